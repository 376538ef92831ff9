"""Running an unmodified user script in-process under the profiler.

``-- python train.py ARGS``, ``-- train.py ARGS`` and ``-- [python] -m module ARGS``
run the target with :mod:`runpy` as ``__main__`` with ``sys.argv`` set, like
Python would.  The profiler advances at every *step event* (``--step-on``):

* ``optimizer`` (default): after every ``Optimizer.step()`` of any optimizer.
  A global ``register_optimizer_step_post_hook`` counts the steps, but the post
  hook runs inside the ``Optimizer.step#...`` profiler range, so the profiler
  step itself is taken when the outermost ``Optimizer.step`` call returns (each
  optimizer class's hooked ``step`` gets a thin outer wrapper for the run);
  ``ProfilerStep#N`` ranges thus never cut an ``Optimizer.step`` range in two.
  A script with two optimizers (e.g. a GAN) takes two profiler steps per iteration.
* ``forward``: after every *outermost* ``nn.Module`` call, via global module
  forward pre/post hooks that track the call depth per thread; nested
  submodule calls do not count.  For inference scripts (``model(x)`` per
  batch).  A loss module called at top level counts as its own step.
* ``backward``: after every ``torch.autograd.backward`` call (``loss.backward()``).

Steps from forked child processes (DataLoader workers) are ignored.

The script runs as it would under ``python``, and the collector's own work
(stopping the profiler, the manifest, the exit code) happens only in the
process that started it, after the script:

* a process the script forks and that returns from the script exits there
  with the script's exit code, as it would under ``python``; it never runs
  the collector's epilogue;
* ``os.chdir``, ``sys.argv`` and ``sys.path`` changes are undone after the
  script (``-o`` is an absolute path before it starts);
* non-daemon threads the script started are waited for before the profiler
  stops, as Python waits for them before exiting;
* ``os._exit(code)`` in the script's process stops the profiler and writes
  the manifest first (:func:`exit_hook`);
* SIGINT (``KeyboardInterrupt``) and SIGTERM end the script: the profiler
  stops, traces of completed cycles are kept, the exit code is 130 or 143
  (:func:`terminate_raises`).
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import runpy
import signal
import sys
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, List, NoReturn, Optional

from ..errors import CollectError

if TYPE_CHECKING:
    from torch.utils.hooks import RemovableHandle

STEP_EVENTS = ("optimizer", "forward", "backward")
_PYTHON = re.compile(r"^python[0-9.]*(\.exe)?$")
_IGNORED_PYTHON_FLAGS = {"-u", "-B", "-O", "-OO", "-s", "-E", "-I"}
_PACKAGE_DIR = str(Path(__file__).resolve().parent)


@dataclass
class ScriptSpec:
    """What to run.

    Attributes:
        path: the script file (or directory/zip with ``__main__.py``), if not a module.
        module: the module name for ``-m``.
        args: arguments after the script or module.
    """

    path: Optional[Path] = None
    module: Optional[str] = None
    args: List[str] = field(default_factory=list)

    @property
    def display(self) -> str:
        """``train.py`` or ``-m pkg.mod``, for messages."""
        return f"-m {self.module}" if self.module else str(self.path)

    @property
    def argv(self) -> List[str]:
        """``sys.argv`` as the script will see it."""
        return [str(self.module if self.module else self.path), *self.args]


def parse_command(command: List[str]) -> ScriptSpec:
    """Parse ``[python [flags]] script.py ARGS`` or ``[python] -m module ARGS``.

    Raises:
        CollectError: empty command, ``-c`` or another unsupported interpreter
            option, missing script, or a module that cannot be found.
    """
    words = list(command)
    if not words:
        raise CollectError("empty command: pass --workload NAME or -- python script.py ARGS")
    if _PYTHON.match(os.path.basename(words[0])) or words[0] == sys.executable:
        words = words[1:]
        while words and words[0] in _IGNORED_PYTHON_FLAGS:
            words = words[1:]
        if not words:
            raise CollectError("no script after the interpreter: pass python script.py ARGS "
                               "or python -m module ARGS")
        if words[0].startswith("-") and words[0] != "-m":
            raise CollectError(f"unsupported interpreter option {words[0]!r}: "
                               "pass python script.py ARGS or python -m module ARGS")
    if words[0] == "-m":
        if len(words) < 2:
            raise CollectError("-m needs a module name")
        module = words[1]
        sys.path.insert(0, os.getcwd())  # as python -m does
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            found = None
        finally:
            sys.path.remove(os.getcwd())
        if found is None:
            raise CollectError(f"no module named {module!r}")
        return ScriptSpec(module=module, args=words[2:])
    path = Path(words[0])
    if not path.exists():
        raise CollectError(f"no such script: {path}")
    return ScriptSpec(path=path, args=words[1:])


def install_step_hook(event: str, step: Callable[[], None]) -> Callable[[], None]:
    """Call ``step()`` at every step event; return a function removing the hook.

    Raises:
        CollectError: unknown event (see :data:`STEP_EVENTS`).
    """
    import torch

    if event == "optimizer":
        steps = _OptimizerSteps(step)
        steps.install()
        return steps.remove
    if event == "forward":
        from torch.nn.modules import module as nn_module

        depth = threading.local()

        def pre(mod, args):
            depth.n = getattr(depth, "n", 0) + 1

        def post(mod, args, out):
            depth.n = getattr(depth, "n", 1) - 1
            if depth.n == 0:
                step()

        handles = [nn_module.register_module_forward_pre_hook(pre),
                   nn_module.register_module_forward_hook(post, always_call=True)]

        def remove() -> None:
            for handle in handles:
                handle.remove()

        return remove
    if event == "backward":
        original = torch.autograd.backward

        def backward(*args, **kwargs):
            result = original(*args, **kwargs)
            step()
            return result

        torch.autograd.backward = backward
        return lambda: setattr(torch.autograd, "backward", original)
    raise CollectError(f"unknown --step-on {event!r} (choose {', '.join(STEP_EVENTS)})")


class _OptimizerSteps:
    """Counts optimizer steps with the global post hook and takes the profiler
    step when the outermost ``Optimizer.step`` call has returned.

    Wraps the ``step`` of every optimizer class already patched by torch and,
    through ``Optimizer.profile_hook_step``, of classes patched during the run
    (torch patches a class on its first instantiation).  :meth:`remove` undoes both.
    """

    _MARK = "_hta_report_step_wrapper"

    def __init__(self, step: Callable[[], None]) -> None:
        self._step = step
        self.pending = 0
        self._depth = 0
        self._handle: Optional[RemovableHandle] = None
        #: ``Optimizer.profile_hook_step`` as torch defines it (a staticmethod), while replaced
        self._factory: Optional[staticmethod[Any, Any]] = None

    @staticmethod
    def _classes():
        from torch.optim import Optimizer

        seen, todo = [], [Optimizer]
        while todo:
            cls = todo.pop()
            if cls not in seen:
                seen.append(cls)
                todo.extend(cls.__subclasses__())
        return seen

    def install(self) -> None:
        """Register the post hook and wrap the optimizer classes' ``step``."""
        from torch.optim import Optimizer
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._handle = register_optimizer_step_post_hook(self._post_hook)
        self._factory = Optimizer.__dict__["profile_hook_step"]
        torch_wrap = self._factory.__func__
        setattr(Optimizer, "profile_hook_step", staticmethod(lambda func: self._wrap(torch_wrap(func))))
        for cls in self._classes():
            current = cls.__dict__.get("step")
            if current is not None and getattr(current, "hooked", False):
                cls.step = self._wrap(current)

    def _wrap(self, hooked_step: Callable) -> Callable:
        import functools

        @functools.wraps(hooked_step)
        def step(*args, **kwargs):
            self._depth += 1
            try:
                return hooked_step(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self.flush()

        setattr(step, "hooked", True)
        setattr(step, self._MARK, True)
        return step

    def _post_hook(self, optimizer, args, kwargs) -> None:
        self.pending += 1

    def flush(self) -> None:
        """Take the profiler steps counted so far."""
        while self.pending:
            self.pending -= 1
            self._step()

    def remove(self) -> None:
        """Flush, remove the hook and restore every wrapped ``step``."""
        from torch.optim import Optimizer

        self.flush()
        if self._handle is not None:
            self._handle.remove()
        if self._factory is not None:
            setattr(Optimizer, "profile_hook_step", self._factory)
        for cls in self._classes():
            current = cls.__dict__.get("step")
            if getattr(current, self._MARK, False):
                inner = current.__wrapped__
                inner.hooked = True
                cls.step = inner


#: Exit codes of a script ended by a signal, as a shell reports them (128 + the signal number).
EXIT_SIGINT = 128 + signal.SIGINT
EXIT_SIGTERM = 128 + signal.SIGTERM


class ScriptTerminated(BaseException):
    """Raised in the script's main thread when the process gets SIGTERM (see
    :func:`terminate_raises`); a BaseException, like KeyboardInterrupt, so
    that ``except Exception`` in the script does not swallow it."""


@dataclass
class Outcome:
    """How the script ended.

    Attributes:
        exit_code: what Python would have exited with (0, a ``sys.exit`` code,
            1 after an exception, 130 after SIGINT, 143 after SIGTERM).
        error: the exception that escaped the script, if any (not
            ``SystemExit``, ``KeyboardInterrupt`` or SIGTERM).
        signal: ``"SIGINT"`` or ``"SIGTERM"`` when a signal ended the script.
    """

    exit_code: int = 0
    error: Optional[BaseException] = None
    signal: Optional[str] = None

    @property
    def error_line(self) -> Optional[str]:
        """``ValueError: message`` (first line), or None."""
        if self.error is None:
            return None
        text = traceback.format_exception_only(type(self.error), self.error)[-1].strip()
        return text.splitlines()[0] if text else type(self.error).__name__


def _internal(filename: str) -> bool:
    return (filename.startswith("<frozen runpy") or filename == runpy.__file__
            or filename.startswith(_PACKAGE_DIR))


def print_script_traceback(exc: BaseException) -> None:
    """Print ``exc``'s traceback to stderr as Python would, without the collector's frames."""
    tb = exc.__traceback__
    while tb is not None and _internal(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb if tb is not None else exc.__traceback__,
                              file=sys.stderr)
    sys.stderr.flush()


@contextlib.contextmanager
def terminate_raises() -> Iterator[None]:
    """While the block runs, SIGTERM raises :class:`ScriptTerminated` in the
    main thread of this process, so that the script unwinds and the profiler
    stops (Python's default would kill the process at once, without the
    manifest). Only when SIGTERM has its default handler and this is the
    main thread; a handler the script installs replaces this one. A forked
    child that gets SIGTERM dies of it, as it would by default."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    owner = os.getpid()

    def handler(signum, frame):
        if os.getpid() != owner:  # a forked child: the default action
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise ScriptTerminated()

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is handler:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def exit_hook(before_exit: Callable[[int], None]) -> Iterator[None]:
    """While the block runs, ``os._exit(code)`` called by the script in this
    process's main thread calls ``before_exit(code)`` first (the collector
    stops the profiler and writes the manifest), then exits. Calls from
    forked children or other threads exit at once, as always."""
    real_exit = os._exit
    owner = os.getpid()

    def _exit(status: int = 0) -> NoReturn:  # os._exit's signature (status=... included)
        if os.getpid() == owner and threading.current_thread() is threading.main_thread():
            os._exit = real_exit
            try:
                before_exit(status)
            except BaseException:  # noqa: BLE001 - exiting anyway
                pass
            _flush()
        real_exit(status)

    os._exit = _exit
    try:
        yield
    finally:
        if os._exit is _exit:
            os._exit = real_exit


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - closed or replaced by the script
            pass


def _argv0_restore_failed(exc: IndexError) -> bool:
    """Whether ``exc`` is runpy failing to put back ``sys.argv[0]`` after the
    script emptied or replaced ``sys.argv`` (legal under ``python``, where
    nothing is put back): the script itself ended before that."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    modified = getattr(runpy, "_ModifiedArgv0", None)
    return (tb is not None and modified is not None and tb.tb_frame.f_code.co_name == "__exit__"
            and isinstance(tb.tb_frame.f_locals.get("self"), modified))


