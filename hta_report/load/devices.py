"""What a trace's header says about its devices, read before it is parsed.

Kineto writes ``"deviceProperties"`` near the top of every trace, before
``"traceEvents"``: one entry per GPU it saw, ``[]`` when it saw none (a
CPU-only run, e.g. ``collect --device cpu``). The local engine reads this to
decide what its worker processes will need (:mod:`hta_report.engines.local`);
nothing here changes a result.
"""
from __future__ import annotations

import os
import re
import zlib
from typing import Iterable, Union

from ..files import is_url, open_text_stream
from .validation import HEAD_BYTES

#: ``"deviceProperties": [ ]`` with any whitespace: Kineto saw no GPU.
_NO_DEVICES = re.compile(rb'"deviceProperties"\s*:\s*\[\s*\]')


def declares_no_gpu(path: Union[str, os.PathLike]) -> bool:
    """True when the first :data:`~.validation.HEAD_BYTES` (64 KiB) of the
    trace's text (decompressed for ``.gz``) hold ``"deviceProperties": []``
    before ``"traceEvents"``. False when they list a device, do not reach the
    key, the file is remote (a URL: not opened twice) or cannot be read (the
    parse reports why): "may have a GPU" is the safe answer.

    A trace whose header lists no device may still hold GPU events (a
    hand-made trace); callers use this only for what to prepare, never for
    what to analyze.
    """
    if is_url(path):
        return False
    try:
        with open_text_stream(path) as fh:
            head = fh.read(HEAD_BYTES)
    except (OSError, EOFError, zlib.error):
        return False
    events = head.find(b'"traceEvents"')
    match = _NO_DEVICES.search(head, 0, events if events >= 0 else len(head))
    return match is not None


def all_declare_no_gpu(paths: Iterable[Union[str, os.PathLike]]) -> bool:
    """True when every file of ``paths`` declares no GPU (:func:`declares_no_gpu`);
    False for an empty list."""
    paths = list(paths)
    return bool(paths) and all(declares_no_gpu(p) for p in paths)
