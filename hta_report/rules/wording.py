"""The fix a finding prints, in the words of the workload it is printed for.

Rules write their fix for a training loop, the case most traces hold. The
same cause needs other words elsewhere (:class:`~hta_report.model.Workload`):
an inference server has no optimizer, DataLoader or learning rate to tune; a
trace of a CUDA/HIP-graph capture shows a one-off at start-up, to be profiled
again around the replay; code that is already ``torch.compile``'d gains from
``mode="reduce-overhead"`` (CUDA graphs) or ``"max-autotune"``, not from
``torch.compile(model)``. :data:`FIXES` holds those texts per rule and
variant; :func:`fix_for` picks the one for a finding's ranks, and the engine
(:func:`hta_report.rules.engine.advise`) applies it to every fired finding.
``tests/test_workload_wording.py`` checks every text against the words its
kind must not use (:data:`FORBIDDEN`).
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Sequence, Set, Tuple

from ..model import RankResult, Workload

def variants(w: Workload) -> Tuple[str, ...]:
    """The :data:`FIXES` keys that apply to a rank of workload ``w``, most
    specific first: inference under a serving engine the trace shows
    (:data:`SERVING_ENGINES`) tries ``serving`` first; compiled inference tries
    ``inference-compiled``, then ``inference``, then ``compiled``; a capture
    window ``graph-capture``, then as inference (serving engines capture graphs at start-up);
    training and unknown workloads ``compiled`` when compiled, else none
    (the rule's own text)."""
    out: List[str] = []
    if w.kind == "graph-capture":  # serving engines capture graphs: the rest speaks of inference
        out.append("graph-capture")
    kind = "inference" if w.kind in ("inference", "graph-capture") else ""
    if kind and w.serving in SERVING_ENGINES:  # an engine's own flags only where the trace shows the engine
        out.append("serving")
    if kind and w.compiled:
        out.append(f"{kind}-compiled")
    if kind:
        out.append(kind)
    if w.compiled:
        out.append("compiled")
    return tuple(out)


#: Serving engines whose flags a fix may name (:attr:`~hta_report.model.Workload.serving`, read
#: from the trace's own markers): elsewhere an inference fix speaks of the model, not of an engine.
SERVING_ENGINES = ("vLLM", "SGLang", "TGI", "TensorRT-LLM")


_PROFILE_SERVING = (
    "# profile steady requests, after the server has warmed up (captured its graphs, compiled):\n"
    "# vLLM: VLLM_TORCH_PROFILER_DIR=traces/ vllm serve ...; then POST /start_profile, send requests,\n"
    "#       POST /stop_profile (offline: llm.start_profile() / llm.stop_profile())\n"
    "# SGLang: SGLANG_TORCH_PROFILER_DIR=traces/; POST /start_profile with {\"num_steps\": 5} after warm-up\n"
    "# your own serving loop: a profiler schedule, one prof.step() per batch of requests:\n"
    "prof = torch.profiler.profile(\n"
    "    activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],\n"
    "    schedule=torch.profiler.schedule(wait=1, warmup=1, active=7),\n"
    "    on_trace_ready=torch.profiler.tensorboard_trace_handler(\"traces/\"),\n"
    ")\n"
    "with prof:\n"
    "    for batch in requests:\n"
    "        serve(batch)\n"
    "        prof.step()")

_PROFILE_INFERENCE = (
    "# profile steady batches, after the model has warmed up (first calls compile, tune and allocate):\n"
    "prof = torch.profiler.profile(\n"
    "    activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],\n"
    "    schedule=torch.profiler.schedule(wait=1, warmup=1, active=7),\n"
    "    on_trace_ready=torch.profiler.tensorboard_trace_handler(\"traces/\"),\n"
    ")\n"
    "with prof, torch.inference_mode():\n"
    "    for batch in batches:\n"
    "        model(batch)\n"
    "        prof.step()")

#: rule id -> variant -> the fix text (code or configuration, as rules write it).
FIXES: Mapping[str, Mapping[str, str]] = {
    "trace-window": {
        "graph-capture": (
            "# this trace records a CUDA/HIP-graph capture: it runs once, at start-up, and then the graph\n"
            "# is replayed (cudaGraphLaunch/hipGraphLaunch) for every batch: profile the replay instead\n"
            + _PROFILE_SERVING),
        "serving": _PROFILE_SERVING,
        "inference": _PROFILE_INFERENCE,
    },
    "host-bound": {
        "serving": (
            "# the GPU waits while the server's host thread works (scheduling, sampling, detokenizing):\n"
            "# keep CUDA graphs on (vLLM: no --enforce-eager; SGLang: no --disable-cuda-graph), overlap the\n"
            "# scheduler with the GPU (SGLang's overlap scheduler, vLLM's async scheduling), batch more requests"),
        "inference": (
            "# the GPU waits while the host prepares work: move the host ops listed above off the thread\n"
            "# that launches the model (a worker pool, or the GPU), and batch inputs so one forward does\n"
            "# more work; replay the forward as a CUDA graph:\n"
            "model = torch.compile(model, mode=\"reduce-overhead\")"),
        "inference-compiled": (
            "# the model is already compiled: the host time is around the compiled forward; move the host\n"
            "# ops listed above off the thread that launches it, and replay the forward as a CUDA graph:\n"
            "model = torch.compile(model, mode=\"reduce-overhead\")"),
        "compiled": (
            "# the model is already compiled: the host time is around the compiled region;\n"
            "# move preprocessing into DataLoader workers, per-step Python bookkeeping out of the loop,\n"
            "# and replay the compiled region as a CUDA graph:\n"
            "model = torch.compile(model, mode=\"reduce-overhead\")"),
    },
    "launch-bound": {
        "serving": (
            "# many small kernels, each shorter than its launch: keep CUDA graphs on and captured for the\n"
            "# batch sizes you serve (vLLM: no --enforce-eager, --max-seq-len-to-capture; SGLang: no\n"
            "# --disable-cuda-graph, --cuda-graph-max-bs), or batch more requests per forward"),
        "inference": (
            "# many small kernels, each shorter than its launch: replay the forward as a CUDA graph\n"
            "model = torch.compile(model, mode=\"reduce-overhead\")   # fuses kernels, one graph launch per forward\n"
            "# or batch more inputs per forward"),
        "inference-compiled": (
            "# already compiled: replay the compiled forward as a CUDA graph (one launch per forward)\n"
            "model = torch.compile(model, mode=\"reduce-overhead\")\n"
            "# or batch more inputs per forward"),
        "compiled": (
            "# already compiled: replay the compiled step as a CUDA graph (one launch per graph)\n"
            "model = torch.compile(model, mode=\"reduce-overhead\")\n"
            "# or raise the batch size so each kernel does more work; fused optimizers: AdamW(..., fused=True)"),
    },
    "low-gpu-utilization": {
        "inference": (
            "# give the GPU more work per launch: batch more inputs per forward (a larger batch),\n"
            "# replay the forward as a CUDA graph, and keep pre/post-processing off the launching thread:\n"
            "model = torch.compile(model, mode=\"reduce-overhead\")"),
        "inference-compiled": (
            "# already compiled: replay the forward as a CUDA graph and give each forward more inputs\n"
            "model = torch.compile(model, mode=\"reduce-overhead\")"),
        "compiled": (
            "# already compiled: replay it as a CUDA graph and give each launch more work (a larger batch)\n"
            "model = torch.compile(model, mode=\"reduce-overhead\")"),
    },
    "gpu-gaps": {
        "serving": (
            "# the host ops listed for each gap are what the GPU waited for: request pre/post-processing\n"
            "# (off the launching thread), synchronization (no .item()/.cpu() per token), logging or\n"
            "# scheduling work between batches (overlap it with the GPU: vLLM/SGLang async scheduling)"),
        "inference": (
            "# the host ops listed for each gap are what the GPU waited for: pre/post-processing (off the\n"
            "# launching thread), synchronization (no .item()/.cpu() per output), logging between batches"),
    },
    "low-sm-occupancy": {
        "inference": (
            "# each kernel has too few blocks for the GPU: batch more inputs per forward,\n"
            "# or fuse the small kernels and replay them as a CUDA graph:\n"
            "model = torch.compile(model, mode=\"reduce-overhead\")"),
        "inference-compiled": (
            "# already compiled: let Inductor tune its kernels for this GPU, or batch more inputs per forward\n"
            "model = torch.compile(model, mode=\"max-autotune\")"),
        "compiled": (
            "# already compiled: let Inductor tune its kernels for this GPU, or give them more work\n"
            "model = torch.compile(model, mode=\"max-autotune\")\n"
            "# a larger batch (memory-under-used gives the headroom)"),
    },
    "full-launch-queue": {
        "compiled": (
            "# the host is ahead of the GPU and the model is already compiled: make the kernels faster\n"
            "model = torch.compile(model, mode=\"max-autotune\")   # tuned GEMM templates\n"
            "# 16-bit matrix math: torch.autocast(device_type=\"cuda\", dtype=torch.bfloat16)"),
    },
    "memory-under-used": {
        "serving": (
            "# more of the GPU's memory can hold requests: raise the batch (more concurrent sequences)\n"
            "# vLLM: --max-num-seqs, --gpu-memory-utilization; SGLang: --max-running-requests, --mem-fraction-static"),
        "inference": (
            "# more of the GPU's memory can hold inputs: raise the batch size of each forward"),
    },
    "memory-near-capacity": {
        "serving": (
            "# serving engines reserve most of the memory for the KV cache on purpose\n"
            "# (vLLM --gpu-memory-utilization, SGLang --mem-fraction-static): near capacity is expected there"),
        "inference": (
            "# near capacity at inference: a smaller batch or context length, or 16-bit weights where the\n"
            "# model is in float32 and the GPU has 16-bit Tensor Cores"),
    },
    "blocking-copy": {
        "inference": (
            "# inputs: copy from a pinned buffer without blocking (allocate it once, reuse it per batch)\n"
            "x = pinned_buf.copy_(x_host).to(device, non_blocking=True)\n"
            "# outputs: copy into a pinned buffer with non_blocking=True and read it after an event,\n"
            "# once per batch rather than per token or per op"),
    },
    "pageable-memcpy": {
        "inference": (
            "# copy from pinned host memory without blocking: allocate the input buffers pinned once, reuse them\n"
            "buf = torch.empty(shape, dtype=dtype, pin_memory=True)\n"
            "buf.copy_(host_tensor); x = buf.to(device, non_blocking=True)"),
    },
    "step-time-outliers": {
        "inference": (
            "# see what ran in the slow iterations (the trace in Perfetto, or the report's steps chart):\n"
            "# a new batch size or sequence length (a graph captured or a kernel compiled on first use),\n"
            "# scheduling or logging between batches, garbage collection (gc.freeze() after start-up)"),
    },
}

#: Words a fix printed for a kind must not use (a test checks :data:`FIXES`
#: and the real reports): training-loop advice on inference, a serving
#: engine's flags on inference that runs under none, bare
#: ``torch.compile(model)`` on compiled code, anything but profiling the
#: replay on a capture window.
FORBIDDEN: Mapping[str, Sequence[str]] = {
    "serving": ("DataLoader", "optimizer", "fused=True", "learning rate", "no_sync", "backward", "GradScaler",
                "training", "train_step", "gradient"),
    "inference": ("DataLoader", "optimizer", "fused=True", "learning rate", "no_sync", "backward", "GradScaler",
                  "training", "train_step", "gradient", "vLLM", "SGLang", "--enforce-eager", "--max-num-seqs"),
    "compiled": ("torch.compile(model)",),
    "graph-capture": ("DataLoader", "optimizer", "fused=True", "learning rate", "no_sync", "backward", "GradScaler",
                      "training", "train_step", "gradient", "torch.compile(model)"),
}


def workload_of(ranks: Sequence[RankResult]) -> Workload:
    """The workload a finding over ``ranks`` speaks to: theirs when they all
    share kind and compiled flag, else the unknown workload (the rule's own text)."""
    seen: Dict[Tuple[str, bool], Workload] = {(r.workload.kind, r.workload.compiled): r.workload for r in ranks}
    return next(iter(seen.values())) if len(seen) == 1 else Workload()


#: Fix texts a rule wrote for what its trace shows (a lost GPU side, a kind of synchronization):
#: no workload variant replaces them (:func:`specific`).
SPECIFIC: Set[str] = set()


def specific(text: str) -> str:
    """``text``, kept as a finding's fix whatever its workload (:data:`SPECIFIC`)."""
    SPECIFIC.add(text)
    return text


#: Fix texts of another fix than the one the rule's edit replays (launch-bound's loop fix: vectorizing,
#: where the rule's edit is a CUDA graph): a finding with one gets no what-if and keeps its bound
#: (:func:`unreplayed`; :func:`hta_report.rules.base.predicted`).
UNREPLAYED: Set[str] = set()


def unreplayed(text: str) -> str:
    """``text``, a :func:`specific` fix that the rule's edit does not model: no prediction is attached."""
    UNREPLAYED.add(text)
    return specific(text)


def fix_for(rule_id: str, ranks: Sequence[RankResult], default: str) -> str:
    """The fix text for a finding of ``rule_id`` on ``ranks``: the first
    :data:`FIXES` variant that applies to their workload (:func:`variants`),
    else ``default`` (the rule's own); a :func:`specific` text stays as it is."""
    if default in SPECIFIC:
        return default
    texts = FIXES.get(rule_id, {})
    for v in variants(workload_of(ranks)):
        if v in texts:
            return texts[v]
    return default
