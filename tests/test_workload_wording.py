"""Issue 29, item 1: the report knows the workload before choosing its words.

The kind (training, inference, a CUDA/HIP-graph capture window), the serving
engine and phase, graph replay and compiled code are read from the trace
(hta_report/analysis/workload.py), shown in the headline, and every fix is
printed in the words of the kind it is printed for (hta_report/rules/wording.py).
"""
from __future__ import annotations

import pytest

from conftest import SHARED_ROOT, shared_runs
from kineto import TraceBuilder, training_trace
from hta_report.api import analyze
from hta_report.model import RankResult, Workload
from hta_report.render.view import headline
from hta_report.rules.engine import RULE_IDS
from hta_report.rules.wording import FIXES, FORBIDDEN, SERVING_ENGINES, fix_for, variants

#: What an engineer reads in each real trace (see ../shared/traces/README.md and the trace itself):
#: kind, serving engine, phase, graph replays seen, compiled.
EXPECTED = {
    "tracelens/vllm_decode_graph_capture": ("graph-capture", "vLLM", "", False, True),
    "tracelens/vllm_decode_graph_replay": ("inference", "vLLM", "decode", True, True),
    "tracelens/sglang_decode": ("inference", "SGLang", "decode", True, False),
    "tracelens/sglang_prefill_decode": ("inference", "SGLang", "prefill", False, False),
    "tracelens/torch_compile_triton": ("inference", "", "", False, True),
    "tracelens/h100_timesformer": ("inference", "Hugging Face pipeline", "", False, False),
    "tracelens/h100_bert_small": ("inference", "", "", False, False),
    "tracelens/mi300_qwen_chat": ("inference", "", "", False, False),
    "tracelens/mi300_resnet_act_checkpoint": ("training", "", "", False, False),
    "tracelens/mi210_gpu_only": ("", "", "", False, False),
    "legacy/tb_resnet50_num_workers_4": ("training", "", "", False, False),
    "hta/trace_diff/control": ("training", "", "", False, False),
    "hta/two_ranks": ("training", "", "", False, False),
}


def _shared(run: str):
    path = SHARED_ROOT / run
    if not path.is_dir():
        pytest.skip(f"{run} not available (../shared is absent)")
    return path


@pytest.fixture(scope="module")
def reports():
    """Every shared run analyzed once (empty when ../shared is absent)."""
    return {run: analyze(SHARED_ROOT / run) for run in shared_runs()}


@pytest.mark.parametrize("run", sorted(EXPECTED))
def test_workload_of_real_traces(run, reports):
    _shared(run)
    kind, serving, phase, replay, compiled = EXPECTED[run]
    for r in reports[run].ranks:
        w = r.workload
        assert (w.kind, w.serving, w.phase, w.graph_launches > 0, w.compiled) == (kind, serving, phase, replay,
                                                                                  compiled), w.evidence
        assert (w.evidence != []) == bool(kind or compiled or replay)


def test_the_capture_window_is_a_one_off_not_host_bound(reports):
    run = "tracelens/vllm_decode_graph_capture"
    _shared(run)
    r = reports[run]
    top = r.findings[0]
    assert top.id == "trace-window" and top.severity == "high"
    assert "capture" in top.title and "replay" in top.title
    assert "profile the replay" in top.fix and "/start_profile" in top.fix
    # before: "Host-bound: the GPU waits 100 % of the trace while the host runs its own work"
    assert not any(f.id in ("host-bound", "launch-bound", "gpu-gaps") for f in r.findings)
    w = r.ranks[0].workload
    assert w.capture_pct > 95 and "hipStreamBeginCapture" in w.evidence[0]


def test_headline_names_the_workload(reports):
    run = "tracelens/sglang_decode"
    _shared(run)
    h = headline(reports[run])
    assert h.run.kind == "inference (SGLang, decode; graph replay)"


@pytest.mark.parametrize("run", shared_runs() or ["(none)"])
def test_every_fix_speaks_to_the_kind_it_is_printed_for(run, reports):
    if run == "(none)":
        pytest.skip("../shared is absent")
    result = reports[run]
    for f in result.findings:
        ranks = [r for r in result.ranks if r.rank in f.ranks]
        # inference under a serving engine the trace shows may name that engine's flags; other inference not
        kinds = {"serving" if r.workload.kind == "inference" and r.workload.serving in SERVING_ENGINES
                 else r.workload.kind for r in ranks}
        compiled = {r.workload.compiled for r in ranks}
        banned = [w for k in kinds for w in FORBIDDEN.get(k, ())] + \
            (list(FORBIDDEN["compiled"]) if compiled == {True} else [])
        assert not [w for w in banned if w in f.fix], (run, f.id, f.fix)


