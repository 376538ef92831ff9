"""Rewrite ``tests/slow.txt``, the tests marked ``slow``, from measured durations.

The everyday loop is ``pytest -m "not slow"`` (under 2 minutes on a 2-core
machine); CI runs everything. A test function is slow when one of its cases
took at least ``THRESHOLD_S`` (setup, call and teardown together) in a full
run with ``--durations=0``::

    python -m pytest -q -p no:randomly --durations=0 > /tmp/durations.log
    python tests/refresh_slow.py /tmp/durations.log

Measured under the load of a CI run beside it, so the threshold leaves room.
"""
from __future__ import annotations

import collections
import re
import sys
from pathlib import Path

#: A test function whose slowest case takes this long or longer is marked slow (seconds).
THRESHOLD_S = 0.5
SLOW_LIST = Path(__file__).with_name("slow.txt")
_ROW = re.compile(r"\s*([\d.]+)s (?:call|setup|teardown)\s+(\S+)")


def slow_functions(log: str, threshold_s: float = THRESHOLD_S) -> list:
    """The node ids (``file::function``, parameters dropped) of the test
    functions with a case of at least ``threshold_s`` in a ``--durations=0`` log."""
    per_case: dict = collections.defaultdict(float)
    for line in log.splitlines():
        m = _ROW.match(line)
        if m:
            per_case[m.group(2)] += float(m.group(1))
    return sorted({case.split("[")[0] for case, seconds in per_case.items() if seconds >= threshold_s})


def main(argv: list) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    names = slow_functions(Path(argv[1]).read_text(encoding="utf-8"))
    if not names:
        print(f"{argv[1]}: no durations found (run pytest with --durations=0)", file=sys.stderr)
        return 1
    SLOW_LIST.write_text("# Tests marked slow: written by tests/refresh_slow.py from a --durations=0 run.\n"
                         + "\n".join(names) + "\n", encoding="utf-8")
    print(f"{len(names)} slow test functions written to {SLOW_LIST}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
