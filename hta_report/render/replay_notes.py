"""The words of a rank's replay notes (:attr:`hta_report.model.Replay.notes`).

The replay records what it leaves out, and why a rank was not replayed or
got no what-if, as codes with their figures
(:class:`~hta_report.replay_terms.NoteCode`); this module says them, for
every format (:class:`~hta_report.render.view.ReplayView`). A code this
version does not know (a result saved by a newer one) is shown as its code.
"""
from __future__ import annotations

from typing import Callable, Dict, List

from ..model import Replay, ReplayNote
from ..replay_terms import NoteCode


def _host_ahead(v: Dict[str, float]) -> str:
    return (f"the host ran ahead of the GPU: what-ifs start from {v.get('before_us', 0.0) / 1e3:.2f} ms per step, "
            f"counting the GPU work the steps leave behind (ProfilerStep measures "
            f"{v.get('measured_us', 0.0) / 1e3:.2f} ms)")


def _warmup(v: Dict[str, float]) -> str:
    return (f"no what-if made: {v.get('warmup_pct', 0.0):.0f} % of the analyzed window is one-off warm-up "
            "(context creation, allocator growth, first launches, capture or autotuning), which no fix to the "
            "steady step removes; record steady steps (a profiler schedule with wait and warmup steps)")


def _lost_gpu(v: Dict[str, float]) -> str:
    return (f"no what-if made: the host launched {int(v.get('launches', 0)):,} kernels and the trace holds no GPU "
            "record of them (the GPU side was lost or not recorded): a prediction would leave out the GPU's time")


def _dropped_graphs(v: Dict[str, float]) -> str:
    return (f"no what-if made: {int(v.get('dropped', 0)):,} of {int(v.get('graphs', 0)):,} CUDA-graph launches have "
            "no GPU operation in the trace (the profiler dropped their kernels: CUPTI's activity buffer, TraceLens "
            "#728): a prediction would leave out the GPU time of those replays; record fewer replays per window")


def _late_starts(v: Dict[str, float]) -> str:
    return (f"no what-if made: {int(v.get('starts', 0)):,} times, work launched on an idle GPU started 1 ms or more "
            f"after its launch ({v.get('late_pct', 0.0):.0f} % of the analyzed window), waiting on something the "
            "trace does not show (another process or the display sharing the GPU, a driver holding submissions "
            "back): when the launches move, the replay cannot tell when the GPU would start them")


def _profiler_cost(v: Dict[str, float]) -> str:
    step = v.get("step_us", 0.0)
    lo, hi = v.get("low_us", 0.0), v.get("high_us", 0.0)
    events = v.get("events", 0.0)
    if step > 0 and lo >= step:  # the events come faster than 3 µs apart: this host records them cheaper
        cost = (f"would take the whole {step / 1e3:.2f} ms step (they are {step / max(events, 1.0):.1f} µs apart, "
                "so here each costs less: how much of the step is the profiler's, the trace cannot say)")
    else:
        share = f" ({100 * lo / step:.0f}-{100 * hi / step:.0f} % of it)" if step > 0 else ""
        cost = f"are about {lo / 1e3:.1f}-{hi / 1e3:.1f} ms of this {step / 1e3:.2f} ms step{share}"
    predicted = ""
    if "noprof_us" in v:  # results saved before the replay predicted it lack these figures
        predicted = (f"; the replay puts the step without the profiler at about {v['noprof_us'] / 1e3:.2f} ms "
                     f"(80 % interval {v.get('noprof_low_us', 0.0) / 1e3:.2f}-{v.get('noprof_high_us', 0.0) / 1e3:.2f}"
                     " ms: a wide estimate, calibrated on one H200 host; docs/whatif.md gives its error)")
    return (f"the profiler's own cost: {events:,.0f} host events recorded a step, "
            f"at 3-6 µs each (measured on one H200 host; other hosts differ), {cost}, whose critical path is "
            f"{v.get('host_share_pct', 0.0):.0f} % host time: without the profiler the host's part is shorter "
            "and the step may be the GPU's, so the what-ifs are the profiled run's (record with "
            f"record_shapes=False, or fewer ops a step, to see the host as it runs){predicted}")


#: The words of each :class:`~hta_report.replay_terms.NoteCode`, from the note's figures.
WORDS: Dict[str, Callable[[Dict[str, float]], str]] = {
    NoteCode.NO_WINDOW: lambda v: "not replayed: no analyzed window",
    NoteCode.NO_LAUNCH: lambda v: "not replayed: no GPU work launched by host calls in the analyzed window",
    NoteCode.CYCLE: lambda v: "not replayed: the trace's times order its events in a cycle (a malformed trace)",
    NoteCode.NO_STEPS: lambda v: ("no ProfilerStep: one window, from the trace's start to the end of the main "
                                  "thread's last runtime call or of the last GPU operation, whichever is later"),
    NoteCode.GPU_LIMITS: lambda v: ("collectives keep their measured durations (other ranks are not replayed); "
                                    "another host thread waits for the training thread after idling, else only "
                                    "through the GPU; cross-stream waits and synchronizations are inferred from the "
                                    "times (the trace has no event ids)"),
    NoteCode.HOST_ONLY: lambda v: "no GPU work: the step thread's host time alone (nothing overlaps it)",
    NoteCode.HOST_AHEAD: _host_ahead,
    NoteCode.WARMUP: _warmup,
    NoteCode.LOST_GPU: _lost_gpu,
    NoteCode.DROPPED_GRAPHS: _dropped_graphs,
    NoteCode.LATE_STARTS: _late_starts,
    NoteCode.PROFILER_COST: _profiler_cost,
}


def note_text(n: ReplayNote) -> str:
    """One note in words (its code where this version does not know it)."""
    words = WORDS.get(n.code)
    return words(n.values) if words is not None else n.code


def replay_note(rp: Replay) -> str:
    """What the replay ``rp`` leaves out, or why it was not replayed or made
    no what-if: its notes in words, joined with ``"; "``; a result saved
    before ``Replay.notes`` existed keeps its ``note``."""
    if not rp.notes:
        return rp.note
    return "; ".join(note_text(n) for n in rp.notes)


def replay_note_parts(rp: Replay) -> List[str]:
    """:func:`replay_note` in parts, one per line of the report (split at
    ``"; "``, as the words of a note may hold several)."""
    return [part.strip() for part in replay_note(rp).split("; ") if part.strip()]

