"""Self times of CPU events (:func:`hta_report.analysis.cpu_side.self_times`):
the parents found with numpy give exactly what the stack walk gives."""
import numpy as np
import pandas as pd
import pytest

from hta_report.analysis import cpu_side


def _walk(df):
    """The reference: the stack walk over every row."""
    ts, end = df["ts"].to_numpy(dtype=float), df["end"].to_numpy(dtype=float)
    thread = df["thread"].to_numpy()
    order = np.lexsort((-end, ts, thread))
    self_t = np.maximum(df["dur"].to_numpy(dtype=float), 0.0)
    out = cpu_side._self_times_walk(ts[order], end[order], thread[order], self_t[order])
    self_t[order] = out
    return np.maximum(self_t, 0.0)


def _nested(rng, n, threads=3, zero_share=0.1, whole=False):
    """Properly nested events (a random call tree per thread), some of zero
    or negative duration, equal starts and ends included."""
    rows = []
    for thr in range(threads):
        def tree(start, stop, depth):
            t = start
            while t < stop and len(rows) < n:
                dur = rng.choice([0.0, rng.uniform(0, stop - t)]) if rng.random() < zero_share else rng.uniform(0, stop - t)
                if whole:
                    dur = float(np.floor(dur))
                rows.append((thr, t, dur))
                if depth < 6 and dur > 2 and rng.random() < 0.6:
                    tree(t, t + dur, depth + 1)
                t += dur + (0 if rng.random() < 0.3 else rng.uniform(0, 5))
                if whole:
                    t = float(np.ceil(t))
        tree(0.0, 10_000.0, 0)
    if rows:
        rows.append((0, rows[0][1], -1.0))  # a negative duration, as some traces carry
    thr, ts, dur = map(np.array, zip(*rows))
    return pd.DataFrame({"thread": thr, "ts": ts, "dur": dur, "end": ts + dur})


def _overlapping(rng, n):
    ts = np.round(rng.uniform(0, 1000, n), 1)
    dur = np.round(rng.exponential(50, n), 1)
    return pd.DataFrame({"thread": rng.integers(0, 2, n), "ts": ts, "dur": dur, "end": ts + dur})


@pytest.mark.parametrize("seed", range(12))
def test_nested_events_take_numpy_and_match_the_walk(seed):
    rng = np.random.default_rng(seed)
    df = _nested(rng, 3000, whole=seed % 3 == 0)
    ts, end, thread = (df[c].to_numpy(dtype=float) for c in ("ts", "end", "thread"))
    order = np.lexsort((-end, ts, thread))
    assert cpu_side._parents(ts[order], end[order], thread[order]) is not None  # the numpy way was taken
    got = cpu_side.self_times(df)
    assert np.array_equal(got, _walk(df))  # the same floats, not merely close
    assert (got < df["dur"].clip(lower=0).to_numpy()).any()  # parents lost their children's time


@pytest.mark.parametrize("seed", range(8))
def test_overlapping_events_take_numpy_and_match_the_walk(seed):
    """Events that end after their parent (children overhanging by a rounding
    error, as fractional-µs traces have them, or anything at random): the
    walk's parent is still the last open event, which numpy finds too."""
    rng = np.random.default_rng(100 + seed)
    df = _overlapping(rng, 400)
    ts, end, thread = (df[c].to_numpy(dtype=float) for c in ("ts", "end", "thread"))
    order = np.lexsort((-end, ts, thread))
    assert cpu_side._parents(ts[order], end[order], thread[order]) is not None
    assert np.array_equal(cpu_side.self_times(df), _walk(df))


def test_a_child_overhanging_its_parent_and_a_row_in_the_overhang():
    # r contains a; c starts inside a and ends after it; d starts after a ends, inside c
    df = pd.DataFrame({"thread": [0] * 5, "ts": [0.0, 10.0, 15.0, 52.0, 70.0],
                       "dur": [100.0, 40.0, 40.0, 1.0, 1.0]})
    df["end"] = df["ts"] + df["dur"]
    ts, end = df["ts"].to_numpy(), df["end"].to_numpy()
    assert list(cpu_side._parents(ts, end, df["thread"].to_numpy())) == [-1, 0, 1, 2, 0]
    assert np.array_equal(cpu_side.self_times(df), _walk(df))


@pytest.mark.parametrize("seed", range(4))
def test_overhangs_by_a_rounding_error_match_the_walk(seed):
    """Nested events whose ends are recomputed from fractional starts and
    durations, as ``ts + dur`` of a current trace: some children end a
    fraction of a ns after their parent."""
    rng = np.random.default_rng(200 + seed)
    df = _nested(rng, 3000)
    frac = np.round(rng.uniform(0, 1, len(df)), 3)
    df["ts"] = df["ts"] + 4_457_415_638_173.0 + frac
    df["end"] = df["ts"] + df["dur"]
    assert np.array_equal(cpu_side.self_times(df), _walk(df))


def test_nan_times_fall_back_to_the_walk():
    df = pd.DataFrame({"thread": [0, 0, 0], "ts": [0.0, 1.0, np.nan], "dur": [10.0, 2.0, 1.0]})
    df["end"] = df["ts"] + df["dur"]
    assert np.array_equal(cpu_side.self_times(df), _walk(df), equal_nan=True)


def test_real_events_match_the_walk(tmp_path):
    from kineto import training_trace

    from hta_report.analysis.events import RankEvents
    from hta_report.load import load_traces

    training_trace(rank=0, steps=4).write(tmp_path / "rank0.json")
    loaded = load_traces(tmp_path)
    cpu = RankEvents.from_loaded(loaded, 0).cpu
    assert np.array_equal(cpu_side.self_times(cpu), _walk(cpu))
