"""What a rank's trace runs: training, inference (and which server, which
phase), a CUDA/HIP-graph capture window, graph replay, compiled code.

The advice's words depend on it (:mod:`hta_report.rules.wording`): a capture
window is a one-off at start-up, an inference server has no optimizer or
DataLoader to tune, and code that is already ``torch.compile``'d needs
``mode="reduce-overhead"`` rather than ``torch.compile(model)``. Everything is
read from event names the trace spells out (PyTorch's autograd and optimizer
annotations, the runtime's capture and graph calls, Inductor's and the
serving engines' names); times are µs.
"""
from __future__ import annotations

import re
from typing import List, Tuple

import numpy as np
import pandas as pd

from ..model import CAPTURE_SHARE, Workload
from .. import intervals
from .events import RankEvents, shared

#: Backward ops (autograd's engine, the legacy ``*Backward`` names, user ``## backward ##`` annotations).
BACKWARD = re.compile(r"^autograd::engine::evaluate_function|Backward\d*$|^## backward ##")
#: ``Optimizer.step#SGD.step``: the optimizer's annotation.
OPTIMIZER = re.compile(r"^Optimizer\.step#")
#: Stream capture begins and ends (CUDA and HIP runtime names).
BEGIN_CAPTURE = ("cudaStreamBeginCapture", "cudaStreamBeginCapture_v2", "hipStreamBeginCapture")
END_CAPTURE = ("cudaStreamEndCapture", "hipStreamEndCapture")
#: Runtime calls made only while a stream is being captured or queried for it.
CAPTURE_CALLS = BEGIN_CAPTURE + END_CAPTURE + ("cudaStreamGetCaptureInfo", "cudaStreamGetCaptureInfo_v2",
                                               "hipStreamGetCaptureInfo", "hipStreamGetCaptureInfo_v2")
#: A serving engine's capture annotation (vLLM: ``capture_32_FULL``).
CAPTURE_ANNOTATION = re.compile(r"^capture_")
#: Graph launches: each replays a captured CUDA/HIP graph.
GRAPH_LAUNCHES = ("cudaGraphLaunch", "cudaGraphLaunch_v10000", "hipGraphLaunch")
#: torch.compile's host events.
COMPILED = re.compile(r"^Torch-Compiled Region|CompiledFxGraph|^TorchDynamo Cache Lookup")
#: Inductor's generated Triton kernels (pointwise, reduction, persistent reduction, template).
INDUCTOR_KERNEL = re.compile(r"^triton_(?:poi|red|per|tem)_")
#: SGLang's scheduler annotation: ``step[DECODE bs=32]``, ``step[EXTEND bs=1 toks=512]``.
SGLANG_STEP = re.compile(r"^step\[(DECODE|EXTEND|PREFILL|MIXED|IDLE)\b")
#: vLLM's model-runner annotation: ``execute_1_context_0(...)_generation_32(...)``.
VLLM_EXECUTE = re.compile(r"^execute_\d+_context_(\d+)\(.*\)_generation_(\d+)")
#: Python frames (``with_stack``) that name a serving stack.
FRAMES = (("SGLang", re.compile(r"(?:^|/)sglang/")), ("vLLM", re.compile(r"(?:^|/)vllm/")),
          ("TGI", re.compile(r"(?:^|/)text_generation_server/")),
          ("TensorRT-LLM", re.compile(r"(?:^|/)tensorrt_llm/")),
          ("Hugging Face pipeline", re.compile(r"(?:^|/)transformers/pipelines/")))
#: One-off tuning inside a window: cuDNN/MIOpen benchmark mode times each
#: algorithm between events (``cudaEventSynchronize`` inside the convolution
#: op), Triton compiles a kernel on its first call.
TUNING_PARENTS = ("aten::cudnn_convolution", "aten::miopen_convolution", "aten::cudnn_convolution_transpose",
                  "aten::miopen_convolution_transpose")
TUNING_SYNCS = ("cudaEventSynchronize", "hipEventSynchronize")
TRITON_COMPILE = re.compile(r"triton/compiler/compiler\.py\(\d+\): compile$")
#: torch.compile's compile phases, which run on a graph's first call (or a recompile): Dynamo's
#: ``_compile.compile_inner (dynamo_timed)`` and Inductor's, recorded as annotations.
COMPILE_PHASES = re.compile(r"\(dynamo_timed\)$|^OutputGraph\.call_user_compiler|^compile_fx|^_compile\.compile_inner|"
                            r"^TorchDynamo Compile|^inductor_compile|^compile_file")
