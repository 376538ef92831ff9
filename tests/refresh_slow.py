"""Rewrite ``tests/slow.txt``, the tests marked ``slow``, from measured durations.

The everyday loop is ``pytest -m "not slow"`` (docs/TESTING.md); CI runs
everything. A test function is slow when one of its cases took at least
``THRESHOLD_S`` (setup, call and teardown together) in a run with
``--durations=0 --durations-min=0`` (every test's time, none hidden)::

    python -m pytest -q -p no:randomly --durations=0 --durations-min=0 > /tmp/durations.log
    python tests/refresh_slow.py /tmp/durations.log [--threshold SECONDS]

The log may be of part of the suite (``-m "not slow"``, one file): each
function the log measured is judged again (listed when slow, dropped when
not); a listed function the log does not mention keeps its line. The
safety checks (``tests/safety.txt``) are never written, however long
they took: they stay in the quick tier.

Measured under the load of a CI run beside it, so the threshold leaves room.
"""
from __future__ import annotations

import collections
import re
import sys
from pathlib import Path
from typing import Iterable, Set

#: A test function whose slowest case takes this long or longer is marked slow (seconds).
THRESHOLD_S = 0.5
HERE = Path(__file__).resolve().parent
SLOW_LIST = HERE / "slow.txt"
SAFETY_LIST = HERE / "safety.txt"
_ROW = re.compile(r"\s*([\d.]+)s (call|setup|teardown|shared-setup)\s+(\S+)")
HEADER = ("# Tests marked slow: written by tests/refresh_slow.py from --durations=0 runs.\n"
          "# The safety checks (tests/safety.txt) are never listed here.\n")


def listed(path: Path) -> Set[str]:
    """The entries of a list file (one a line; ``#`` starts a comment line); empty when absent."""
    if not path.is_file():
        return set()
    return {line.strip() for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")}


def is_safety(function: str, safety: Iterable[str]) -> bool:
    """Whether ``file::function`` is a safety check: listed itself, or its file is."""
    safety = set(safety)
    return function in safety or function.split("::")[0] in safety


def durations(log: str) -> dict:
    """Seconds per test case (node id with parameters; setup, call and
    teardown added up) in a ``--durations=0`` log, less the setup of
    fixtures shared with other tests (the ``shared-setup`` lines
    tests/conftest.py adds: a module's or the session's fixture is charged
    to whichever test comes first, and is no test's own cost)."""
    per_case: dict = collections.defaultdict(float)
    for line in log.splitlines():
        m = _ROW.match(line)
        if m:
            per_case[m.group(3)] += float(m.group(1)) * (-1 if m.group(2) == "shared-setup" else 1)
    return {case: max(0.0, seconds) for case, seconds in per_case.items()}


def slow_functions(log: str, threshold_s: float = THRESHOLD_S, safety: Iterable[str] = ()) -> list:
    """The node ids (``file::function``, parameters dropped) of the test
    functions with a case of at least ``threshold_s`` in a ``--durations=0``
    log, leaving out the safety checks ``safety`` (entries of tests/safety.txt)."""
    return sorted({case.split("[")[0] for case, seconds in durations(log).items()
                   if seconds >= threshold_s and not is_safety(case.split("[")[0], safety)})


def refreshed(log: str, current: Iterable[str], safety: Iterable[str], threshold_s: float = THRESHOLD_S) -> list:
    """The new slow list: ``current`` (the listed functions) judged again
    where ``log`` measured them, the log's other slow functions added, the
    safety checks left out."""
    measured = {case.split("[")[0] for case in durations(log)}
    safety = set(safety)
    kept = {f for f in current if f not in measured}
    return sorted(f for f in kept | set(slow_functions(log, threshold_s, safety)) if not is_safety(f, safety))


def main(argv: list) -> int:
    threshold = THRESHOLD_S
    if len(argv) == 4 and argv[2] == "--threshold":  # a log measured under a heavier or lighter load
        threshold = float(argv[3])
    elif len(argv) != 2:
        print(__doc__)
        return 2
    log = Path(argv[1]).read_text(encoding="utf-8")
    if not durations(log):
        print(f"{argv[1]}: no durations found (run pytest with --durations=0 --durations-min=0)", file=sys.stderr)
        return 1
    before = listed(SLOW_LIST)
    names = refreshed(log, before, listed(SAFETY_LIST), threshold)
    SLOW_LIST.write_text(HEADER + "\n".join(names) + "\n", encoding="utf-8")
    print(f"{len(names)} slow test functions written to {SLOW_LIST} "
          f"({len(set(names) - before)} added, {len(before - set(names))} dropped)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
