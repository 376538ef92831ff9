"""Distributed rules: C16 exposed communication, C17 rank imbalance (stragglers)."""
from __future__ import annotations

import math
import statistics
from typing import List, Optional, Tuple

from ..model import COMM_OVERLAP_STEP, MOST_STEPS, AnalysisResult, RankResult
from ..replay_terms import EditLabel
from .base import (DOCS_DDP, Fired, Verdict, claim, claim_each, evidence_lines, fine, make_finding, ms, not_checked,
                   of_step, pct_of_step, per, rule, shares_over, up_to, worst_first)
from .claims import claimable_by
from .config import AdviceConfig
from .wording import specific, unreplayed


def exposed_transfer_us(r: RankResult) -> float:
    """Exposed communication per step (µs) beyond the rank's wait: its
    synchronization wait across ranks, or its stalled collectives (kernels
    10x their median: :func:`~hta_report.analysis.transfers.collective_stalls`),
    whichever is larger (both are waits; they are not added): the part that
    overlap (not load balance) can hide. On a rank without GPU activity, the
    step thread's wait for its host collectives
    (``CommSummary.host_exposed_us_per_step``) less the same wait."""
    exposed = r.comm.exposed_us_per_step if r.has_gpu else r.comm.host_exposed_us_per_step
    return max(0.0, exposed - peer_wait_us(r))


def _with_communication(r: RankResult) -> bool:
    """Ranks C16 judges: communication kernels on a GPU rank, host
    collective ops (a CPU backend such as gloo) on the others."""
    return bool(r.comm.kernel_count) if r.has_gpu else r.comm.cpu_collective_us_per_step > 0


def peer_wait_us(r: RankResult) -> float:
    """A rank's wait in its collectives per step (µs): its synchronization
    wait across ranks or its stalls, whichever is larger (both are waits)."""
    return max(r.comm.sync_wait_us_per_step, r.comm.stall_us_per_step)


@rule("exposed-communication", "C16", "Communication that no compute overlaps",
      "TensorBoard profiler 10 %",
      lambda c: f"exposed communication (beyond waiting for other ranks) > {c.exposed_comm_pct:g} % of the step",
      DOCS_DDP, needs=(COMM_OVERLAP_STEP,),
      description=("Communication kernel time with no compute kernel running (on a rank without GPU activity, "
                   "the time its step thread waits for its host collectives, gloo's, with no op of its own "
                   "running), less the time spent waiting "
                   "for slower ranks (that is `rank-straggler`'s), split by what it does: data-parallel gradient "
                   "reduction, tensor-parallel activation collectives, FSDP parameter gathers, all-to-all "
                   "exchanges (experts, sharded embeddings), pipeline send/recv; the fix is that of the kind with "
                   "the most exposed time, and only gradient reduction has the replay's overlap edit. Gradients "
                   "reduced by hand (no DDP or FSDP in the trace, 8 or more gradient collectives a step, all "
                   "issued after the backward pass) get DDP itself as their fix."),
      fix=("Overlap communication with compute: DDP buckets (`DDP(model, bucket_cap_mb=50, "
           "gradient_as_bucket_view=True)`), `model.no_sync()` during gradient accumulation, a "
           "larger batch per GPU; FSDP: `forward_prefetch=True`, "
           "`backward_prefetch=BackwardPrefetch.BACKWARD_PRE`."),
      edit=EditLabel.GRADIENT_OVERLAP)
