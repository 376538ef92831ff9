"""The view model: the result model turned into display-ready strings.

Shared by the HTML and markdown reporters so both say the same thing.
Templates only read, loop and test what this module builds. Each section of
the HTML report is a function here listed in :data:`SECTIONS` under the name
the template reads it by.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List

from ..model import (ATTRIBUTION_STEP, CHECK_STATUSES, IDLE_CAUSE_LABELS, MEMORY_STEP, OCCUPANCY_STEP, SPAN_STEP,
                     STEP_BREAKDOWN_STEP, TEMPORAL_STEP, TENSORBOARD_STEP, WINDOWS_STEP, AnalysisResult, Finding,
                     RankResult, is_doc_url, is_source_url)
from ..names import short_names
from . import fmt

#: What a cell shows for a figure whose analysis step failed on the rank.
NOT_COMPUTED = "not computed"

#: Findings below this % of the step are not in the headline's top list.
TOP_MIN_GAIN_PCT = 1.0


def _rank_label(r: RankResult) -> str:
    return f"rank {r.rank}"


def devices(result: AnalysisResult) -> str:
    """The devices of the run: from the traces (``deviceProperties``), else
    from the collector's ``manifest.json`` (``device_names``, said so), else
    what is known (``"GPU model not recorded in the traces"`` or ``"CPU only"``)."""
    inv = result.inventory
    if inv.devices:
        return ", ".join(inv.devices)
    listed = inv.manifest.get("device_names") if isinstance(inv.manifest, dict) else None
    if isinstance(listed, list) and listed:
        return ", ".join(str(d) for d in listed) + " (from manifest.json)"
    return "GPU model not recorded in the traces" if result.aggregate.gpu_ranks else "CPU only"


def _workload(manifest: Dict[str, Any]) -> str:
    """What ``hta-report collect`` ran, from its manifest: ``workload cnn`` or
    ``script train.py --lr 3``; empty for traces from elsewhere."""
    run = manifest.get("run") if isinstance(manifest, dict) else None
    if not isinstance(run, dict):
        return ""
    if run.get("mode") == "workload" and run.get("workload"):
        return f"workload {run['workload']}"
    if run.get("mode") == "script" and isinstance(run.get("command"), list):
        command = " ".join(str(a) for a in run["command"])
        return "script " + (command if len(command) <= 80 else command[:79] + "…")
    return ""


def _world_note(result: AnalysisResult) -> str:
    """A remark when the traces name a larger world than the ranks found
    (``distributedInfo.world_size`` 8, one trace): the report covers only those."""
    inv = result.inventory
    world = max((f.world_size for f in inv.files if f.world_size), default=0)
    present = len(inv.files) + len(inv.unreadable)
    if world <= present:
        return ""
    ranks = ", ".join(str(f.rank) for f in inv.files)
    which = "that rank" if len(inv.files) == 1 else "those ranks"
    return (f"The traces come from a job of {world} ranks (world size {world}), but only "
            f"{present} of its {world} traces {'is' if present == 1 else 'are'} here "
            f"({'rank' if len(inv.files) == 1 else 'ranks'} {ranks}): the figures cover {which} only, "
            "and cross-rank checks (stragglers, waiting for other ranks) need every rank's trace.")


def run(result: AnalysisResult) -> Dict[str, str]:
    """What the report is about, for its title: the run's ``name`` (folder or
    file, :func:`hta_report.render.fmt.run_name`), the question it answers
    (``kicker``: CPU-only traces get no GPU question), the ``input`` as given,
    ``ranks`` (``"1 rank"``), ``devices``, the collector's ``workload`` and a
    ``world_note`` when ranks of the job are missing."""
    inv = result.inventory
    return {
        "name": fmt.run_name(inv.input_dir),
        "kicker": ("hta-report · why is the GPU idle?" if result.aggregate.gpu_ranks
                   else "hta-report · CPU-only traces: where does the step time go?"),
        "input": inv.input_dir,
        "ranks": fmt.plural(result.aggregate.ranks, "rank"),
        "devices": devices(result),
        "workload": _workload(inv.manifest),
        "world_note": _world_note(result),
    }


#: Idle causes below this share of the window (%) are not named in the headline.
HEADLINE_MIN_CAUSE_PCT = 0.5


def window_words(result: AnalysisResult) -> str:
    """``"of the analyzed steps"``, or ``"of the traced window"`` when no GPU
    rank has ``ProfilerStep`` annotations: the window of the headline's GPU
    figures and of the findings' gains."""
    gpu = [r for r in result.ranks if r.has_gpu] or result.ranks
    return "of the analyzed steps" if any(r.steps.count for r in gpu) else "of the traced window"


