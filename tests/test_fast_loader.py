"""The fast loader gives what HTA's own parser gives: same dataframes, same results.

- every shared trace: :func:`hta_report.load.fastparse.parse_trace_file` against
  ``hta.common.trace.parse_trace_file``, column by column (dtypes, values,
  index, column order), metadata and symbol table, with HTA's default parser
  config and with the report's;
- every shared trace folder: the whole AnalysisResult from the fast loader and
  from HTA's parser (``loader="hta"``) is the same JSON (but ``analyzed_at``);
- synthetic traces for the corners (ns timestamps, missing fields, mixed types,
  strings that look like event boundaries, tiny read blocks, parallel pieces);
- the parse cache returns what was parsed, ``--no-cache`` touches no cache, a
  corrupt entry is ignored and rewritten.
"""
import gzip
import itertools
import json
import logging
import random
import warnings

import msgspec
import numpy as np
import pandas as pd
import pytest

from conftest import SHARED_FOLDERS, SHARED_TRACES, shared
from hta_report.load import fastnative, fastparse
from hta_report.api import analyze
from hta_report.cache import Cache
from hta_report.load.parse import report_parser_config



@pytest.fixture(autouse=True)
def _quiet():
    logging.getLogger("hta").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def default_cfg():
    from hta.configs.parser_config import ParserConfig

    return ParserConfig.get_default_cfg()


def assert_same_parse(theirs, ours):
    m1, d1, s1 = theirs
    m2, d2, s2 = ours
    # which reader ran (fastparse.PARSER_USED) is the one key the readers differ in by design
    assert {k: v for k, v in m1.items() if k != fastparse.PARSER_USED} == \
        {k: v for k, v in m2.items() if k != fastparse.PARSER_USED}
    assert s1.get_sym_table() == s2.get_sym_table()
    assert s1.get_sym_id_map() == s2.get_sym_id_map()
    assert list(d1.columns) == list(d2.columns)
    assert type(d1.index) is type(d2.index)
    for col in d1.columns:
        assert d1[col].dtype == d2[col].dtype, col
        pd.testing.assert_series_equal(d1[col], d2[col], check_exact=True, obj=col)
        if d1[col].dtype == object:
            assert [type(v) for v in d1[col]] == [type(v) for v in d2[col]], col


def shared_files():
    if not SHARED_TRACES.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason="../shared is absent"))]
    return sorted(SHARED_TRACES.glob("**/*.json.gz"), key=str)


@pytest.mark.parametrize("path", shared_files(), ids=lambda p: p.parent.name if p else "none")
@pytest.mark.parametrize("config", ["hta-default", "report"])
def test_same_dataframe_as_hta(path, config):
    cfg = (lambda: default_cfg()) if config == "hta-default" else report_parser_config
    theirs = fastparse.hta_parse_trace_file(path, cfg())
    ours = fastparse.parse_trace_file(path, cfg(), fallback=False)
    assert_same_parse(theirs, ours)


def test_pieces_in_tiny_blocks_and_parallel_workers(monkeypatch):
    path = next(shared("trace_diff/control").glob("*.json.gz"))
    theirs = fastparse.parse_trace_file(path, report_parser_config(), fallback=False)
    monkeypatch.setattr(fastparse, "BLOCK_BYTES", 256 << 10)  # ~100 pieces
    assert_same_parse(theirs, fastparse.parse_trace_file(path, report_parser_config(), fallback=False))
    assert_same_parse(theirs, fastparse.parse_trace_file(path, report_parser_config(), fallback=False, workers=2))


@pytest.mark.parametrize("folder", SHARED_FOLDERS)
def test_same_result_as_with_hta_parser(folder):
    path = shared(folder)
    fast = json.loads(analyze(path, loader="fast").to_json())
    hta = json.loads(analyze(path, loader="hta").to_json())
    for r in (fast, hta):
        r["inventory"]["analyzed_at"] = ""
        # the validating reader behind HTA's parser also notes fields it ignored
        # (e.g. a string "stream"); the fast path reads them as HTA does, silently
        r["inventory"]["warnings"] = [w for w in r["inventory"]["warnings"] if "was ignored" not in w]
    # which reader read each file is the one thing the two loaders must differ on
    assert {f["parser"] for f in fast["inventory"]["files"]} <= {"native", "python", "native and python"}
    assert {f["parser"] for f in hta["inventory"]["files"]} == {"hta"}
    for r in (fast, hta):
        for f in r["inventory"]["files"]:
            f["parser"] = ""
    assert fast == hta


