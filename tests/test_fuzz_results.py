"""Fuzzing saved results into ``compare`` and ``--fail-on`` gates (issue 18).

Results saved by ``analyze --json`` are mutated over the schema: keys
dropped, values replaced by NaN, infinities, huge or negative numbers,
booleans, strings (numbers as text, unknown severities and statuses,
hostile text), lists and objects of the wrong kind, list items duplicated,
unknown keys added, the document cut short. Each case runs
``hta-report compare GOOD CASE --fail-on ... --fail-on ...`` in-process with
random gates over every metric, and the case as a result-cache entry.

Checked on every case:

* no unhandled exception: the exit code is 0, 1 or 2, never "unexpected
  error"; exit 1 is one stderr line naming the case's file;
* no gate fails open: a gate that did not trip is justified by the raw JSON
  (an independent reading of the document, not hta-report's): the metric's
  value there is a finite number (or its findings and severities are known)
  and the condition does not hold on it;
* a comparison written is strict JSON (no NaN or infinity);
* the result cache serves an entry exactly when ``load_result`` accepts the
  same document (hand-edited entries are checked like results).

``HTA_REPORT_FUZZ_RESULT_CASES`` sets the number of cases (default 600).
"""
from __future__ import annotations

import collections
import contextlib
import io
import json
import math
import operator
import os
import random

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from hta_report.api import analyze, load_result
from hta_report.cache import Cache, ResultCache, _mac, signing_key
from hta_report.cli import main
from hta_report.errors import InputError
from kineto import TraceBuilder, simple_gpu_trace, training_trace

CASES = int(os.environ.get("HTA_REPORT_FUZZ_RESULT_CASES", "600"))

HOSTILE = ["<img src=x>", "`", "@octocat", "\x1b[2J", "\n## h", "\ud800", "x" * 300]
VALUES = [float("nan"), float("inf"), float("-inf"), None, True, False, 0, -1, -1e300, 1e300, 2 ** 63, 10 ** 30,
          1.5, 250.0, "", "40", "NaN", "1", "critical", "high", "fired", "not checked", [], {}, [1], {"a": 1}] + HOSTILE
OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq,
       "!=": operator.ne}
THRESHOLDS = ["-1000000000", "-1", "0", "0.5", "1", "5", "30", "50", "100", "1000000000"]
SEVERITY = {"low": 1, "medium": 2, "high": 3}


# ---------------------------------------------------------------- an independent reading of the raw JSON


