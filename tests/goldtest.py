"""Gold files: a report compared with the copy kept in ``tests/gold/``
(coverage.py's ``tests/goldtest.py`` is the model).

A test renders an output, scrubs what differs from machine to machine or run
to run (:func:`scrub`) and calls :func:`check_gold`. When the text differs, the
test fails with a unified diff and the new text is left in ``tests/actual/``
(not tracked) to look at. After a change that means to alter the outputs,
refresh every gold file with one command and review the diff in git::

    HTA_REPORT_UPDATE_GOLD=1 python -m pytest -q tests/test_gold.py
"""
from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GOLD = REPO / "tests" / "gold"
ACTUAL = REPO / "tests" / "actual"
#: Set to 1 to write the gold files instead of comparing with them.
UPDATE_ENV = "HTA_REPORT_UPDATE_GOLD"


def scrub(text: str, replacements: dict[str, str]) -> str:
    """``text`` with each key of ``replacements`` (an absolute path, a version,
    a time) replaced by its value, longest key first (so a folder's path
    goes before its parent's), and any pytest temporary folder as ``<TMP>``."""
    for old in sorted(replacements, key=len, reverse=True):
        if old:
            text = text.replace(old, replacements[old])
    return re.sub(r"/[^\s\"'<>]*?/pytest-of-[^/\s\"'<>]+/pytest-\d+", "<TMP>", text)


def check_gold(name: str, text: str) -> None:
    """Compare ``text`` with ``tests/gold/<name>``; write it there instead when
    :data:`UPDATE_ENV` is set.

    Raises:
        AssertionError: the gold file is missing or differs (a unified diff
            of the first lines; the whole new text is in ``tests/actual/<name>``).
    """
    gold = GOLD / name
    if os.environ.get(UPDATE_ENV) == "1":
        gold.parent.mkdir(parents=True, exist_ok=True)
        gold.write_text(text, encoding="utf-8", newline="")
        return
    actual = ACTUAL / name
    if gold.is_file():
        expected = gold.read_text(encoding="utf-8")
        if expected == text:
            if actual.exists():
                actual.unlink()
            return
    else:
        expected = ""
    actual.parent.mkdir(parents=True, exist_ok=True)
    actual.write_text(text, encoding="utf-8", newline="")
    diff = "".join(list(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                             f"gold/{name}", f"actual/{name}", n=2))[:80])
    if not gold.is_file():
        raise AssertionError(f"no gold file tests/gold/{name}; refresh with {UPDATE_ENV}=1 "
                             f"python -m pytest -q tests/test_gold.py")
    raise AssertionError(f"tests/gold/{name} differs (new text in tests/actual/{name}; if the change is "
                         f"meant, refresh with {UPDATE_ENV}=1 python -m pytest -q tests/test_gold.py):\n{diff}")