# ------------------------------------------------------------------ the texts, kind by kind
@pytest.mark.parametrize("rule_id", sorted(FIXES))
def test_fix_texts_use_no_word_their_kind_forbids(rule_id):
    assert rule_id in RULE_IDS
    for variant, text in FIXES[rule_id].items():
        kinds = variant.split("-compiled")[0], *(["compiled"] if variant.endswith("compiled") else [])
        for kind in kinds:
            assert kind in FORBIDDEN, variant
            bad = [w for w in FORBIDDEN[kind] if w in text]
            assert not bad, (rule_id, variant, bad)


def _rank(kind: str, compiled: bool = False, rank: int = 0) -> RankResult:
    return RankResult(rank=rank, file="t.json", workload=Workload(kind=kind, compiled=compiled))


def test_fix_for_picks_the_most_specific_text():
    default = "the rule's own text"
    assert fix_for("launch-bound", [_rank("training")], default) == default
    assert fix_for("launch-bound", [_rank("inference")], default) == FIXES["launch-bound"]["inference"]
    assert fix_for("launch-bound", [_rank("inference", True)], default) == FIXES["launch-bound"]["inference-compiled"]
    assert fix_for("launch-bound", [_rank("training", True)], default) == FIXES["launch-bound"]["compiled"]
    assert fix_for("host-bound", [_rank("inference", True)], default) == FIXES["host-bound"]["inference-compiled"]
    assert fix_for("trace-window", [_rank("graph-capture")], default) == FIXES["trace-window"]["graph-capture"]
    # a capture window's other findings speak of inference (serving engines capture graphs)
    assert fix_for("blocking-copy", [_rank("graph-capture")], default) == FIXES["blocking-copy"]["inference"]
    # ranks of different kinds: the rule's own words
    assert fix_for("launch-bound", [_rank("inference"), _rank("training", rank=1)], default) == default
    assert fix_for("launch-bound", [_rank("")], default) == default
    assert variants(Workload(kind="", compiled=True)) == ("compiled",)


# ------------------------------------------------------------------ detection on built traces
def _ops(b: TraceBuilder, names, t0: float = 0.0, dur: float = 10.0, cat: str = "cpu_op") -> float:
    for i, n in enumerate(names):
        b.cpu_op(n, t0 + i * (dur + 1), dur, cat=cat)
    return t0 + len(names) * (dur + 1)


def test_stream_capture_spanning_most_of_the_trace_is_a_capture_window(tmp_path):
    b = TraceBuilder(rank=0)
    b.runtime("cudaStreamBeginCapture", 0, 5)
    t = _ops(b, ["aten::mm"] * 20, t0=10)
    for i in range(5):
        b.runtime("cudaStreamGetCaptureInfo", t + i, 0.5)
    b.runtime("cudaStreamEndCapture", t + 10, 5)
    b.kernel("void gemm_kernel<float, 128>(float*)", t + 100, 20)
    w = analyze(b.write(tmp_path / "rank-0.json")).ranks[0].workload
    assert w.kind == "graph-capture" and w.capture_us == pytest.approx(t + 15, abs=0.01)
    # the same ops without the capture calls: inference
    b2 = TraceBuilder(rank=0)
    _ops(b2, ["aten::mm"] * 20, t0=10)
    b2.kernel("void gemm_kernel<float, 128>(float*)", 300, 20)
    (tmp_path / "b").mkdir()
    assert analyze(b2.write(tmp_path / "b" / "rank-0.json")).ranks[0].workload.kind == "inference"


def test_capture_annotation_counts_only_around_capture_calls(tmp_path):
    # a user annotation named capture_* with no capture call inside is not a capture
    b = TraceBuilder(rank=0)
    b.cpu_op("capture_frames", 0, 400, cat="user_annotation")
    _ops(b, ["aten::add"] * 20, t0=5)
    b.kernel("void add_kernel(float*)", 450, 20)
    w = analyze(b.write(tmp_path / "rank-0.json")).ranks[0].workload
    assert w.kind == "inference" and w.capture_us == 0


