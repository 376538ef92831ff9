"""The questions an agent asks of a run, as bounded JSON answers: the tools of
``hta-report mcp`` (:mod:`hta_report.mcp_server`), with no MCP import here.

Each tool is a thin function over :mod:`hta_report.api` (``analyze``,
``load_result``, ``compare_paths``) that reads the result model and returns a
plain dict: at most ``MAX_ITEMS`` items of any list (paged with ``offset`` /
``limit`` or cut to ``k``, the total always given), every string taken from a
trace passed through :func:`hta_report.escape.visible` and cut to
``MAX_TEXT`` characters (kernel and op names, evidence, source lines are
untrusted), and every item shaped as its class in the published result schema
(``docs/schema/result.schema.json``, named in each answer's ``schema``).

Events are cited by stable ids: ``rank``, ``stream``, ``correlation`` (the
trace's own ids) and ``ts_us`` (µs from the start of the trace directory, as
``GpuGap.start_us``); a step by its ``ProfilerStep`` number.

Paths: every path a tool is given must lie under one of the workspace's
``roots`` (after resolving links); nothing is written anywhere but the
optional ``cache`` folder. Errors a caller can act on are
:class:`ToolInputError` (one line, naming the path or the id).

Registry: :data:`TOOLS` (name -> :class:`ToolSpec`); the recipe for adding a
tool is in ``docs/ARCHITECTURE.md``.
"""
from __future__ import annotations

import dataclasses
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .errors import InputError
from .escape import visible
from .model import SCHEMA_VERSION, AnalysisResult, Comparison, RankResult

#: Longest string returned (characters): a longer kernel name or line is cut, its last character "…"
#: (ROCm's Tensile GEMM names run past 240 characters; a name must come back whole to be cited).
MAX_TEXT = 1024
#: Most items of any list in an answer (a page, a top-k, the host ops of a gap).
MAX_ITEMS = 50
#: Longest path accepted (characters).
MAX_PATH = 4096
#: The published schema the items of an answer follow (``hta-report schema result``; in the repository).
SCHEMA_URL = "docs/schema/result.schema.json"


class ToolInputError(InputError):
    """A tool call that cannot be answered as asked: a path outside the roots
    or missing, an unknown finding id, rank, step or edit (one line)."""


def clip(text: object, limit: int = MAX_TEXT) -> str:
    """``text`` made inert and bounded: every non-printable character
    (controls, bidi overrides, line breaks) shown as an escape
    (:func:`hta_report.escape.visible`), cut to ``limit`` characters, the
    last one "…"."""
    s = visible(str(text))
    return s if len(s) <= limit else s[: limit - 1] + "…"


def plain(obj: Any, depth: int = 0) -> Any:
    """A model object (dataclass, list, dict, number, string) as JSON-ready
    values with every string :func:`clip`'d and every list cut to
    :data:`MAX_ITEMS` items (a nested object deeper than 12 levels is dropped)."""
    if depth > 12:
        return None
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: plain(getattr(obj, f.name), depth + 1) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {clip(k, 80): plain(v, depth + 1) for k, v in list(obj.items())[:MAX_ITEMS]}
    if isinstance(obj, (list, tuple)):
        return [plain(v, depth + 1) for v in list(obj)[:MAX_ITEMS]]
    if isinstance(obj, str):
        return clip(obj)
    if isinstance(obj, float):
        return round(obj, 3) if obj == obj and obj not in (float("inf"), float("-inf")) else None
    return obj


def _page(items: Sequence[Any], offset: int, limit: int) -> Tuple[List[Any], Dict[str, int]]:
    """``items[offset:offset+limit]`` (limit capped at :data:`MAX_ITEMS`) and the paging facts."""
    offset = max(0, int(offset))
    limit = max(1, min(int(limit), MAX_ITEMS))
    return list(items[offset:offset + limit]), {"total": len(items), "offset": offset, "limit": limit}