#: Fewer ops than this, none of them backward, cannot tell inference from a sampled or cut trace.
MIN_OPS = 10


def _matching(names: pd.Series, pattern: "re.Pattern[str]") -> np.ndarray:
    """A boolean mask of ``names`` (a categorical of event names) matching ``pattern``, by category."""
    if len(names) == 0:
        return np.zeros(0, dtype=bool)
    cats = names.cat.categories
    hit = np.fromiter((bool(pattern.search(str(c))) for c in cats), dtype=bool, count=len(cats))
    codes = names.cat.codes.to_numpy()
    return np.where(codes >= 0, hit[np.maximum(codes, 0)], False)


def _examples(names: pd.Series, top: int = 2) -> str:
    counts = names.astype(str).value_counts().head(top)
    return ", ".join(f"{n} ×{c}" if c > 1 else str(n) for n, c in counts.items())


@shared
def capture_rows(ev: RankEvents) -> pd.DataFrame:
    """Host rows (of ``ev.cpu``) that span stream capture: each
    ``*StreamBeginCapture`` call, its ``end`` moved to the end of the first
    ``*StreamEndCapture`` after it, and ``capture_*`` annotations that hold a
    capture call (vLLM's ``capture_32_FULL``). Columns as ``ev.cpu``; the
    begin rows keep their index (they are not launches). Made once per rank
    (:func:`~.events.shared`: the workload kind and the warm-up calls read
    them); not to be changed by the caller."""
    cpu = ev.cpu
    if cpu.empty:
        return cpu
    begins = cpu[cpu["s_name"].isin(BEGIN_CAPTURE)].sort_values("ts")
    ends = cpu[cpu["s_name"].isin(END_CAPTURE)].sort_values("ts")
    rows = []
    if len(begins) and len(ends):
        end_ts = ends["end"].to_numpy(dtype=float)
        at = np.searchsorted(ends["ts"].to_numpy(dtype=float), begins["ts"].to_numpy(dtype=float))
        ok = at < len(ends)
        spans = begins[ok].copy()
        spans["end"] = end_ts[at[ok]]
        spans["dur"] = spans["end"] - spans["ts"]
        rows.append(spans)
    notes = cpu[cpu["s_cat"].eq("user_annotation") & _matching(cpu["s_name"], CAPTURE_ANNOTATION)]
    if len(notes):
        calls = np.sort(cpu[cpu["s_name"].isin(CAPTURE_CALLS)]["ts"].to_numpy(dtype=float))
        lo = np.searchsorted(calls, notes["ts"].to_numpy(dtype=float))
        hi = np.searchsorted(calls, notes["end"].to_numpy(dtype=float), side="right")
        rows.append(notes[hi > lo])
    return pd.concat(rows) if rows else cpu.iloc[0:0]


def tuning_rows(ev: RankEvents) -> pd.DataFrame:
    """One-off tuning calls (rows of ``ev.cpu``): ``cudaEventSynchronize`` /
    ``hipEventSynchronize`` inside a cuDNN/MIOpen convolution op (benchmark
    mode timing algorithms, ``torch.backends.cudnn.benchmark = True``),
    Triton's ``compile`` frames (a kernel compiled on its first call) and
    torch.compile's compile phases (:data:`COMPILE_PHASES`)."""
    cpu = ev.cpu
    if cpu.empty:
        return cpu
    syncs = cpu[cpu["s_name"].isin(TUNING_SYNCS)]
    parents = cpu[cpu["s_name"].isin(TUNING_PARENTS)]
    picked = []
    if len(syncs) and len(parents):
        u = intervals.union(parents["ts"].to_numpy(dtype=float), parents["end"].to_numpy(dtype=float))
        inside = intervals.overlap_each(syncs[["ts", "end"]].to_numpy(dtype=float), u) > 0
        picked.append(syncs[inside])
    frames = cpu[cpu["s_cat"].eq("python_function")]
    if len(frames):
        picked.append(frames[_matching(frames["s_name"], TRITON_COMPILE)])
    notes = cpu[cpu["s_cat"].isin(("user_annotation", "cpu_op"))]
    if len(notes):
        picked.append(notes[_matching(notes["s_name"], COMPILE_PHASES)])
    picked = [p for p in picked if len(p)]
    return pd.concat(picked) if picked else cpu.iloc[0:0]