def test_loader_env_var_selects_hta(monkeypatch):
    from hta_report.load.parse import resolve_loader

    monkeypatch.setenv("HTA_REPORT_LOADER", "hta")
    assert resolve_loader(None) == "hta"
    assert resolve_loader("fast") == "fast"
    with pytest.raises(ValueError):
        resolve_loader("nope")


# ------------------------------------------------------------------ synthetic corners


def _event(rng, i, ts, kind):
    if kind == "cpu":
        e = {"ph": "X", "cat": "cpu_op", "name": rng.choice(["aten::mm", "aten::add", 'we"ird}, {"x', "a\\b"]),
             "pid": 10, "tid": rng.choice([1, 2]), "ts": ts, "dur": rng.randint(1, 50),
             "args": {"External id": i, "Input Dims": [[1, 2], []], "nested": [{"a": 1}, {"b": [2, {"c": 3}]}]}}
    elif kind == "launch":
        e = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 1, "ts": ts,
             "dur": 5, "args": {"correlation": 1000 + i, "External id": i}}
    elif kind == "kernel":
        e = {"ph": "X", "cat": "kernel", "name": rng.choice(["gemm<float>", "ncclDevKernel_AllReduce"]),
             "pid": 0, "tid": 7, "ts": ts + 3, "dur": rng.randint(1, 40),
             "args": {"correlation": 1000 + i - 1, "stream": 7, "device": 0}}
    elif kind == "flow":
        e = {"ph": rng.choice(["s", "f"]), "id": i, "pid": 10, "tid": 1, "ts": ts, "cat": "ac2g",
             "name": "ac2g", "bp": "e"}
    else:
        e = {"name": "thread_name", "ph": "M", "ts": ts, "pid": rng.choice([10, "Spans"]), "tid": 1,
             "args": {"name": "thread 1"}}
    return e


def synthetic(rng, variant):
    events, ts = [], 1_000_000
    for step in range(3):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step + 5}", "pid": 10,
                       "tid": 1, "ts": ts, "dur": 900, "args": {"External id": 1}})
        for i in range(40):
            kind = rng.choice(["cpu", "launch", "kernel", "kernel", "flow", "meta"])
            events.append(_event(rng, step * 100 + i, ts + 10 * i, kind))
        ts += 1000
    if variant == "ns":  # ns-resolution timestamps: HTA rounds them
        for e in events:
            e["ts"] = e["ts"] + rng.choice([0.25, 0.5, 0.75])
            if "dur" in e:
                e["dur"] = e["dur"] + 0.5
    elif variant == "missing":  # fields missing here and there, null cat, a Trace span, an unknown key
        for e in events[::7]:
            e.pop("tid", None)
        for e in events[3::11]:
            e.pop("args", None)
        events[5]["cat"] = None
        events.insert(2, {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",
                          "tid": "PyTorch Profiler", "ts": 1_000_000, "dur": 5000})
        for e in events[::5]:
            e["cname"] = "good"
    elif variant == "mixed":  # string stream numbers, float bytes, bool args, overlapping steps
        for e in events:
            if e.get("cat") == "kernel":
                e["args"]["stream"] = "7"
                e["args"]["bytes"] = 12.5
        # overlapping two steps, enclosing none (an enclosing step is left out: test_hostile_load)
        events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#99", "pid": 10, "tid": 1,
                       "ts": 1_000_500, "dur": 1000, "args": {}})
    return {"schemaVersion": 1, "distributedInfo": {"rank": 0}, "traceEvents": events,
            "traceName": "synthetic", "baseTimeNanoseconds": 1}


@pytest.mark.parametrize("variant", ["plain", "ns", "missing", "mixed"])
@pytest.mark.parametrize("indent", [None, 2])
def test_synthetic_corners_match_hta(tmp_path, monkeypatch, variant, indent):
    rng = random.Random(f"{variant}{indent}")
    doc = synthetic(rng, variant)
    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(doc, f, indent=indent)
    theirs = fastparse.hta_parse_trace_file(path, default_cfg())
    monkeypatch.setattr(fastparse, "BLOCK_BYTES", 4096)  # cuts near the '}, {' inside names
    assert_same_parse(theirs, fastparse.parse_trace_file(path, default_cfg(), fallback=False))
    assert_same_parse(theirs, fastparse.parse_trace_file(path, default_cfg(), fallback=False, workers=2))