def headline(result: AnalysisResult) -> Dict[str, Any]:
    """Headline figures of the whole directory. The GPU figures are % of each
    rank's analyzed window (:func:`window_words`), mean over the GPU ranks:
    ``busy`` (a kernel, memcpy or memset running), ``kernels`` (a kernel
    running: the TensorBoard profiler's GPU utilization), ``idle`` and its
    largest ``idle_causes`` (the idle attribution the findings claim from);
    ``span_note`` gives the same GPU over its own span, and HTA's figure, labelled."""
    a = result.aggregate
    causes = sorted(((c, v) for c, v in a.idle_by_cause.items() if v >= HEADLINE_MIN_CAUSE_PCT),
                    key=lambda cv: -cv[1])[:3]
    return {
        "has_gpu": a.gpu_ranks > 0,
        "busy": fmt.pct(a.busy_pct),
        "idle": fmt.pct(a.idle_pct),
        "kernels": fmt.pct(a.kernel_busy_pct),
        "window": window_words(result),
        "idle_causes": [{"label": IDLE_CAUSE_LABELS.get(c, c), "pct": fmt.pct(v)} for c, v in causes],
        "span_note": _span_note(result),
        "integrity": integrity_notes(result),
        "mean_step": fmt.ms(a.mean_step_us) if a.mean_step_us else "–",
        "steps_note": "" if a.mean_step_us else "no ProfilerStep annotations",
        "ranks": str(a.ranks),
        "ranks_text": fmt.plural(a.ranks, "rank"),
        "gpu_ranks": str(a.gpu_ranks),
        "devices": devices(result),
        "dataloader": fmt.pct(a.dataloader_pct),
        "exposed_comm": fmt.pct(a.exposed_comm_pct),
        "exposed_memcpy": fmt.pct(a.exposed_memcpy_pct),
        "findings": len(result.findings),
        "high": sum(f.severity == "high" for f in result.findings),
        "top": [f for f in findings(result) if f["gain_pct"] >= TOP_MIN_GAIN_PCT][:3],
        "window_note": _window_note(result),
    }


def _span_note(result: AnalysisResult) -> str:
    """The GPU over its own span, labelled as such, and HTA's figure, labelled as HTA's."""
    a = result.aggregate
    gpu = [r for r in result.ranks if r.has_gpu and r.gpu_span_us > 0]
    if not gpu:
        return ""
    span = (fmt.ms(gpu[0].gpu_span_us) + " long") if len(gpu) == 1 else "each rank's"
    text = (f"Over the GPU's own span (first to last GPU operation of the trace, all of them; {span}): busy "
            f"{fmt.pct(a.span_busy_pct)}")
    if any(not r.failed(TEMPORAL_STEP) for r in gpu):
        text += f"; HTA's temporal breakdown, on its whole-µs times: busy {fmt.pct(a.hta_busy_pct)}"
    return text + "."


def integrity_notes(result: AnalysisResult) -> List[str]:
    """Where the traces show their GPU figures cannot be fully trusted
    (:class:`~hta_report.model.Integrity`), one line per rank and finding."""
    return [f"rank {r.rank}: {note}" for r in result.ranks for note in r.integrity.notes]


def _window_note(result: AnalysisResult) -> str:
    """The trace-window finding's title for the headline, unless all it says
    is that ranks of the job are missing (the run's ``world_note`` says that)."""
    f = next((f for f in result.findings if f.id == "trace-window"), None)
    if f is None or (_world_note(result) and len(f.evidence) == 1 and "world_size" in f.evidence[0]):
        return ""
    return f.title


def _stepped(result: AnalysisResult, f) -> bool:
    """Whether the rank a finding's gain is measured on has ``ProfilerStep`` annotations."""
    steps = {r.rank: r.steps.count > 0 for r in result.ranks}
    best = max(f.rank_gains, key=lambda g: g.gain_pct).rank if f.rank_gains else (f.ranks[0] if f.ranks else None)
    return steps.get(best, any(steps.values()))


