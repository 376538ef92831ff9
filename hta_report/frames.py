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

import re
import sys
from typing import Optional, Sequence, Tuple

__all__ = ["LIBRARY_MODULES", "parse_frame", "module_of", "is_user_frame", "callee_name", "called_name"]

#: Top-level modules (first path component as the profiler trims it) that are
#: library code, besides the standard library (``sys.stdlib_module_names``).
LIBRARY_MODULES = frozenset({
    "torch", "torchvision", "torchaudio", "torchtext", "torchdata", "torchrec", "functorch", "triton", "numpy",
    "pandas", "scipy", "transformers", "accelerate", "datasets", "tokenizers", "safetensors", "huggingface_hub",
    "lightning", "pytorch_lightning", "lightning_fabric", "deepspeed", "apex", "timm", "einops", "tqdm", "wandb",
    "tensorboard", "hta", "hta_report", "fsspec", "PIL", "typing_extensions", "_pytest", "pytest", "pluggy",
    "runpy", "click",
})
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


def is_user_frame(path: str, library: Sequence[str] = ()) -> bool:
    """Whether a frame's file (as the profiler names it) is the user's code:
    not ``<frozen ...>``/``<string>``, not under ``site-packages`` or
    ``dist-packages``, not in the standard library (an absolute path under
    ``lib/pythonX.Y``, or a top-level module in ``sys.stdlib_module_names``),
    and not one of :data:`LIBRARY_MODULES` or ``library`` (top-level module
    names, or path prefixes with a ``/``)."""
    p = path.replace("\\", "/")
    if not p or p.startswith("<") or "/site-packages/" in p or "/dist-packages/" in p:
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
