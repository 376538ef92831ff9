"""Host code rules: C30 Python loops over elements, C31 a model in training mode at inference, C32 the CPU's
reference kernels, C33 a model run on the CPU of a machine with a GPU."""
from __future__ import annotations

from typing import List

from ..model import AnalysisResult, RankResult
from ..replay_terms import EditLabel
from .base import (DOCS_TUNING, Fired, Verdict, claim, evidence_lines, fine, ms, not_checked, of_step, pct_of_step,
                   per, rule, shares_over, up_to)
from .config import AdviceConfig
from .launch import loop_driven
from .wording import unreplayed

DOCS_EVAL = "https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.eval"
DOCS_CPU = "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#cpu-specific-optimizations"
#: Share of the step (%) from which each of these rules fires (proposal: the
#: medium severity's 5 %, below which a fix is not worth a code change).
MIN_PCT = 5.0


def loop_us(r: RankResult) -> float:
    """The time per step (µs) Python loops over elements that read no scalar
    cost (those that do are ``sync-in-step``'s: their fix is the same
    vectorized read; ``CodePatterns.read_loop_us_per_step``): on a rank
    without GPU activity their host time; on a GPU rank the GPU idle while
    the loops run (``IdleAttribution.host_loop_us``, part of the host-ops
    idle) less the reading loops' host time: what vectorizing them gives
    back; host time the GPU's own work covers is no gain."""
    p = r.patterns
    if r.has_gpu:
        return max(0.0, r.idle_attribution.host_loop_us - p.read_loop_us_per_step)
    return max(0.0, p.loop_us_per_step - p.read_loop_us_per_step)


def _pools(r: RankResult) -> List[str]:
    return ["idle:host_ops"] if r.has_gpu else ["host:other"]


def _launch_owned(r: RankResult, fired: Fired) -> bool:
    """Whether ``launch-bound`` fired on GPU rank ``r`` naming its loop as where
    its launches come from (:func:`~.launch.loop_driven`; its fix then is the
    same vectorized op): one loop, one finding."""
    return r.has_gpu and loop_driven(r) and "launch-bound" in fired.claimers(r.rank, ["idle:launch"])


@rule("per-sample-ops", "C30", "A Python loop over a tensor's elements or samples",
      "proposal; PyTorch performance tuning guide",
      lambda c: f"Python loops over elements (an indexing op every few ops, 16 times or more) > {MIN_PCT:g} % of "
                "the step: their host time on a rank without GPU activity, the GPU idle while they run on a GPU rank",
      DOCS_TUNING,
      description=("A run of host ops in which `x[i]` (`aten::select`, `aten::slice`) comes back every few ops "
                   "with the same ops between, 16 times or more: a Python loop over a tensor's samples or "
                   "elements. Each op pays its fixed cost (Python, the dispatcher, the profiler) once per "
                   "element; one op over the whole tensor pays it once. On a rank without GPU activity the "
                   "loop's host time counts; on a GPU rank the GPU idle while it runs (before the first or "
                   "after the last GPU operation too: a loop is the workload's, not the profiler's start or "
                   "stop). Loops that call a loss (a model run per sample) are `tiny-batches`', loops of "
                   "`.item()` `sync-in-step`'s, loops whose kernel launches make a GPU rank launch-bound "
                   "`launch-bound`'s (its fix is this one)."),
      fix=("Compute on the whole tensor: `total = x.sum()` instead of `for i in range(len(x)): total += x[i]`; "
           "`x = (x - x.mean(1, keepdim=True)) / (x.std(1, keepdim=True) + eps)` instead of "
           "`for i in range(len(x)): x[i] = (x[i] - x[i].mean()) / x[i].std()`."),
      edit=EditLabel.LOOP_VECTORIZED)