def _gain(result: AnalysisResult, f) -> str:
    if f.gain_ms_per_step <= 0:
        return "no gain estimate"
    if _stepped(result, f):
        return f"up to {fmt.ms(f.gain_ms_per_step * 1e3)} per step ({fmt.pct(f.gain_pct)} of the step)"
    return f"up to {fmt.ms(f.gain_ms_per_step * 1e3)} over the trace ({fmt.pct(f.gain_pct)} of the traced window)"


#: What each ``SourceLocation.how`` means, as the report says it.
HOW = {"call": "spent in the call on this line",
       "def": "spent inside this function (the line is its first)",
       "frame": "spent in this function (the line it ran when tracing started; the call was not found in the source)"}


def source_lines(f: Finding) -> List[Dict[str, Any]]:
    """A finding's source lines as shown: ``label`` (``path/file.py:LINE``),
    ``function``, ``time`` per step and ``share`` of the finding's time,
    ``how`` in words, ``url`` (GitHub, or empty) and the ``excerpt`` as rows
    (``no``, ``text``, ``hit`` for the line itself)."""
    out = []
    for loc in f.locations:
        calls = f"; one of {loc.calls} such calls in {loc.function}, the trace does not say which" \
            if loc.calls > 1 else ""
        out.append({
            "label": f"{loc.path}:{loc.line}", "function": loc.function, "time": fmt.ms(loc.time_us),
            "share": fmt.pct(loc.share_pct), "how": HOW.get(loc.how, loc.how) + calls,
            "url": loc.url if is_source_url(loc.url) else "",  # nothing else read from a saved result is linked
            "excerpt": [{"no": str(loc.excerpt_start + i), "text": text, "hit": loc.excerpt_start + i == loc.line}
                        for i, text in enumerate(loc.excerpt)],
        })
    return out


def stack_note(result: AnalysisResult) -> str:
    """What the report says about source lines: empty when a rank has Python
    stacks (``with_stack`` traces); else what ``--with-stack`` would add."""
    if any(r.code.has_stacks for r in result.ranks) or not result.ranks:
        return ""
    return ("No Python stacks in the traces: record with hta-report collect --with-stack (or "
            "torch.profiler.profile(with_stack=True)) to see the lines of your code behind each finding "
            "(the .item() call, the Dataset's __getitem__, the optimizer step).")


def findings(result: AnalysisResult) -> List[Dict[str, Any]]:
    """Findings as shown, in the model's order (largest time at stake first)."""
    return [
        {
            "id": f.id, "title": f.title, "severity": f.severity, "evidence": list(f.evidence),
            "fix": f.fix, "doc_url": f.doc_url if is_doc_url(f.doc_url) else "", "threshold": f.threshold,
            "ranks": ", ".join(str(r) for r in f.ranks), "share": fmt.pct(f.share_pct), "rule": f.rule,
            "gain": _gain(result, f), "gain_pct": f.gain_pct,
            "gain_note": " if the cause were removed (upper bound)" if f.gain_ms_per_step > 0 else "",
            "lines": source_lines(f),
        }
        for f in result.findings
    ]


def no_findings(result: AnalysisResult) -> str:
    """What the report says when no rule fired: that the run looks healthy
    only when every trace was read and every rank analyzed in full (no rule
    left a rank out for a failed step); else what was not analyzed. Empty
    when a rule fired."""
    if result.findings:
        return ""
    missing = [f"{u.path} (unreadable)" for u in result.inventory.unreadable]
    missing += [f"rank {r.rank}: {', '.join(f.step for f in r.failures)}" for r in result.ranks if r.failures]
    missing += [f"rank {r.rank}: its GPU idle time ({r.integrity.unreliable_reason()})" for r in result.ranks
                if r.integrity.idle_unreliable]
    if not missing:
        return "No rule fired: the run looks healthy on what was checked (below)."
    shown = "; ".join(missing[:4]) + (f"; and {len(missing) - 4} more" if len(missing) > 4 else "")
    return (f"No rule fired on what was analyzed, but part of the run was not ({shown}): "
            "no verdict on that part.")


def checks(result: AnalysisResult) -> List[Dict[str, str]]:
    """One row per catalogue rule: what it concluded on this result."""
    return [{"rule": c.rule, "id": c.id, "title": c.title, "status": c.status, "detail": c.detail,
             "css": c.status.replace(" ", "-")} for c in result.checks]