@dataclass
class Workspace:
    """What a server may read and write: trace directories and saved results
    under ``roots`` (resolved, links followed before the check), and the
    result cache folder ``cache`` (None: nothing written). Results analyzed or
    read once are kept in memory, keyed by the resolved path and the files'
    sizes and modification times.

    Raises (from :meth:`resolve`):
        ToolInputError: a path outside every root, too long, or missing.
    """

    roots: List[Path]
    cache: Optional[Path] = None
    _results: Dict[str, Tuple[Tuple[Any, ...], AnalysisResult]] = field(default_factory=dict)
    _comparisons: Dict[Tuple[str, str], Tuple[Tuple[Any, ...], Comparison]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def of(cls, roots: Sequence[os.PathLike | str], cache: Optional[os.PathLike | str] = None) -> "Workspace":
        """A workspace over ``roots`` (default: the current directory)."""
        resolved = [Path(os.path.realpath(r)) for r in (roots or [os.getcwd()])]
        return cls(roots=resolved, cache=Path(os.path.realpath(cache)) if cache is not None else None)

    def resolve(self, path: str) -> Path:
        """``path`` (relative to the first root, or absolute) resolved and
        checked to lie under a root and exist."""
        if not isinstance(path, str) or not path or len(path) > MAX_PATH or "\x00" in path:
            raise ToolInputError("not a usable path (empty, too long or with a NUL)", clip(path, 200))
        p = Path(path)
        full = Path(os.path.realpath(p if p.is_absolute() else self.roots[0] / p))
        if not any(full == r or r in full.parents for r in self.roots):
            raise ToolInputError("outside the folders this server may read (its --root folders)", clip(path, 200))
        if not full.exists():
            raise ToolInputError("no such trace directory, trace file or result file", clip(path, 200))
        return full

    @staticmethod
    def _signature(p: Path) -> Tuple[Any, ...]:
        files = [p] if p.is_file() else sorted(q for q in p.rglob("*") if q.is_file())[:10_000]
        return tuple((str(q), q.stat().st_size, q.stat().st_mtime_ns) for q in files)

    def result(self, path: str) -> AnalysisResult:
        """The result of ``path``: a saved result (``analyze --json``) read, or a
        trace directory or file analyzed (once per content; see :class:`Workspace`).

        Raises:
            ToolInputError: as :meth:`resolve`.
            hta_report.errors.InputError, hta_report.errors.TraceError: as
                :func:`hta_report.api.load_side`.
        """
        from .api import load_side

        full = self.resolve(path)
        sig = self._signature(full)
        with self._lock:
            hit = self._results.get(str(full))
            if hit is not None and hit[0] == sig:
                return hit[1]
            result = load_side(full, cache=self.cache) if self.cache is not None else load_side(full)
            self._results[str(full)] = (sig, result)
            return result

    def comparison(self, base: str, new: str) -> Comparison:
        """:func:`hta_report.api.compare_paths` of two paths under the roots,
        each side read or analyzed once (:meth:`result`)."""
        from .compare import compare

        b, n = self.resolve(base), self.resolve(new)
        sig = self._signature(b) + ("|",) + self._signature(n)
        key = (str(b), str(n))
        hit = self._comparisons.get(key)
        if hit is not None and hit[0] == sig:
            return hit[1]
        comp = compare(self.result(base), self.result(new), base_label=clip(base), new_label=clip(new))
        self._comparisons[key] = (sig, comp)
        return comp


# ------------------------------------------------------------------ helpers over a result

def _rank(result: AnalysisResult, rank: Optional[int]) -> RankResult:
    """The rank asked for, else the first rank with GPU work, else the first."""
    if not result.ranks:
        raise ToolInputError("the run has no analyzed rank", clip(result.inventory.input_dir))
    if rank is None:
        return next((r for r in result.ranks if r.has_gpu), result.ranks[0])
    for r in result.ranks:
        if r.rank == rank:
            return r
    raise ToolInputError(f"no rank {rank}; ranks: {', '.join(str(r.rank) for r in result.ranks[:MAX_ITEMS])}",
                         clip(result.inventory.input_dir))


def _finding_brief(f) -> Dict[str, Any]:
    return {"id": f.id, "title": clip(f.title), "severity": f.severity, "ranks": f.ranks[:MAX_ITEMS],
            "gain_ms_per_step": round(f.gain_ms_per_step, 3), "gain_pct": round(f.gain_pct, 2),
            "share_pct": round(f.share_pct, 2), "has_whatif": f.whatif is not None,
            "locations": len(f.locations), "events": len(f.events)}


def _envelope(schema_def: str, **body: Any) -> Dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "schema": f"{SCHEMA_URL}#/$defs/{schema_def}", **body}


