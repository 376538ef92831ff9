"""Python frames as the PyTorch profiler names them, and which are the user's.

``with_stack=True`` traces name each Python call ``"path(line): function"``
(``python_function`` events): the file relative to the ``sys.path`` entry
that holds it (``torch/nn/modules/linear.py``, ``typing.py``, ``train.py`` for
a script in the current directory) or absolute, the function's first line
(or the line being executed for a frame already running when tracing
started), the function. Calls into C are ``"<built-in method item of Tensor
object at 0x..>"``. "The user's code" is every frame outside torch, the
standard library and site-packages (:func:`is_user_frame`); a configuration
adds more library modules (``library_modules`` in ``[tool.hta-report]``).

Imports nothing of hta-report's and no third-party module (a cached re-run
uses it without pandas).
"""
from __future__ import annotations

import os
import re
import sys
from typing import Optional, Sequence, Tuple

__all__ = ["LIBRARY_MODULES", "OWN_PACKAGE", "RUNNERS", "parse_frame", "module_of", "is_tool_frame", "is_user_frame",
           "callee_name", "called_name"]

#: Top-level modules (first path component as the profiler trims it) that are
#: library code, besides the standard library (``sys.stdlib_module_names``).
LIBRARY_MODULES = frozenset({
    "torch", "torchvision", "torchaudio", "torchtext", "torchdata", "torchrec", "functorch", "triton", "numpy",
    "pandas", "scipy", "transformers", "accelerate", "datasets", "tokenizers", "safetensors", "huggingface_hub",
    "lightning", "pytorch_lightning", "lightning_fabric", "deepspeed", "apex", "timm", "einops", "tqdm", "wandb",
    "tensorboard", "hta", "hta_report", "fsspec", "PIL", "typing_extensions", "_pytest", "pytest", "pluggy",
    "runpy", "click",
})
#: This tool's own package: its frames (``hta-report collect``'s runner that
#: runs the user's script, its optimizer-step wrapper) are never the user's,
#: even when the profiler names them by an absolute path (an editable install,
#: whose folder is on no ``sys.path`` entry the profiler trims).
OWN_PACKAGE = "hta_report"
#: The folder of this tool's package, whose modules :func:`is_tool_frame` recognizes.
_OWN_DIR = os.path.dirname(os.path.abspath(__file__))
#: Standard-library modules that run a user's script (``runpy.run_path``, ``python -m``).
RUNNERS = frozenset({"runpy"})
#: The folder of the standard library of this interpreter (``os`` lives there).
_STDLIB_DIR = os.path.dirname(os.path.abspath(os.__file__)).replace("\\", "/")
#: A ``python_function`` name of a Python frame: ``path(line): function``.
FRAME_NAME = re.compile(r"^(?P<path>.+)\((?P<line>\d+)\): (?P<function>.*)$")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def parse_frame(name: str) -> Optional[Tuple[str, int, str]]:
    """``(path, line, function)`` of a ``python_function`` event name
    ``"path(line): function"``; None for calls into C (``<built-in ...>``),
    ``nn.Module: ...`` markers and other names."""
    m = FRAME_NAME.match(name)
    if not m:
        return None
    return m.group("path"), int(m.group("line")), m.group("function")


def module_of(path: str) -> str:
    """The top-level module of a path as the profiler names it: ``torch`` for
    ``torch/nn/modules/linear.py``, ``typing`` for ``typing.py``; for an
    absolute path, the file's name without ``.py``."""
    p = path.replace("\\", "/")
    first = p.rsplit("/", 1)[-1] if p.startswith("/") or re.match(r"^[A-Za-z]:/", p) else p.split("/", 1)[0]
    return first[:-3] if first.endswith(".py") else first


def is_tool_frame(path: str) -> bool:
    """Whether a frame's file (as the profiler names it) is a module of this
    tool (:data:`OWN_PACKAGE`) or a script runner (:data:`RUNNERS`), told by
    the module the path names rather than by where the package is installed:
    a path with a ``hta_report`` folder in it whose remainder names a module
    of the package (``/any/checkout/hta_report/collect/script.py`` is
    ``hta_report.collect.script``), or ``runpy.py`` in a standard-library
    folder (``.../lib/``, ``.../Lib/`` or this interpreter's)."""
    p = path.replace("\\", "/")
    parts = [x for x in p.split("/") if x]
    for i, part in enumerate(parts[:-1]):
        if part == OWN_PACKAGE and parts[-1].endswith(".py") and ".." not in parts[i + 1:] and \
                os.path.isfile(os.path.join(_OWN_DIR, *parts[i + 1:])):
            return True
    if module_of(p) in RUNNERS and parts:
        folder = p.rsplit("/", 1)[0] if "/" in p else ""
        return not folder or folder == _STDLIB_DIR or folder.rsplit("/", 1)[-1].lower() == "lib" or \
            bool(re.search(r"/lib/python3\.\d+$", folder))
    return False


def is_user_frame(path: str, library: Sequence[str] = ()) -> bool:
    """Whether a frame's file (as the profiler names it) is the user's code:
    not ``<frozen ...>``/``<string>``, not under ``site-packages`` or
    ``dist-packages``, not in the standard library (an absolute path under
    ``lib/pythonX.Y``, or a top-level module in ``sys.stdlib_module_names``),
    not one of :data:`LIBRARY_MODULES` or ``library`` (top-level module
    names, or path prefixes with a ``/``), and not this tool's own code or a
    script runner under any path (:func:`is_tool_frame`)."""
    p = path.replace("\\", "/")
    # a path trimmed to the folder above site-packages starts with it ("site-packages/torch/...")
    if not p or p.startswith("<") or "/site-packages/" in f"/{p}" or "/dist-packages/" in f"/{p}":
        return False
    if is_tool_frame(p):
        return False
    if re.search(r"/lib/python3\.\d+/", p) or re.search(r"/lib/pypy3", p):
        return False
    top = module_of(p)
    if not p.startswith("/") and (top in sys.stdlib_module_names or top in LIBRARY_MODULES):
        return False
    for entry in library:
        if "/" in entry.strip("/"):
            if p.startswith(entry) or f"/{entry.strip('/')}/" in f"/{p}":
                return False
        elif top == entry or p.split("/", 1)[0] == entry:
            return False
    return True


def callee_name(name: str) -> str:
    """A ``python_function`` name without the object address
    (``<built-in method item of Tensor object>``), so that calls aggregate."""
    return _ADDRESS.sub("", name)




def called_name(callee: str) -> str:
    """The name a call site uses for ``callee`` (a ``python_function`` name):
    ``item`` for ``<built-in method item of Tensor object>``, ``sleep`` for
    ``<built-in function sleep>``, ``__next__`` for
    ``torch/utils/data/dataloader.py(720): __next__``; empty for others
    (``nn.Module: Linear_0``)."""
    m = re.match(r"^<built-in (?:method|function) ([A-Za-z_][A-Za-z0-9_]*)", callee)
    if m:
        return m.group(1)
    frame = parse_frame(callee)
    if frame and re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", frame[2]):
        return frame[2]
    return ""