def check_counts(result: AnalysisResult) -> str:
    """``"21 rules: 3 fired, 12 fine, 6 not checked"``."""
    counts: Dict[str, int] = {}
    for c in result.checks:
        counts[c.status] = counts.get(c.status, 0) + 1
    parts = [f"{counts[s]} {s}" for s in CHECK_STATUSES if counts.get(s)]
    return f"{len(result.checks)} rules: " + ", ".join(parts) if result.checks else "no rules ran"


def rank_rows(result: AnalysisResult) -> List[Dict[str, str]]:
    """One row per rank for the per-rank table."""
    rows = []
    for r in result.ranks:
        gpu = r.has_gpu
        row = {
            "rank": str(r.rank),
            "device": ", ".join(sorted(set(r.device_names))) or ("not recorded" if gpu else "CPU"),
            "steps": (f"{r.steps.count} ({r.steps_used} analyzed)" if r.steps.count and r.steps_used != r.steps.count
                      else str(r.steps.count)),
            "mean_step": fmt.ms(r.steps.mean_us) if r.steps.count else "–",
            "p90_step": fmt.ms(r.steps.p90_us) if r.steps.count else "–",
            "busy": fmt.pct(r.busy_pct) if gpu else "no GPU",
            "kernels": fmt.pct(r.kernel_busy_pct) if gpu else "–",
            "idle": fmt.pct(r.idle_pct) if gpu else "–",
            "span_busy": fmt.pct(r.gpu_span_busy_pct) if gpu else "–",
            "dataloader": fmt.pct(r.cpu.dataloader_pct),
            "sync": fmt.pct(r.cpu.sync_pct),
            "exposed_comm": fmt.pct(r.exposed_comm_window_pct) if gpu else "–",
            "exposed_memcpy": fmt.pct(r.exposed_copy_window_pct) if gpu else "–",
        }
        if gpu and r.failed(ATTRIBUTION_STEP, WINDOWS_STEP):
            row.update(busy=NOT_COMPUTED, kernels=NOT_COMPUTED, idle=NOT_COMPUTED)
        if gpu and r.failed(SPAN_STEP):
            row.update(span_busy=NOT_COMPUTED)
        rows.append(row)
    return rows


def _named_rows(rows) -> List[Dict[str, str]]:
    return [{"name": x.name, "count": fmt.num(x.count), "total": fmt.ms(x.total_us)} for x in rows]