# ------------------------------------------------------------------ the tools

def analyze(ws: Workspace, path: str) -> Dict[str, Any]:
    """Analyze a trace directory (or read a saved result) and return its
    overview: ranks, devices, steps, the headline figures (% of the analyzed
    window, µs), the analysis window per rank and the findings by gain
    (ids for ``explain_finding``)."""
    result = ws.result(path)
    a = result.aggregate
    ranks = [{"rank": r.rank, "has_gpu": r.has_gpu, "devices": [clip(d) for d in list(dict.fromkeys(r.device_names))[:8]],
              "steps_used": r.steps_used, "step_numbers": [s.number for s in r.steps.steps][:MAX_ITEMS],
              "mean_step_us": round(r.steps.mean_us, 3), "window_us": round(r.window_us, 3),
              "kernel_count": r.kernel_count, "busy_pct": round(r.busy_pct, 2) if r.has_gpu else None,
              "failures": [clip(f.step) for f in r.failures]}
             for r in result.ranks[:MAX_ITEMS]]
    return _envelope(
        "AnalysisResult", path=clip(path), ranks_total=len(result.ranks), ranks=ranks,
        steps_found=result.inventory.steps_found, pytorch_version=clip(result.inventory.pytorch_version or ""),
        aggregate={"busy_pct": round(a.busy_pct, 2), "idle_pct": round(a.idle_pct, 2),
                   "compute_pct": round(a.compute_pct, 2), "mean_step_us": round(a.mean_step_us, 3),
                   "max_rank_step_us": round(a.max_rank_step_us, 3), "exposed_comm_pct": round(a.exposed_comm_pct, 2),
                   "exposed_memcpy_pct": round(a.exposed_memcpy_pct, 2), "dataloader_pct": round(a.dataloader_pct, 2),
                   "idle_by_cause_pct": {clip(k, 40): round(v, 2) for k, v in a.idle_by_cause.items()}},
        findings=[_finding_brief(f) for f in result.findings[:MAX_ITEMS]],
        warnings=[clip(w) for w in result.inventory.warnings[:10]],
        unreadable=[{"path": clip(u.path), "reason": clip(u.reason)} for u in result.inventory.unreadable[:10]])


def list_findings(ws: Workspace, path: str, severity: Optional[str] = None, offset: int = 0,
                  limit: int = 10) -> Dict[str, Any]:
    """The findings of a run, largest gain first, paged; ``severity``
    (``high``, ``medium``, ``low``, ``info``) keeps those alone. Each: id,
    title, severity, ranks, gain (ms per step, % of the step), share."""
    result = ws.result(path)
    items = [f for f in result.findings if severity is None or f.severity == severity]
    page, info = _page(items, offset, limit)
    return _envelope("Finding", findings=[_finding_brief(f) for f in page], **info)


#: The GPU idle causes (``GpuGap.cause``) a finding's rule measures: its gaps are the events
#: ``explain_finding`` cites (the names are :class:`hta_report.model.IdleAttribution`'s).
FINDING_GAP_CAUSES: Dict[str, Tuple[str, ...]] = {
    "dataloader-bound": ("dataloader",), "dataloader-main-process": ("dataloader",),
    "pageable-memcpy": ("pageable_copy",), "blocking-copy": ("blocking_copy",), "sync-in-step": ("sync",),
    "launch-bound": ("launch",), "host-bound": ("host_ops", "launch"), "unfused-optimizer": ("optimizer",),
    "zero-grad-zeros": ("zero_grad",), "gpu-gaps": (), "gpu-idle": (),
}