def _serving(cpu: pd.DataFrame) -> Tuple[str, str, List[str]]:
    """The serving engine, the phase and the evidence for them."""
    notes = cpu[cpu["s_cat"].eq("user_annotation")]
    names = notes["s_name"]
    phases = set()
    evidence: List[str] = []
    serving = ""
    sg = notes[_matching(names, SGLANG_STEP)]
    if len(sg):
        serving = "SGLang"
        for n in sg["s_name"].astype(str).unique():
            m = SGLANG_STEP.match(n)
            kind = m.group(1) if m else ""
            phases |= {"decode"} if kind == "DECODE" else {"prefill"} if kind in ("EXTEND", "PREFILL") else \
                {"prefill", "decode"} if kind == "MIXED" else set()
        evidence.append(f"SGLang scheduler annotations: {_examples(sg['s_name'])}")
    vl = notes[_matching(names, VLLM_EXECUTE)]
    if len(vl):
        for n in vl["s_name"].astype(str).unique():
            m = VLLM_EXECUTE.match(n)
            if m:
                phases |= ({"prefill"} if int(m.group(1)) else set()) | ({"decode"} if int(m.group(2)) else set())
        if not serving:
            serving = "vLLM"
            evidence.append(f"vLLM model-runner annotations: {_examples(vl['s_name'], 1)}")
    if not serving:
        frames = cpu[cpu["s_cat"].eq("python_function")]
        for engine, pattern in FRAMES:
            hit = frames[_matching(frames["s_name"], pattern)]
            if len(hit):
                serving = engine
                evidence.append(f"{engine} Python frames ({len(hit):,}), e.g. {_examples(hit['s_name'], 1)}")
                break
    phase = "prefill and decode" if phases == {"prefill", "decode"} else next(iter(phases), "")
    return serving, phase, evidence


def workload(ev: RankEvents) -> Workload:
    """What ``ev``'s trace runs (see :class:`~hta_report.model.Workload` for
    each field and the names it is read from).

    The kind is ``graph-capture`` when stream capture (:func:`capture_rows`)
    spans at least :data:`~hta_report.model.CAPTURE_SHARE` of the trace (the
    first to the last event, µs), else ``training`` when a backward or
    optimizer op ran, else ``inference`` when :data:`MIN_OPS` or more ops ran, else ``""``.
    """
    out = Workload()
    df, cpu = ev.df, ev.cpu
    if df.empty:
        return out
    out.span_us = float(df["end"].max() - df["ts"].min())
    caps = capture_rows(ev)
    if len(caps):
        u = intervals.union(caps["ts"].to_numpy(dtype=float), caps["end"].to_numpy(dtype=float))
        out.capture_us = intervals.total(u)
        out.evidence.append(f"stream capture {out.capture_us / 1000:,.2f} ms of the trace's "
                            f"{out.span_us / 1000:,.2f} ms ({_examples(caps['s_name'])})")
    launches = cpu[cpu["s_name"].isin(GRAPH_LAUNCHES)]
    out.graph_launches = int(len(launches))
    if out.graph_launches:
        out.evidence.append(f"graph replays: {_examples(launches['s_name'])}")
    compiled = cpu[_matching(cpu["s_name"], COMPILED)]
    gpu = ev.gpu
    kernels = gpu[gpu["s_cat"].eq("kernel")] if len(gpu) else gpu
    inductor = int(_matching(kernels["s_name"], INDUCTOR_KERNEL).sum()) if len(kernels) else 0
    out.compiled = bool(len(compiled) or inductor)
    if out.compiled:
        parts = ([_examples(compiled["s_name"])] if len(compiled) else []) + \
            ([f"{inductor:,} Inductor Triton kernels (triton_poi_/triton_red_/triton_per_)"] if inductor else [])
        out.evidence.append("torch.compile: " + "; ".join(parts))
    ops = cpu[cpu["s_cat"].eq("cpu_op")]
    named = cpu[cpu["s_cat"].isin(("cpu_op", "user_annotation"))]
    backward = named[_matching(named["s_name"], BACKWARD)]
    optimizer = named[_matching(named["s_name"], OPTIMIZER)]
    out.serving, out.phase, serving_evidence = _serving(cpu)
    if out.span_us > 0 and out.capture_us >= CAPTURE_SHARE * out.span_us:
        out.kind = "graph-capture"
    elif len(backward) or len(optimizer):
        out.kind = "training"
        out.evidence.append("training: " + "; ".join(
            ([f"{len(backward):,} backward ops, e.g. {_examples(backward['s_name'], 1)}"] if len(backward) else [])
            + ([f"optimizer steps: {_examples(optimizer['s_name'], 1)}"] if len(optimizer) else [])))
    elif len(ops) >= MIN_OPS:
        out.kind = "inference"
        out.evidence.append(f"inference: {len(ops):,} ops and no backward or optimizer op")
    out.evidence.extend(serving_evidence)
    return out
