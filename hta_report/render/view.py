"""The view model: the result model turned into display-ready strings.

Shared by the HTML and markdown reporters so both say the same thing.
Templates only read, loop and test what this module builds. Each section of
the HTML report is a function here listed in :data:`SECTIONS` under the name
the template reads it by.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List

from ..model import AnalysisResult, RankResult
from . import fmt

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}
#: Findings below this % of the step are not in the headline's top list.
TOP_MIN_GAIN_PCT = 1.0


def _rank_label(r: RankResult) -> str:
    return f"rank {r.rank}"


def headline(result: AnalysisResult) -> Dict[str, Any]:
    """Headline figures of the whole directory."""
    a = result.aggregate
    inv = result.inventory
    return {
        "has_gpu": a.gpu_ranks > 0,
        "busy": fmt.pct(a.busy_pct),
        "idle": fmt.pct(a.idle_pct),
        "idle_host": fmt.pct(a.idle_host_wait_pct),
        "idle_kernel": fmt.pct(a.idle_kernel_wait_pct),
        "idle_other": fmt.pct(a.idle_other_pct),
        "mean_step": fmt.ms(a.mean_step_us) if a.mean_step_us else "no ProfilerStep annotations",
        "ranks": str(a.ranks),
        "gpu_ranks": str(a.gpu_ranks),
        "devices": ", ".join(inv.devices) or "none recorded",
        "dataloader": fmt.pct(a.dataloader_pct),
        "exposed_comm": fmt.pct(a.exposed_comm_pct),
        "exposed_memcpy": fmt.pct(a.exposed_memcpy_pct),
        "findings": len(result.findings),
        "high": sum(f.severity == "high" for f in result.findings),
        "top": [f for f in findings(result) if f["gain_pct"] >= TOP_MIN_GAIN_PCT][:3],
        "window_note": next((f.title for f in result.findings if f.id == "trace-window"), ""),
    }


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


def findings(result: AnalysisResult) -> List[Dict[str, Any]]:
    """Findings as shown, in the model's order (largest time at stake first)."""
    return [
        {
            "id": f.id, "title": f.title, "severity": f.severity, "evidence": list(f.evidence),
            "fix": f.fix, "doc_url": f.doc_url, "threshold": f.threshold,
            "ranks": ", ".join(str(r) for r in f.ranks), "share": fmt.pct(f.share_pct), "rule": f.rule,
            "gain": _gain(result, f), "gain_pct": f.gain_pct,
        }
        for f in result.findings
    ]


def checks(result: AnalysisResult) -> List[Dict[str, str]]:
    """One row per catalogue rule: what it concluded on this result."""
    return [{"rule": c.rule, "id": c.id, "title": c.title, "status": c.status, "detail": c.detail,
             "css": c.status.replace(" ", "-")} for c in result.checks]


def check_counts(result: AnalysisResult) -> str:
    """``"21 rules: 3 fired, 12 fine, 6 not checked"``."""
    counts: Dict[str, int] = {}
    for c in result.checks:
        counts[c.status] = counts.get(c.status, 0) + 1
    order = ["fired", "fine", "covered", "not checked", "disabled"]
    parts = [f"{counts[s]} {s}" for s in order if counts.get(s)]
    return f"{len(result.checks)} rules: " + ", ".join(parts) if result.checks else "no rules ran"


def rank_rows(result: AnalysisResult) -> List[Dict[str, str]]:
    """One row per rank for the per-rank table."""
    rows = []
    for r in result.ranks:
        gpu = r.has_gpu
        rows.append({
            "rank": str(r.rank),
            "device": ", ".join(sorted(set(r.device_names))) or "–",
            "steps": (f"{r.steps.count} ({r.steps_used} analyzed)" if r.steps.count and r.steps_used != r.steps.count
                      else str(r.steps.count)),
            "mean_step": fmt.ms(r.steps.mean_us) if r.steps.count else "–",
            "p90_step": fmt.ms(r.steps.p90_us) if r.steps.count else "–",
            "busy": fmt.pct(r.busy_pct) if gpu else "no GPU",
            "idle": fmt.pct(r.temporal.idle_pct) if gpu else "–",
            "compute": fmt.pct(r.temporal.compute_pct) if gpu else "–",
            "non_compute": fmt.pct(r.temporal.non_compute_pct) if gpu else "–",
            "dataloader": fmt.pct(r.cpu.dataloader_pct),
            "sync": fmt.pct(r.cpu.sync_pct),
            "exposed_comm": fmt.pct(r.comm.exposed_pct) if gpu else "–",
            "exposed_memcpy": fmt.pct(r.memcpy.exposed_pct) if gpu else "–",
        })
    return rows


