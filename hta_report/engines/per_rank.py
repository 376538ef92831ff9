"""Each rank parsed and analyzed where it is read: the orchestration that the
``ray`` engine (:mod:`.ray_engine`) and the local engine's worker processes
(:mod:`.local`) share.

1. A runner parses every file where it will be analyzed
   (:func:`hta_report.load.rank_file.parse_file`) and hands back a small
   :class:`~hta_report.load.rank_file.FileParse` per file, or why it is
   unreadable; the parse itself stays where it was made.
2. This process decides what depends on every rank from those summaries
   alone (:func:`hta_report.load.rank_file.plan`: ranks, time origin, last
   step).
3. The runner analyzes each rank where its parse is
   (:func:`hta_report.load.rank_file.loaded_rank`, then
   :func:`hta_report.analysis.rank.analyze_rank`) and hands back its
   :class:`~hta_report.model.RankResult`.
4. The cross-rank part runs here (:func:`hta_report.analysis.assemble`), on
   results whose size grows with the number of ranks, not with their events.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Sequence, Tuple, Union

from .. import progress
from ..errors import TraceError
from ..files import stored_bytes
from ..model import AnalysisResult, RankResult, TraceFileInfo, UnreadableTrace

if TYPE_CHECKING:
    from ..load.rank_file import FileParse
    from ..load.spec import RunSpec

#: Phase 1's answer for one file: its summary, or why it cannot be read.
ParseOutcome = Union["FileParse", str]
#: Phase 3's answer for one rank: its result or the error of its failing
#: step, and the seconds its analysis took where it ran.
AnalyzeOutcome = Tuple[Union[RankResult, TraceError], float]


#: :func:`rank_memory_bytes`: what a rank's analysis in a worker holds beyond
#: its events (bytes) and per event of its parse.
RANK_BASE_BYTES = 50 * 10**6
RANK_BYTES_PER_EVENT = 1100


def rank_memory_bytes(events: int) -> int:
    """The estimated memory (bytes) that analyzing one rank of ``events``
    events in a worker adds to the process tree, its parse read back
    included: 50 MB + 1.1 kB per event. The local engine's unit for
    ``HTA_REPORT_MAX_MEMORY`` (:func:`hta_report.workers.memory_budget`) and
    the Ray engine's ``memory`` request per rank. Measured with ``bench/scale.py``
    (the tree's summed PSS, 2026-11-26): a second worker analyzing at the same
    time added 860 MB on the 286 MB fractional benchmark rank (736,679
    events; this estimate 860 MB) and 68 MB on a 1.6 MB rank of HTA's
    ``two_ranks`` (4,810 events; estimate 55 MB)."""
    return RANK_BASE_BYTES + RANK_BYTES_PER_EVENT * max(0, events)


def share_result_strings() -> Callable[[Any], None]:
    """What both runners call on each phase-3 answer as it arrives (a
    ``("ok", RankResult, seconds)`` or an error tuple): the result's strings
    made one with those of the ranks before it
    (:func:`hta_report.model.share_strings`), one table per run."""
    from ..model import share_strings

    table: Dict[str, str] = {}

    def share(got: Any) -> None:
        if got[0] == "ok":
            share_strings(got[1], table)
    return share


class RankRunner:
    """Where phases 1 and 3 run; subclasses implement :meth:`parse` and :meth:`analyze`.

    Attributes:
        where: appended to the ``-v`` lines of the ranks' analyses (e.g. ``" (ray worker)"``).
        parse_where: appended to the ``-v`` lines of the files' parses.
        parse_stage: ``-v`` stage of phase 1, formatted with ``n`` (files).
        analyze_stage: ``-v`` stage of phase 3, formatted with ``n`` (ranks).
    """

    where = ""
    parse_where = ""
    parse_stage = "parse {n} file(s) in all"
    analyze_stage = "analyze {n} ranks"

    def parse(self, paths: Sequence) -> List[ParseOutcome]:
        """Phase 1 for every file of ``paths`` (in order); the runner keeps
        each good parse under the file's index."""
        raise NotImplementedError

    def analyze(self, keys: Sequence[int], infos: Sequence[TraceFileInfo], plan) -> List[AnalyzeOutcome]:
        """Phase 3: per ``keys[i]`` (an index of the parsed files), the rank
        ``infos[i]`` analyzed under ``plan``; in order."""
        raise NotImplementedError


def measure(spec: "RunSpec", runner: RankRunner) -> AnalysisResult:
    """The metrics of the run ``spec`` describes, each of its files parsed
    and its rank analyzed by ``runner`` (see the module doc).

    Raises:
        hta_report.errors.InputError: two files claim one rank.
        hta_report.errors.TraceError: no file can be read or analyzed.
    """
    from ..analysis import assemble
    from ..load.rank_file import file_infos, plan
    from ..load.traces import unreadable_error

    stages = progress.current()
    paths = list(spec.files)
    with stages.stage(runner.parse_stage.format(n=len(paths))):
        stages.expect_bytes(stored_bytes(paths))
        parsed = runner.parse(paths)
    unreadable: List[UnreadableTrace] = []
    good: List[int] = []
    summaries: List[FileParse] = []  # of the files in good
    for i, (p, got) in enumerate(zip(paths, parsed)):
        if isinstance(got, str):
            unreadable.append(UnreadableTrace(path=str(p), reason=got))
            continue
        for name, seconds in got.stages:
            stages.record(f"{name}{runner.parse_where}", seconds)
        good.append(i)
        summaries.append(got)
    if not good:
        raise unreadable_error(unreadable)
    decided = plan(summaries, spec.include_last_step)
    infos = file_infos(summaries, decided)
    order = sorted(range(len(infos)), key=lambda k: infos[k].rank)
    with stages.stage(runner.analyze_stage.format(n=len(order))):
        outcomes = runner.analyze([good[k] for k in order], [infos[k] for k in order], decided)
    results: List[Union[RankResult, TraceError]] = []
    for k, (outcome, seconds) in zip(order, outcomes):
        if not isinstance(outcome, TraceError):
            stages.record(f"analyze rank {infos[k].rank}{runner.where}", seconds)
        results.append(outcome)
    with stages.stage("cross-rank analyses"):
        return assemble([infos[k] for k in order], results, spec, decided.warnings, unreadable,
                        decided.include_last_step)