def explain_finding(ws: Workspace, path: str, finding_id: str, k: int = 5) -> Dict[str, Any]:
    """One finding whole: evidence, fix, per-rank gains, source lines (with
    excerpts), the what-if of its fix with its 80 % interval (µs per step),
    the rule's check, its evidence events (``events``: at most 20
    :class:`~hta_report.model.EventRef`, the largest gap first, each cited by
    rank, stream, correlation, ``ts_us`` from the trace directory's start and
    ``trace_ts_us`` on the file's own clock, with its ``role``: the host
    ``call`` a gap began in, the GPU operation ``before`` it, the one
    ``after``), and the ``k`` longest GPU idle gaps of its cause on its ranks
    (each cited by rank, ``ts_us``, step, duration µs) where the finding is
    about idle time."""
    result = ws.result(path)
    for f in result.findings:
        if f.id == finding_id:
            check = next((c for c in result.checks if c.id == f.id), None)
            gaps: List[Dict[str, Any]] = []
            if f.id in FINDING_GAP_CAUSES:
                causes = FINDING_GAP_CAUSES[f.id]
                gaps = sorted((_gap(r.rank, g) for r in result.ranks if r.rank in f.ranks
                               for g in r.idle_attribution.gaps if not causes or g.cause in causes),
                              key=lambda g: -g["duration_us"])[: max(1, min(k, MAX_ITEMS))]
            body = plain(f)
            origin = {r.rank: r.time_origin_us for r in result.ranks}
            for ref in body.get("events") or []:
                if origin.get(ref["rank"]):
                    ref["trace_ts_us"] = round(ref["ts_us"] + origin[ref["rank"]], 3)
            return _envelope("Finding", finding=body, check=plain(check) if check is not None else None,
                             gaps=gaps)
    known = ", ".join(f.id for f in result.findings[:MAX_ITEMS]) or "none"
    raise ToolInputError(f"no finding {clip(finding_id, 80)!r}; the run's findings: {known}", clip(path))


def top_kernels(ws: Workspace, path: str, rank: Optional[int] = None, kernel_type: Optional[str] = None,
                name_contains: Optional[str] = None, order_by: str = "total", k: int = 10,
                kernel_types: bool = False) -> Dict[str, Any]:
    """GPU kernels of one rank (default: the first with GPU work) by total
    time over the analyzed window (HTA's step filter: with two or more
    ProfilerSteps, the kernels launched before the last step starts; else
    all), top ``k``: name, HTA kernel type, count, total/mean/min/max µs,
    % of the rank's kernel time and ``longest``, its longest call (rank,
    stream, correlation, ``ts_us`` from the trace directory's start,
    ``trace_ts_us`` the same on the file's own clock, ``dur_us``); ``kernel_count`` counts every kernel call of the window.
    ``order_by``: ``total`` (default) or ``longest`` (by the longest call).
    Filters: ``kernel_type`` (e.g. ``COMPUTATION``, ``COMMUNICATION``), a
    substring of the name. ``kernel_types``: also HTA's kernel-type shares
    (% of kernel time). The rank's table holds its 50 kernels of most total time."""
    if order_by not in ("total", "longest"):
        raise ToolInputError(f"order_by is 'total' or 'longest', not {clip(order_by, 40)!r}", clip(path))
    result = ws.result(path)
    r = _rank(result, rank)
    want_types = kernel_types
    rows = [s for s in r.top_kernels
            if (kernel_type is None or s.kernel_type.lower() == kernel_type.lower())
            and (name_contains is None or name_contains.lower() in s.name.lower())]
    if order_by == "longest":
        rows.sort(key=lambda s: -s.max_us)
    page, info = _page(rows, 0, k)
    kernels = [plain(s) for s in page]
    for row in kernels:
        if row.get("longest") and r.time_origin_us:
            row["longest"]["trace_ts_us"] = round(row["longest"]["ts_us"] + r.time_origin_us, 3)
    return _envelope("KernelStat", rank=r.rank, kernel_count=r.kernel_count, listed_of=len(r.top_kernels),
                     time_origin_us=r.time_origin_us, kernels=kernels,
                     kernel_types=plain(r.kernel_types) if want_types else None, **info)


