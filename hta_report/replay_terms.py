"""The replay's vocabulary, shared by the layers that may not import each other.

The replay (:mod:`hta_report.analysis.replay`) makes the edits and the notes;
the rules (:mod:`hta_report.rules`) name the edit their fix means
(``@rule(..., edit=EditLabel.X)``); the render layer
(:mod:`hta_report.render.replay_notes`) words the notes. None of them may
import another's package (``tests/test_architecture.py``), so the names they
share live here:

* :class:`EditLabel`: the label of every edit of the registry
  :data:`hta_report.analysis.replay.edits.EDITS`, in the order the replay
  makes them (the registry holds exactly these, in this order: checked at
  import and by ``tests/test_edits.py``). A label is
  :attr:`hta_report.model.WhatIf.edit` and the heading of its section in
  ``docs/EDITS.md``. Every label but :attr:`EditLabel.NO_PROFILER` is a
  fix's edit (``Rule.edit``); that one is the profiler's cost removed, which
  no finding offers (:func:`hta_report.analysis.replay.edits.fixes`).
* :class:`NoteCode`: what the replay of a rank says about itself
  (:attr:`hta_report.model.ReplayNote.code`): why it was not replayed, what
  it does not model, why it makes no what-if.

Both are string enums (:class:`Term`, as :class:`enum.StrEnum` of Python
3.11, which the package's Python 3.10 lacks): a member equals, hashes, prints
and formats as its string, so saved results that hold the plain string still
compare equal.
"""
from __future__ import annotations

from enum import Enum


class Term(str, Enum):
    """A string enum member: ``str()`` and ``format()`` give its value."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(str.__str__(self), spec)


class EditLabel(Term):
    """The edits the replay makes, one per fix (``docs/EDITS.md`` states
    what each removes and keeps), in replay order."""

    NO_SYNC = "no host-device sync"
    LOOP_VECTORIZED = "loop vectorized"
    DATALOADER_HIDDEN = "DataLoader hidden"
    CUDA_GRAPH = "step in a CUDA graph"
    COPIES_PINNED = "copies pinned and async"
    TENSOR_CORES = "matmuls on Tensor Cores"
    TF32_TO_BF16 = "TF32 matmuls in bf16"
    ZERO_GRAD_NONE = "zero_grad sets None"
    OPTIMIZER_FUSED = "optimizer fused"
    PASSES_BATCHED = "passes batched"
    EVAL_MODE = "eval mode"
    FAST_CPU_KERNELS = "fast CPU kernels"
    GRADIENT_OVERLAP = "gradient reduction overlapped"
    #: Not a fix: the step without the profiler's own host cost (no rule names it; the replay
    #: makes it only for the :attr:`NoteCode.PROFILER_COST` note's prediction).
    NO_PROFILER = "profiler removed"


class NoteCode(Term):
    """What a rank's replay notes (:class:`hta_report.model.ReplayNote`); the
    figures a note carries (its ``values``, by key) are listed per code.
    :mod:`hta_report.render.replay_notes` words each one."""

    #: Not replayed: the rank has no analyzed window.
    NO_WINDOW = "not-replayed-no-window"
    #: Not replayed: no host call in the window launched GPU work.
    NO_LAUNCH = "not-replayed-no-launch"
    #: Not replayed: the trace's times order its events in a cycle.
    CYCLE = "not-replayed-cycle"
    #: No ``ProfilerStep``: one window, to the main thread's last runtime call
    #: or the last GPU operation.
    NO_STEPS = "no-steps"
    #: What a replay of a rank with GPU work does not model.
    GPU_LIMITS = "gpu-limits"
    #: A rank without GPU work: the step thread's host time alone.
    HOST_ONLY = "host-only"
    #: The host ran ahead of the GPU; values ``before_us`` (the step the
    #: what-ifs start from, µs) and ``measured_us`` (the ``ProfilerStep``
    #: step, µs).
    HOST_AHEAD = "host-ahead"
    #: No what-if: the window is mostly one-off warm-up; value ``warmup_pct``
    #: (% of the analyzed window).
    WARMUP = "no-whatif-warmup"
    #: No what-if: kernels launched with no GPU record; value ``launches``.
    LOST_GPU = "no-whatif-lost-gpu"
    #: No what-if: CUDA-graph launches whose kernels the trace lacks; values
    #: ``dropped`` and ``graphs`` (launches).
    DROPPED_GRAPHS = "no-whatif-dropped-graphs"
    #: No what-if: launched work started late on an idle GPU for a reason the
    #: trace does not show; values ``late_pct`` (% of the analyzed window) and
    #: ``starts`` (how many times).
    LATE_STARTS = "no-whatif-late-starts"
    #: A host-bound GPU rank whose recorded host events cost the profiler a
    #: large share of the step; values ``events`` (host events recorded a step,
    #: every thread), ``low_us`` and ``high_us`` (their cost a step, µs), ``step_us``
    #: (the measured step, µs) and ``host_share_pct`` (% of the critical path
    #: on the host); where the replay predicts it (the
    #: :attr:`EditLabel.NO_PROFILER` edit), also ``noprof_us``, ``noprof_low_us`` and
    #: ``noprof_high_us`` (the step without the profiler and its interval, µs).
    PROFILER_COST = "profiler-cost"


#: The codes that say a rank was not replayed (its ``Replay.steps`` is 0).
NOT_REPLAYED = (NoteCode.NO_WINDOW, NoteCode.NO_LAUNCH, NoteCode.CYCLE)
#: The codes that say a replayed rank got no what-if.
NO_WHATIF = (NoteCode.WARMUP, NoteCode.LOST_GPU, NoteCode.DROPPED_GRAPHS, NoteCode.LATE_STARTS)
