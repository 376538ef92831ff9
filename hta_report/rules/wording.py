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

from typing import Dict, List, Mapping, Sequence, Tuple

from ..model import RankResult, Workload

def variants(w: Workload) -> Tuple[str, ...]:
    """The :data:`FIXES` keys that apply to a rank of workload ``w``, most
    specific first: compiled inference tries ``inference-compiled``, then
    ``inference``, then ``compiled``; a capture window ``graph-capture``,
    then as inference (serving engines capture graphs at start-up);
    training and unknown workloads ``compiled`` when compiled, else none
    (the rule's own text)."""
    out: List[str] = []
    if w.kind == "graph-capture":  # serving engines capture graphs: the rest speaks of inference
        out.append("graph-capture")
    kind = "inference" if w.kind in ("inference", "graph-capture") else ""
    if kind and w.compiled:
        out.append(f"{kind}-compiled")
    if kind:
        out.append(kind)
    if w.compiled:
        out.append("compiled")
    return tuple(out)


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

#: rule id -> variant -> the fix text (code or configuration, as rules write it).
FIXES: Mapping[str, Mapping[str, str]] = {
    "trace-window": {
        "graph-capture": (
            "# this trace records a CUDA/HIP-graph capture: it runs once, at start-up, and then the graph\n"
            "# is replayed (cudaGraphLaunch/hipGraphLaunch) for every batch: profile the replay instead\n"
            + _PROFILE_SERVING),
        "inference": _PROFILE_SERVING,
    },
    "host-bound": {
        "inference": (
            "# the GPU waits while the host prepares work: take pre- and post-processing (tokenizing,\n"
            "# image/video decoding, resizing) off the thread that launches the model: a worker pool,\n"
            "# or the GPU (torchvision.io.decode_jpeg(..., device=\"cuda\"), torchaudio/torchcodec on GPU);\n"
            "# batch requests so one forward does more work; replay the forward as a CUDA graph:\n"
            "model = torch.compile(model, mode=\"reduce-overhead\")\n"
            "# vLLM/SGLang: keep CUDA graphs on (no --enforce-eager / --disable-cuda-graph)"),
        "compiled": (
            "# the model is already compiled: the host time is around the compiled region;\n"
            "# move preprocessing into DataLoader workers, per-step Python bookkeeping out of the loop,\n"
            "# and replay the compiled region as a CUDA graph:\n"
            "model = torch.compile(model, mode=\"reduce-overhead\")"),
    },
    "launch-bound": {
        "inference": (
            "# many small kernels, each shorter than its launch: replay the forward as a CUDA graph\n"
            "model = torch.compile(model, mode=\"reduce-overhead\")   # fuses kernels, one graph launch per forward\n"
            "# or batch more requests per forward; vLLM/SGLang: CUDA graphs on, captured for the batch sizes you serve"),
        "inference-compiled": (
            "# already compiled: replay the compiled forward as a CUDA graph (one launch per forward)\n"
            "model = torch.compile(model, mode=\"reduce-overhead\")\n"
            "# vLLM/SGLang: keep CUDA graphs on and capture the batch sizes you serve;\n"
            "# or batch more requests per forward"),
        "compiled": (
            "# already compiled: replay the compiled step as a CUDA graph (one launch per graph)\n"
            "model = torch.compile(model, mode=\"reduce-overhead\")\n"
            "# or raise the batch size so each kernel does more work; fused optimizers: AdamW(..., fused=True)"),
    },
    "sync-in-step": {
        "inference": (
            "# read results once per batch, not per token or per op: no .item()/.tolist()/print(tensor)\n"
            "# inside the forward or the decoding loop, no Python branches on GPU values;\n"
            "# copy outputs into a pinned buffer without blocking and wait on an event when needed:\n"
            "out_host = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)\n"
            "out_host.copy_(out, non_blocking=True)\n"
            "done = torch.cuda.Event(); done.record()\n"
            "# ... launch the next batch ...\n"
            "done.synchronize()"),
    },
    "low-gpu-utilization": {
        "inference": (
            "# give the GPU more work per launch: batch requests (a larger max batch size),\n"
            "# replay the forward as a CUDA graph, and keep pre/post-processing off the launching thread:\n"
            "model = torch.compile(model, mode=\"reduce-overhead\")"),
        "compiled": (
            "# already compiled: replay it as a CUDA graph and give each launch more work (a larger batch)\n"
            "model = torch.compile(model, mode=\"reduce-overhead\")"),
    },
    "gpu-gaps": {
        "inference": (
            "# the host ops listed for each gap are what the GPU waited for: request pre/post-processing\n"
            "# (off the launching thread), synchronization (no .item()/.cpu() per token), logging or\n"
            "# scheduling work between batches (overlap it with the GPU: vLLM/SGLang async scheduling)"),
    },
    "low-sm-occupancy": {
        "inference": (
            "# each kernel has too few blocks for the GPU: batch more requests per forward,\n"
            "# or fuse the small kernels and replay them as a CUDA graph:\n"
            "model = torch.compile(model, mode=\"reduce-overhead\")"),
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
    "tensor-cores-unused": {
        "inference": (
            "# run the model in 16 bits: bf16 weights and activations (no loss scaling at inference)\n"
            "model = model.to(torch.bfloat16)\n"
            "# or keep float32 and allow TF32 matmuls on Ampere or newer:\n"
            "torch.set_float32_matmul_precision(\"high\")"),
    },
    "memory-under-used": {
        "inference": (
            "# more of the GPU's memory can hold requests: raise the batch (more concurrent sequences)\n"
            "# vLLM: --max-num-seqs, --gpu-memory-utilization; SGLang: --max-running-requests, --mem-fraction-static"),
    },
    "memory-near-capacity": {
        "inference": (
            "# serving engines reserve most of the memory for the KV cache on purpose\n"
            "# (vLLM --gpu-memory-utilization, SGLang --mem-fraction-static): near capacity is expected there;\n"
            "# otherwise: bf16 weights (model.to(torch.bfloat16)), a smaller max batch or context length"),
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
    "exposed-communication": {
        "inference": (
            "# tensor-parallel all-reduces sit on every forward's critical path:\n"
            "# fewer tensor-parallel ranks (more data-parallel replicas) for a model that fits,\n"
            "# custom/fused all-reduce (vLLM and SGLang enable one on NVLink/xGMI), and the fastest links\n"
            "# between the GPUs (check NCCL_P2P_LEVEL / RCCL settings)"),
    },
}

#: Words a fix printed for a kind must not use (a test checks :data:`FIXES`
#: and the real reports): training-loop advice on inference, bare
#: ``torch.compile(model)`` on compiled code, anything but profiling the
#: replay on a capture window.
FORBIDDEN: Mapping[str, Sequence[str]] = {
    "inference": ("DataLoader", "optimizer", "fused=True", "learning rate", "no_sync", "backward", "GradScaler",
                  "training", "train_step", "gradient"),
    "compiled": ("torch.compile(model)",),
    "graph-capture": ("DataLoader", "optimizer", "fused=True", "learning rate", "no_sync", "backward", "GradScaler",
                      "training", "train_step", "gradient", "torch.compile(model)"),
}


def workload_of(ranks: Sequence[RankResult]) -> Workload:
    """The workload a finding over ``ranks`` speaks to: theirs when they all
    share kind and compiled flag, else the unknown workload (the rule's own text)."""
    seen: Dict[Tuple[str, bool], Workload] = {(r.workload.kind, r.workload.compiled): r.workload for r in ranks}
    return next(iter(seen.values())) if len(seen) == 1 else Workload()


def fix_for(rule_id: str, ranks: Sequence[RankResult], default: str) -> str:
    """The fix text for a finding of ``rule_id`` on ``ranks``: the first
    :data:`FIXES` variant that applies to their workload (:func:`variants`),
    else ``default`` (the rule's own)."""
    texts = FIXES.get(rule_id, {})
    for v in variants(workload_of(ranks)):
        if v in texts:
            return texts[v]
    return default