def rank_details(result: AnalysisResult) -> List[Dict[str, Any]]:
    """Per-rank tables: steps, idle per stream, kernels, memcpy, comm, launch, CPU side."""
    out = []
    for r in result.ranks:
        d: Dict[str, Any] = {"rank": str(r.rank), "file": r.file, "has_gpu": r.has_gpu,
                             "failures": [{"step": f.step, "reason": f.reason} for f in r.failures]}
        d["steps"] = [
            {"number": str(s.number), "duration": fmt.ms(s.duration_us), "warmup": s.warmup} for s in r.steps.steps
        ]
        d["step_stats"] = {
            "count": fmt.plural(r.steps.count, "step"), "mean": fmt.ms(r.steps.mean_us), "p50": fmt.ms(r.steps.p50_us),
            "p90": fmt.ms(r.steps.p90_us), "max": fmt.ms(r.steps.max_us),
            "note": "first step (warm-up) excluded" if r.steps.warmup_excluded else "single step, used as is",
        }
        d["idle_streams"] = [
            {"stream": str(s.stream), "host": fmt.ms(s.host_wait_us), "kernel": fmt.ms(s.kernel_wait_us),
             "other": fmt.ms(s.other_us)}
            for s in r.idle.streams
        ]
        d["kernel_types"] = [
            {"type": k.kernel_type, "total": fmt.ms(k.total_us), "pct": fmt.pct(k.pct)} for k in r.kernel_types
        ]
        labels = short_names([k.name for k in r.top_kernels])
        d["kernels"] = [
            {"name": labels[k.name], "full": k.name, "shortened": labels[k.name] != k.name,
             "type": k.kernel_type, "count": fmt.num(k.count), "total": fmt.ms(k.total_us),
             "mean": fmt.ms(k.mean_us), "min": fmt.ms(k.min_us), "max": fmt.ms(k.max_us), "pct": fmt.pct(k.pct),
             "blocks": fmt.fixed(k.blocks_per_sm, 2, grouped=False) if k.blocks_per_sm else "–",
             "occupancy": fmt.pct(k.occupancy_pct) if k.occupancy_pct else "–"}
            for k in r.top_kernels
        ]
        d["kernel_count"] = fmt.num(r.kernel_count)
        d["gpu_by"] = [
            {"what": "operator", "note": "the outermost CPU op around each launch, as the TensorBoard profiler's "
                                          "operator view", "rows": _named_rows(r.code.gpu_by_op)},
            {"what": "nn.Module", "note": "the innermost module around each launch; with_stack traces",
             "rows": _named_rows(r.code.gpu_by_module)},
        ]
        m = r.memcpy
        d["memcpy"] = [
            {"direction": x.direction, "count": fmt.num(x.count), "time": fmt.ms(x.total_us),
             "bytes": fmt.size(x.total_bytes), "bandwidth": fmt.gbps(x.bandwidth_gbps),
             "pageable": fmt.num(x.pageable_count), "pinned": fmt.num(x.pinned_count)}
            for x in m.directions
        ]
        d["memcpy_summary"] = {"total": fmt.ms(m.total_us), "overlapped": fmt.ms(m.overlapped_us),
                               "exposed": fmt.ms(m.exposed_us), "exposed_pct": fmt.pct(m.exposed_pct)}
        d["gpu_time"] = gpu_time(r, result.inventory.last_step_included) if r.has_gpu else {}
        c = r.comm
        d["comm"] = {"kernels": fmt.num(c.kernel_count), "total": fmt.ms(c.total_us), "overlap": fmt.pct(c.overlap_pct),
                     "exposed": fmt.ms(c.exposed_us), "exposed_pct": fmt.pct(c.exposed_pct), "any": c.kernel_count > 0}
        ln = r.launch
        d["launch"] = {
            "launches": fmt.num(ln.launches), "short": fmt.num(ln.short_kernels),
            "runtime_outliers": fmt.num(ln.runtime_outliers), "delay_outliers": fmt.num(ln.delay_outliers),
            "runtime_cutoff": fmt.ms(ln.runtime_cutoff_us), "delay_cutoff": fmt.ms(ln.launch_delay_cutoff_us),
            "median_runtime": fmt.ms(ln.median_runtime_us), "median_delay": fmt.ms(ln.median_launch_delay_us),
            "p90_delay": fmt.ms(ln.p90_launch_delay_us),
            "queue": [{"stream": str(q.stream), "mean": fmt.fixed(q.mean, 1, grouped=False),
                       "p50": fmt.fixed(q.p50, 0, grouped=False), "max": fmt.fixed(q.max, 0, grouped=False)}
                      for q in ln.queue],
        }
        cpu = r.cpu
        d["cpu"] = {
            "per": "per step" if r.steps.count else "over the trace",
            "of": "of the step" if r.steps.count else "of the traced window",
            "steps_used": fmt.plural(cpu.steps_used, "step"),
            "dataloader": fmt.ms(cpu.dataloader_us_per_step), "dataloader_pct": fmt.pct(cpu.dataloader_pct),
            "dataloader_seen": cpu.dataloader_seen,
            "dataloader_mode": "main process (num_workers=0)" if cpu.dataloader_in_main_process else "worker processes",
            "sync_calls": fmt.fixed(cpu.sync_calls_per_step, 1, grouped=False), "sync": fmt.ms(cpu.sync_us_per_step),
            "sync_pct": fmt.pct(cpu.sync_pct),
            "sync_events": [{"name": e.name, "count": fmt.num(e.count), "total": fmt.ms(e.total_us)} for e in cpu.sync_events],
            "top_ops": [{"name": e.name, "count": fmt.num(e.count), "self": fmt.ms(e.self_us), "total": fmt.ms(e.total_us)}
                        for e in cpu.top_ops],
        }
        d["occupancy"] = occupancy(r) if r.has_gpu else {"state": "cpu"}
        d["memory"] = memory(r)
        d["step_breakdown"] = step_breakdown(r)
        out.append(d)
    return out