def _num(v):
    """``v`` if it is a finite real number in the JSON (not a bool), else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return v if math.isfinite(v) else None


def _agg(doc, key):
    a = doc.get("aggregate") if isinstance(doc, dict) else None
    return _num(a.get(key)) if isinstance(a, dict) else None


def _time_per_step(doc):
    """The step time the verdict compares, read from the JSON: the
    aggregate's mean step, except that the ranks with analyzed steps then
    count ``replay.gpu_paced_step_us`` where it is positive (a host that ran
    ahead of its GPU; :func:`hta_report.compare.time_per_step`). None
    without a usable value."""
    mean = _agg(doc, "mean_step_us")
    ranks = doc.get("ranks") if isinstance(doc, dict) else None
    if mean is None or mean <= 0 or not isinstance(ranks, list):
        return mean
    times, paced = [], 0
    for r in ranks:
        steps, replay, failures = r.get("steps") or {}, r.get("replay") or {}, r.get("failures") or []
        if any(isinstance(f, dict) and f.get("step") == "step times" for f in failures) or not steps.get("count"):
            continue
        ahead = _num(replay.get("gpu_paced_step_us")) or 0
        paced += ahead > 0
        times.append(ahead if ahead > 0 else _num(steps.get("mean_us")))
    if not paced:
        return mean
    return None if None in times else sum(times) / len(times)


def _findings(doc):
    f = doc.get("findings") if isinstance(doc, dict) else None
    return f if isinstance(f, list) and all(isinstance(x, dict) for x in f) else None


def _severity(doc):
    f = _findings(doc)
    if f is None or any(x.get("severity") not in SEVERITY for x in f):
        return None
    return max((SEVERITY[x["severity"]] for x in f), default=0)


def raw_metric(metric, base, new):
    """The gate metric read straight from the JSON documents, or None when
    the documents do not hold a usable value for it."""
    if metric in ("idle_pct", "busy_pct", "compute_pct", "dataloader_pct", "exposed_comm_pct",
                  "exposed_memcpy_pct"):
        return _agg(new, metric)
    if metric == "host_wait_pct":
        return _agg(new, "idle_host_wait_pct")
    if metric == "step_time_ms":
        v = _agg(new, "mean_step_us")
        return None if v is None else v / 1e3
    if metric == "findings":
        f = _findings(new)
        return None if f is None else len(f)
    if metric == "severity":
        return _severity(new)
    if metric == "step_time_regression":
        b, n = _time_per_step(base), _time_per_step(new)
        return None if not b or not n or b <= 0 or n <= 0 else 100 * (n - b) / b
    if metric == "idle_pct_increase":
        b, n = _agg(base, "idle_pct"), _agg(new, "idle_pct")
        return None if b is None or n is None else n - b
    if metric == "new_findings":
        fb, fn = _findings(base), _findings(new)
        if fb is None or fn is None:
            return None
        return len({x.get("id") for x in fn} - {x.get("id") for x in fb})
    if metric == "regressed":
        return None  # the verdict needs the noise band: only "tripped when not comparable" is checked
    raise AssertionError(metric)


METRICS = ["idle_pct", "busy_pct", "compute_pct", "host_wait_pct", "dataloader_pct", "exposed_comm_pct",
           "exposed_memcpy_pct", "step_time_ms", "findings", "severity", "step_time_regression",
           "idle_pct_increase", "new_findings", "regressed"]


# ---------------------------------------------------------------- mutations


def _paths(node, prefix=()):
    """Every path into the document (containers and leaves)."""
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


def _mutate(doc, rng: random.Random):
    paths = [p for p in _paths(doc) if p]
    path = rng.choice(paths)
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    key = path[-1]
    kind = rng.randrange(6)
    if kind == 0 and isinstance(parent, dict):
        del parent[key]
    elif kind == 1 and isinstance(parent[key], list) and parent[key]:
        parent[key].append(parent[key][0])
    elif kind == 2 and isinstance(parent[key], dict):
        parent[key][rng.choice(["unknown", "x" * 50, "rank"])] = rng.choice(VALUES)
    elif kind == 3 and isinstance(parent[key], int) and not isinstance(parent[key], bool):
        parent[key] = float(parent[key]) + rng.choice([0.0, 0.5])
    else:
        parent[key] = rng.choice(VALUES)
    return doc


@st.composite
def cases(draw, n_bases):
    which = draw(st.integers(0, n_bases - 1))
    rng = random.Random(draw(st.integers(0, 2 ** 32 - 1)))
    mutations = draw(st.integers(0, 3))
    gates = draw(st.lists(st.tuples(st.sampled_from(METRICS), st.sampled_from(sorted(OPS)),
                                    st.sampled_from(THRESHOLDS + ["low", "medium", "high"])), min_size=1,
                          max_size=3))
    cut = draw(st.one_of(st.none(), st.integers(0, 2000))) if draw(st.integers(0, 19)) == 0 else None
    return which, rng, mutations, gates, cut


# ---------------------------------------------------------------- the test


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    """Saved results: a GPU trace with findings, a CPU-only trace, two ranks of simulated training."""
    out = []
    cpu = TraceBuilder(rank=0, gpu_name=None)
    for i in range(4):
        cpu.step(i + 1, i * 1000.0, 1000)
        cpu.cpu_op("aten::mm", i * 1000.0 + 100, 500)
    for name, builders in (("gpu", [simple_gpu_trace(rank=0)]), ("cpu", [cpu]),
                           ("train", [training_trace(rank=r, world_size=2, steps=5, allreduce_us=50.0,
                                                     pinned=False) for r in (0, 1)])):
        d = tmp_path_factory.mktemp(name)
        for i, b in enumerate(builders):
            b.write(d / f"rank{i}.json")
        out.append(json.loads(analyze(d).to_json()))
    return out


STATS = collections.Counter()


def _cli(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, err.getvalue()


def _gate_text(metric, op, value):
    if metric == "severity" and value not in SEVERITY:
        value = "high"
    elif metric != "severity" and value in SEVERITY:
        value = "1"
    return f"{metric}{op}{value}"


def _fuzz(bases, tmp, case):
    which, rng, mutations, gates, cut = case
    doc = json.loads(json.dumps(bases[which]))
    for _ in range(mutations):
        doc = _mutate(doc, rng)
    text = json.dumps(doc)
    if cut is not None:
        text = text[:cut]
    _run_case(bases, tmp, text, gates)


def _signed(body: dict) -> dict:
    """A result-cache entry as this user's runs write it (signed: hta_report.cache.signing_key)."""
    return {**body, "mac": _mac(signing_key(), body)}


