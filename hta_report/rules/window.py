"""C0: whether the traced window can answer the question at all.

A report is only as good as the window the profiler recorded. A window that
starts with the process holds one-off warm-up (CUDA context creation takes
seconds, the first launch of each kernel loads its module); a trace without
``ProfilerStep`` annotations has no step to measure; one or two steps are too
few to tell a pattern from noise; and the trace of one rank of a distributed
job cannot show the ranks waiting for each other. This rule says so first,
with the fix, instead of advice computed from such a window.
"""
from __future__ import annotations

import statistics
from typing import List

from ..errors import plural
from ..model import AnalysisResult, RankResult
from .base import (DOCS_PROFILER, WINDOW, Fired, Verdict, claim_each, fine, make_finding, ms, not_checked, pct_of_step,
                   rule)
from .config import AdviceConfig
from .wording import specific

FIX = ("prof = torch.profiler.profile(\n"
       "    activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],\n"
       "    schedule=torch.profiler.schedule(wait=1, warmup=1, active=7),  # 7 recorded, 5 analyzed (the first\n"
       "    # and the last are left out), as hta-report collect does\n"
       "    on_trace_ready=torch.profiler.tensorboard_trace_handler(\"traces/\"),  # one file per rank\n"
       ")\n"
       "with prof:\n"
       "    for batch in loader:\n"
       "        train_step(batch)\n"
       "        prof.step()   # marks ProfilerStep#N\n"
       "# distributed: the same on every rank, all traces in one directory")


#: The fix where the trace lost GPU records (CUPTI's activity buffers filled: pytorch/pytorch#192021).
FIX_LOST = specific("# record the GPU (ProfilerActivity.CUDA) over a short window, so CUPTI's buffers hold every record:\n"
                    "prof = torch.profiler.profile(\n"
                    "    activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],\n"
                    "    schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),\n"
                    "    on_trace_ready=torch.profiler.tensorboard_trace_handler(\"traces/\"),\n"
                    ")\n"
                    "# lost records are logged at INFO only: KINETO_LOG_LEVEL=0 shows them")
#: The fix where the launches without a GPU record are the trace's last ones
#: (:attr:`~hta_report.model.Integrity.lost_tail`): the profiler stopped before the GPU ran them.
FIX_LOST_TAIL = specific("# the GPU ran behind the host and the profiler stopped before it ran the work queued last:\n"
                         "# wait for the GPU inside the profiled region, at the end of each step (or once before stopping)\n"
                         "with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:\n"
                         "    for batch in batches:\n"
                         "        model(batch)\n"
                         "        torch.cuda.synchronize()\n"
                         "        prof.step()")


_GPU_ONE_OFFS = ("(calls of {} or more that set up the device, context, streams or memory, first launches that "
                 "load a kernel's module, and the first call of a GPU library's ops (cuDNN, cuBLAS) that loads it; "
                 "cuDNN benchmark syncs and Triton compiles, which tune once and are not syncs to remove from the "
                 "step; the first batch of a DataLoader with worker processes, which starts them; and the "
                 "profiler's own overhead records, category overhead: its cost, not the workload's)")
#: What counts as one-off on a rank without GPU work (:func:`hta_report.analysis.warmup.cpu_one_offs`).
_CPU_ONE_OFFS = ("(the model's construction: weight fills before its first forward; and first calls of an op "
                 "five times or more as long as its later calls with the same shapes, by their excess: oneDNN "
                 "creates a primitive per shape on its first call; and the first batch of a DataLoader with "
                 "worker processes, which starts them)")


def warmup_pct(r: RankResult) -> float:
    """One-off warm-up calls as % of the rank's analyzed window."""
    return pct_of_step(r.warmup.us_per_step, r)


#: Iterations whose longest takes this many times their median or more ran on a machine whose speed
#: changed (proposal: 2x; the same ops with the same shapes do the same arithmetic).
SPREAD_RATIO = 2.0