def _step_range(numbers: List[int]) -> str:
    """``"step 6"``, ``"steps 5–9"`` or ``"steps 2, 5, 9"``."""
    if len(numbers) == 1:
        return f"step {numbers[0]}"
    if numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"steps {numbers[0]}–{numbers[-1]}"
    return "steps " + ", ".join(map(str, numbers))


def tensorboard(r: RankResult, last_step_included: bool) -> str:
    """The TensorBoard profiler's overview figures of the rank, labelled with
    their window (:class:`~hta_report.model.TensorBoardOverview`); empty
    without steps or when the step failed."""
    t = r.tensorboard
    if not t.steps or r.failed(TENSORBOARD_STEP):
        return ""
    last = "" if last_step_included else (
        "; the plugin also counts the trace's last step, which HTA leaves out: --include-last-step keeps it")
    occupancy = (f", est. SM efficiency {fmt.pct(t.sm_efficiency_pct)}, est. achieved occupancy "
                 f"{fmt.pct(t.achieved_occupancy_pct)}" if t.kernels_with_data else "")
    return (f"The TensorBoard profiler's overview, by its definitions over {_step_range(t.steps)} (the first step "
            f"included{last}): GPU utilization {fmt.pct(t.gpu_utilization_pct)}{occupancy}.")


def gpu_time(r: RankResult, last_step_included: bool = False) -> Dict[str, Any]:
    """The rank's GPU time in each window, each labelled: ``window`` (the
    analyzed steps or traced window: busy, kernels, idle), ``span`` (the GPU's
    own first-to-last span, all of its operations, exact times) and ``hta``
    (HTA's temporal breakdown on its whole-µs times, or hta-report's where
    HTA's failed: ``replaced`` says why)."""
    t = r.temporal
    of = "of the analyzed steps" if r.steps.count else "of the traced window"
    out: Dict[str, Any] = {
        "window": (f"GPU busy {fmt.pct(r.busy_pct)} {of} (kernels {fmt.pct(r.kernel_busy_pct)}, idle "
                   f"{fmt.pct(r.idle_pct)}), from the exact times."),
        "span": (f"Over its own span (first to last GPU operation of the trace, all of them: "
                 f"{fmt.ms(r.gpu_span_us)}): busy {fmt.pct(r.gpu_span_busy_pct)}, exact times."),
        "hta": "", "replaced": [f"{f.step}: {f.reason}" for f in r.replaced],
    }
    out["tensorboard"] = tensorboard(r, last_step_included)
    if r.failed(TEMPORAL_STEP):
        out["hta"] = f"HTA's temporal breakdown: {NOT_COMPUTED} ({_failure(r, TEMPORAL_STEP)})."
    else:
        who = "HTA's temporal breakdown, on its whole-µs times" if t.source == "HTA" else \
            "The temporal breakdown as HTA defines it, computed by hta-report from the exact times (HTA's failed)"
        out["hta"] = (f"{who}, over {fmt.ms(t.total_us)}: compute {fmt.pct(t.compute_pct)}, non-compute "
                      f"{fmt.pct(t.non_compute_pct)}, idle {fmt.pct(t.idle_pct)}.")
    return out


def occupancy(r: RankResult) -> Dict[str, Any]:
    """How well the rank's compute kernels fill the GPU: ``state`` is
    ``shown``, ``not computed`` (the step failed, ``reason``) or ``missing``
    (``reason``: no occupancy args); ``per`` (``per step``, or over the
    trace without steps); the figures (``sm_efficiency``,
    ``occupancy``, ``small`` time per step and its ``small_pct``,
    ``idle_sm``) and the ``kernels`` with fewer blocks than SMs (shortened names)."""
    if r.failed(OCCUPANCY_STEP):
        return {"state": NOT_COMPUTED, "reason": _failure(r, OCCUPANCY_STEP)}
    o = r.occupancy
    if not o.kernels_with_data:
        return {"state": "missing", "reason": o.missing_reason or "no compute kernels in the analyzed steps"}
    labels = short_names([k.name for k in o.top_small])
    return {
        "state": "shown", "per": "per step" if r.steps.count else "over the trace (no ProfilerStep)",
        "kernels_with_data": fmt.num(o.kernels_with_data),
        "kernel_time": fmt.ms(o.kernel_us_per_step), "sm_efficiency": fmt.pct(o.sm_efficiency_pct),
        "occupancy": fmt.pct(o.achieved_occupancy_pct), "small": fmt.ms(o.small_grid_us_per_step),
        "small_pct": fmt.pct(o.small_grid_pct), "idle_sm": fmt.ms(o.idle_sm_us_per_step),
        "kernels": [{"name": labels[k.name], "full": k.name, "shortened": labels[k.name] != k.name,
                     "count": fmt.num(k.count), "total": fmt.ms(k.total_us), "blocks": fmt.fixed(k.blocks_per_sm, 2, grouped=False),
                     "occupancy": fmt.pct(k.occupancy_pct), "idle_sm": fmt.ms(k.idle_sm_us), "pct": fmt.pct(k.pct)}
                    for k in o.top_small],
    }


