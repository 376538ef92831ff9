"""The ``ray`` engine: one Ray task per rank, summaries to the driver.

Phase 1, one task per file (:func:`hta_report.load.rank_file.parse_file`):
check and parse the trace where the task runs, through the parse cache when
its directory is given (put it on storage every node reads). The task has
two returns: a small :class:`~hta_report.load.rank_file.FileParse`, which the
driver fetches, and the parse, which stays in Ray's object store.

The driver decides what depends on all ranks from the summaries alone
(:func:`hta_report.load.rank_file.plan`: ranks, time origin, last step).

Phase 2, one task per rank: align and filter the rank as HTA does for the
whole directory and run every per-rank analysis
(:func:`hta_report.analysis.rank.analyze_rank`), asking Ray for the
rank's estimated memory (:func:`memory_request`: Ray then runs on a node
only as many as its ``memory`` resource holds); only the rank's
:class:`~hta_report.model.RankResult` returns. The cross-rank part runs on the
driver (:func:`hta_report.analysis.assemble`), whose memory grows with the
number of ranks, not with their events.

A rank whose file or analysis fails is an unreadable rank with its reason, as
with the local engine; a task whose worker dies is retried by Ray
(``max_retries``) and, if it keeps failing, reported as unreadable.
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import List, Optional, TypedDict

import ray

from .. import progress
from ..errors import InputError, TraceError
from ..escape import redact_url
from ..model import TraceFileInfo
from . import per_rank
from .per_rank import RankRunner, rank_memory_bytes

#: Ray retries a task whose worker process died this many times.
MAX_RETRIES = 3


def _one_process() -> None:
    """Inside a task: no process pools of our own (Ray schedules the cores)."""
    os.environ["HTA_REPORT_WORKERS"] = "1"


@ray.remote(num_returns=2, max_retries=MAX_RETRIES)
def _parse_task(read_path: str, shown_path: str, max_trace_bytes: int, loader: str, cache_dir: Optional[str]):
    """Phase 1 on a worker: ``(("ok", FileParse) or ("error", reason), parse or None)``."""
    from ..load.rank_file import parse_file

    _one_process()
    try:
        summary, parsed = parse_file(read_path, max_trace_bytes, loader, cache_dir)
    except TraceError as exc:
        return ("error", exc.message), None
    summary.path = shown_path
    return ("ok", summary), parsed


@ray.remote(max_retries=MAX_RETRIES)
def _analyze_task(parsed, info: TraceFileInfo, plan, loader: str):
    """Phase 2 on a worker: ``("ok", RankResult, seconds)`` or ``("error", (message, step), seconds)``."""
    from ..analysis.rank import analyze_rank
    from ..load.rank_file import loaded_rank

    _one_process()
    t0 = time.perf_counter()
    try:
        result = analyze_rank(loaded_rank(parsed, info, plan, loader), info)
    except TraceError as exc:
        return "error", (exc.message, exc.step), time.perf_counter() - t0
    return "ok", result, time.perf_counter() - t0


def _read_path(p) -> str:
    """What a worker opens: a local path made absolute (workers run elsewhere), or the URL."""
    return str(p.absolute()) if isinstance(p, Path) else str(p)


#: Seconds to wait for the cluster at ``--ray-address`` (or ``RAY_ADDRESS``)
#: before giving up with one line naming it; ``HTA_REPORT_RAY_CONNECT_TIMEOUT``
#: sets another. Ray's own connect retries for minutes (its GCS client tries
#: 20 times, 35 s each) and logs every attempt.
CONNECT_TIMEOUT_S = 30.0
#: The environment variable that overrides :data:`CONNECT_TIMEOUT_S`.
CONNECT_TIMEOUT_ENV = "HTA_REPORT_RAY_CONNECT_TIMEOUT"


def connect_timeout() -> float:
    """Seconds to wait for a Ray cluster: ``HTA_REPORT_RAY_CONNECT_TIMEOUT``,
    else :data:`CONNECT_TIMEOUT_S`.

    Raises:
        hta_report.errors.InputError: the variable is not a number of seconds above 0.
    """
    import math

    text = os.environ.get(CONNECT_TIMEOUT_ENV, "").strip()
    if not text:
        return CONNECT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise InputError(f"{CONNECT_TIMEOUT_ENV}={text!r}: expected a number of seconds above 0")
    return value


class _InitOptions(TypedDict, total=False):
    """The options :func:`_connect` gives ``ray.init`` besides the address."""

    logging_level: int
    log_to_driver: bool
    configure_logging: bool
    include_dashboard: bool


def _connect(address: Optional[str]) -> bool:
    """Connect to the cluster at ``address`` (else ``RAY_ADDRESS``, else start
    a Ray instance here) unless connected already; True when this call connected.

    Connecting to an address is bounded (:func:`connect_timeout`): a port
    nothing listens on, an unknown host or a host that does not answer is
    found by a plain TCP connection first, and Ray's own connect (a server
    that answers but is no Ray head) runs in a thread given the time left;
    Ray's own log lines meanwhile go nowhere.

    Raises:
        hta_report.errors.InputError: the cluster cannot be reached in time
            (one line naming the address and the cause).
    """
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    kwargs: _InitOptions = {"logging_level": logging.ERROR, "log_to_driver": False, "configure_logging": True}
    if address is None or address == "local":
        if address is None:
            kwargs["include_dashboard"] = False
        try:
            ray.init(address=address, **kwargs)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise InputError(f"cannot connect to the Ray cluster at {address or 'a new local instance'}: "
                             f"{_first_line(exc)}") from exc
        return True
    timeout = connect_timeout()
    deadline = time.monotonic() + timeout
    where = f"cannot connect to the Ray cluster at {redact_url(address)}"
    _probe(address, timeout, where)
    _init_within(address, kwargs, max(0.5, deadline - time.monotonic()), timeout, where)
    return True


def _host_port(address: str) -> Optional[tuple]:
    """``(host, port)`` of a Ray address (``host:port``, ``[v6]:port``,
    ``ray://host:port``), or None for one Ray resolves itself (``auto``)."""
    text = address[len("ray://"):] if address.startswith("ray://") else address
    text = text.rsplit("@", 1)[-1].split("/", 1)[0]
    host, sep, port = text.rpartition(":")
    if "://" in text or not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _probe(address: str, timeout: float, where: str) -> None:
    """Open (and close) a TCP connection to ``address``'s host and port
    within ``timeout`` seconds; for a loopback name, also to this node's
    address, which Ray connects to instead.

    Raises:
        hta_report.errors.InputError: no connection: refused, unknown host,
            no answer in time (names the address and the cause).
    """
    import socket

    found = _host_port(address)
    if found is None:
        return
    host, port = found
    hosts = [host]
    if host in ("localhost", "127.0.0.1", "::1"):
        try:
            hosts.append(ray.util.get_node_ip_address())
        except Exception:  # noqa: BLE001 - no other address to try
            pass
    deadline = time.monotonic() + timeout
    why = ""
    for h in dict.fromkeys(hosts):
        try:
            with socket.create_connection((h, port), timeout=max(0.5, deadline - time.monotonic())):
                return
        except socket.gaierror as exc:
            why = why or f"unknown host {host!r} ({exc.strerror or exc})"
        except (socket.timeout, TimeoutError):
            why = why or (f"no answer within {timeout:g} s (set {CONNECT_TIMEOUT_ENV} to wait longer)")
        except ConnectionRefusedError:
            why = why or ("connection refused: no Ray head listens there (is the address right, is "
                          "`ray start --head` running?)")
        except OSError as exc:
            why = why or (exc.strerror or str(exc))
    raise InputError(f"{where}: {why}")


def _init_within(address: str, kwargs: _InitOptions, seconds: float, timeout: float, where: str) -> None:
    """``ray.init(address=address, **kwargs)`` in a thread, waited for at most
    ``seconds``; Ray's native log lines (written to file descriptor 2)
    silenced meanwhile. A connect that completes after the wait is shut down.

    Raises:
        hta_report.errors.InputError: no connection in time, or Ray refused it.
    """
    import threading

    state: dict = {}
    lock = threading.Lock()

    def connect() -> None:
        try:
            ray.init(address=address, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            state["error"] = exc
            return
        with lock:
            late = state.setdefault("outcome", "connected") != "connected"
        if late:  # given up on: leave no connection behind
            ray.shutdown()

    thread = threading.Thread(target=connect, name="hta-report: ray connect", daemon=True)
    with _native_stderr_silenced():
        thread.start()
        thread.join(seconds)
    with lock:
        outcome = state.setdefault("outcome", "abandoned")
    if "error" in state:
        raise InputError(f"{where}: {_first_line(state['error'])}") from state["error"]
    if outcome != "connected":
        raise InputError(f"{where}: no Ray cluster answered within {timeout:g} s "
                         f"(set {CONNECT_TIMEOUT_ENV} to wait longer)")


class _native_stderr_silenced:
    """File descriptor 2 pointed at ``/dev/null`` for the block (Ray's C++
    core logs each failed attempt there, past Python's ``sys.stderr``);
    restored after. Does nothing where descriptor 2 cannot be duplicated."""

    def __enter__(self):
        import sys

        self.saved = None
        try:
            sys.stderr.flush()
            self.saved = os.dup(2)
            sink = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(sink, 2)
            finally:
                os.close(sink)
        except (OSError, ValueError, AttributeError):
            if self.saved is not None:
                os.close(self.saved)
            self.saved = None
        return self

    def __exit__(self, *exc) -> None:
        if self.saved is not None:
            os.dup2(self.saved, 2)
            os.close(self.saved)


def _gather(refs: List, label: str, unit: str, each=None) -> List:
    """``ray.get`` of ``refs`` in their order, with progress as they finish;
    a task that failed for good (its worker died on every try, or a bug
    raised) comes back as the exception; ``each`` (if given) is called on
    each other result as it is fetched."""
    stages = progress.current()
    pending = list(refs)
    done = 0
    while pending:
        ready, pending = ray.wait(pending, num_returns=min(len(pending), max(1, len(refs) // 20)))
        done += len(ready)
        stages.update(f"{label}: {done}/{len(refs)} {unit}")
    out = []
    for ref in refs:
        try:
            got = ray.get(ref)
        except (ray.exceptions.RayError, ray.exceptions.RayTaskError) as exc:
            out.append(exc)
            continue
        if each is not None:
            each(got)
        out.append(got)
    return out


def memory_request(events: int, largest_node: Optional[int]) -> int:
    """The ``memory`` a rank's analysis task asks Ray for (bytes): its estimate
    (:func:`~.per_rank.rank_memory_bytes`), so that Ray starts on a node only
    as many as its memory resource holds, but at most ``largest_node`` (the
    largest ``memory`` resource of the cluster's live nodes): a task asking
    more than any node has would never be scheduled."""
    want = rank_memory_bytes(events)
    return min(want, largest_node) if largest_node else want


def _largest_node_memory() -> Optional[int]:
    """The largest ``memory`` resource (bytes) among the cluster's live
    nodes, or None where Ray names none."""
    sizes = [int(n.get("Resources", {}).get("memory", 0)) for n in ray.nodes() if n.get("Alive")]
    return max(sizes) if sizes and max(sizes) > 0 else None


class _RayRunner(RankRunner):
    """Phases 1 and 3 as Ray tasks (see the module doc); the parses stay in
    Ray's object store until their rank is analyzed."""

    where = parse_where = " (ray worker)"
    parse_stage = "ray: parse {n} files"
    analyze_stage = "ray: analyze {n} ranks"

    def __init__(self, max_trace_bytes: int, loader: str, cache_dir: Optional[str]) -> None:
        self.max_trace_bytes, self.loader, self.cache_dir = max_trace_bytes, loader, cache_dir
        self.parses: List = []
        self.events: List[int] = []  # per file: events of its parse (0: unreadable)

    def parse(self, paths):
        pairs = [_parse_task.remote(_read_path(p), str(p), self.max_trace_bytes, self.loader, self.cache_dir)
                 for p in paths]
        self.parses = [ref for _, ref in pairs]
        out = []
        for got in _gather([s for s, _ in pairs], "ray: parsed", "files"):
            if isinstance(got, Exception):
                out.append(f"the Ray task failed: {_first_line(got)}")
            else:
                out.append(got[1])  # ("ok", FileParse) or ("error", reason)
        self.events = [0 if isinstance(x, str) else x.events for x in out]
        return out

    def analyze(self, keys, infos, plan):
        largest = _largest_node_memory()
        refs = [_analyze_task.options(memory=memory_request(self.events[k], largest)).remote(
                    self.parses[k], info, plan, self.loader) for k, info in zip(keys, infos)]
        outcomes = _gather(refs, "ray: analyzed", "ranks", each=per_rank.share_result_strings())
        self.parses = []  # the parses in the object store can go
        out = []
        for info, got in zip(infos, outcomes):
            if isinstance(got, Exception):
                out.append((TraceError(f"the Ray task failed: {_first_line(got)}", info.path), 0.0))
            elif got[0] == "error":
                message, step = got[1]
                out.append((TraceError(message, info.path, step=step), got[2]))
            else:
                out.append((got[1], got[2]))
        return out


def measure(spec, cache):
    """The metrics of the run ``spec`` (a :class:`~hta_report.load.spec.RunSpec`)
    describes, computed on the Ray cluster at ``spec.ray_address`` (see the
    module doc); ``cache``: the parse cache (on storage every worker reads), or None.

    Raises:
        hta_report.errors.InputError: two files claiming one rank, the
            cluster cannot be reached.
        hta_report.errors.TraceError: no file can be read or analyzed.
    """
    stages = progress.current()
    with stages.stage("ray: connect"):
        connected = _connect(spec.ray_address)
    try:
        cache_dir = str(Path(cache.root).absolute()) if cache is not None else None
        return per_rank.measure(spec, _RayRunner(spec.max_trace_bytes, spec.loader, cache_dir))
    finally:
        if connected:
            ray.shutdown()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}"[:300]
