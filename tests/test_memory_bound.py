"""Memory follows the events, not the bytes: a trace padded with more whitespace
than the memory allowed is analyzed under that limit.

A 3.4 MB ``.json.gz`` can inflate to 3.5 GB of spaces inside a valid
``{"traceEvents": [...]}`` (under the default 4 GiB size cap); reading all of
it once took 20 GB. Here ``analyze`` runs in a subprocess whose address space
is capped at 1 GiB (``RLIMIT_AS``) on a trace holding 1.1 GiB of spaces between
its events: through the fast parser, and through HTA's parser behind the
validating reader (a negative ``dur`` sends the file there). The gzip is built
from one compressed block of spaces repeated as gzip members, so making it
costs nothing; each run takes a few seconds (decompressing 1.1 GiB).
"""
import gzip
import json
import os
import resource
import subprocess
import sys

import pytest

from conftest import REPO

LIMIT = 1 << 30
SPACES = 70 * (16 << 20)  # 1.1 GiB, more than LIMIT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS as Linux enforces it")


def events(negative: bool) -> list:
    out = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
            "ts": 1000.25 + 1000 * i, "dur": 900.5, "args": {"External id": i}} for i in range(3)]
    out += [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1100.5 + 1000 * i,
             "dur": 300.125, "args": {"External id": 10 + i}} for i in range(3)]
    if negative:
        out.append({"ph": "X", "cat": "cpu_op", "name": "aten::bad", "pid": 1, "tid": 1, "ts": 1500, "dur": -3,
                    "args": {}})
    return out


def whitespace_bomb(path, negative: bool = False) -> None:
    """``{"traceEvents": [`` half the events, :data:`SPACES` spaces, the rest ``]}``, gzipped."""
    evs = [json.dumps(e).encode() for e in events(negative)]
    half = len(evs) // 2
    block = gzip.compress(b" " * (16 << 20), compresslevel=9, mtime=0)
    with open(path, "wb") as f:
        f.write(gzip.compress(b'{"traceEvents": [' + b",".join(evs[:half]) + b",", mtime=0))
        for _ in range(SPACES // (16 << 20)):
            f.write(block)
        f.write(gzip.compress(b",".join(evs[half:]) + b"]}", mtime=0))


def analyze_limited(trace_dir, out, env=None):
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))

    cmd = [sys.executable, "-m", "hta_report", "analyze", str(trace_dir), "-o", str(out), "--no-cache", "-v",
           "--json", str(out.with_suffix(".json"))]
    return subprocess.run(cmd, capture_output=True, text=True, preexec_fn=limit, cwd=REPO, timeout=300,
                          env=dict(os.environ, **(env or {})))


@pytest.mark.parametrize("path", ["fast", "hta"])
def test_whitespace_bomb_is_read_in_bounded_memory(tmp_path, path):
    trace_dir = tmp_path / "bomb"
    trace_dir.mkdir()
    whitespace_bomb(trace_dir / "rank-0.json.gz", negative=path == "hta")
    run = analyze_limited(trace_dir, tmp_path / "r.html")
    assert run.returncode == 0, run.stderr[-2000:]
    parse = [line for line in run.stderr.splitlines() if "  parse rank-0" in line]
    assert len(parse) == 1
    assert ("HTA's parser: events with a negative dur" in parse[0]) == (path == "hta")
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["ranks"][0]["steps"]["count"] == 2  # HTA drops the last of the 3 steps
    if path == "hta":
        assert any("1 of 7 trace events left out: 1 has a negative dur" in w for w in result["inventory"]["warnings"])


def _random_json(rng, depth=0) -> str:
    """A JSON text with random whitespace, strings full of spaces, escapes and quotes."""
    def ws():
        return "".join(rng.choice(" \t\r\n") for _ in range(rng.choice([0, 0, 1, 2, 7, 40])))

    r = rng.random()
    if depth > 3 or r < 0.3:
        return rng.choice(["1", "-2.5e3", "true", "null", json.dumps(rng.choice(["a  b", 'x"  y', "\\", "  ", 'q\\"',
                                                                                  "é\n  \t"]))])
    if r < 0.65:
        return "[" + ",".join(ws() + _random_json(rng, depth + 1) + ws() for _ in range(rng.randint(0, 4))) + "]"
    return "{" + ",".join(ws() + json.dumps(f"k {i}\\") + ws() + ":" + ws() + _random_json(rng, depth + 1) + ws()
                          for i in range(rng.randint(0, 4))) + "}"


def test_collapser_keeps_the_json_value_and_cuts_every_run():
    import random

    from hta_report.load.whitespace import Collapser

    rng = random.Random(14)
    for _ in range(500):
        text = (" \n" + _random_json(rng) + "  ").encode()
        c, out, i = Collapser(), b"", 0
        while i < len(text):  # chunks of 1 to 8 bytes: escapes and runs straddle chunks
            k = rng.randint(1, 8)
            out += c.feed(text[i:i + k])
            i += k
        assert json.loads(out) == json.loads(text)
        assert Collapser().feed(out) == out  # no run of two whitespace bytes outside strings is left
    # each run keeps its first byte; the spaces inside the string stay
    assert Collapser().feed(b'{"a":  "  x  " ,  "b":[ 1 ,\n\n 2 ]}') == b'{"a": "  x  " , "b":[ 1 ,\n2 ]}'


# --- the size cap, enforced while reading ---------------------------------------------------------


def _small_bomb(path, mb: int, negative: bool = False):
    """The trace of :func:`events` with ``mb`` MB of spaces between its events, gzipped."""
    evs = [json.dumps(e).encode() for e in events(negative)]
    with gzip.open(path, "wb") as f:
        f.write(b'{"traceEvents": [' + evs[0] + b",")
        for _ in range(mb):
            f.write(b" " * 1_000_000)
        f.write(b",".join(evs[1:]) + b"]}")
    return path


@pytest.mark.parametrize("loader", ["fast", "hta"])
def test_gzip_over_the_cap_is_refused_by_either_reader(tmp_path, loader):
    """The cap is checked while the file is inflated (not by inflating it once more
    before parsing), by the fast reader and by HTA's path alike."""
    from hta_report.api import analyze
    from hta_report.errors import TraceError

    _small_bomb(tmp_path / "rank-0.json.gz", 30)
    with pytest.raises(TraceError, match="decompresses to more than the --max-trace-size cap of 20 MB"):
        analyze(tmp_path, max_trace_bytes=20_000_000, loader=loader)
    assert analyze(tmp_path, max_trace_bytes=40_000_000, loader=loader).ranks[0].steps.count == 2


def test_a_parse_cached_under_a_larger_cap_does_not_pass_a_smaller_one(tmp_path):
    from hta_report.api import analyze
    from hta_report.cache import Cache
    from hta_report.errors import TraceError

    trace_dir = tmp_path / "t"
    trace_dir.mkdir()
    _small_bomb(trace_dir / "rank-0.json.gz", 30)
    cache = Cache(tmp_path / "cache")
    analyze(trace_dir, max_trace_bytes=40_000_000, cache=cache)
    with pytest.raises(TraceError, match="cap of 20 MB"):
        analyze(trace_dir, max_trace_bytes=20_000_000, cache=cache)
