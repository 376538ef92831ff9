"""bench/scale.py's pure parts (issue 34): the skewed rank generator and the
exponent fit. Nothing here runs ``analyze``."""
from __future__ import annotations

import gzip
import math
import sys

import orjson
import pytest

from conftest import REPO, shared

sys.path.insert(0, str(REPO / "bench"))
import scale  # noqa: E402


def test_skewed_ranks_shift_each_file_uniformly_and_stay_bounded():
    src_dir = shared("two_ranks")
    sources = [orjson.loads(gzip.open(p).read()) for p in sorted(src_dir.glob("*.json.gz"))]
    n = 48
    offsets = []
    for rank in range(n):
        src = sources[rank % len(sources)]
        before = orjson.dumps(src)
        doc, off = scale.skewed(src, rank, n, seed=3)
        assert orjson.dumps(src) == before, "the source document was modified"
        assert doc["distributedInfo"]["rank"] == rank
        assert doc["distributedInfo"]["world_size"] == n
        assert abs(off) <= scale.SKEW_MAX_US + scale.STRAGGLER_US
        assert len(doc["traceEvents"]) == len(src["traceEvents"])
        shifts = set()
        for a, b in zip(src["traceEvents"], doc["traceEvents"]):
            if "ts" in a:
                shifts.add(b["ts"] - a["ts"])
            # nothing but ts changes: dur, ids, names are the real trace's
            assert {k: v for k, v in a.items() if k != "ts"} == {k: v for k, v in b.items() if k != "ts"}
        assert shifts == {off}, f"rank {rank}: events shifted by {sorted(shifts)[:5]}, not one offset"
        offsets.append(off)
    # plausible skew: the offsets differ between ranks, the clock skew stays within a few ms,
    # and one rank in STRAGGLER_EVERY starts STRAGGLER_US late
    assert len(set(offsets)) > n // 2
    stragglers = [r for r, o in enumerate(offsets) if o > scale.SKEW_MAX_US]
    assert stragglers == [r for r in range(n) if r % scale.STRAGGLER_EVERY == scale.STRAGGLER_EVERY // 2]
    assert all(abs(o) <= scale.SKEW_MAX_US for r, o in enumerate(offsets) if r not in stragglers)
    # seeded: the same seed gives the same offsets, another seed others
    assert [scale.rank_offset_us(r, 3) for r in range(n)] == offsets
    assert [scale.rank_offset_us(r, 4) for r in range(n)] != offsets


def test_make_ranks_writes_distinct_ranks_and_reuses_them(tmp_path, monkeypatch):
    src_dir = shared("two_ranks")
    monkeypatch.setattr(scale, "SOURCE", src_dir)
    d, sizes = scale.make_ranks(5, tmp_path, seed=1)
    files = sorted(d.glob("*.json.gz"))
    assert len(files) == 5 == len(sizes)
    docs = [orjson.loads(gzip.open(p).read()) for p in files]
    assert sorted(doc["distributedInfo"]["rank"] for doc in docs) == list(range(5))
    assert {doc["distributedInfo"]["world_size"] for doc in docs} == {5}
    assert sorted(sizes) == sorted(len(gzip.open(p).read()) for p in files)
    stamp = files[0].stat().st_mtime_ns
    assert scale.make_ranks(5, tmp_path, seed=1)[1] == sizes
    assert files[0].stat().st_mtime_ns == stamp, "existing files were not reused"
    src0 = orjson.loads(gzip.open(sorted(src_dir.glob("*.json.gz"))[0]).read())["traceEvents"][0]["ts"]
    for seed in (1, 2):  # another seed: made again, with that seed's offset
        scale.make_ranks(5, tmp_path, seed=seed)
        first = orjson.loads(gzip.open(d / "rank-0.json.gz").read())
        assert first["traceEvents"][0]["ts"] - src0 == scale.rank_offset_us(0, seed)


@pytest.mark.parametrize("power", [1.0, 2.0, 0.5])
def test_fit_exponent_recovers_the_power(power):
    xs = [3e6, 2.4e7, 9.6e7, 3.9e8, 8e9]
    a, b = scale.fit_exponent(xs, [7.0 * x ** power for x in xs])
    assert b == pytest.approx(power, abs=1e-9)
    assert a == pytest.approx(7.0, rel=1e-6)


def test_fit_exponent_needs_two_sizes():
    with pytest.raises(ValueError):
        scale.fit_exponent([5.0, 5.0], [1.0, 2.0])


def test_fit_line_and_parse_big():
    assert scale.fit_line([8, 64, 256], [100 + 2 * x for x in (8, 64, 256)]) == pytest.approx((100, 2))
    assert scale.parse_big("8x1GB") == (8, 10**9)
    assert scale.parse_big("2x50MB") == (2, 50 * 10**6)
    assert scale.parse_big("0") == (0, 0)
    assert math.isclose(scale.parse_big("4x1.5GB")[1], 1.5e9)