def _failure(r: RankResult, step: str) -> str:
    return next((f.reason for f in r.failures if f.step == step), "")


def gib(nbytes: int) -> str:
    """bytes -> ``"1.25 GiB"`` / ``"850.0 MiB"`` (powers of 1024, as device memory is counted)."""
    if nbytes >= 2 ** 30:
        return f"{fmt.fixed(nbytes / 2 ** 30, 2)} GiB"
    return f"{fmt.fixed(nbytes / 2 ** 20, 1)} MiB"


#: What the memory section says for a trace without ``[memory]`` events.
HOW_TO_RECORD_MEMORY = ("No [memory] events in this trace: profile with "
                        "torch.profiler.profile(profile_memory=True), or hta-report collect --profile-memory.")


def memory(r: RankResult) -> Dict[str, Any]:
    """The rank's memory: ``state`` ``shown``, ``not computed`` or
    ``missing`` (``reason`` says how to record it); per device its peaks and
    capacity (``–`` when the trace has none, e.g. the CPU)."""
    if r.failed(MEMORY_STEP):
        return {"state": NOT_COMPUTED, "reason": _failure(r, MEMORY_STEP)}
    m = r.memory
    if not m.recorded:
        return {"state": "missing", "reason": HOW_TO_RECORD_MEMORY}
    if not m.devices:  # every event held values no device has
        return {"state": "missing", "reason": f"All {m.out_of_range:,} [memory] events of this trace hold values no "
                                              "device has (a total beyond 2**50 bytes or the device's memory, NaN, a "
                                              "device id outside -1..127): not believed, so no memory figures."}
    return {
        "state": "shown", "device": m.device,
        "devices": [{"device": d.device, "events": fmt.num(d.events), "allocated": gib(d.peak_allocated_bytes),
                     "reserved": gib(d.peak_reserved_bytes),
                     "capacity": gib(d.capacity_bytes) if d.capacity_bytes else "– (not in the trace)",
                     "allocated_pct": fmt.pct(d.peak_allocated_pct) if d.capacity_bytes else "–",
                     "reserved_pct": fmt.pct(d.peak_reserved_pct) if d.capacity_bytes else "–"}
                    for d in m.devices],
    }


#: Columns of the step breakdown: field of ``StepBreakdown`` (without ``_us``) -> heading.
STEP_PARTS = {"kernel": "kernel", "memcpy": "memcpy", "memset": "memset", "runtime": "runtime",
              "dataloader": "DataLoader", "cpu_exec": "CPU exec", "other": "other"}


def step_breakdown(r: RankResult) -> Dict[str, Any]:
    """The rank's per-step breakdown table: ``state`` ``shown``, ``not
    computed`` or ``missing`` (no ProfilerStep); ``headings`` and one row per
    step (ms), the warm-up step marked."""
    if r.failed(STEP_BREAKDOWN_STEP):
        return {"state": NOT_COMPUTED, "reason": _failure(r, STEP_BREAKDOWN_STEP)}
    if not r.step_breakdown:
        return {"state": "missing", "reason": "no ProfilerStep annotations"}
    return {
        "state": "shown", "headings": list(STEP_PARTS.values()),
        "rows": [{"number": str(b.number), "warmup": b.warmup, "total": fmt.ms(b.duration_us),
                  "parts": [fmt.ms(getattr(b, f"{k}_us")) for k in STEP_PARTS]} for b in r.step_breakdown],
    }


