"""Batching rules: C29 many tiny forward passes per step (a per-sample loop, tiny micro-batches)."""
from __future__ import annotations

from ..model import AnalysisResult, RankResult
from ..replay_terms import EditLabel
from .base import Fired, Verdict, claim, evidence_lines, fine, ms, not_checked, of_step, pct_of_step, per, rule
from .claims import pool_size
from .config import AdviceConfig

DOCS_BATCHING = "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"
#: Forward passes (loss calls) per step from which the per-pass overhead is
#: judged where each pass runs its own backward (proposal: a plain step runs 1;
#: gradient accumulation over a few micro-batches of a useful size stays below it).
MANY_PASSES = 16
#: The same where the losses are summed into one backward (a model called per
#: sample): few models compute more than a handful of losses per step on
#: purpose (multi-task heads), and the fix bench's 8-sample per-sample loop
#: lost 25 % of its step to it (docs/FIXBENCH.md).
MANY_SUMMED_PASSES = 8
#: Samples per pass up to which a batch is tiny (proposal: per-op overhead,
#: not arithmetic, dominates each op at 4 samples or fewer).
TINY_BATCH = 4


def passes(r: RankResult) -> float:
    """Forward passes per step (loss op calls, :class:`~hta_report.model.CpuSide`)."""
    return r.cpu.loss_calls_per_step


def accumulates(r: RankResult) -> bool:
    """True when most passes run their own backward (gradient accumulation);
    False when the losses are summed first and one backward runs (a per-sample loop)."""
    return r.cpu.backward_passes_per_step > passes(r) / 2


def bound_us(r: RankResult) -> float:
    """An upper bound (µs per step) of what one batched pass would save: the
    N passes' share (N - 1) / N of the step's host time outside the
    DataLoader, synchronization, zero_grad, the optimizer and waits (the pool
    ``host:other``), as if the batched pass cost what one of the N small ones
    does (it costs more, so the saving is less)."""
    n = passes(r)
    return (n - 1) / n * pool_size(r, "host:other") if n > 1 else 0.0


def _evidence(r: RankResult) -> str:
    batch = (f"{r.cpu.loss_batch} sample(s) per pass (the leading dimension of {r.cpu.loss_op}'s input)"
             if r.cpu.loss_batch else "samples per pass not recorded (record_shapes=True shows them)")
    how = ("each with its own backward: gradient accumulation" if accumulates(r)
           else f"their losses summed, {r.cpu.backward_passes_per_step:.0f} backward: the model called per sample")
    return (f"rank {r.rank}: {passes(r):.0f} forward passes {per(r)} ({r.cpu.loss_op} calls), {how}; {batch}; "
            f"up to {ms(bound_us(r))} ({pct_of_step(bound_us(r), r):.0f} % {of_step(r)}) is the bound: "
            f"(N - 1)/N of the step's host time outside the DataLoader, optimizer and waits, if one batched "
            "pass cost what one small pass costs")


@rule("tiny-batches", "C29", "Many tiny forward passes in a step (per-sample loop, tiny micro-batches)",
      "proposal; PyTorch performance tuning guide",
      lambda c: (f">= {MANY_PASSES} forward passes (loss op calls) in a step, each with its backward, or >= "
                 f"{MANY_SUMMED_PASSES} whose losses are summed into one, on a rank without GPU activity; "
                 f"<= {TINY_BATCH} samples per pass where shapes are recorded"),
      DOCS_BATCHING,
      description=("On ranks without GPU activity (GPU ranks: `launch-bound`), a step that computes its loss "
                   "many times (`aten::cross_entropy_loss`, `aten::mse_loss`...): the model is called once per "
                   f"sample (the losses summed, one backward; {MANY_SUMMED_PASSES} or more), or gradients are "
                   f"accumulated over many micro-batches (a backward per pass; {MANY_PASSES} or more). Every op "
                   f"then pays its fixed per-call cost N times. Where shapes are recorded, only passes of "
                   f"{TINY_BATCH} samples or fewer count. The bound: (N - 1)/N of the step's host time outside "
                   "the DataLoader, optimizer and waits; the prediction replays one batched pass, or micro-batches "
                   "of 16."),
      fix=("Batch the samples: stack them and call the model once on a `[64, ...]` tensor instead of once per "
           "sample; with gradient accumulation, use larger micro-batches and fewer accumulation steps (as "
           "memory allows)."),
      edit=EditLabel.PASSES_BATCHED)
def tiny_batches(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C29: on ranks without GPU activity, :data:`MANY_PASSES` forward passes
    or more per step (loss op calls, ``CpuSide.loss_calls_per_step``) of at
    most :data:`TINY_BATCH` samples where shapes are recorded. The gain,
    :func:`bound_us`, is claimed from ``host:other``."""
    ranks = [r for r in result.ranks if not r.has_gpu and r.cpu.steps_used]
    if not ranks:
        return not_checked("no rank without GPU activity (GPU ranks: launch-bound judges per-op overhead)")
    seen = [r for r in ranks if r.cpu.loss_op]
    if not seen:
        return not_checked("no loss op (aten::cross_entropy_loss, aten::mse_loss...) in the steps")
    hits = sorted([r for r in seen if passes(r) >= (MANY_PASSES if accumulates(r) else MANY_SUMMED_PASSES)
                   and r.cpu.loss_batch <= TINY_BATCH], key=lambda r: -bound_us(r))
    if not hits:
        most = max(seen, key=passes)
        return fine(f"up to {passes(most):.0f} forward passes {per(most)} ({most.cpu.loss_op} calls)"
                    + (f" of {most.cpu.loss_batch} samples" if most.cpu.loss_batch else ""))
    worst = hits[0]
    if accumulates(worst):
        title = (f"Use larger micro-batches: {passes(worst):.0f} forward and backward passes {per(worst)}, "
                 "up to {pct:.0f} % {of} (bound)")
        fix = ("# fewer, larger micro-batches (as memory allows), e.g. 4 of 16 instead of 32 of 2:\n"
               "for xb, yb in zip(x.split(16), y.split(16)):\n"
               "    (loss_fn(model(xb), yb) * len(xb) / len(x)).backward()")
    else:
        title = (f"Batch the samples: the model runs {passes(worst):.0f} times {per(worst)}, "
                 "up to {pct:.0f} % {of} (bound)")
        fix = ("# one forward on the whole batch instead of one per sample:\n"
               "loss = loss_fn(model(x), y)   # x: [64, ...], not x[i:i+1] in a loop\n"
               "loss.backward()")
    title = title.format(pct=pct_of_step(bound_us(worst), worst), of=of_step(worst))
    return claim(fired, hits, ["host:other"], bound_us).verdict(cfg, title, evidence_lines(hits, _evidence), fix)