def _count_paths(monkeypatch):
    """Count the pieces the Python reader decodes into structs and into dicts
    (the Python reader alone: ``HTA_REPORT_PARSER=python``)."""
    monkeypatch.setenv("HTA_REPORT_PARSER", "python")
    counts = {"structs": 0, "dicts": 0}
    typed, dicts = fastparse._typed_piece, fastparse._piece

    def count_typed(*a):
        counts["structs"] += 1
        return typed(*a)

    def count_dicts(*a):
        counts["dicts"] += 1
        return dicts(*a)

    monkeypatch.setattr(fastparse, "_typed_piece", count_typed)
    monkeypatch.setattr(fastparse, "_piece", count_dicts)
    return counts


@pytest.mark.parametrize("path", shared_files(), ids=lambda p: p.parent.name if p else "none")
def test_real_traces_decode_into_structs_and_dicts_give_the_same(path, monkeypatch):
    """Every shared trace takes the struct path (no piece falls back to dicts),
    and the dict path gives the same frame (both equal HTA's, above)."""
    counts = _count_paths(monkeypatch)
    typed = fastparse.parse_trace_file(path, report_parser_config(), fallback=False, exact_times=True)
    assert counts["structs"] and not counts["dicts"]

    def refuse(*a):
        raise msgspec.ValidationError("forced")

    monkeypatch.setattr(fastparse, "_typed_decoder", lambda specs: (type("D", (), {"decode": refuse}), None))
    dicts = fastparse.parse_trace_file(path, report_parser_config(), fallback=False, exact_times=True)
    assert counts["dicts"]
    assert_same_parse(typed, dicts)