def iteration_line(r: RankResult) -> str:
    """What the iterations of a rank without ``ProfilerStep`` show
    (:class:`~hta_report.model.Iterations`): their count and lengths on
    the host, a cold first one (longer than every other), and on a rank
    without GPU work (where the host's time is the work's) a spread of
    :data:`SPREAD_RATIO` or more between the same iterations."""
    it = r.iterations
    d = sorted(it.durations_us)
    median = statistics.median(d)
    text = (f"rank {r.rank}: the trace holds {it.count} repeated iterations of {it.ops_per_iteration} ops (each "
            f"starting with {it.first_op}), {ms(d[0])} to {ms(d[-1])} each on the host (median {ms(median)})")
    first, rest = it.durations_us[0], it.durations_us[1:]
    if rest and first > max(rest):
        text += f"; the first, {ms(first)}, is the cold one"
    steady = sorted(rest) if rest and first > max(rest) else d
    m = steady[len(steady) // 2]
    # a GPU rank's host waits with the queue, recorded or not
    if not r.has_gpu and not r.integrity.device_unrecorded and m > 0 and steady[-1] >= SPREAD_RATIO * m:
        text += (f"; the same ops took up to {steady[-1] / m:.1f}x their median: the machine's load or clock "
                 "changed during the run (a shared or throttled host): the same shapes do the same arithmetic, so "
                 "measure on a quiet machine before comparing")
    return text + "; prof.step() after each iteration makes them steps"


def _world(result: AnalysisResult) -> int:
    return max((f.world_size or 0 for f in result.inventory.files), default=0)


def problems(result: AnalysisResult, cfg: AdviceConfig) -> List[str]:
    """What limits the traced window, one line each (empty: nothing)."""
    out: List[str] = []
    for r in result.ranks:
        if r.workload.kind == "graph-capture":
            w = r.workload
            out.append(f"rank {r.rank}: CUDA/HIP stream capture takes {ms(w.capture_us)} of the trace's "
                       f"{ms(w.span_us)} ({w.capture_pct:.0f} %): a graph is captured once, at start-up, then "
                       "replayed for every batch; the capture's timing says nothing about the replay")
        # a device run recorded without its device: its host ops' times hold waits for the device, so a first
        # call longer than the later ones is no cold CPU call (the CPU one-offs read it as one)
        elif r.warmup.us_per_step > 0 and warmup_pct(r) >= cfg.window_warmup_pct and not r.integrity.device_unrecorded:
            calls = ", ".join(f"{c.name} {ms(c.total_us)}" + (f" ×{c.count}" if c.count > 1 else "")
                              for c in r.warmup.calls[:4])
            out.append(f"rank {r.rank}: one-off warm-up takes {ms(r.warmup.us_per_step)} "
                       f"({warmup_pct(r):.1f} %) of the {'step' if r.steps.count else 'traced window'}: {calls} "
                       + (_GPU_ONE_OFFS.format(ms(r.warmup.threshold_us)) if r.has_gpu else _CPU_ONE_OFFS))
    for r in result.ranks:
        i = r.integrity
        if i.workload_missing:
            out.append(f"rank {r.rank}: the trace holds none of the workload: {i.workload_missing}; the "
                       "profiler's window missed the work (started after it, stopped before it, or CPU activity "
                       "not recorded)")
        elif i.device_unrecorded:
            out.append(f"rank {r.rank}: the GPU side was not recorded: the model ran on a device "
                       f"({i.device_unrecorded}), yet the trace holds no GPU operation and no runtime call "
                       "(ProfilerActivity.CUDA missing from activities): no GPU figure or advice can come from "
                       "it, and it is no CPU run")
        elif i.launches_without_ops and i.launches_without_ops == i.launches:
            out.append(f"rank {r.rank}: the GPU side is missing: the host launched {i.launches:,} kernels or copies "
                       "and the trace holds no GPU record of any (the profiler lost them, or GPU activity "
                       "was not recorded): no GPU figure or advice can come from it")
        elif i.tail_unrecorded_us:
            out.append(f"rank {r.rank}: the last {i.launches_without_ops:,} of {i.launches:,} launches have no GPU "
                       "record: the profiler stopped while the GPU was still behind; GPU idle in the last "
                       f"{ms(i.tail_unrecorded_us)} of the trace is not known, the record before them is judged")
        elif r.integrity.idle_unreliable and i.launches_without_ops:
            out.append(f"rank {r.rank}: {i.launches_without_ops:,} of {i.launches:,} launches have no GPU record: the "
                       "GPU's busy and idle time are not known")
        if i.host_unrecorded:  # a GPU-only recording, lost launches or not
            out.append(f"rank {r.rank}: the host side was not recorded: the trace holds {i.host_unrecorded} "
                       "(ProfilerActivity.CPU missing from activities): the GPU's idle time is known, but not "
                       "what the host did meanwhile, so no rule that reads the host can judge it")
    no_steps = [r.rank for r in result.ranks if not r.steps.count]
    if no_steps:
        out.append(f"{'rank' if len(no_steps) == 1 else 'ranks'} {', '.join(map(str, no_steps[:8]))}: no ProfilerStep annotations: there is no step to "
                   "measure, so every figure covers the whole trace as one window")
        out += [iteration_line(r) for r in result.ranks if not r.steps.count and r.iterations.count]
    few = [r for r in result.ranks if r.steps.count and r.steps_used < cfg.window_min_steps]
    if few:
        out.append(f"{'rank' if len(few) == 1 else 'ranks'} {', '.join(str(r.rank) for r in few[:8])}: only "
                   f"{plural(min(r.steps_used for r in few), 'analyzed step')} "
                   # steps.count is after HTA's load, which left the last step out: it was recorded
                   f"(recorded {max(r.steps.count for r in few) + (0 if result.inventory.last_step_included else 1)}"
                   + _few_steps_dropped(few, result.inventory.last_step_included)
                   + f"): fewer than {cfg.window_min_steps} steps cannot tell a pattern from noise")
    world = _world(result)
    if world > len(result.ranks):
        out.append(f"the traces hold {len(result.ranks)} of the job's {world} ranks (distributedInfo.world_size): "
                   "ranks waiting for each other (stragglers) cannot be seen")
    return out


def _few_steps_dropped(few: List[RankResult], last_included: bool) -> str:
    """What the analysis left out of the recorded steps of the ranks ``few``:
    the first step as warm-up where it kept two or more after it
    (``StepSummary.warmup_excluded``), the last as HTA does unless it was kept;
    ``""`` where it left out none."""
    parts = (["the first is left out (warm-up, or the profiler starting in it)"]
             if all(r.steps.warmup_excluded for r in few) else []) + (
        [] if last_included else ["the last is dropped, as HTA does"])
    return "; " + " and ".join(parts) if parts else ""


@rule("trace-window", "C0", "The traced window cannot answer the question well",
      "PyTorch profiler recipe (schedule with wait/warmup, prof.step()); thresholds: proposal",
      lambda c: (f"one-off warm-up >= {c.window_warmup_pct:g} % of the window, no ProfilerStep, fewer than "
                 f"{c.window_min_steps} analyzed steps, or fewer traces than distributedInfo.world_size"),
      DOCS_PROFILER, phase=WINDOW,
      description=("Whether the traced window can answer the question at all: one-off warm-up work (CUDA "
                   "context creation, allocator growth, the first kernel launches) inside the analyzed "
                   "steps, no `ProfilerStep` annotations (figures then cover the whole trace), too few "
                   "analyzed steps to judge a step, or fewer trace files than the job's "
                   "`distributedInfo.world_size`. The gain is the warm-up time inside the window; the other "
                   "limits have none."),
      fix=("Record steady steps only: a profiler schedule with wait and warm-up steps "
           "(`schedule=torch.profiler.schedule(wait=1, warmup=1, active=7)`), `prof.step()` at the "
           "end of every iteration, and one trace file per rank (`tensorboard_trace_handler`); "
           "`hta-report collect` does all three."))
def trace_window(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C0: one-off warm-up inside the analyzed window (:class:`~hta_report.model.Warmup`),
    a trace that records a CUDA/HIP-graph capture (``Workload.kind``
    ``graph-capture``: the capture is among the warm-up calls), no
    ``ProfilerStep`` annotations, fewer than ``window_min_steps`` analyzed
    steps, or fewer traces than the job's ``distributedInfo.world_size``. The
    gain is the warm-up time (GPU ranks: the GPU idle while the host is in
    those calls), which a profiler schedule with wait and warm-up steps
    leaves out of the window; the other limits have none (0)."""
    ranks = [r for r in result.ranks if r.steps_used]
    if not ranks:
        return not_checked("no events in the traces")
    found = problems(result, cfg)
    if not found:
        return fine(f"{min(r.steps_used for r in ranks)} or more analyzed steps per rank, no one-off warm-up, "
                    f"{plural(len(result.ranks), 'rank')}" + (f" of {_world(result)}" if _world(result) else ""))
    warm = [r for r in ranks if r.warmup.us_per_step > 0 and warmup_pct(r) >= cfg.window_warmup_pct]
    claims = claim_each(fired, warm, lambda r: ["idle:warmup"] if r.has_gpu else ["host:warmup"],
                        lambda r: r.warmup.us_per_step)
    capture = [r for r in warm if r.workload.kind == "graph-capture"]
    # Launches inside a stream capture record no kernel (they are captured, not run): not lost records.
    lost = [r for r in ranks if r.integrity.launches_without_ops > 0
            and (r.integrity.idle_unreliable or r.integrity.tail_unrecorded_us > 0)
            and r.workload.kind != "graph-capture"]
    missing = [r for r in ranks if r.integrity.workload_missing]
    unrecorded = [r for r in ranks if r.integrity.device_unrecorded]
    hostless = [r for r in ranks if r.integrity.host_unrecorded]
    if missing:
        return make_finding(cfg, missing, {}, "The trace holds none of the workload: record the steps themselves",
                            found, FIX, ranks=[r.rank for r in missing])
    if unrecorded:
        return make_finding(cfg, unrecorded, {}, "The trace lost its GPU side: the model ran on a device, but no GPU "
                            "activity was recorded; record again with ProfilerActivity.CUDA", found, FIX_LOST,
                            ranks=[r.rank for r in unrecorded])
    if hostless:
        return make_finding(cfg, hostless, {}, "The trace lost its host side: only GPU activity was recorded; "
                            "record again with ProfilerActivity.CPU", found, FIX, ranks=[r.rank for r in hostless])
    if lost:
        w = max(lost, key=lambda r: r.integrity.launches_without_ops)
        gone = w.integrity.launches_without_ops == w.integrity.launches
        if w.integrity.lost_tail:
            title = (f"The profiler stopped before the GPU ran the last {w.integrity.launches_without_ops:,} of "
                     f"{w.integrity.launches:,} launches: synchronize before it stops")
            return make_finding(cfg, lost, {}, title, found, FIX_LOST_TAIL, ranks=[r.rank for r in lost])
        title = ("The trace lost its GPU side: " if gone else "The trace lost GPU records: ") + \
            f"{w.integrity.launches_without_ops:,} of {w.integrity.launches:,} launches have none; record again"
        return make_finding(cfg, lost, {}, title, found, FIX_LOST, ranks=[r.rank for r in lost])
    if capture:
        w = max(capture, key=warmup_pct)
        title = (f"The trace records a CUDA/HIP-graph capture ({warmup_pct(w):.0f} % of it), a one-off at start-up: "
                 "profile the graph replay")
    elif warm:
        w = max(warm, key=warmup_pct)
        title = (f"The traced window starts with one-off warm-up ({warmup_pct(w):.0f} % of it): profile steady "
                 "steps with a schedule")
    elif any(not r.steps.count for r in ranks):
        title = "No ProfilerStep annotations: mark steps with prof.step() so the report can measure a step"
    elif any(r.steps_used < cfg.window_min_steps for r in ranks):
        title = f"Too few steps in the trace: record {cfg.window_min_steps} or more steady steps"
    else:
        title = "The traces hold part of the job's ranks: trace every rank"
    return make_finding(cfg, warm or ranks, claims, title, found, FIX, ranks=[r.rank for r in (warm or ranks)])