def per_sample_ops(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C30: Python loops over elements (:func:`loop_us`: host time on ranks
    without GPU activity, the GPU idle while they run on GPU ranks) above
    :data:`MIN_PCT` of the step; claims it from ``host:other`` or, on GPU
    ranks, ``idle:host_ops`` (before host-bound, which owns that pool: the
    loop is a cause found inside it). A GPU rank where ``launch-bound``
    names the loop is left to it."""
    ranks = [r for r in result.ranks if r.steps_used and not _launch_owned(r, fired)]
    if not ranks:
        return not_checked("no events in the traces")
    val, hits = shares_over(ranks, loop_us, MIN_PCT, strict=True)
    if not hits:
        return fine(f"Python loops over elements {up_to(ranks, val)}")
    worst = hits[0]

    def line(r: RankResult) -> str:
        p = r.patterns
        idle = f"; the GPU idles through {ms(r.idle_attribution.host_loop_us)} of it" if r.has_gpu else ""
        return (f"rank {r.rank}: {p.loops_per_step:.1f} Python loops over elements {per(r)}, "
                f"{p.loop_iterations} iterations or more each, {ms(p.loop_us_per_step)} {per(r)} "
                f"({pct_of_step(p.loop_us_per_step, r):.1f} % {of_step(r)}), of which arithmetic "
                f"{ms(p.loop_arithmetic_us_per_step)}: the rest is each op's fixed cost paid per element{idle}")
    fix = ("# one op over the whole tensor instead of one per element (on the GPU or the CPU):\n"
           "total = x.sum()                  # not: for i in range(len(x)): total += x[i]\n"
           "x = (x - x.mean(dim=1, keepdim=True)) / (x.std(dim=1, keepdim=True) + 1e-5)\n"
           "# not: for i in range(len(x)): x[i] = (x[i] - x[i].mean()) / x[i].std()")
    title = f"Vectorize a Python loop over elements: {val[worst.rank]:.0f} % {of_step(worst)}"
    return claim(fired, hits, _pools, loop_us).verdict(cfg, title, evidence_lines(hits, line), fix)


def dropout_us(r: RankResult) -> float:
    """Time per step (µs) of active dropout on a rank without a backward pass."""
    return 0.0 if r.patterns.backward else r.patterns.dropout_us_per_step


def train_mode_us(r: RankResult) -> float:
    """Time per step (µs) a model left in training mode spends on a rank
    without a backward pass: active dropout (host time) and BatchNorm's
    training-mode GPU kernels (their GPU time: an upper bound of what eval
    mode saves there, its inference kernel still normalizes)."""
    return 0.0 if r.patterns.backward else r.patterns.dropout_us_per_step + r.patterns.bn_training_us_per_step


@rule("train-mode-inference", "C31", "A model left in training mode at inference (active dropout, BatchNorm)",
      "proposal; torch.nn.Module.eval",
      lambda c: (f"dropout ops that draw a mask (aten::bernoulli_) or BatchNorm's training-mode GPU kernels "
                 f"(cuDNN bn_fw_tr, MIOpen BatchNormFwdTrain, batch_norm_collect_statistics) in a trace without a "
                 f"backward pass, > {MIN_PCT:g} % of the step"),
      DOCS_EVAL,
      description=("A rank that runs no backward pass (inference) whose dropout ops draw a random mask "
                   "(`aten::native_dropout`, `aten::bernoulli_`) or whose BatchNorm runs its training-mode kernels "
                   "(the batch's statistics computed, the running ones updated): the model was not put in eval "
                   "mode. Its outputs are randomly perturbed or depend on the batch, and the masks and statistics "
                   "cost time. BatchNorm's mode on the CPU is not checked (the trace shows it only in an op's "
                   "recorded inputs)."),
      fix="Call `model.eval()` before inference (and `torch.inference_mode()` around it).",
      edit=EditLabel.EVAL_MODE)
def train_mode_inference(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C31: active dropout (``CodePatterns.dropout_us_per_step``) and
    BatchNorm's training-mode kernels (``CodePatterns.bn_training_us_per_step``)
    on ranks without a backward pass, above :data:`MIN_PCT` of the step;
    claims them from ``host:other`` (CPU ranks) or ``compute`` (GPU ranks:
    the mask and statistics kernels)."""
    ranks = [r for r in result.ranks if r.steps_used]
    if not ranks:
        return not_checked("no events in the traces")
    if all(r.patterns.backward for r in ranks):
        return fine("every rank runs a backward pass (training: dropout and batch statistics belong there)")
    val, hits = shares_over(ranks, train_mode_us, MIN_PCT, strict=True)
    if not hits:
        return fine(f"active dropout and training-mode BatchNorm at inference {up_to(ranks, val)}")
    worst = hits[0]

    def line(r: RankResult) -> str:
        p = r.patterns
        parts = []
        if p.dropout_us_per_step:
            parts.append(f"{p.dropout_per_step:.1f} dropout ops {per(r)} draw a random mask "
                         f"(aten::bernoulli_/native_dropout): {ms(p.dropout_us_per_step)} {per(r)} "
                         f"({pct_of_step(p.dropout_us_per_step, r):.1f} % {of_step(r)}); the outputs are perturbed "
                         "at random")
        if p.bn_training_us_per_step:
            parts.append(f"{p.bn_training_per_step:.1f} BatchNorm kernels {per(r)} run in training mode (computing "
                         f"the batch's statistics): {ms(p.bn_training_us_per_step)} of GPU time {per(r)} "
                         f"({pct_of_step(p.bn_training_us_per_step, r):.1f} % {of_step(r)}); the outputs depend on "
                         "the batch and the running statistics are overwritten")
        return f"rank {r.rank}: no backward pass, and " + "; ".join(parts)
    fix = ("model.eval()                      # dropout off, BatchNorm on its running statistics\n"
           "with torch.inference_mode():\n"
           "    out = model(x)")
    what = " and ".join(w for w, us in (("dropout is active", worst.patterns.dropout_us_per_step),
                                        ("BatchNorm computes batch statistics",
                                         worst.patterns.bn_training_us_per_step)) if us)
    title = f"Put the model in eval mode: {what} at inference ({val[worst.rank]:.0f} % {of_step(worst)})"
    return claim(fired, hits, lambda r: ["compute"] if r.has_gpu else ["host:other"], train_mode_us).verdict(
        cfg, title, evidence_lines(hits, line), fix)


def slow_us(r: RankResult) -> float:
    """Host time per step (µs) in the CPU's reference kernels, on a rank without GPU activity."""
    return 0.0 if r.has_gpu else r.patterns.slow_cpu_us_per_step


#: The dtype oneDNN's CPU convolutions take on every x86 and ARM CPU PyTorch supports (``Input type`` as
#: the profiler records it); bfloat16 and float16 take them only where the CPU has the instructions.
ONEDNN_DTYPE = "float"


def slow_cause(r: RankResult) -> str:
    """Why rank ``r``'s convolutions took the reference kernels, from what the
    trace recorded of their inputs (``CodePatterns.slow_cpu_dtypes``,
    ``slow_cpu_batch``): ``dtype`` (a type other than float32: oneDNN's
    convolutions run float32), ``single`` (float32 one sample at a time),
    ``build`` (float32 in batches: PyTorch's dispatch would take oneDNN,
    so this build or its settings do not have it), or ``unknown`` (types or
    shapes not recorded: ``record_shapes=True`` records them)."""
    p = r.patterns
    if any(t != ONEDNN_DTYPE for t in p.slow_cpu_dtypes):
        return "dtype"
    if not p.slow_cpu_dtypes or not p.slow_cpu_batch:
        return "unknown"
    return "single" if p.slow_cpu_batch == 1 else "build"


FIX_DTYPE = ("model = model.float()             # oneDNN's CPU convolutions run float32; other types take the\n"
             "x = x.float()                     # slow reference kernels")
FIX_SINGLE = ("# one convolution call per sample takes the reference kernels: batch the samples\n"
              "x = torch.stack(samples)          # [N, C, H, W], N > 1\n"
              "out = model(x)")
#: Float32 inputs in batches took the reference path: the build or its settings, not the code (no replay
#: models a different build or device, so this fix has no prediction).
FIX_BUILD = unreplayed(
    "# float32 inputs in batches should take oneDNN: this PyTorch ran without it\n"
    "print(torch.backends.mkldnn.is_available(), torch.backends.mkldnn.enabled)\n"
    "# False: a build without oneDNN (some ARM builds); install one with it, or run the model on the\n"
    "# machine's GPU (model.to(\"mps\") on Apple silicon, \"cuda\" elsewhere)\n"
    "# enabled False: remove torch.backends.mkldnn.enabled = False")
FIX_UNKNOWN = ("model = model.float()             # float64 takes the slow reference kernels on the CPU\n"
               "x = x.float()\n"
               "# convolutions one sample at a time take them too: batch the samples into one call\n"
               "# record_shapes=True records the inputs' types and shapes, which tell the cause")
_CAUSE_TEXT = {
    "dtype": "their inputs are {dtypes}: oneDNN's convolutions run float32",
    "single": "their inputs are float32 but one sample at a time (batch 1): oneDNN takes batches",
    "build": ("their inputs are float32 in batches of {batch}, which oneDNN takes: this PyTorch build or its settings "
              "have no oneDNN convolution"),
    "unknown": ("the path taken where oneDNN is not used (float64, one sample at a time, or a build without it); "
                "the trace did not record the inputs' types and shapes"),
}
_TITLE_TEXT = {
    "dtype": "use float32, which takes oneDNN's",
    "single": "batch the samples, which takes oneDNN's",
    "build": "float32 batches already: this PyTorch has no oneDNN convolution",
    "unknown": "float32 in batches takes oneDNN's",
}


@rule("slow-cpu-kernels", "C32", "The CPU's slow reference kernels (float64, single samples, no oneDNN path)",
      "proposal; PyTorch CPU performance tuning guide",
      lambda c: f"time in aten::_slow_conv2d_forward, _slow_conv2d_backward... > {MIN_PCT:g} % of the step on a "
                "rank without GPU activity",
      DOCS_CPU,
      description=("On ranks without GPU activity, time in PyTorch's reference convolution kernels "
                   "(`aten::_slow_conv2d_forward`/`_backward`, `slow_conv3d`, `slow_conv_dilated2d`, "
                   "`slow_conv_transpose2d`): the path taken where oneDNN (MKLDNN) is not used. The cause is "
                   "read from the ops' recorded inputs: a type other than float32 (use float32), float32 one "
                   "sample at a time (batch), or float32 in batches, which PyTorch gives oneDNN wherever the "
                   "build has it (the build or `torch.backends.mkldnn.enabled`: a code change does not help, "
                   "and no prediction is made). Without recorded inputs the fix names the likely causes."),
      fix=("Use float32 (`model.float()` and float32 inputs) and batch the samples: a convolution over a "
           "batch in float32 takes oneDNN's kernels; float32 batches that still take the reference path "
           "need a build with oneDNN or the machine's GPU."),
      edit=EditLabel.FAST_CPU_KERNELS)
def slow_cpu_kernels(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C32: host time in the CPU's reference kernels
    (``CodePatterns.slow_cpu_us_per_step``) above :data:`MIN_PCT` of the
    step on ranks without GPU activity; claims it from ``host:other``. The
    fix follows the worst rank's cause (:func:`slow_cause`)."""
    ranks = [r for r in result.ranks if not r.has_gpu and r.steps_used]
    if not ranks:
        return not_checked("no rank without GPU activity")
    val, hits = shares_over(ranks, slow_us, MIN_PCT, strict=True)
    if not hits:
        return fine(f"the CPU's reference kernels {up_to(ranks, val)}")
    worst = hits[0]

    def line(r: RankResult) -> str:
        p = r.patterns
        cause = _CAUSE_TEXT[slow_cause(r)].format(dtypes=", ".join(p.slow_cpu_dtypes), batch=p.slow_cpu_batch)
        return (f"rank {r.rank}: {ms(p.slow_cpu_us_per_step)} {per(r)} "
                f"({pct_of_step(p.slow_cpu_us_per_step, r):.1f} % {of_step(r)}) in "
                f"{', '.join(p.slow_cpu_ops[:4])}: {cause}")
    cause = slow_cause(worst)
    fix = {"dtype": FIX_DTYPE, "single": FIX_SINGLE, "build": FIX_BUILD, "unknown": FIX_UNKNOWN}[cause]
    title = f"The CPU's slow reference convolution kernels take {val[worst.rank]:.0f} % {of_step(worst)}: " + \
        _TITLE_TEXT[cause]
    return claim(fired, hits, ["host:other"], slow_us).verdict(cfg, title, evidence_lines(hits, line), fix)


#: Host memory the allocator must have held (bytes) for a trace with memory events on the CPU alone
#: to show that the model's tensors lived there: 64 MiB, more than a script's stray CPU tensors.
CPU_ONLY_MEMORY_BYTES = 64 << 20


def host_memory_only(r: RankResult) -> bool:
    """Whether rank ``r``'s ``[memory]`` events (``profile_memory=True``, recorded
    whether or not the GPU was traced) put every allocation on the CPU, at least
    :data:`CPU_ONLY_MEMORY_BYTES` of them, and none on a GPU."""
    m = r.memory
    return (m.recorded and bool(m.devices) and all(d.device == "cpu" for d in m.devices)
            and host_peak_bytes(r) >= CPU_ONLY_MEMORY_BYTES)


def host_peak_bytes(r: RankResult) -> int:
    """The largest peak of allocated memory among rank ``r``'s devices (bytes; 0 without memory events)."""
    return max((d.peak_allocated_bytes for d in r.memory.devices), default=0)


def on_cpu(r: RankResult) -> bool:
    """Whether rank ``r`` ran its model on the CPU of a machine with a GPU:
    its trace lists a GPU (``deviceProperties``) but holds no GPU activity and
    no launch, no op of a GPU's (cuDNN, MIOpen), and either ops that are the
    CPU's own kernels (oneDNN, the reference path) or memory allocated on
    the CPU alone (:func:`host_memory_only`). A trace recorded without
    ``ProfilerActivity.CUDA`` of a model on the GPU shows neither: its ops
    are device-neutral (``aten::addmm``) and its tensors' memory is the GPU's."""
    return (not r.has_gpu and bool(r.device_names) and not r.integrity.launches and not r.patterns.gpu_kernel_ops
            and (bool(r.patterns.cpu_kernel_ops) or host_memory_only(r)))


@rule("gpu-unused", "C33", "The model runs on the CPU of a machine with a GPU",
      "proposal",
      lambda c: "a trace listing a GPU (deviceProperties) with no GPU activity or launch, whose ops are the CPU's "
                "own kernels (oneDNN, the reference path) and no GPU's, or whose memory events put every "
                f"allocation (>= {CPU_ONLY_MEMORY_BYTES >> 20} MiB) on the CPU",
      "https://pytorch.org/docs/stable/notes/cuda.html",
      description=("A trace whose `deviceProperties` lists a GPU, with no kernel, copy or launch, and whose ops "
                   "ran the CPU's own kernels (`aten::mkldnn_convolution`, `aten::_slow_conv2d_forward`, "
                   "`aten::thnn_*`) and none of a GPU's (`aten::cudnn_*`), or whose `[memory]` events put every "
                   "allocation on the CPU: the model and its inputs were never "
                   "moved to the GPU. The bound is the host time of the step's ops."),
      fix="Move the model and its inputs to the GPU: `model.to('cuda')`, `x = x.to('cuda', non_blocking=True)`.")
def gpu_unused(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C33: ranks that ran on the CPU of a machine with a GPU (:func:`on_cpu`);
    claims their ops' host time from ``host:other``."""
    ranks = [r for r in result.ranks if r.steps_used]
    if not ranks:
        return not_checked("no events in the traces")
    hits = sorted([r for r in ranks if on_cpu(r)], key=lambda r: -r.patterns.compute_us_per_step)
    if not hits:
        return fine("the model ran where the trace's GPU work is" if any(r.has_gpu for r in ranks)
                    else "no GPU listed, or no op only the CPU runs")
    worst = hits[0]

    def line(r: RankResult) -> str:
        where = (f"its ops ran on the CPU ({', '.join(r.patterns.cpu_kernel_ops[:3])})" if r.patterns.cpu_kernel_ops
                 else f"every allocation is on the CPU (peak "
                      f"{host_peak_bytes(r) / 2**30:.1f} GiB), none on the GPU")
        return (f"rank {r.rank}: the trace lists {', '.join(sorted(set(r.device_names)))[:120]} but holds no GPU "
                f"activity or launch; {where}: {ms(r.patterns.compute_us_per_step)} {per(r)} in ops")
    fix = ("device = torch.device(\"cuda\")\n"
           "model = model.to(device)\n"
           "x = x.to(device, non_blocking=True)   # every input, each step (pin_memory=True in the DataLoader)")
    title = f"The model runs on the CPU while the machine has {sorted(set(worst.device_names))[0][:60]}: move it to the GPU"
    return claim(fired, hits, ["host:other"], lambda r: r.patterns.compute_us_per_step).verdict(
        cfg, title, evidence_lines(hits, line), fix)