def inventory(result: AnalysisResult) -> Dict[str, Any]:
    """What was analyzed, with which versions."""
    inv = result.inventory
    return {
        "input_dir": inv.input_dir,
        "files": [{"path": f.path, "rank": str(f.rank), "source": f.rank_source, "size": fmt.size(f.size_bytes),
                   "world": str(f.world_size) if f.world_size is not None else "–", "backend": f.backend or "–"}
                  for f in inv.files],
        "devices": devices(result),
        "pytorch": inv.pytorch_version or "not recorded in the traces",
        "schema": ", ".join(str(v) for v in inv.kineto_schema_versions) or "not recorded",
        "steps_found": str(inv.steps_found),
        "last_step": ("included" if inv.last_step_included else
                      "dropped, as HTA does by default (its GPU work may be cut off)"),
        "hta": inv.hta_version, "tool": inv.tool_version, "analyzed_at": inv.analyzed_at,
        "warnings": list(inv.warnings),
        "manifest": [{"key": str(k), "value": str(v)} for k, v in inv.manifest.items()],
        "unreadable": unreadable(result),
        "incomplete": incomplete(result),
        "reading": reading_notes(result),
    }


def reading_notes(result: AnalysisResult) -> List[str]:
    """How the traces were read, where it differs from reading every file as
    written: the processes that wrote several profiling windows, of which
    the latest is analyzed (:class:`~hta_report.model.WorkerWindows`), and
    the event names PyTorch left unescaped, repaired (:mod:`hta_report.load.repair`).
    One line each; empty when every file was read as it is."""
    notes = []
    for w in result.inventory.windows:
        n = len(w.others) + 1
        others = ", ".join(fmt.base_name(o) for o in w.others)
        notes.append(f"{w.worker} wrote {n} profiling windows (one file per profiler cycle): they are windows "
                     f"of one rank, not {n} ranks. This report analyzes the latest full one, "
                     f"{fmt.base_name(w.analyzed)}; set aside: {others} (name a file to analyze that window: "
                     "hta-report analyze FILE).")
    notes += [f"{f.path}: {fmt.plural(f.repaired_names, 'event name')} with unescaped double quotes repaired "
              "(PyTorch writes them so until pytorch/kineto#1459; the rest of the file is as written)"
              for f in result.inventory.files if f.repaired_names]
    return notes


def unreadable(result: AnalysisResult) -> Dict[str, Any]:
    """Trace files left out of the report: ``count``, ``total`` (files found),
    ``summary`` (one line) and ``files`` (path and reason of each)."""
    inv = result.inventory
    bad = inv.unreadable
    total = len(bad) + len(inv.files)
    return {
        "count": len(bad),
        "total": total,
        "summary": (f"{len(bad)} of {total} traces could not be read; this report covers the rest" if bad else ""),
        "files": [{"path": u.path, "reason": u.reason} for u in bad],
    }


def incomplete(result: AnalysisResult) -> Dict[str, Any]:
    """Ranks analyzed in part (an analysis step failed; the rest is
    reported): ``count``, ``summary`` (one line) and ``ranks`` (rank, file,
    and each failed step with its reason)."""
    partial = [r for r in result.ranks if r.failures]
    return {
        "count": len(partial),
        "summary": (f"{fmt.plural(len(partial), 'rank')} analyzed in part; these sections are missing, and the "
                    "advice that needs them was not checked on these ranks" if partial else ""),
        "ranks": [{"rank": str(r.rank), "file": r.file,
                   "failures": [{"step": f.step, "reason": f.reason} for f in r.failures]} for r in partial],
        "replaced": replaced(result),
    }


def replaced(result: AnalysisResult) -> List[str]:
    """One line per HTA analysis that failed on a rank and that hta-report
    computed itself from the exact times instead (the rank is complete)."""
    return [f"rank {r.rank}: HTA's {f.step.replace(' (HTA)', '')} failed ({f.reason}); hta-report computed "
            "it from the exact times, with HTA's definitions" for r in result.ranks for f in r.replaced]


#: The HTML report's sections: template variable -> the function that builds it from the result.
SECTIONS: Dict[str, Callable[[AnalysisResult], Any]] = {
    "run": run,
    "headline": headline,
    "findings": findings,
    "no_findings": no_findings,
    "stack_note": stack_note,
    "checks": checks,
    "check_counts": check_counts,
    "rank_rows": rank_rows,
    "ranks": rank_details,
    "inventory": inventory,
}