def _same_as_htas_in_small_blocks(tmp_path, monkeypatch, events, block: int):
    """Our parse of ``events`` read ``block`` bytes at a time (so in many pieces,
    each decoded into structs), checked equal to HTA's parser's; returned. The
    native reader's parse (where built) is checked equal too."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    theirs = fastparse.hta_parse_trace_file(path, default_cfg())
    monkeypatch.setattr(fastparse, "BLOCK_BYTES", block)
    counts = _count_paths(monkeypatch)
    ours = fastparse.parse_trace_file(path, default_cfg(), fallback=False)
    assert counts["structs"] > 5 and not counts["dicts"]
    assert_same_parse(theirs, ours)
    if fastnative.available():
        monkeypatch.setenv("HTA_REPORT_PARSER", "native")
        native = fastparse.parse_trace_file(path, default_cfg(), fallback=False)
        assert_same_parse(theirs, native)
        monkeypatch.setenv("HTA_REPORT_PARSER", "python")
    return ours


def test_keys_first_seen_in_a_later_piece_keep_htas_column_order(tmp_path, monkeypatch):
    """Kineto starts with metadata events (no cat, no dur): with tiny blocks the
    first pieces hold only those, and cat and dur first appear together in a
    later piece, in one event, in the order that event writes them."""
    meta = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": t, "ts": 5.5, "args": {"name": f"thread {t}"}}
            for t in range(300)]
    spans = [{"ph": "X", "name": "aten::mm", "dur": 3.25, "pid": 1, "cat": "cpu_op", "tid": 2, "ts": 10.5 + i,
              "args": {"External id": i}} for i in range(300)]
    ours = _same_as_htas_in_small_blocks(tmp_path, monkeypatch, meta + spans, 2048)
    assert list(ours[1].columns).index("dur") < list(ours[1].columns).index("cat")


@pytest.mark.parametrize("variant", ["lists", "numbers", "strings", "mixed", "every-number", "every-string"])
def test_object_args_absent_in_some_pieces_and_of_any_type_match_hta(tmp_path, monkeypatch, variant):
    """The args HTA keeps as objects (``Input Dims``, ``In split size``...):
    pieces where no event has them (all HTA's default text), pieces with
    lists, and values that are not lists (numbers, strings, both), which
    pandas does not keep as objects when every event has them; tiny
    blocks, so each piece differs."""
    rng = random.Random(variant)

    def dims(i):
        if variant == "lists":
            return [[i % 3, 2], []]
        if variant in ("numbers", "every-number"):
            return rng.choice([i % 4, 2.5])
        if variant in ("strings", "every-string"):
            return rng.choice(["a", "b"])
        return rng.choice([[1, 2], 7, "x", {"k": [1]}, None, ["nul \u0000 inside"]])

    events = []
    for i in range(600):
        e = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 10 + i, "dur": 1,
             "args": {"External id": i}}
        block = (i // 100) % 3  # 100 events without the args, 100 with some, 100 with all
        if block == 1 and i % 2 or block == 2 or variant.startswith("every"):  # every: pandas infers
            e["args"]["Input Dims"] = dims(i)                                   # numbers, or strings
            e["args"]["Input type"] = ["float", ""] if variant != "numbers" else 1
        if block == 2 and i % 5 == 0:
            e["args"]["In split size"] = [i % 2]
        events.append(e)
    ours = _same_as_htas_in_small_blocks(tmp_path, monkeypatch, events, 4096)
    # and the column that every piece lacks holds HTA's default in every row
    assert set(ours[1]["out_split_size"]) == {"[]"}


SAMPLES = {"str": "a", "int": 1, "bool": True, "list": [1], "dict": {"k": 1}, "float": 2.5, "nan": float("nan"),
           "none": None}


@pytest.mark.parametrize("kinds", [c for r in (1, 2, 3, 4) for c in itertools.combinations(SAMPLES, r)],
                         ids="-".join)
def test_infer_gives_the_dtype_pandas_infers(kinds):
    """:func:`fastparse._infer`'s tag is pandas' dtype for every mix of JSON
    value types (its shortcuts, such as a string beside an int, included)."""
    values = [SAMPLES[k] for k in kinds] * 2
    dtype = pd.Series(values).dtype
    expected = {"int64": "i8", "float64": "f8", "bool": "bool", "object": "obj"}.get(str(dtype), "str")
    try:
        tag, _ = fastparse._infer(values)
    except fastparse.Unsupported:
        return  # the caller hands the file to HTA's parser
    if tag == "null" and None in values:
        return  # JSON nulls only: the merge hands such a column to HTA's parser (_Column.tag)
    if tag in ("null", "f8i"):  # NaN only / ints and NaN: floats to pandas
        tag = "f8"
    assert tag == expected, (kinds, dtype)


def test_texts_of_raws_split_at_nul_bytes_only_when_none_holds_one():
    """:func:`fastparse._texts_of` joins the texts with NUL bytes to split them
    in one call; texts holding one (not valid JSON, so not from msgspec's
    decoder) are converted one by one instead."""
    R = msgspec.Raw
    assert fastparse._texts_of([]) == []
    assert fastparse._texts_of([R(b"[1]"), R(b'"\\u0000"'), R(b"[1]")]) == [b"[1]", b'"\\u0000"', b"[1]"]
    assert fastparse._texts_of([R(b'"a\x00b"'), R(b"[1]"), R(b"\x00")]) == [b'"a\x00b"', b"[1]", b"\x00"]
    distinct, texts = fastparse._decode_shared([R(b"[1]"), R(b"[2, 3]"), R(b"[1]")])
    assert distinct == [[1], [2, 3]] and texts.texts == [b"[1]", b"[2, 3]"] and texts.codes.tolist() == [0, 1, 0]


def test_unsupported_inputs_go_to_hta(tmp_path):
    doc = synthetic(random.Random(1), "plain")
    doc["traceEvents"].append({"ph": "X", "cat": "cuda_profiler_range", "name": "r", "pid": 1, "tid": 1,
                               "ts": 1_000_010, "dur": 5, "args": {"smsp__x": 3}})
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(fastparse.Unsupported):
        fastparse.parse_trace_file(path, default_cfg(), fallback=False)
    assert_same_parse(fastparse.hta_parse_trace_file(path, default_cfg()),
                      fastparse.parse_trace_file(path, default_cfg()))


@pytest.mark.parametrize("text", ['{"traceEvents": [{"ph": "X", "ts": 1,', '{"traceEvents": [], }', "[1, 2]"])
def test_malformed_json_raises_what_hta_raises(tmp_path, text):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(Exception) as theirs:
        fastparse.hta_parse_trace_file(path, default_cfg())
    with pytest.raises(Exception) as ours:
        fastparse.parse_trace_file(path, default_cfg())
    assert type(ours.value) is type(theirs.value)


# ------------------------------------------------------------------ cache


def _frames(loaded):
    return {r: loaded.frame(r) for r in loaded.ranks}


def test_cached_parse_equals_uncached(tmp_path):
    from hta_report.load import load_traces

    path = shared("two_ranks")
    cache = Cache(tmp_path / "c")
    first = load_traces(path, cache=cache)
    assert len(list((tmp_path / "c" / "parse-v1").glob("*.arrow"))) == 2
    second = load_traces(path, cache=Cache(tmp_path / "c"))
    plain = load_traces(path)
    for loaded in (first, second):
        assert loaded.symbols == plain.symbols
        for r, df in _frames(plain).items():
            pd.testing.assert_frame_equal(loaded.frame(r), df, check_exact=True)


def test_cli_cache_reuse_no_cache_and_corrupt_entries(tmp_path, run_cli):
    path = shared("two_ranks")
    cache = tmp_path / "cache"
    outs = []
    for i, extra in enumerate([["--no-cache"], ["--cache-dir", cache], ["--cache-dir", cache]]):
        out = tmp_path / f"r{i}.json"
        code, _, err = run_cli("analyze", path, "-o", tmp_path / f"r{i}.html", "--json", out, "-q", *extra)
        assert code == 0, err
        data = json.loads(out.read_text())
        data["inventory"]["analyzed_at"] = ""
        outs.append(data)
        if i == 0:
            assert not cache.exists()
    assert outs[0] == outs[1] == outs[2]
    entries = list(cache.glob("parse-v1/*.arrow")) + list(cache.glob("result-v1/*.json"))
    assert len(entries) == 4  # two parsed files, the result, its charts
    for p in entries:  # corrupt every entry: ignored, then rewritten
        p.write_bytes(b"garbage")
    code, _, err = run_cli("analyze", path, "-o", tmp_path / "r3.html", "--json", tmp_path / "r3.json", "-q",
                           "--cache-dir", cache)
    assert code == 0, err
    data = json.loads((tmp_path / "r3.json").read_text())
    data["inventory"]["analyzed_at"] = ""
    assert data == outs[0]
    assert all(p.read_bytes() != b"garbage" for p in entries)


def test_no_cache_touches_default_cache_dir(tmp_path, monkeypatch, run_cli):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    path = shared("cpu_only")
    assert run_cli("analyze", path, "-o", tmp_path / "r.html", "-q", "--no-cache")[0] == 0
    assert not (tmp_path / "xdg" / "hta-report").exists()  # (matplotlib may keep its font list beside it)
    assert run_cli("analyze", path, "-o", tmp_path / "r.html", "-q")[0] == 0
    assert list((tmp_path / "xdg" / "hta-report").glob("*/*"))


def test_changed_file_is_not_served_from_cache(tmp_path):
    src = next(shared("cpu_only").glob("*.json.gz"))
    d = tmp_path / "t"
    d.mkdir()
    data = json.loads(gzip.open(src).read())
    (d / "rank-0.json").write_text(json.dumps(data))
    cache = Cache(tmp_path / "c")
    before = analyze(d, cache=cache)
    data["traceEvents"] = [e for e in data["traceEvents"] if e.get("name") != data["traceEvents"][0].get("name")]
    (d / "rank-0.json").write_text(json.dumps(data))
    after = analyze(d, cache=Cache(tmp_path / "c"))
    assert after.to_json() != before.to_json() or after.ranks[0].cpu != before.ranks[0].cpu
    fresh = analyze(d)
    assert after.ranks[0].cpu == fresh.ranks[0].cpu


# ------------------------------------------------------------------ self times, progress


def test_self_times_match_the_per_thread_reference():
    import importlib

    cpu_side = importlib.import_module("hta_report.analysis.cpu_side")
    from hta_report.analysis.events import thread_codes

    def reference(cpu):
        self_t = np.maximum(cpu["dur"].to_numpy(dtype=float), 0.0)
        ts, end = cpu["ts"].to_numpy(dtype=float), cpu["end"].to_numpy(dtype=float)
        threads = (cpu["pid"].astype(str) + "/" + cpu["tid"].astype(str)).to_numpy()
        for thread in np.unique(threads):
            idx = np.flatnonzero(threads == thread)
            idx = idx[np.lexsort((-end[idx], ts[idx]))]
            stack = []
            for i in idx:
                while stack and ts[i] >= end[stack[-1]]:
                    stack.pop()
                if stack:
                    self_t[stack[-1]] -= min(end[i], end[stack[-1]]) - ts[i]
                stack.append(i)
        return np.maximum(self_t, 0.0)

    rng = np.random.default_rng(0)
    for _ in range(100):
        n = int(rng.integers(1, 50))
        ts = rng.integers(0, 40, n).astype(float)
        dur = rng.integers(-1, 25, n).astype(float)
        df = pd.DataFrame({"ts": ts, "dur": dur, "end": ts + dur,
                           "pid": rng.choice(np.array([1, 2, "1", 3.0], dtype=object), n),
                           "tid": rng.choice(np.array([5, "5", 6], dtype=object), n)})
        df["thread"] = thread_codes(df)  # as RankEvents.from_loaded adds it
        assert np.array_equal(cpu_side.self_times(df), reference(df))


def test_verbose_prints_stage_times_and_no_status_line_off_a_terminal(tmp_path, run_cli):
    code, _, err = run_cli("analyze", shared("cpu_only"), "-o", tmp_path / "r.html", "-q", "-v", "--no-cache")
    assert code == 0
    for stage in ("find trace files", "parse ", "HTA align and filter", "analyze rank 34", "advice", "render html"):
        assert stage in err, err
    assert "\r" not in err
    code, _, err = run_cli("analyze", shared("cpu_only"), "-o", tmp_path / "r.html", "-q", "--no-cache")
    assert err == ""


def test_progress_line_only_on_a_terminal():
    import io

    from hta_report.progress import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    from hta_report.progress import using

    tty, pipe = Tty(), io.StringIO()
    for stream in (tty, pipe):
        with using(Progress(stream=stream)) as p, p.stage("parsing"):
            p.update("parsed 1/2 files")
    assert "parsing" in tty.getvalue() and "\r" in tty.getvalue()
    assert pipe.getvalue() == ""  # no heartbeat asked for


def test_shared_values_share_equal_values_of_one_type_only():
    from hta_report.load.fastparse import shared_values

    nan = float("nan")
    values = [[1, [2]], [1, [2]], 1, 1.0, True, "1", "1", {"a": 1}, {"a": 1}, nan, float("nan"), None, None, 10**6,
              int("1000000")]
    out = shared_values(values)
    assert out == values or all(a is b or a == b for a, b in zip(out, values))  # NaN != NaN
    assert out[0] is out[1] and out[5] is out[6] and out[7] is out[8] and out[13] is out[14]
    assert [type(v) for v in out] == [type(v) for v in values]  # 1, 1.0 and True stay apart
    assert out[2] is not out[3] and out[3] is not out[4]
    assert out[9] is values[9] and out[10] is values[10]  # NaNs are never merged


def test_parsed_object_columns_hold_few_distinct_objects():
    from hta_report.load.fastparse import parse_trace_file
    from hta_report.load.parse import report_parser_config

    (path,) = sorted(shared("trace_diff/control").glob("*.json.gz"))
    _, df, _ = parse_trace_file(str(path), report_parser_config(), fallback=False)
    for col in ("pid", "tid", "input_dims", "input_type"):
        values = df[col].to_numpy()
        assert len({id(v) for v in values}) < len(values) / 20, col


@pytest.mark.parametrize("path", shared_files(), ids=lambda p: p.parent.name if p else "none")
def test_hta_path_gives_hta_parse_trace_file(path):
    """HTA's functions called on our validated document (no monkeypatching of
    HTA) give what HTA's own ``parse_trace_file`` gives, wherever the
    validating reader left nothing out."""
    from hta_report.load.hta_parser import parse_with_hta

    ours, report = parse_with_hta(path, report_parser_config())
    if report.dropped or report.ignored:
        pytest.skip(f"the validating reader changed events: {report.warning()}")
    assert_same_parse(fastparse.hta_parse_trace_file(path, report_parser_config()), ours)


@pytest.mark.parametrize("parser", ["python", "native"])
def test_an_unsupported_run_with_object_args_raises_its_own_error_not_buffer_error(tmp_path, monkeypatch, parser):
    # the Python reader decoded a run in the read buffer's view into structs whose object args
    # (msgspec.Raw) kept the buffer exported; raising Unsupported with them alive in the traceback
    # made the view's release raise BufferError instead (158 of seeds 0-199 of
    # tests/test_native_reader.py's _random_document, with either reader, before the fix)
    if parser == "native" and not fastnative.available():
        pytest.skip("the native reader is not built")
    monkeypatch.setenv("HTA_REPORT_PARSER", parser)
    event = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1000, "dur": 2,
             "args": {"Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"]}}
    no_dur = {k: v for k, v in event.items() if k != "dur"}  # a complete event without dur: Unsupported
    events = [dict(event, ts=1000 + i) for i in range(20)] + [no_dur] + [dict(event, ts=2000 + i) for i in range(20)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    with pytest.raises(fastparse.Unsupported, match="^complete events without dur$"):
        fastparse.parse_trace_file(str(path), report_parser_config(), fallback=False)
    # and the same error again: nothing was left exported
    with pytest.raises(fastparse.Unsupported, match="^complete events without dur$"):
        fastparse.parse_trace_file(str(path), report_parser_config(), fallback=False)