def rank_details(result: AnalysisResult) -> List[Dict[str, Any]]:
    """Per-rank tables: steps, idle per stream, kernels, memcpy, comm, launch, CPU side."""
    out = []
    for r in result.ranks:
        d: Dict[str, Any] = {"rank": str(r.rank), "file": r.file, "has_gpu": r.has_gpu}
        d["steps"] = [
            {"number": str(s.number), "duration": fmt.ms(s.duration_us), "warmup": s.warmup} for s in r.steps.steps
        ]
        d["step_stats"] = {
            "count": str(r.steps.count), "mean": fmt.ms(r.steps.mean_us), "p50": fmt.ms(r.steps.p50_us),
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
        d["kernels"] = [
            {"name": k.name, "type": k.kernel_type, "count": fmt.num(k.count), "total": fmt.ms(k.total_us),
             "mean": fmt.ms(k.mean_us), "max": fmt.ms(k.max_us), "pct": fmt.pct(k.pct)}
            for k in r.top_kernels
        ]
        d["kernel_count"] = fmt.num(r.kernel_count)
        m = r.memcpy
        d["memcpy"] = [
            {"direction": x.direction, "count": fmt.num(x.count), "time": fmt.ms(x.total_us),
             "bytes": fmt.size(x.total_bytes), "bandwidth": fmt.gbps(x.bandwidth_gbps),
             "pageable": fmt.num(x.pageable_count), "pinned": fmt.num(x.pinned_count)}
            for x in m.directions
        ]
        d["memcpy_summary"] = {"total": fmt.ms(m.total_us), "overlapped": fmt.ms(m.overlapped_us),
                               "exposed": fmt.ms(m.exposed_us), "exposed_pct": fmt.pct(m.exposed_pct)}
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
            "queue": [{"stream": str(q.stream), "mean": f"{q.mean:.1f}", "p50": f"{q.p50:.0f}", "max": f"{q.max:.0f}"}
                      for q in ln.queue],
        }
        cpu = r.cpu
        d["cpu"] = {
            "per": "per step" if r.steps.count else "over the trace",
            "of": "of the step" if r.steps.count else "of the traced window",
            "steps_used": str(cpu.steps_used),
            "dataloader": fmt.ms(cpu.dataloader_us_per_step), "dataloader_pct": fmt.pct(cpu.dataloader_pct),
            "dataloader_seen": cpu.dataloader_seen,
            "dataloader_mode": "main process (num_workers=0)" if cpu.dataloader_in_main_process else "worker processes",
            "sync_calls": f"{cpu.sync_calls_per_step:.1f}", "sync": fmt.ms(cpu.sync_us_per_step),
            "sync_pct": fmt.pct(cpu.sync_pct),
            "sync_events": [{"name": e.name, "count": fmt.num(e.count), "total": fmt.ms(e.total_us)} for e in cpu.sync_events],
            "top_ops": [{"name": e.name, "count": fmt.num(e.count), "self": fmt.ms(e.self_us), "total": fmt.ms(e.total_us)}
                        for e in cpu.top_ops],
        }
        out.append(d)
    return out


def inventory(result: AnalysisResult) -> Dict[str, Any]:
    """What was analyzed, with which versions."""
    inv = result.inventory
    return {
        "input_dir": inv.input_dir,
        "files": [{"path": f.path, "rank": str(f.rank), "source": f.rank_source, "size": fmt.size(f.size_bytes),
                   "world": str(f.world_size) if f.world_size is not None else "–", "backend": f.backend or "–"}
                  for f in inv.files],
        "devices": ", ".join(inv.devices) or "none recorded",
        "pytorch": inv.pytorch_version or "not recorded in the traces",
        "schema": ", ".join(str(v) for v in inv.kineto_schema_versions) or "not recorded",
        "steps_found": str(inv.steps_found),
        "last_step": ("included" if inv.last_step_included else
                      "dropped, as HTA does by default (its GPU work may be cut off)"),
        "hta": inv.hta_version, "tool": inv.tool_version, "analyzed_at": inv.analyzed_at,
        "warnings": list(inv.warnings),
        "manifest": [{"key": str(k), "value": str(v)} for k, v in inv.manifest.items()],
        "unreadable": unreadable(result),
    }


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


#: The HTML report's sections: template variable -> the function that builds it from the result.
SECTIONS: Dict[str, Callable[[AnalysisResult], Any]] = {
    "headline": headline,
    "findings": findings,
    "checks": checks,
    "check_counts": check_counts,
    "rank_rows": rank_rows,
    "ranks": rank_details,
    "inventory": inventory,
}