def top_ops(ws: Workspace, path: str, rank: Optional[int] = None, k: int = 10) -> Dict[str, Any]:
    """Host (CPU) ops of one rank by self time over the analyzed window, top
    ``k`` (name, count, total and self µs), with the GPU time each op's
    kernels took where the trace has stacks (``gpu_by_op``), the
    synchronizations per step and the DataLoader's time; ``code_times``,
    the host time (µs per step) of each cause (``sync``, ``dataloader``,
    ``pageable_copy``, ``optimizer``) under the user's innermost source
    frames (``"train.py(42): step"``, as the trace names them; stack traces
    only), top ``k`` per cause; and ``optimizer``, the ``Optimizer.step``
    profile (kernels launched from it per step, host µs per step, the host
    µs of their launch calls per step, whether it is foreach or fused)."""
    result = ws.result(path)
    r = _rank(result, rank)
    page, info = _page(r.cpu.top_ops, 0, k)
    kk = max(1, min(k, MAX_ITEMS))
    code: List[Any] = []
    for cause in dict.fromkeys(t.category for t in r.code.times):
        code += sorted((t for t in r.code.times if t.category == cause), key=lambda t: -t.time_us)[:kk]
    return _envelope("NamedTime", rank=r.rank, ops=plain(page),
                     gpu_by_op=plain(r.code.gpu_by_op[:kk]), code_times=plain(code[:MAX_ITEMS]),
                     optimizer=plain(r.optimizer),
                     sync_calls_per_step=round(r.cpu.sync_calls_per_step, 3),
                     sync_us_per_step=round(r.cpu.sync_us_per_step, 3),
                     sync_events=plain(r.cpu.sync_events[:10]),
                     dataloader_us_per_step=round(r.cpu.dataloader_us_per_step, 3), **info)


def time_breakdown(ws: Workspace, path: str, rank: Optional[int] = None, step: Optional[int] = None) -> Dict[str, Any]:
    """Where one rank's step time goes (µs and %): the steps (number,
    duration, warm-up), the temporal breakdown of GPU time (compute,
    non-compute, idle), idle by kind, exposed communication and memcpy, and
    TensorBoard's step breakdown (kernel, memcpy, memset, runtime,
    DataLoader, CPU exec, other) for ``step`` (a ProfilerStep number) or
    every analyzed step."""
    result = ws.result(path)
    r = _rank(result, rank)
    rows = r.step_breakdown
    if step is not None:
        rows = [b for b in rows if b.number == step]
        if not rows and all(s.number != step for s in r.steps.steps):
            known = ", ".join(str(s.number) for s in r.steps.steps[:MAX_ITEMS]) or "none"
            raise ToolInputError(f"no step {step} on rank {r.rank}; steps: {known}", clip(path))
    steps = [s for s in r.steps.steps if step is None or s.number == step]
    return _envelope(
        "StepBreakdown", rank=r.rank, window_us=round(r.window_us, 3), steps_used=r.steps_used,
        steps=plain(steps), step_stats={"count": r.steps.count, "mean_us": round(r.steps.mean_us, 3),
                                        "max_us": round(r.steps.max_us, 3), "warmup_excluded": r.steps.warmup_excluded},
        gpu_span_us=round(r.gpu_span_us, 3), busy_pct=round(r.busy_pct, 2) if r.has_gpu else None,
        temporal=plain(r.temporal), idle_split_pct=plain(r.idle_split) if r.has_gpu else None,
        exposed_comm_us_per_step=round(r.comm.exposed_us_per_step, 3),
        exposed_memcpy_us=round(r.memcpy.exposed_us, 3), memcpy=plain(r.memcpy.directions),
        step_breakdown=plain(rows[:MAX_ITEMS]))


def idle_gaps(ws: Workspace, path: str, rank: Optional[int] = None, cause: Optional[str] = None,
              min_us: float = 0.0, k: int = 10) -> Dict[str, Any]:
    """GPU idle time of one rank per analyzed step by cause (µs per step:
    DataLoader, sync, launch, host ops, optimizer...) and the longest gaps
    with no GPU work (start ``ts_us`` from the trace directory's start,
    duration, step, cause, what the host ran), filtered by ``cause`` and
    ``min_us``, top ``k``."""
    result = ws.result(path)
    r = _rank(result, rank)
    ia = r.idle_attribution
    gaps = sorted((g for g in ia.gaps if (cause is None or g.cause == cause) and g.duration_us >= min_us),
                  key=lambda g: -g.duration_us)
    page, info = _page(gaps, 0, k)
    by_cause = {f.name: round(getattr(ia, f.name), 3) for f in dataclasses.fields(ia)
                if f.name.endswith("_us") and isinstance(getattr(ia, f.name), float)}
    return _envelope("IdleAttribution", rank=r.rank, per_step_us=by_cause,
                     gaps=[_gap(r.rank, g) for g in page], gaps_recorded=len(ia.gaps), **info)


