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

Where a raw name ends is ambiguous (it may hold ``", "id":`` or ``"}``), so
each candidate end is tested: the rest of the event must then parse as the
rest of one JSON object, followed by ``,``, ``]`` or ``}``; the last such
candidate inside that object wins. The scan is linear in the text (one pass
over the names, a bounded window per broken one) and has a byte budget, so no
input makes it run away; a name it cannot place is left as written and the
parser then says where the text is invalid.
"""
from __future__ import annotations

import json
import re
from typing import Optional, Tuple

#: The key of a parse's metadata (HTA's ``meta_data`` of the trace) that holds
#: how many event names were repaired; absent when none was.
REPAIRED_NAMES = "hta_report_repaired_names"

#: A valid JSON string body (RFC 8259: no raw quote, backslash or control
#: character; escapes as listed).
_VALID = re.compile(rb'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*')
#: Where a ``name`` value starts, in Kineto's layout (``"name": "``) or a
#: compact one (``"name":"``).
_NAME_KEY = re.compile(rb'"name"[ \t]*:[ \t]*"')
#: What may follow a valid name's closing quote: the object's end, or its next
#: member whose value is a plain string or number ending at ``,``/``}``, or
#: opens an array or object (a raw name holding ``", "id": "b`` fails this).
_AFTER = re.compile(rb'\s*(?:\}|,\s*"[^"\\\n]*"\s*:\s*(?:"' + _VALID.pattern + rb'"\s*[,}]'
                    rb'|-?[0-9][0-9.eE+-]*\s*[,}]|[\[{]|(?:true|false|null)\s*[,}]))')
#: A quote that could close a raw name (followed as :data:`_AFTER` says).
_CANDIDATE = re.compile(rb'"(?=\s*(?:,\s*"[^"\\\n]*"\s*:|\}))')

#: The longest raw name looked at (bytes). Kineto's longest names are C++
#: template kernel names of a few KiB; 1 MiB leaves room for generated code.
MAX_NAME_BYTES = 1 << 20
#: Candidate ends tried per broken name.
MAX_CANDIDATES = 64
#: The first window an event's rest is parsed in; doubled up to :data:`MAX_EVENT_BYTES`.
_FIRST_WINDOW = 4096
#: The longest rest of an event parsed to test a candidate (bytes).
MAX_EVENT_BYTES = 4 << 20
#: Bytes the repair may examine beyond one pass, as a multiple of the text's
#: size (plus :data:`MAX_EVENT_BYTES`): past it, broken names are left as written.
BUDGET_FACTOR = 4


#: Parsed before an event's rest so that it reads as one object.
_PREFIX = '{"":0'


class _Budget:
    def __init__(self, size: int) -> None:
        self.left = BUDGET_FACTOR * size + MAX_EVENT_BYTES

    def spend(self, n: int) -> bool:
        self.left -= n
        return self.left >= 0


def _rest_end(data: bytes, i: int, budget: _Budget) -> Optional[int]:
    """Where the object ends (index after its ``}``) if ``data[i:]`` is the
    rest of a JSON object after one member's value (``, "k": v ... }``) and
    is followed by ``,``, ``]``, ``}`` or the end of ``data``; else None."""
    decoder = json.JSONDecoder()
    window = _FIRST_WINDOW
    while True:
        piece = data[i:i + window]
        if not budget.spend(len(piece)):
            return None
        text = piece.decode("utf-8", "surrogateescape")
        try:
            _, end = decoder.raw_decode(_PREFIX + text)
        except json.JSONDecodeError as exc:
            truncated = exc.pos >= len(text) + len(_PREFIX) - 1 or exc.msg.startswith("Unterminated")
            if truncated and i + window < len(data) and window < MAX_EVENT_BYTES:  # look further
                window *= 2
                continue
            return None
        except RecursionError:
            return None
        end -= len(_PREFIX)
        stop = len(text[:end].encode("utf-8", "surrogateescape"))
        after = data[i + stop:i + stop + 64].lstrip()
        if after and after[:1] not in b",]}":
            return None
        return i + stop


def _name_end(data: bytes, start: int, first: int, budget: _Budget) -> Optional[int]:
    """The index of the quote closing the raw name that starts at ``start``
    (its first invalid byte is at ``first``), or None if none fits."""
    limit = min(len(data), start + MAX_NAME_BYTES)
    chosen, object_end = None, None
    for tries, m in enumerate(_CANDIDATE.finditer(data, first, limit)):
        q = m.start()
        if object_end is not None and q >= object_end or tries >= MAX_CANDIDATES:
            break
        if not budget.spend(q - (chosen or first)):
            break
        end = _rest_end(data, q + 1, budget)
        if end is not None:
            chosen = q
            if object_end is None:
                object_end = end
    return chosen


def repair_names(data: bytes) -> Tuple[bytes, int]:
    """``data`` (JSON text of a trace, or of a run of its events) with every
    ``"name"`` value that is not a valid JSON string escaped as the raw text
    it is; and how many were repaired (0: ``data`` is returned as is).

    Cost: one pass over the names plus, per broken name, at most
    :data:`MAX_NAME_BYTES` scanned and :data:`MAX_CANDIDATES` event rests
    parsed, within a budget of :data:`BUDGET_FACTOR` times ``len(data)``.
    Text that is invalid for another reason stays invalid: the caller's
    parser then says where.
    """
    out = []
    count, pos, done = 0, 0, 0
    budget = _Budget(len(data))
    search, valid, after = _NAME_KEY.search, _VALID.match, _AFTER.match
    while True:
        m = search(data, pos)
        if m is None:
            break
        start = m.end()
        v = valid(data, start).end()  # type: ignore[union-attr]
        if data[v:v + 1] == b'"' and after(data, v + 1):
            pos = v + 1
            continue
        end = _name_end(data, start, v, budget)
        if end is None:
            pos = v + 1
            continue
        value = data[start:end]
        text = value.decode("utf-8", "surrogateescape")
        escaped = json.dumps(text, ensure_ascii=False)[1:-1].encode("utf-8", "surrogateescape")
        out.append(data[done:start])
        out.append(escaped)
        done = pos = end
        count += 1
    if not count:
        return data, 0
    out.append(data[done:])
    return b"".join(out), count