def exposed_communication(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C16: communication kernel time with no compute kernel running (on
    ranks without GPU activity, the step thread's wait for its host
    collectives: :func:`~hta_report.analysis.collectives.host_collectives`),
    minus the time spent waiting for slower ranks (that is C17), above
    ``exposed_comm_pct`` of the step."""
    ranks = [r for r in result.ranks if _with_communication(r)]
    if not ranks:
        return not_checked("no communication kernels (nccl*) or host collective ops (gloo*) in the traces")
    val, hits = shares_over(ranks, exposed_transfer_us, cfg.exposed_comm_pct, strict=True)
    if not hits:
        return fine(f"exposed communication {up_to(ranks, val)}")
    worst = hits[0]
    alone = len(ranks) < 2
    kind = dominant_kind(worst)
    if comm_bound(worst):
        return claim(fired, hits, COMM_POOLS, exposed_transfer_us).verdict(
            cfg, f"Communication-bound: collectives run {pct_of_step(comm_us(worst), worst):.0f} % "
                 f"{of_step(worst)}, {val[worst.rank]:.0f} % exposed; overlap cannot hide them",
            evidence_lines(hits, lambda r: _exposed_evidence(r, alone)),
            unreplayed(COMM_BOUND_FIX + (COMM_BOUND_DP if kind == "dp" else "")))
    by_hand = _reduced_by_hand(worst)
    if kind == "dp" and by_hand:
        return claim(fired, hits, COMM_POOLS, exposed_transfer_us).verdict(
            cfg, f"Gradients reduced by hand, {by_hand:.0f} collectives a step after the backward pass: "
                 f"{val[worst.rank]:.0f} % {of_step(worst)} is exposed communication",
            evidence_lines(hits, lambda r: _exposed_evidence(r, alone)), specific(BY_HAND_FIX))
    title = {"dp": "Overlap the gradient reduction with the backward pass",
             "tp": "Tensor-parallel collectives sit on the critical path",
             "fsdp": "Prefetch FSDP's parameter gathers",
             "ep": "Overlap the all-to-all exchanges with compute",
             "pp": "Pipeline send/recv waits"}.get(kind, "Overlap communication with compute")
    return claim(fired, hits, COMM_POOLS, exposed_transfer_us).verdict(
        cfg, f"{title}: {val[worst.rank]:.0f} % {of_step(worst)} is exposed communication",
        evidence_lines(hits, lambda r: _exposed_evidence(r, alone)), specific(KIND_FIXES.get(kind, KIND_FIXES["other"])))


#: Gradient collectives per step from which, with no data-parallel wrapper in the trace
#: (``CommSummary.wrapper``), the gradients are reduced by hand: one collective a parameter (or a
#: few tensors) after backward, as course labs' "naive DDP" does. DDP sends one bucket of 25 MB
#: at a time (a few a step for most models); a loop over parameters sends dozens.
BY_HAND_MIN_CALLS = 8
BY_HAND_FIX = (
    "# one blocking collective per parameter after backward: nothing overlaps it, and each call pays\n"
    "# the collective's latency. DistributedDataParallel buckets the gradients (bucket_cap_mb=25) and\n"
    "# all-reduces each bucket during the backward pass, as soon as its gradients are ready:\n"
    "model = torch.nn.parallel.DistributedDataParallel(model)\n"
    "# keeping the loop: one flat buffer, one all_reduce, issued asynchronously\n"
    "flat = torch._utils._flatten_dense_tensors(grads); work = dist.all_reduce(flat, async_op=True)")


def _reduced_by_hand(r: RankResult) -> float:
    """Gradient collectives per step (``dp``) of a rank whose trace shows no
    data-parallel wrapper, where there are :data:`BY_HAND_MIN_CALLS` or more
    and all were issued after the backward pass had ended (a framework's
    own bucketed reduction, DeepSpeed's or Megatron's, starts during
    backward); 0 otherwise."""
    if r.comm.wrapper:
        return 0.0
    dp = [k for k in r.comm.kinds if k.kind == "dp"]
    calls = sum(k.calls_per_step for k in dp)
    after = sum(k.after_backward_per_step for k in dp)
    return calls if calls >= BY_HAND_MIN_CALLS and after >= calls - 1e-9 else 0.0


#: The fix of exposed communication by what it is (:class:`~hta_report.model.CollectiveKind`).
KIND_FIXES = {
    "dp": ("model = DDP(model, bucket_cap_mb=50, gradient_as_bucket_view=True)\n"
           "with model.no_sync():   # during gradient accumulation micro-steps\n"
           "    loss.backward()\n"
           "# raise the batch size per GPU; FSDP: forward_prefetch=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE"),
    "tp": ("# a tensor-parallel layer reduces its activations on every forward pass: overlap cannot\n"
           "# hide what the next layer needs. Fewer tensor-parallel ranks for a model that fits (more data-parallel\n"
           "# replicas), sequence parallelism with overlapped (async) tensor parallelism, and the fastest links\n"
           "# between the GPUs of a tensor-parallel group (NVLink/xGMI in one node; check NCCL_P2P_LEVEL)"),
    "fsdp": ("model = FSDP(model, forward_prefetch=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE,\n"
             "             limit_all_gathers=True)\n"
             "# FSDP2: fully_shard(...) with reshard_after_forward=False for the last blocks; a larger batch per GPU\n"
             "# DeepSpeed ZeRO-3: a larger stage3_prefetch_bucket_size and overlap_comm: true in its config"),
    "ep": ("# all-to-all moves tokens to their experts (or embeddings to their shards): overlap dispatch and\n"
           "# combine with the other micro-batch's compute (two-batch overlap), keep experts within a node\n"
           "# where possible, and balance the load across experts (a capacity factor, an auxiliary loss)"),
    "pp": ("# pipeline stages wait for each other's activations: more micro-batches per step (smaller\n"
           "# bubbles), an interleaved or zero-bubble schedule, and stages of equal cost"),
    "other": ("# communication the trace does not name (no gradient reduction seen): find which calls issue it\n"
              "# (the collectives above), issue it asynchronously (async_op=True, wait() just before the result\n"
              "# is used) so that compute runs meanwhile, and keep the ranks that talk most on the fastest links"),
}


#: Collective kernel time (union, % of the step) from which a rank is communication-bound: with
#: compute perfectly overlapped the step still lasts the collectives' time, so overlapping can save
#: at most the rest (a quarter here); the lever is the collectives themselves (proposal, from that
#: bound). tracelens/mi300_resnet_act_checkpoint: 2 all-reduces of 6.6 and 9.2 ms in a 15.9 ms step.
COMM_BOUND_PCT = 75.0
COMM_BOUND_FIX = (
    "# the collectives take most of the step: overlapping them with compute can hide only the compute\n"
    "# beside them. Find why they are long: a slower peer (profile every rank: rank-straggler says\n"
    "# who is late), the link (nccl-tests all_reduce_perf against NVLink/xGMI/InfiniBand bandwidth),\n"
    "# or how much is sent per step (a larger batch per GPU sends the same gradients for more work)")
COMM_BOUND_DP = (
    "\n# gradients sent in 16 bits halve the bytes of a DDP all-reduce:\n"
    "from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook\n"
    "model.register_comm_hook(None, fp16_compress_hook)")


#: Where C16's time comes from: exposed communication kernels (GPU ranks), the step thread's wait for its
#: host collectives (ranks without GPU activity); a rank has time in one of the two only.
COMM_POOLS = ["comm:exposed", "host:communication"]


def comm_us(r: RankResult) -> float:
    """Collective time per step (µs): communication kernels (union) on a GPU
    rank, host collective ops on any thread (union) on the others."""
    return r.comm.us_per_step if r.has_gpu else r.comm.cpu_collective_us_per_step


def comm_bound(r: RankResult) -> bool:
    """Whether ``r``'s collective kernels run :data:`COMM_BOUND_PCT` of its step
    or more, their waits for other ranks and stalls left out (as
    :func:`exposed_transfer_us` leaves them: a late peer's time is
    ``rank-straggler``'s, a stall a one-off)."""
    return pct_of_step(max(0.0, comm_us(r) - peer_wait_us(r)), r) >= COMM_BOUND_PCT


def dominant_kind(r: RankResult) -> str:
    """The kind of collective with the most exposed time on ``r`` (``dp`` where none is known)."""
    return max(r.comm.kinds, key=lambda k: k.exposed_us_per_step).kind if r.comm.kinds else "dp"


def _exposed_evidence(r: RankResult, alone: bool) -> str:
    """C16's line for ``r`` (``alone``: the only rank in the directory, so its wait is unknown)."""
    if not r.has_gpu:
        return (f"rank {r.rank}: the step thread waits for its collectives (host ops such as gloo:all_reduce on "
                f"any thread, no op of its own running) {ms(r.comm.host_exposed_us_per_step)} {per(r)} "
                f"({pct_of_step(r.comm.host_exposed_us_per_step, r):.1f} % {of_step(r)}), of which waiting for "
                "other ranks " + ("unknown (one rank in the directory)" if alone else ms(r.comm.sync_wait_us_per_step))
                + f"; collective ops {ms(r.comm.cpu_collective_us_per_step)} {per(r)} in all"
                + ("; by kind, waited " + ", ".join(f"{k.label} {ms(k.exposed_us_per_step)} ({k.calls_per_step:.0f} "
                                                    f"call{'s' if round(k.calls_per_step) != 1 else ''} {per(r)})"
                                                    for k in r.comm.kinds if k.exposed_us_per_step > 0)
                   if r.comm.kinds else ""))
    return (f"rank {r.rank}: communication with no compute running {ms(r.comm.exposed_us_per_step)} {per(r)} "
            f"({pct_of_step(r.comm.exposed_us_per_step, r):.1f} % {of_step(r)}), of which waiting for other ranks "
            + ("unknown (one rank in the directory)" if alone else ms(r.comm.sync_wait_us_per_step))
            + f"; {r.comm.overlap_pct:.1f} % of communication overlaps compute (HTA)"
            + ("; by kind, exposed " + ", ".join(f"{k.label} {ms(k.exposed_us_per_step)}" for k in r.comm.kinds
                                               if k.exposed_us_per_step > 0) if r.comm.kinds else "")
            + (f"; {r.comm.stalls} stalled collective{'s' if r.comm.stalls != 1 else ''}, the largest "
               f"{r.comm.stall_kernel} of {ms(r.comm.stall_us)} against a median of {ms(r.comm.stall_median_us)} "
               f"over its {r.comm.stall_calls} calls: {ms(r.comm.stall_us_per_step)} {per(r)} of waiting (a late "
               "peer, a host stall or the window's end), not transfer, left out of this finding"
               if r.comm.stalls else ""))


def wait_pools(r: RankResult) -> List[str]:
    """Where a rank's wait for other ranks is claimed from: its exposed
    communication kernels, or (collectives on the host) its host time or GPU idle."""
    if r.comm.collective_basis == "kernels":
        return ["comm:exposed"]
    return ["host:collective_wait"] if not r.has_gpu else ["idle:stream_wait", "idle:host_ops", "idle:unattributed"]


@rule("rank-straggler", "C17", "A slow rank holds the others back",
      "proposal; HTA straggler analysis (sync wait), SageMaker Debugger",
      lambda c: (f"with collectives: the others' median wait for the same rank, last to arrive in most steps, "
                 f">= {c.straggler_pct:g} % of the step; without: the median step-time spread >= "
                 f"{c.straggler_pct:g} %"), DOCS_DDP,
      description=("With two ranks or more. With collectives on two ranks: the rank that arrives last at the "
                   "collectives (least time in them) in most steps is the straggler, and the others' wait for "
                   'it is the median over steps of their collective time beyond that step\'s smallest (HTA\'s '
                   '"sync wait"): one slow step makes no straggler. Ranks waiting under a quarter of the '
                   "longest wait arrived late with it and are named with it (a slow node of several ranks). "
                   "Where every rank waits in stalled collectives (communication kernels 10x their median, "
                   "two or more on each rank, the threshold's share of its step), no one rank is late: the "
                   "finding says the ranks wait for each other and claims each one's stalled time, unless one "
                   "rank's host launched every collective last (the ranks' launch calls on their common clock) and "
                   "the others' kernels ran the threshold's share of their step before it launched them: that rank "
                   "is named, late for its host, and the others' wait for its launches is claimed. "
                   "Without collectives no wait can be seen: "
                   "the rule speaks only of a step-time spread, the rank whose step is longest in most steps "
                   "(median excess over the median rank)."),
      fix=("Find why the slow rank is slower: compare its section of the report with the others' "
           "(DataLoader wait, CPU contention, GPU clocks); with uneven inputs, bucket samples by "
           "length so that every rank gets the same work per iteration."))
def rank_straggler(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C17 with two or more ranks. With collectives on two ranks or more
    (communication kernels, or host time in collective ops such as
    ``gloo:all_reduce``): the rank that arrived last (least collective time)
    in at least :data:`~hta_report.model.MOST_STEPS` of the steps is a
    straggler when the others' median per-step wait for it (HTA's "sync
    wait", :class:`~hta_report.model.CommSummary`) is ``straggler_pct`` of
    the step or more; that wait is the gain, claimed from the waiting ranks'
    pools. Synchronous data parallelism makes step times equal, so step
    times are not read then. Without collectives on two ranks no wait shows:
    the rule then judges the step-time spread (:func:`step_spread`: the rank
    slowest in most steps, its median excess over the median rank), says it
    is a spread, and claims that excess from the slow rank's pools
    (``claims.OWNERSHIP``: not those of causes that run after it)."""
    ranks = [r for r in result.ranks if r.steps_used and r.window_us > 0]
    if len(ranks) < 2:
        world = max((f.world_size or 0 for f in result.inventory.files), default=0)
        return not_checked("needs two or more ranks with steps in the directory"
                           + (f" (the traces hold {len(ranks)} of {world} ranks)" if world > len(ranks) else ""))
    slowest, spread_us, slow_in, compared = step_spread(ranks)
    median_step = statistics.median(r.window_us for r in ranks)
    spread = (f"step-time spread {100 * spread_us / median_step:.1f} % of the median step (median over "
              f"{compared} steps; rank {slowest.rank} slowest in {slow_in})")
    with_coll = [r for r in ranks if r.comm.collective_basis]
    if len(with_coll) < 2:
        return _spread_verdict(cfg, fired, ranks, slowest, spread_us, slow_in, compared, spread)
    if all(r.comm.collective_basis == "kernels" and r.comm.stalls >= MUTUAL_MIN_STALLS
           and pct_of_step(r.comm.stall_us_per_step, r) >= cfg.straggler_pct for r in with_coll):
        late_host = host_late(with_coll, cfg)
        if late_host is not None:
            return _host_late_verdict(cfg, fired, with_coll, late_host)
        return _mutual_verdict(cfg, fired, with_coll)
    waiter = max(with_coll, key=lambda r: r.comm.sync_wait_us_per_step)
    wait_us = waiter.comm.sync_wait_us_per_step
    pct = pct_of_step(wait_us, waiter)
    late = max(with_coll, key=lambda r: r.comm.late_steps)
    arrival = (f"; rank {late.rank} arrived last in {late.comm.late_steps} of {late.comm.compared_steps} steps"
               if late.comm.compared_steps else "")
    if pct < cfg.straggler_pct:
        return fine(f"wait for other ranks in collectives up to {pct:.1f} % {of_step(waiter)} "
                    f"({_basis(with_coll)}{arrival}), {spread}")
    group = late_group(with_coll, wait_us)
    straggler = group[0]  # the last to arrive: least wait, then most steps last
    waits = ", ".join(f"rank {r.rank} {ms(r.comm.sync_wait_us_per_step)}" for r in
                      sorted(with_coll, key=lambda r: -r.comm.sync_wait_us_per_step)[:8])
    evidence = [f"time in collectives {per(waiter)} beyond the step's smallest, median over the steps "
                f"({_basis(with_coll)}; waiting for a slower rank): {waits}"]
    if straggler.comm.compared_steps:
        evidence.append(f"rank {straggler.rank} spent the least time in collectives, i.e. arrived last, in "
                        f"{straggler.comm.late_steps} of {straggler.comm.compared_steps} steps: the others wait for it")
    if len(group) > 1:
        others = group[1:]
        evidence.append(f"{_names(others)} wait{'s' if len(others) == 1 else ''} "
                        + ", ".join(ms(r.comm.sync_wait_us_per_step) for r in others)
                        + f", under {LATE_GROUP_SHARE * 100:.0f} % of the longest wait ({ms(wait_us)}): "
                        f"{'it arrives' if len(others) == 1 else 'they arrive'} late with rank {straggler.rank}")
    evidence.append("mean step per rank: " + ", ".join(f"rank {r.rank} {ms(r.window_us)}" for r in ranks[:8]))
    waiting = [r for r in with_coll if pct_of_step(r.comm.sync_wait_us_per_step, r) >= 1.0] or [waiter]
    claims = claim_each(fired, waiting, wait_pools, lambda r: r.comm.sync_wait_us_per_step)
    # the title's share is what the finding claims (the wait that holds the step: on kernels, the part with no
    # compute running), as its gain is; the evidence above gives the whole wait
    pct = max((pct_of_step(sum(claims[r.rank].values()), r) for r in waiting), default=pct)
    who = _names(group)
    fix = (f"# find why {who} {'is' if len(group) == 1 else 'are'} slower or start{'s' if len(group) == 1 else ''} "
           "later: compare the sections of this report\n"
           "# (DataLoader wait, CPU contention, GPU clocks); uneven inputs: bucket samples by length, e.g.\n"
           "# a length-grouped sampler, so every rank gets the same work per iteration")
    title = (f"Rank {straggler.rank} is a straggler: other ranks wait {pct:.0f} % {of_step(waiter)} for it"
             if len(group) == 1 else
             f"{who[0].upper() + who[1:]} arrive last at the collectives: other ranks wait {pct:.0f} % "
             f"{of_step(waiter)} for them")
    return make_finding(cfg, waiting, claims, title, evidence, fix, ranks=[r.rank for r in group])


#: Stalled collectives (:func:`~hta_report.analysis.transfers.collective_stalls`: 10x the median of
#: the same kernel) each rank must have before "every rank waits for another" is read: one stall
#: per rank can be the window's first or last collective.
MUTUAL_MIN_STALLS = 2


def _mutual_verdict(cfg: AdviceConfig, fired: Fired, ranks: List[RankResult]) -> Verdict:
    """C17 where every rank with collectives waits in stalled collectives
    (:attr:`~hta_report.model.CommSummary.stall_us_per_step`, at least
    :data:`MUTUAL_MIN_STALLS` of them and ``straggler_pct`` of its step): no
    one rank is late (a straggler does not wait for the others, so its
    collectives do not stall); the ranks reach the same collectives at
    different times, each late for some of them. Each rank's stalled time is
    claimed from its communication pool (exposed-communication leaves it:
    :func:`exposed_transfer_us`)."""
    worst = max(ranks, key=lambda r: pct_of_step(r.comm.stall_us_per_step, r))
    evidence = [f"rank {r.rank}: {r.comm.stalls} stalled collective{'s' if r.comm.stalls != 1 else ''}, the "
                f"largest {r.comm.stall_kernel} of {ms(r.comm.stall_us)} against a median of "
                f"{ms(r.comm.stall_median_us)} over its {r.comm.stall_calls} calls: {ms(r.comm.stall_us_per_step)} "
                f"{per(r)} waiting ({pct_of_step(r.comm.stall_us_per_step, r):.1f} % {of_step(r)}) with no compute "
                "running" for r in sorted(ranks, key=lambda r: -r.comm.stall_us_per_step)[:8]]
    evidence.append("every rank waits in some collectives: none is late at all of them, so no one rank is the "
                    "straggler; the ranks reach the same collectives at different times")
    claims = claim_each(fired, ranks, wait_pools, lambda r: r.comm.stall_us_per_step)
    pct = max((pct_of_step(sum(claims[r.rank].values()), r) for r in ranks), default=0.0)
    fix = ("# each rank is late for some collectives and early for others: compare where the ranks launch them\n"
           "# (this report's per-rank timelines); balance the work between two collectives across ranks (MoE:\n"
           "# expert load, a capacity factor; pipelines: stages of equal cost, more micro-batches), and issue the\n"
           "# collectives in the same order on every rank")
    return make_finding(cfg, ranks, claims,
                        f"Ranks wait for each other at the collectives: up to {pct:.0f} % {of_step(worst)} in "
                        "stalled collectives", evidence, fix, ranks=[r.rank for r in ranks])


def host_late(ranks: List[RankResult], cfg: AdviceConfig) -> Optional[RankResult]:
    """The rank of ``ranks`` whose host launched every compared collective
    after every other rank (``CommSummary.launched_last`` of
    ``launches_compared``, :func:`hta_report.analysis._launch_order`), where
    another rank's collective kernels ran ``straggler_pct`` of its step or
    more before it launched them (``launch_wait_us_per_step``: waiting for
    its host); else None. Where every rank stalls at the collectives, this
    tells a rank whose host is late from ranks that wait for each other."""
    late = [r for r in ranks if r.comm.launches_compared and r.comm.launched_last == r.comm.launches_compared]
    if len(late) != 1:
        return None
    waited = [r for r in ranks if r is not late[0]
              and pct_of_step(r.comm.launch_wait_us_per_step, r) >= cfg.straggler_pct]
    return late[0] if waited else None


def _host_late_verdict(cfg: AdviceConfig, fired: Fired, ranks: List[RankResult], late: RankResult) -> Verdict:
    """C17 where every rank stalls at the collectives but one rank's host
    launched each of them last (:func:`host_late`): that rank is the late
    one, and its host, not its GPU, is why (the others' kernels ran before it
    had even launched its own). The gain is the others' wait for its
    launches (``launch_wait_us_per_step``), claimed from their communication
    pools (:func:`wait_pools`); their stalls beyond it are named, not claimed."""
    c = late.comm
    waiting = [r for r in ranks if r is not late and r.comm.launch_wait_us_per_step > 0]
    worst = max(waiting, key=lambda r: pct_of_step(r.comm.launch_wait_us_per_step, r))
    evidence = [f"rank {late.rank}'s host launches each of the {c.launches_compared} collectives last, "
                f"{ms(c.launch_lag_min_us)} to {ms(c.launch_lag_max_us)} after the next rank's launch of the same "
                "collective (communication kernels in launch order, on the ranks' common clock)"]
    evidence += [f"rank {r.rank}: its collective kernels run {ms(r.comm.launch_wait_us_per_step)} {per(r)} "
                 f"({pct_of_step(r.comm.launch_wait_us_per_step, r):.1f} % {of_step(r)}) before rank {late.rank} has "
                 "launched the same collectives: waiting for its host" for r in waiting[:8]]
    evidence += [f"rank {r.rank}: {r.comm.stalls} stalled collective{'s' if r.comm.stalls != 1 else ''}, "
                 f"{ms(r.comm.stall_us_per_step)} {per(r)} with no compute running in all"
                 for r in sorted(ranks, key=lambda r: -r.comm.stall_us_per_step)[:8]]
    claims = claim_each(fired, waiting, wait_pools, lambda r: r.comm.launch_wait_us_per_step)
    pct = max((pct_of_step(sum(claims[r.rank].values()), r) for r in waiting), default=0.0)
    fix = (f"# rank {late.rank}'s host issues every collective {ms(c.launch_lag_min_us)} or more after the others: "
           "find what\n"
           f"# its host does before them (rank {late.rank}'s host ops, warm-up and waits in this report against "
           "the others':\n"
           "# CPU contention, data loading, a one-off set-up or allocation on that rank); its GPU is not what is late")
    return make_finding(cfg, waiting, claims,
                        f"Rank {late.rank} launches its collectives late: other ranks wait {pct:.0f} % "
                        f"{of_step(worst)} for its host", evidence, fix, ranks=[late.rank])


#: A rank whose wait at the collectives is under this share of the longest
#: wait arrived in the last quarter of the spread of arrivals (the longest
#: wait is the spread between the first rank and the last): late with the
#: straggler, not early. Named with it, so that a slow node of several ranks
#: reads as such rather than as its single last rank.
LATE_GROUP_SHARE = 0.25


def late_group(ranks: List[RankResult], longest_wait_us: float) -> List[RankResult]:
    """The ranks of ``ranks`` that arrived late at the collectives: whose
    per-step wait (``CommSummary.sync_wait_us_per_step``, µs) is under
    :data:`LATE_GROUP_SHARE` of ``longest_wait_us``, the last to arrive
    (least wait, then most steps last) first; only the last alone where that
    would be every rank."""
    order = sorted(ranks, key=lambda r: (r.comm.sync_wait_us_per_step, -r.comm.late_steps))
    late = [r for r in order if r.comm.sync_wait_us_per_step < LATE_GROUP_SHARE * longest_wait_us] or order[:1]
    return late if len(late) < len(ranks) else order[:1]


def _names(ranks: List[RankResult]) -> str:
    """``"rank 7"``, ``"ranks 7 and 2"``, ``"ranks 7, 2 and 6"``."""
    ids = [str(r.rank) for r in ranks]
    if len(ids) == 1:
        return f"rank {ids[0]}"
    return f"ranks {', '.join(ids[:-1])} and {ids[-1]}"


def step_spread(ranks: List[RankResult]) -> Tuple[RankResult, float, int, int]:
    """The slowest rank by step time, robustly: per analyzed step common to
    ``ranks``, each rank's excess over that step's median across ranks (µs);
    the rank longest in the most steps, its median excess over the steps,
    in how many steps it was longest, and how many were compared. Without
    steps in common: mean steps (``window_us``), one step compared."""
    times = [{s.number: s.duration_us for s in r.steps.steps if not s.warmup} for r in ranks]
    common = sorted(set.intersection(*(set(t) for t in times)))
    if not common:
        median_step = statistics.median(r.window_us for r in ranks)
        slow = max(ranks, key=lambda r: r.window_us)
        return slow, max(0.0, slow.window_us - median_step), 1, 1
    longest = [max(range(len(ranks)), key=lambda i: times[i][n]) for n in common]
    k = max(range(len(ranks)), key=longest.count)
    excess = [times[k][n] - statistics.median(t[n] for t in times) for n in common]
    return ranks[k], max(0.0, statistics.median(excess)), longest.count(k), len(common)


def _spread_verdict(cfg: AdviceConfig, fired: Fired, ranks: List[RankResult], slowest: RankResult, spread_us: float,
                    slow_in: int, compared: int, spread: str) -> Verdict:
    """C17 without collectives on two ranks: a step-time spread, never a wait (none can be seen)."""
    unseen = "no collective ops or communication kernels on two ranks: a wait for a slow rank would not show"
    pct = pct_of_step(spread_us, slowest)
    if pct < cfg.straggler_pct or slow_in < math.ceil(MOST_STEPS * compared):
        return not_checked(f"{unseen} ({spread})")
    steps = ", ".join(f"rank {r.rank} {ms(r.window_us)}" for r in ranks[:8])
    evidence = [f"rank {slowest.rank}'s step is the longest in {slow_in} of {compared} steps, by a median "
                f"{ms(spread_us)} over the median rank's", f"mean step per rank: {steps}",
                f"{unseen}: whether other ranks wait for it is not known"]
    # the slowest rank's extra time, from the pools the straggler may claim (claims.OWNERSHIP):
    # not those of causes that run after it (the optimizer, zero_grad, compute)
    claims = {slowest.rank: fired.take(slowest, claimable_by("rank-straggler"), spread_us)}
    fix = (f"# find why rank {slowest.rank}'s steps are longer: compare its section of this report with the "
           "others\n# (DataLoader wait, CPU contention, GPU clocks); uneven inputs: bucket samples by length")
    return make_finding(cfg, [slowest], claims,
                        f"Rank {slowest.rank}'s steps are {pct:.0f} % longer than the median rank's "
                        "(step-time spread; no collectives in the traces)", evidence, fix, ranks=[slowest.rank])


def _basis(ranks: List[RankResult]) -> str:
    kinds = {r.comm.collective_basis for r in ranks}
    if kinds == {"kernels"}:
        return "communication kernels"
    if kinds == {"host"}:
        return "host time in collective ops such as gloo:all_reduce"
    return "communication kernels or host collective ops"


@rule("data-parallel", "C18", "torch.nn.DataParallel instead of DistributedDataParallel",
      "TensorBoard profiler, performance tuning guide",
      lambda c: "any DataParallel.forward; no gain estimate from one process's trace", DOCS_DDP,
      description=("`torch.nn.DataParallel` (`DataParallel.forward` annotations): it replicates the model "
                   "and scatters inputs every step and drives every GPU from one Python process. One "
                   "process's trace cannot bound the gain (estimate 0)."),
      fix=("Run one process per GPU with DistributedDataParallel: `torchrun "
           '--nproc-per-node=NUM_GPUS train.py`, `dist.init_process_group("nccl")`, `model = '
           "DDP(model.to(local_rank), device_ids=[local_rank])`."))
def data_parallel(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C18: ``DataParallel.forward`` annotations. DataParallel replicates the
    model and scatters inputs every step and drives all GPUs from one Python
    process; DDP runs a process per GPU. The trace of one process cannot
    bound the gain, so the estimate is 0 and the severity low."""
    ranks = [r for r in result.ranks if r.steps_used]
    if not ranks:
        return not_checked("no events in the traces")
    hits = [r for r in ranks if r.cpu.data_parallel_calls_per_step > 0]
    if not hits:
        return fine("no DataParallel.forward")
    evidence = evidence_lines(hits, lambda r: (
        f"rank {r.rank}: {r.cpu.data_parallel_calls_per_step:.1f} DataParallel.forward {per(r)}, "
        f"{ms(r.cpu.data_parallel_us_per_step)} of host time; devices: "
        f"{', '.join(sorted(set(r.device_names))) or 'not recorded'} ({len(r.device_names)})"))
    evidence.append("no gain estimate: DataParallel's replication and single-process threads are not separable "
                    "in one trace")
    fix = ("# one process per GPU: torchrun --nproc-per-node=NUM_GPUS train.py\n"
           "dist.init_process_group(\"nccl\")\n"
           "model = DDP(model.to(local_rank), device_ids=[local_rank])")
    return make_finding(cfg, hits, {}, "Use DistributedDataParallel instead of DataParallel", evidence, fix)


#: ``distributedInfo.backend`` values that name no backend: torch 2.x writes ``undefined`` for a
#: process group made without one (``init_process_group()``), which then runs NCCL for CUDA tensors
#: and gloo for CPU ones (``pg_config``'s ``backend_config`` "cpu:gloo,cuda:nccl").
UNNAMED_BACKENDS = ("undefined", "", "none")


def not_nccl(backend: str, r: RankResult) -> bool:
    """Whether a GPU rank's collectives run on another backend than NCCL
    (RCCL keeps the name on AMD): never where NCCL/RCCL kernels ran
    (``comm.kernel_count``); with a backend named other than ``nccl``; with
    an unnamed one (:data:`UNNAMED_BACKENDS`) only where host-side collective
    ops (``gloo:*``) took time."""
    if r.comm.kernel_count > 0:
        return False
    name = backend.strip().lower()
    if name in UNNAMED_BACKENDS:
        return r.comm.cpu_collective_us_per_step > 0
    return name != "nccl"


@rule("non-nccl-backend", "C19", "A non-NCCL process group backend on GPUs",
      "TensorBoard profiler",
      lambda c: "distributedInfo.backend other than nccl on a rank with GPU activity", DOCS_DDP,
      description=("A process group backend other than NCCL (`gloo`...) on a rank with GPU activity, from "
                   "`distributedInfo.backend` (RCCL keeps the name `nccl` on AMD GPUs). The gain bound is "
                   "the host time in collective ops per step."),
      fix=('Use NCCL for GPU collectives: `dist.init_process_group(backend="nccl")`.'))
def non_nccl_backend(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C19: ``distributedInfo.backend`` is ``gloo`` (or another backend than
    ``nccl``, the name RCCL keeps on AMD GPUs) on a rank with GPU activity and
    no NCCL/RCCL kernels (:func:`not_nccl`). The gain bound is the host time
    in collective ops (``gloo:*``) per step."""
    backend = {f.rank: f.backend for f in result.inventory.files}
    ranks = [r for r in result.ranks if backend.get(r.rank)]
    if not ranks:
        return not_checked("no distributedInfo.backend in the traces")
    gpu = [r for r in ranks if r.has_gpu]
    if not gpu:
        return not_checked("no GPU activity (a CPU backend is right for CPU training)")
    hits = worst_first([r for r in gpu if not_nccl(str(backend[r.rank]), r)],
                       lambda r: r.comm.cpu_collective_us_per_step)
    if not hits:
        return fine(f"backend {backend[gpu[0].rank]}")
    worst = hits[0]
    evidence = evidence_lines(hits, lambda r: (
        f"rank {r.rank}: distributedInfo.backend = {backend[r.rank]} with GPU activity; host time in collective ops "
        f"{ms(r.comm.cpu_collective_us_per_step)} {per(r)}"))
    fix = "dist.init_process_group(backend=\"nccl\")   # collectives on the GPU, over NVLink/InfiniBand"
    return claim(fired, hits, ["idle:host_ops"], lambda r: r.comm.cpu_collective_us_per_step).verdict(
        cfg, f"Use the NCCL backend on GPUs (found {backend[worst.rank]})", evidence, fix)