def _gap(rank: int, g) -> Dict[str, Any]:
    """A :class:`hta_report.model.GpuGap` as cited: rank, ``ts_us``, duration, step, cause, host ops."""
    return {"rank": rank, "ts_us": round(g.start_us, 3), "duration_us": round(g.duration_us, 3),
            "step": g.step, "cause": g.cause, "host_ops": [clip(o) for o in g.host_ops[:5]]}


def compare_runs(ws: Workspace, base: str, new: str, k: int = 10) -> Dict[str, Any]:
    """Compare two runs (trace directories or saved results): the verdict,
    the step-time change (%), the overall metric deltas, the ``k`` kernels
    that changed most, the findings that appeared and went, and how the two
    runs differ (devices, versions). The comparison's own fields, each list cut."""
    comp = ws.comparison(base, new)
    data = {f.name: getattr(comp, f.name) for f in dataclasses.fields(comp) if f.name not in ("base", "new")}
    kernels = sorted(comp.kernels, key=lambda d: -abs(d.delta_us))
    data["kernels"] = kernels[: max(1, min(k, MAX_ITEMS))]
    data["findings_appeared"] = [_finding_brief(f) for f in comp.findings_appeared]
    data["findings_gone"] = [_finding_brief(f) for f in comp.findings_gone]
    body = plain(data)
    body["kernels_total"] = len(comp.kernels)
    return _envelope("Comparison", **body)


def what_if(ws: Workspace, path: str, edit: Optional[str] = None, rank: Optional[int] = None) -> Dict[str, Any]:
    """The replay of one rank: measured vs replayed step (µs, error %), the
    critical path's longest ops, and each edit's predicted step time with its
    80 % interval (µs); ``edit`` (a label or part of one, e.g. ``fuse``,
    ``sync``) keeps the matching edits. Plus what the findings' fixes buy together."""
    result = ws.result(path)
    r = _rank(result, rank)
    rp = r.replay
    items = [w for w in rp.whatifs if edit is None or edit.lower() in w.edit.lower()]
    if edit is not None and not items:
        known = ", ".join(sorted({w.edit for w in rp.whatifs}))[:2000] or "none"
        raise ToolInputError(f"no edit matching {clip(edit, 80)!r} on rank {r.rank}; edits: {known}", clip(path))
    whatifs = [{"edit": clip(w.edit), "applies": w.applies, "step_us_before": round(w.step_us_before, 3),
                "step_us_after": round(w.step_us_after, 3), "step_us_low": round(w.step_us_low, 3),
                "step_us_high": round(w.step_us_high, 3),
                "saving_pct": round(100 * (1 - w.step_us_after / w.step_us_before), 2) if w.step_us_before else 0.0}
               for w in items[:MAX_ITEMS]]
    crit = sorted(rp.critical_path, key=lambda o: -o.us)[:10]
    return _envelope("Replay", rank=r.rank, measured_step_us=round(rp.measured_step_us, 3),
                     replayed_step_us=round(rp.replayed_step_us, 3), error_pct=round(rp.error_pct, 2),
                     host_share_pct=round(rp.host_share_pct, 2), note=clip(rp.note),
                     critical_path_top=plain(crit), whatifs=whatifs,
                     together=plain(result.together) if result.together is not None else None)


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name, function ``(workspace, **arguments) -> dict`` and
    whether it reports progress (runs an analysis)."""

    name: str
    fn: Callable[..., Dict[str, Any]]
    progress: bool = False


#: Every tool the server exposes, in the order it lists them (at most 10).
TOOLS: Dict[str, ToolSpec] = {t.name: t for t in (
    ToolSpec("analyze", analyze, progress=True),
    ToolSpec("list_findings", list_findings),
    ToolSpec("explain_finding", explain_finding),
    ToolSpec("top_kernels", top_kernels),
    ToolSpec("top_ops", top_ops),
    ToolSpec("time_breakdown", time_breakdown),
    ToolSpec("idle_gaps", idle_gaps),
    ToolSpec("compare_runs", compare_runs, progress=True),
    ToolSpec("what_if", what_if),
)}
