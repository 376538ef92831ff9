"""Fuzzing: analyze either succeeds or raises our own error, never anything else.

Mutated valid traces (tests/fuzzing.py): structural mutations of the parsed
document and byte-level ones (truncation, flipped, inserted or overwritten
bytes, on plain or gzipped JSON). Every case is analyzed and rendered as
markdown and JSON; any exception other than an HtaReportError fails the test
with hypothesis's shrunk example.

The cases run in forked worker processes (two, or up to four where there are
more cores), each with a fixed seed. ``HTA_REPORT_FUZZ_CASES`` sets the
number of cases (default 2,000: 40 % structural, which cost about 0.1 s of CPU
each as most of them load and go through every HTA analysis, and 60 % on
bytes, about 0.03 s each); ``bench/fuzz.py`` runs longer campaigns.
"""
import collections
import json
import multiprocessing
import os
import time
import traceback

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

import fuzzing

TOTAL = int(os.environ.get("HTA_REPORT_FUZZ_CASES", "2000"))
CASES = {"structural": TOTAL * 2 // 5, "bytes": TOTAL - TOTAL * 2 // 5}
WORKERS = max(2, min(4, len(os.sched_getaffinity(0))))


def _campaign(job):
    """One worker's share: ``(kind, cases, seed)`` -> (outcome counts, failure or None, CPU seconds)."""
    kind, n, rng_seed = job
    strategy = {"structural": fuzzing.structural_case(), "bytes": fuzzing.byte_case()}[kind]
    counts = collections.Counter()

    @seed(rng_seed)
    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.generate, Phase.shrink])
    @given(strategy)
    def one(files):
        outcome, _ = fuzzing.run_case(files)  # anything but our own errors propagates
        counts[outcome] += 1

    cpu = time.process_time()
    try:
        one()
    except BaseException:  # hypothesis re-raises the shrunk failure with the falsifying example
        return dict(counts), traceback.format_exc(), time.process_time() - cpu
    return dict(counts), None, time.process_time() - cpu


def _run(kind):
    n = CASES[kind]
    jobs = [(kind, n // WORKERS + (i < n % WORKERS), 1000 * i + 17) for i in range(WORKERS)]
    start = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(WORKERS) as pool:
        results = pool.map(_campaign, jobs, chunksize=1)
    elapsed = time.perf_counter() - start
    counts = collections.Counter()
    for c, _, _ in results:
        counts.update(c)
    failures = [f for _, f, _ in results if f]
    cpu = sum(t for _, _, t in results)
    print(f"\nfuzz {kind}: {sum(counts.values())} cases in {elapsed:.1f} s ({WORKERS} workers, "
          f"{cpu:.1f} s of CPU): {dict(counts)}")
    return counts, failures


@pytest.mark.parametrize("kind", ["structural", "bytes"])
def test_fuzzed_traces_never_crash(kind):
    counts, failures = _run(kind)
    assert not failures, failures[0]
    assert sum(counts.values()) >= CASES[kind]
    assert counts["ok"] > 0 and counts["error"] > 0  # the mutations reach both ends


HOSTILE_TEXT = st.one_of(st.sampled_from(fuzzing.HOSTILE), st.text(max_size=40))


@seed(5)
@settings(max_examples=15, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(kernel=HOSTILE_TEXT, op=HOSTILE_TEXT, device=HOSTILE_TEXT, backend=HOSTILE_TEXT)
def test_hostile_names_render_in_every_format(kernel, op, device, backend):
    """Any string in a kernel, op, device or backend name renders (charts
    included) and never becomes markup."""
    from kineto import simple_gpu_trace

    b = simple_gpu_trace(kernel_name=kernel or "k", rank=0)
    b.gpu_name = device
    b.cpu_op(op or "o", 10, 5)
    doc = b.document()
    doc["distributedInfo"]["backend"] = backend
    outcome, exc = fuzzing.run_case({"rank0.json": fuzzing.encode(doc, gz=False)}, html=True)
    assert outcome == "ok", exc


def test_html_never_holds_unescaped_hostile_names(tmp_path):
    from hta_report.api import analyze
    from hta_report.render import render
    from kineto import simple_gpu_trace

    b = simple_gpu_trace(kernel_name='"><script>alert(1)</script>', rank=0)
    b.gpu_name = "<img src=x onerror=alert(1)>"
    doc = b.document()
    doc["distributedInfo"]["backend"] = "</td><script>x</script>"
    (tmp_path / "rank0.json").write_text(json.dumps(doc))
    html = render(analyze(tmp_path), "html")
    assert "<script" not in html and "<img src=x" not in html