def _run_case(bases, tmp, text, gates):
    """``compare GOOD CASE`` with ``gates`` (metric, op, value) on the document ``text``; see the module docstring."""
    good, path, out = tmp / "good.json", tmp / "case.json", tmp / "out.json"
    good.write_text(json.dumps(bases[0]))
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    if out.exists():
        out.unlink()
    exprs = [_gate_text(*g) for g in gates]
    args = ["compare", good, path, "-o", out, "-q"]
    for e in exprs:
        args += ["--fail-on", e]
    code, err = _cli(*args)
    assert "unexpected error" not in err and "Traceback" not in err, err
    assert code in (0, 1, 2), (code, err)
    if code == 1:
        assert err.count("\n") == 1 and err.startswith(f"hta-report: error: {path}: "), err
        STATS["refused"] += 1
    else:
        STATS["accepted"] += 1
        base, new = bases[0], json.loads(text)
        for e, (metric, op, value) in zip(exprs, gates):
            if f"gate tripped: {e} (" in err:
                STATS["tripped"] += 1
                continue
            raw = raw_metric(metric, base, new)
            threshold = float(SEVERITY.get(e.split(op)[-1], 0) or e.split(op)[-1]) if metric == "severity" \
                else float(e[len(metric) + len(op):])
            assert metric != "regressed" or (_agg(base, "mean_step_us") or 0) > 0 and (_agg(new, "mean_step_us") or 0) > 0, \
                f"fail-open: {e} passed on runs that cannot be compared"
            if metric == "regressed":
                continue
            assert raw is not None, f"fail-open: {e} passed without a usable value in the JSON ({err!r})"
            assert not OPS[op](raw, threshold), f"fail-open: {e} passed with {metric} = {raw}"
            STATS["held"] += 1
        json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in the written comparison"))
    # the result cache serves the document exactly when load_result accepts it
    results = ResultCache(Cache(tmp / "cache"))
    results.dir.mkdir(parents=True, exist_ok=True)
    (results.dir / "k.json").write_text(json.dumps(_signed({"key": "k", "result": text})), encoding="utf-8",
                                        errors="surrogatepass")
    try:
        load_result(path)
        accepted = True
    except InputError:
        accepted = False
    assert (results.get("k") is not None) == accepted


def test_fuzzed_results_never_crash_or_fail_open(bases, tmp_path):
    STATS.clear()

    @seed(18)
    @settings(max_examples=CASES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(case=cases(len(bases)))
    def run(case):
        STATS["cases"] += 1
        _fuzz(bases, tmp_path, case)

    run()
    print(f"\nfuzz results: {dict(STATS)}")
    assert STATS["cases"] >= CASES
    assert STATS["refused"] > CASES // 4 and STATS["accepted"] > CASES // 10  # both ends reached
    assert STATS["held"] > 0 and STATS["tripped"] > 0


def test_the_oracle_catches_a_gate_failing_open(bases, tmp_path, monkeypatch):
    """With the result check switched off and the gates as they were before
    issue 18, a NaN or a missing aggregate reaches the gates, which pass: the
    fuzzer's checks must report it (so that their passing means something)."""
    import hta_report.cli as cli
    import hta_report.model_check as model_check
    from hta_report.gates import _OPS, COMPARISON_METRICS, RESULT_METRICS

    from hta_report.model import GateResult

    def naive(gates, result=None, comparison=None):  # no "not measured", no finiteness check
        out = []
        for g in gates:
            table = COMPARISON_METRICS if g.metric in COMPARISON_METRICS else RESULT_METRICS
            subject = comparison if table is COMPARISON_METRICS else (comparison.new if comparison else result)
            value = table[g.metric][1](subject)
            shown = value if math.isfinite(value) else None  # (a NaN in the model would stop the JSON report)
            out.append(GateResult(expression=g.text, metric=g.metric, value=shown, tripped=_OPS[g.op](value, g.value)))
        return out

    monkeypatch.setattr(model_check, "check_result", lambda data: None)
    monkeypatch.setattr(cli, "evaluate_gates", naive)
    nan = json.loads(json.dumps(bases[0]))
    nan["aggregate"]["idle_pct"] = float("nan")  # and writing the comparison then fails too, as it did
    with pytest.raises(AssertionError, match="unexpected error: ValueError: Out of range float"):
        _run_case(bases, tmp_path, json.dumps(nan), [("idle_pct", ">", "30")])
    missing = json.loads(json.dumps(bases[0]))
    del missing["aggregate"]["busy_pct"]
    with pytest.raises(AssertionError, match="fail-open: busy_pct>50 passed without a usable value"):
        _run_case(bases, tmp_path, json.dumps(missing), [("busy_pct", ">", "50")])
    critical = json.loads(json.dumps(bases[0]))
    critical["findings"][0]["severity"] = "critical"
    with pytest.raises(AssertionError, match="fail-open: severity>=high passed without a usable value"):
        _run_case(bases, tmp_path, json.dumps(critical), [("severity", ">=", "high")])


def test_the_oracle_reads_the_verdict_s_step_where_the_host_ran_ahead(bases, tmp_path):
    """A result whose rank ran ahead of its GPU (``gpu_paced_step_us`` ten
    times its mean ``ProfilerStep``): the verdict's step change is +900 %
    against the same run, the oracle reads the same figure from the JSON,
    and a gate on it trips or holds as that figure says."""
    doc = json.loads(json.dumps(bases[0]))
    assert _agg(doc, "mean_step_us") == 1000.0
    doc["ranks"][0]["replay"]["gpu_paced_step_us"] = 10000.0
    assert raw_metric("step_time_regression", bases[0], doc) == pytest.approx(900.0)
    STATS.clear()
    _run_case(bases, tmp_path, json.dumps(doc), [("step_time_regression", "<", "100"),
                                                  ("step_time_regression", ">", "100")])
    assert STATS["accepted"] == 1 and STATS["held"] == 1 and STATS["tripped"] == 1