def test_serving_phase_from_annotations(tmp_path):
    b = TraceBuilder(rank=0)
    b.cpu_op("execute_4_context_2(sq512sk512sqsq1024sqsk1024)_generation_2(sq2sk900sqsq2sqsk900)", 0, 500,
             cat="user_annotation")
    _ops(b, ["aten::mm"] * 12, t0=5)
    b.runtime("cudaGraphLaunch", 200, 5)
    b.kernel("void gemm_kernel<float, 128>(float*)", 300, 20)
    w = analyze(b.write(tmp_path / "rank-0.json")).ranks[0].workload
    assert (w.kind, w.serving, w.phase, w.graph_launches) == ("inference", "vLLM", "prefill and decode", 1)


def test_training_from_backward_ops_and_too_few_ops_unknown(tmp_path):
    (tmp_path / "t").mkdir()
    assert analyze(training_trace(steps=4).write(tmp_path / "t" / "rank-0.json")).ranks[0].workload.kind == "training"
    b = TraceBuilder(rank=0)
    _ops(b, ["aten::mm"] * 3)
    b.kernel("void gemm_kernel<float, 128>(float*)", 100, 20)
    w = analyze(b.write(tmp_path / "rank-0.json")).ranks[0].workload
    assert w.kind == "" and w.label == ""


def test_cudnn_benchmark_syncs_and_triton_compiles_are_one_off_warmup(tmp_path):
    b = TraceBuilder(rank=0)
    for i in range(3):
        b.step(i + 1, i * 1000, 1000)
    # step 2: cuDNN benchmark mode times algorithms inside the convolution
    b.cpu_op("aten::cudnn_convolution", 1010, 700)
    b.runtime("cudaEventSynchronize", 1020, 300)
    b.runtime("cudaEventSynchronize", 1400, 200)
    b.python("triton/compiler/compiler.py(230): compile", 1720, 150, python_id=1, parent=None)
    _ops(b, ["aten::mm"] * 12, t0=2500, dur=5)
    for i in range(3):
        b.kernel("void gemm_kernel<float, 128>(float*)", i * 1000 + 900, 50)
    result = analyze(b.write(tmp_path / "rank-0.json"))
    r = result.ranks[0]
    names = {c.name for c in r.warmup.calls}
    # a trace-window finding ("tune once"), not syncs to remove from the step
    window = next(f for f in result.findings if f.id == "trace-window")
    assert "cuDNN benchmark syncs" in window.evidence[0] and "sync-in-step" not in [f.id for f in result.findings]
    assert {"cudaEventSynchronize", "triton/compiler/compiler.py(230): compile"} <= names
    assert r.steps_used == 1 and r.warmup.us_per_step == pytest.approx(300 + 200 + 150)


def test_serving_flags_only_where_the_trace_shows_a_serving_engine():
    """vLLM/SGLang flags are printed for inference under one of those engines
    (its markers in the trace), never for a model run without one."""
    plain = _rank("inference")
    served = RankResult(rank=0, file="t.json", workload=Workload(kind="inference", serving="SGLang"))
    for rule_id in ("launch-bound", "host-bound", "trace-window", "memory-under-used"):
        text = fix_for(rule_id, [plain], "default")
        assert "vLLM" not in text and "SGLang" not in text, rule_id
        assert fix_for(rule_id, [served], "default") == FIXES[rule_id]["serving"]
    assert variants(Workload(kind="inference", serving="Hugging Face pipeline")) == ("inference",)


def test_compiled_inference_never_gets_the_uncompiled_inference_text():
    """A rule with an inference text and a compiled one has an
    inference-compiled one, which :func:`variants` tries first for a
    compiled inference run: the inference texts suggest torch.compile to a
    model that already is (the seventh gathering's torch.compile'd convs got
    "batch requests (a larger max batch size)"); and outside a serving engine
    no inference text speaks of requests."""
    from hta_report.model import Workload
    from hta_report.rules.wording import FIXES, variants
    assert variants(Workload(kind="inference", compiled=True))[0] == "inference-compiled"
    for rid, texts in FIXES.items():
        if "inference" in texts and "compiled" in texts:
            assert "inference-compiled" in texts, rid
        for key in ("inference", "inference-compiled"):
            assert "request" not in texts.get(key, ""), (rid, key)
