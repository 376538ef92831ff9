"""The replay: a rank's execution graph scheduled with its measured durations,
and edited to predict what a fix buys (issue 30; the recipe "add a what-if"
in ``docs/ARCHITECTURE.md``).

Modules, in the order a replay runs them:

* :mod:`.graph`: the execution graph of a rank (nodes: host calls, GPU
  operations, step markers; edges: host order, launches, stream order,
  synchronizations, cross-stream waits).
* :mod:`.schedule`: the graph scheduled with measured or edited inputs, and
  the windows' times in it.
* :mod:`.path`: the critical path of each step, named by what holds it.
* :mod:`.edits`: the registry :data:`~.edits.EDITS` of the edits (one per
  fix, labelled by :class:`~hta_report.replay_terms.EditLabel`).
* :mod:`.whatif`: a what-if (edits made, scheduled, turned into a predicted
  step with its interval) in one rank's :class:`~.whatif.ReplayContext`.
* :mod:`.run`: :func:`~.run.replay`, the step of the analysis that runs
  the stages and writes :class:`~hta_report.model.Replay`.
"""
from .edits import EDITS, EditSpec
from .run import replay, rank_graph
from .schedule import schedule, span, step_times
from .whatif import ReplayContext, WhatIfRunner, interval, whatif

__all__ = ["EDITS", "EditSpec", "ReplayContext", "WhatIfRunner", "interval", "rank_graph", "replay", "schedule",
           "span", "step_times", "whatif"]