def _join_threads(before: set) -> None:
    """Wait for the non-daemon threads the script started, as Python waits for
    them before it exits: their steps are profiled like the main thread's
    (a script may train in a thread and return at once). Daemon threads are
    not waited for; they end with the process."""
    for t in threading.enumerate():
        if t not in before and not t.daemon and t is not threading.current_thread():
            t.join()


def _outcome(run: Callable[[], None]) -> Outcome:
    """Run the script (``run``) and say how it ended; never raises what it raises."""
    try:
        run()
        return Outcome(0)
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return Outcome(0)
        if isinstance(code, int):
            return Outcome(code)
        print(code, file=sys.stderr)
        return Outcome(1)
    except KeyboardInterrupt as exc:  # SIGINT: Python prints the traceback too
        sys.stdout.flush()
        print_script_traceback(exc)
        return Outcome(EXIT_SIGINT, signal="SIGINT")
    except ScriptTerminated:  # SIGTERM: Python would print nothing
        return Outcome(EXIT_SIGTERM, signal="SIGTERM")
    except BaseException as exc:  # noqa: BLE001 - the script's error, reported by the caller
        sys.stdout.flush()
        print_script_traceback(exc)
        return Outcome(1, exc)


def run_script(spec: ScriptSpec) -> Outcome:
    """Run the script as ``__main__``; never raises what the script raises.

    ``sys.argv`` and ``sys.path`` are set as ``python script.py`` / ``python -m``
    would set them; they and the working directory are restored afterwards,
    whatever the script did to them. An escaping exception's traceback is
    printed to stderr at once; ``sys.exit("text")`` prints ``text``. A process
    forked by the script that returns from it exits here with the script's
    exit code (after flushing stdout and stderr), as under ``python``: only
    the process that started the script returns. Non-daemon threads the
    script started are waited for before it returns, as Python waits for
    them before exiting.

    Returns:
        the :class:`Outcome`.
    """
    owner = os.getpid()
    argv_list, path_list = sys.argv, sys.path
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    try:
        saved_cwd: Optional[str] = os.getcwd()
    except OSError:
        saved_cwd = None
    sys.argv = spec.argv
    threads_before = set(threading.enumerate())

    def run() -> None:
        try:
            if spec.module:
                sys.path.insert(0, os.getcwd())
                runpy.run_module(spec.module, run_name="__main__", alter_sys=True)
            else:
                assert spec.path is not None  # a ScriptSpec names a module or a path
                sys.path.insert(0, str(spec.path.resolve().parent if spec.path.is_file()
                                       else spec.path.resolve()))
                runpy.run_path(str(spec.path), run_name="__main__")
        except IndexError as exc:
            if not _argv0_restore_failed(exc):
                raise
            if exc.__context__ is not None:  # how the script itself ended
                raise exc.__context__ from None
        finally:
            _join_threads(threads_before)

    outcome = _outcome(run)
    if os.getpid() != owner:  # a forked child returned from the script: it ends here
        _flush()
        os._exit(outcome.exit_code & 0xFF)  # what the system makes of sys.exit(code) too
    argv_list[:], path_list[:] = saved_argv, saved_path
    sys.argv, sys.path = argv_list, path_list
    if saved_cwd is not None:
        try:
            os.chdir(saved_cwd)
        except OSError:
            pass
    return outcome
