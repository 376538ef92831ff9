"""Event names that Kineto wrote without escaping, repaired while reading.

PyTorch's profiler writes each event's ``name`` as a bare JSON string. Until
pytorch/kineto#1459 (not in the torch 2.13.0 wheel) it did not escape double
quotes: a ``record_function('user "quoted" range')``, or a ``with_stack``
frame whose file name torch.compile made from source text
(``{"device": "cpu"}(12): run``, pytorch/pytorch#146900), makes the whole file
invalid JSON. Before pytorch/kineto#754 backslashes (Windows paths) were not
escaped either.

Kineto never escapes a name partly, so a name that is not a valid JSON string
is its raw text: :func:`repair_names` writes such values again, escaped, and
leaves every valid one alone. It runs only on text that failed to parse.
"""
from __future__ import annotations

import json
import re
from typing import Tuple

#: The key of a parse's metadata (HTA's ``meta_data`` of the trace) that holds
#: how many event names were repaired; absent when none was.
REPAIRED_NAMES = "hta_report_repaired_names"

#: A valid JSON string body (RFC 8259: no raw quote, backslash or control
#: character; escapes as listed).
_VALID = re.compile(rb'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*')
#: Kineto's keys after ``name`` when an event is written on one line (PyTorch
#: 1.8-1.13: ``"name": "aten::add", "pid": 7, ...``).
_NEXT_KEY = rb'(?:pid|tid|ts|dur|ph|cat|args|id|bp|s)'
#: ``"name": "VALUE", "pid":`` on one line; else ``"name": "VALUE",`` ending
#: its line (PyTorch 2.x writes one field per line). VALUE runs to the last
#: quote before that ending, so quotes inside it are part of it.
_NAME = re.compile(rb'("name": ")(?:([^\n]*?)(", "' + _NEXT_KEY + rb'":)|([^\n]*)("[ \t]*,?[ \t]*\r?$))',
                   re.MULTILINE)


def repair_names(data: bytes) -> Tuple[bytes, int]:
    """``data`` (JSON text of a trace, or of a run of its events) with every
    ``"name"`` value that is not a valid JSON string escaped as the raw text
    it is; and how many were repaired (0: ``data`` is returned as is).

    Text that is invalid for another reason stays invalid: the caller's
    parser then says where.
    """
    count = 0

    def fix(m: "re.Match[bytes]") -> bytes:
        nonlocal count
        value, end = (m.group(2), m.group(3)) if m.group(2) is not None else (m.group(4), m.group(5))
        if _VALID.fullmatch(value):
            return m.group(0)
        count += 1
        text = value.decode("utf-8", "surrogateescape")
        escaped = json.dumps(text, ensure_ascii=False)[1:-1].encode("utf-8", "surrogateescape")
        return m.group(1) + escaped + end

    out = _NAME.sub(fix, data)
    return (out, count) if count else (data, 0)
