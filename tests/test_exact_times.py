"""Fractional-µs traces: HTA's rounding for HTA, the exact times for our metrics.

Every trace current PyTorch writes has fractional µs (``"ts": 4457415638173.640``);
HTA rounds each event inward to whole µs, so sub-µs events get ``dur`` -1 or 0.

- such traces take the fast parser (``-v`` names no file as read by HTA's parser);
- the fast parse is HTA's dataframe plus two columns with the exact times,
  equal to the numbers in the file; HTA's path behind the validating reader
  gives the same two columns;
- no ``*_us`` figure of a result is negative, on every shared and sample trace;
- a sub-µs synchronization op is counted with its true duration, not -1 µs.
"""
import gzip
import json
import logging
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, SHARED_FOLDERS, shared
from hta_report.api import analyze
from hta_report.load import fastparse
from hta_report.load.hta_parser import parse_with_hta
from hta_report.load.parse import report_parser_config
from kineto import ELEMENTWISE, TraceBuilder
from test_fast_loader import assert_same_parse

SAMPLES = sorted(p for p in (REPO / "sample_traces").iterdir() if p.is_dir())
#: Traces with fractional-µs timestamps and sub-µs events (HTA makes some ``dur`` -1).
FRACTIONAL = [REPO / "sample_traces" / "cpu_healthy", REPO / "sample_traces" / "cpu_ddp_2ranks", "amd_trace",
              "cpu_only"]


@pytest.fixture(autouse=True)
def _quiet():
    logging.getLogger("hta").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def folder(name) -> Path:
    return name if isinstance(name, Path) else shared(name)


def raw_events(path: Path) -> list:
    with gzip.open(path, "rb") as f:
        return json.loads(f.read())["traceEvents"]


@pytest.mark.parametrize("name", FRACTIONAL, ids=str)
def test_fractional_traces_take_the_fast_parser(name, tmp_path, run_cli):
    code, _, err = run_cli("analyze", folder(name), "-o", tmp_path / "r.html", "--no-cache", "-v")
    assert code == 0, err
    parses = [line for line in err.splitlines() if "  parse " in line]
    assert parses and not [line for line in parses if "HTA's parser" in line], parses


@pytest.mark.parametrize("name", FRACTIONAL, ids=str)
def test_exact_times_beside_htas_rounded_ones(name):
    cfg = report_parser_config
    for path in sorted(folder(name).glob("*.json.gz")):
        meta, df, table = fastparse.parse_trace_file(path, cfg(), fallback=False, exact_times=True)
        assert (df["dur"] < 0).any()  # the rounding this is about
        # without the two columns, HTA's own dataframe
        theirs = fastparse.hta_parse_trace_file(path, cfg())
        assert_same_parse(theirs, (meta, df.drop(columns=list(fastparse.EXACT_COLUMNS)), table))
        # the columns hold the numbers written in the file, row by row
        events = raw_events(path)
        rows = df["index"].to_numpy()
        ts = np.array([events[i]["ts"] for i in rows], dtype=float)
        dur = np.array([events[i]["dur"] for i in rows], dtype=float)
        assert np.array_equal(df[fastparse.EXACT_TS].to_numpy(), ts)
        assert np.array_equal(df[fastparse.EXACT_DUR].to_numpy(), dur)
        assert (dur >= 0).all()
        assert np.array_equal(df["ts"].to_numpy(), np.ceil(ts))
        # HTA's path behind the validating reader keeps the same columns
        (_, df_hta, _), _ = parse_with_hta(path, cfg(), exact_times=True)
        for col in fastparse.EXACT_COLUMNS:
            assert np.array_equal(df_hta[col].to_numpy(), df[col].to_numpy()), col


def test_whole_us_traces_get_no_exact_columns():
    path = next(shared("trace_diff/control").glob("*.json.gz"))
    _, df, _ = fastparse.parse_trace_file(path, report_parser_config(), fallback=False, exact_times=True)
    assert not set(fastparse.EXACT_COLUMNS) & set(df.columns)


def negative_us(obj, where=""):
    """(path, value) of every number under a key containing ``_us`` that is negative."""
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and "_us" in k and v < 0:
                out.append((f"{where}.{k}", v))
            out += negative_us(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += negative_us(v, f"{where}[{i}]")
    return out


@pytest.mark.parametrize("name", SHARED_FOLDERS + SAMPLES, ids=str)
def test_no_negative_time_in_any_result(name, sample_results):
    analyzed = sample_results[name.name] if name in SAMPLES else analyze(folder(name))
    result = json.loads(analyzed.to_json())
    assert negative_us(result) == []


def test_sub_us_sync_ops_keep_their_true_duration(tmp_path):
    """``aten::item`` of 0.4 µs inside a 1 ms step: HTA rounds it to dur -1;
    the sync figures say 0.4 µs per call (Kineto's three decimals, ts near 4.5e12).
    Each read holds its 0.1 µs ``cudaStreamSynchronize`` (a read of a device
    tensor: a read without a copy or synchronize inside is no sync)."""
    b = TraceBuilder(rank=0, base_ts=4457415638173.640)
    for step in range(4):
        t0 = 1000.0 * step
        b.step(step + 1, t0, 1000.0)
        b.cpu_op("aten::mm", t0 + 10.125, 300.5)
        b.kernel(ELEMENTWISE, t0 + 320.0, 50.0, launch_ts=t0 + 311.0, launch_dur=4.0)
        for k in range(3):
            b.cpu_op("aten::item", t0 + 400.46 + 10 * k, 0.4)
            b.cpu_op("aten::_local_scalar_dense", t0 + 400.51 + 10 * k, 0.3)
            b.runtime("cudaStreamSynchronize", t0 + 400.55 + 10 * k, 0.1)
    (tmp_path / "t").mkdir()
    path = b.write(tmp_path / "t" / "rank-0.json.gz")
    _, df, _ = fastparse.parse_trace_file(path, report_parser_config(), fallback=False)
    assert set(df["dur"].unique()) >= {-1}  # what HTA makes of them
    rank = analyze(path.parent).ranks[0]
    sync = {e.name: e for e in rank.cpu.sync_events}
    # HTA drops the last step and the first is the warm-up: 2 analyzed steps, 3 calls each
    assert rank.cpu.steps_used == 2
    assert sync["aten::item"].count == 6
    assert math.isclose(sync["aten::item"].total_us, 6 * 0.4, rel_tol=1e-6)
    assert math.isclose(sync["aten::_local_scalar_dense"].total_us, 6 * 0.3, rel_tol=1e-6)
    # the union of each step's item calls (each holds its _local_scalar_dense)
    assert math.isclose(rank.cpu.sync_us_per_step, 3 * 0.4, rel_tol=1e-6)
    assert math.isclose(rank.steps.mean_us, 1000.0, rel_tol=1e-9)
