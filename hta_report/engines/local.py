"""The ``local`` engine: this machine, its cores used by forked worker processes.

Three ways, the same result (``tests/test_parallel.py``):

- **Several files and several cores** (:class:`_ForkedRunner`): each worker
  process parses its share of the files (largest first, to the least loaded
  worker) and keeps the parses; this process plans from their summaries and
  each worker then analyzes the ranks it parsed (:mod:`.per_rank`). No event
  dataframe crosses a process boundary, and this process never holds one.
  On 8 ranks of a real A100 trace (227 MB of JSON) this took 5.5 s against
  7.7 s for parsing in workers, sending the dataframes here and forking
  again for the analyses (``bench/load.py``), and the forked analyses no
  longer write into pages shared with this process.
- **Several files, one worker** (``HTA_REPORT_WORKERS=1``, one core, no
  ``fork``, or a worker that died) (:class:`_HereRunner`): the same two
  phases in this process, one file at a time, each parse spilled to disk
  before the next is made.
- **One file**: it is loaded here (:func:`hta_report.load.load_traces`: a
  large file is cut into pieces parsed side by side) and analyzed by
  :func:`hta_report.analysis.analyze_loaded` (the rank's two parts side by
  side in forked workers).

**Memory flat in the number of ranks.** A worker holds at most one parse
in memory: before it parses its next file it writes the one it holds to a
spill file (a pickle, in a private temporary folder under ``TMPDIR``, made
by this process and removed at the end: no file anyone else wrote is ever
unpickled), and each worker analyzes the rank still in its memory first,
then reads the others back one at a time. So the process tree holds one
parse per core whatever the number of ranks (``bench/scale.py`` measures the
tree's peak against a lone rank's). A 28 MB rank of the fractional
benchmark (75,000 events): 13 ms to write, 19 ms to read back, 9.5 MB on
disk; the Arrow IPC layout of the parse cache took 292 and 92 ms.

**A memory cap.** Analyzing a rank holds about 3 bytes per byte of its
JSON (:func:`rank_memory_bytes`), and each worker analyzes one: two workers on
286 MB ranks held 2.3 x the tree of one such rank alone. With
``HTA_REPORT_MAX_MEMORY`` (default: the memory available at the start), a
worker whose next rank would take the estimate of the ranks being analyzed
past the cap waits for one to finish, its parse written to disk meanwhile; a
rank alone always runs. The result is the same, only later.

A worker that dies (e.g. killed for memory) loses the parses it held: the
run then starts again the second way, one rank at a time.
"""
from __future__ import annotations

import contextlib
import logging
import os
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Union

from .. import progress, workers
from ..cache import Cache
from ..errors import InputError, TraceError
from ..model import AnalysisResult
from . import per_rank
from .per_rank import RankRunner, rank_memory_bytes

if TYPE_CHECKING:
    from ..files import Location
    from ..load.rank_file import ParsedRank

logger = logging.getLogger(__name__)

#: In a worker of :class:`_ForkedRunner`: the parses it made, by file index,
#: until their rank is analyzed (each worker process has its own): the parse
#: itself, or the path of its spill file.
_HELD: Dict[int, Union[ParsedRank, str]] = {}


def measure(spec, cache: Optional[Cache]) -> AnalysisResult:
    """The metrics of the run ``spec`` (a :class:`~hta_report.load.spec.RunSpec`)
    describes, computed on this machine (see the module doc); ``cache``: the
    parse cache, or None.

    Raises:
        hta_report.errors.InputError: two files claiming one rank;
            ``HTA_REPORT_MAX_MEMORY`` is not a size.
        hta_report.errors.TraceError: no trace can be read or analyzed.
    """
    from ..analysis import analyze_loaded
    from ..load import load_traces, quiet_hta
    from ..load.devices import all_declare_no_gpu

    paths = list(spec.files)
    n = min(workers.count(), len(paths))
    if n >= 2 and workers.can_fork():
        try:
            runner = _ForkedRunner(n, spec.max_trace_bytes, spec.loader, cache,
                                   with_hta=not all_declare_no_gpu(paths))
        except ValueError as exc:  # the CLI refuses it before; here for the Python API
            raise InputError(f"{workers.MAX_MEMORY_ENV}: {exc}") from None
        try:
            with quiet_hta(), runner:
                return per_rank.measure(spec, runner)
        except BrokenProcessPool:
            logger.warning("a worker process died; analyzing the traces again in this process, one at a time")
    if len(paths) >= 2:
        with quiet_hta(), _HereRunner(spec.max_trace_bytes, spec.loader, cache) as here:
            return per_rank.measure(spec, here)
    return analyze_loaded(load_traces(spec, cache=cache), spec)


class _ForkedRunner(RankRunner):
    """Phases 1 and 3 of :mod:`.per_rank` in ``n`` forked worker processes,
    each rank analyzed in the process that parsed it (one pool of one worker
    per process, so that a call goes to the process holding its parse)."""

    where = " (worker)"
    analyze_stage = "analyze {n} ranks in worker processes"

    def __init__(self, n: int, max_trace_bytes: int, loader: str, cache: Optional[Cache],
                 with_hta: bool) -> None:
        self.n, self.max_trace_bytes, self.loader, self.with_hta = n, max_trace_bytes, loader, with_hta
        self.cache_dir = str(cache.root) if cache is not None else None
        self.pools: List = []
        self.owner: Dict[int, int] = {}
        self.in_memory: Dict[int, int] = {}  # worker -> the file index whose parse it holds in memory
        self.spill_dir: Optional[str] = None
        self.events: Dict[int, int] = {}  # file index -> events of its parse
        self.budget = workers.memory_budget()
        self.frozen: Optional[contextlib.AbstractContextManager] = None  # workers.fork_friendly while workers live

    def __enter__(self) -> "_ForkedRunner":
        import tempfile

        _preload(self.with_hta)
        self.spill_dir = tempfile.mkdtemp(prefix="hta-report-spill-")
        self.frozen = workers.fork_friendly()  # the modules just imported stay shared with the workers
        self.frozen.__enter__()
        try:
            self.pools = [workers.pool(1) for _ in range(self.n)]
        except BaseException as exc:
            self.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        import shutil

        self._stop_workers(exc_type, exc, tb)
        if self.spill_dir is not None:
            shutil.rmtree(self.spill_dir, ignore_errors=True)
            self.spill_dir = None

    def parse(self, paths: Sequence[Location]) -> List[per_rank.ParseOutcome]:
        from ..files import size

        sizes = [_size(size, p) for p in paths]
        load = [0] * self.n
        futures: Dict[int, Future] = {}
        for i in sorted(range(len(paths)), key=lambda k: -sizes[k]):  # largest first, to the least loaded
            w = load.index(min(load))
            load[w] += sizes[i]
            self.owner[i] = w
            futures[i] = self.pools[w].submit(_parse_held, i, str(paths[i]), self.max_trace_bytes, self.loader,
                                              self.cache_dir, self.spill_dir)
            self.in_memory[w] = i  # a worker runs its calls in order: its last file stays in memory
        got = _collect([futures[i] for i in range(len(paths))], "parsed", "files")
        self.events = {i: g.events for i, g in enumerate(got) if not isinstance(g, str)}
        return got

    def analyze(self, keys, infos, plan):
        # each worker first analyzes the rank whose parse it holds in memory, then reads back the others
        held = set(self.in_memory.values())
        order = sorted(range(len(keys)), key=lambda j: keys[j] not in held)
        cost = {j: rank_memory_bytes(self.events.get(keys[j], 0)) for j in order}
        if self.budget is None or sum(sorted(cost.values())[-self.n:]) <= self.budget:  # never held back
            submitted = {j: self.pools[self.owner[keys[j]]].submit(_analyze_held_pickled, keys[j], infos[j], plan,
                                                                   self.loader) for j in order}
            got = _collect([submitted[j] for j in range(len(keys))], "analyzed", "ranks")
            del submitted  # its futures hold the bytes too: the bytes of a rank go once it is built
        else:
            got = self._analyze_within_budget(keys, infos, plan, order, cost, self.budget)
        self._stop_workers()
        return _outcomes(infos, _unpickled(got))

    def _stop_workers(self, exc_type=None, exc=None, tb=None) -> None:
        """Stop the worker processes (at once when leaving by an exception)
        and end :func:`~hta_report.workers.fork_friendly`'s freeze: after
        phase 3 nothing else runs in them, and while they lived, their memory
        added to the tree's peak while this process built the results (see
        :func:`_unpickled`)."""
        for pool in self.pools:
            pool.__exit__(exc_type, exc, tb)  # left by an exception: workers stopped at once
        self.pools = []
        if self.frozen is not None:
            self.frozen.__exit__(None, None, None)
            self.frozen = None

    def _analyze_within_budget(self, keys, infos, plan, order: List[int], cost: Dict[int, int], budget: int) -> list:
        """Phase 3 with at most one rank per worker in flight and, together,
        at most ``budget`` bytes by :func:`rank_memory_bytes` (a rank alone
        always runs): a worker whose next rank does not fit waits. The
        answers of :func:`_analyze_held_pickled`, in ``keys``' order."""
        from ..sizes import format_size

        t0 = time.perf_counter()
        most_at_once = 0
        queues: Dict[int, List[int]] = {}
        for j in order:  # per worker, in the order it would run them
            queues.setdefault(self.owner[keys[j]], []).append(j)
        running: Dict[Future, int] = {}
        spills: List[Future] = []
        got: Dict[int, tuple] = {}
        stages = progress.current()
        while queues or running:
            busy = {self.owner[keys[j]] for j in running.values()}
            used = sum(cost[j] for j in running.values())
            for w in sorted(set(queues) - busy, key=lambda w: -cost[queues[w][0]]):  # the largest waiting first
                j = queues[w][0]
                if running and used + cost[j] > budget:
                    if self.in_memory.pop(w, None) is not None:  # it waits: to disk with the parse it holds
                        spills.append(self.pools[w].submit(_spill_worker, self.spill_dir))
                    continue
                running[self.pools[w].submit(_analyze_held_pickled, keys[j], infos[j], plan, self.loader)] = j
                used += cost[j]
                queues[w].pop(0)
                if not queues[w]:
                    del queues[w]
            most_at_once = max(most_at_once, len(running))
            workers.idle()
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                j = running.pop(future)
                got[j] = future.result()
                stages.update(f"analyzed {len(got)}/{len(keys)} ranks")
        for future in spills:
            future.result()  # a spill that failed (a full disk) fails the run as a parse's does
        if most_at_once < min(self.n, len(keys)):
            stages.record(f"analyses held to {most_at_once} at once by the memory cap "
                          f"({format_size(budget)}, ${workers.MAX_MEMORY_ENV})", time.perf_counter() - t0)
        return [got[j] for j in range(len(keys))]


class _HereRunner(RankRunner):
    """Phases 1 and 3 of :mod:`.per_rank` in this process, one file at a
    time, for several files where no worker can be forked or one is asked
    for (``HTA_REPORT_WORKERS=1``, one core) or after a worker died: each
    parse is written to a spill file before the next is made and read back
    for its rank's analysis, so this process holds one parse at a time
    whatever the number of ranks, as each worker of :class:`_ForkedRunner`
    does. (Loading every file here first, as for a lone file, held them all:
    the 8 fractional benchmark ranks of 28 MB peaked at 388 MB against 211
    MB for one, growing ~25 MB a rank.) Same functions, so the same result."""

    where = ""

    def __init__(self, max_trace_bytes: int, loader: str, cache: Optional[Cache]) -> None:
        self.max_trace_bytes, self.loader = max_trace_bytes, loader
        self.cache_dir = str(cache.root) if cache is not None else None
        self.spill_dir: Optional[str] = None
        self.held: Dict[int, Union[ParsedRank, str]] = {}  # its own, not _HELD: two runs may share a process

    def __enter__(self) -> "_HereRunner":
        import tempfile

        self.spill_dir = tempfile.mkdtemp(prefix="hta-report-spill-")
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        import shutil

        self.held.clear()  # a failure between the phases: its spill files go with the folder
        if self.spill_dir is not None:
            shutil.rmtree(self.spill_dir, ignore_errors=True)
            self.spill_dir = None

    def parse(self, paths: Sequence[Location]) -> List[per_rank.ParseOutcome]:
        stages = progress.current()
        out = []
        for k, p in enumerate(paths):
            out.append(_parse_held(k, str(p), self.max_trace_bytes, self.loader, self.cache_dir, self.spill_dir,
                                   one_core=False, store=self.held))
            stages.update(f"parsed {k + 1}/{len(paths)} files")
        return out

    def analyze(self, keys, infos, plan):
        held = [k for k in keys if not isinstance(self.held.get(k), str)]  # the one still in memory first
        order = sorted(range(len(keys)), key=lambda j: keys[j] not in held)
        share = per_rank.share_result_strings()
        stages = progress.current()
        got: Dict[int, tuple] = {}
        for done, j in enumerate(order, 1):
            got[j] = _analyze_held(keys[j], infos[j], plan, self.loader, store=self.held)
            share(got[j])
            stages.update(f"analyzed {done}/{len(keys)} ranks")
        return _outcomes(infos, [got[j] for j in range(len(keys))])


def _outcomes(infos, got: list) -> List[per_rank.AnalyzeOutcome]:
    """Phase 3's answers (:func:`_analyze_held`'s, in ``infos``' order) as
    :data:`~.per_rank.AnalyzeOutcome`: a failing step's error names its file."""
    return [(TraceError(value[0], info.path, step=value[1]) if status == "error" else value, seconds)
            for info, (status, value, seconds) in zip(infos, got)]


def _preload(with_hta: bool) -> None:
    """Import here, before the workers are forked, what each of them runs:
    the parser and our analyses, and with ``with_hta`` HTA's ``TraceAnalysis``
    (with networkx and plotly) for the GPU analyses; the workers then share
    these modules instead of each importing them. 8 ranks of the fractional
    benchmark, 5 runs each way: 4.36 -> 4.29 s wall, 8.21 -> 7.93 s of CPU;
    the import here (about 0.25 s) is on the critical path, the two in the
    workers were not.

    ``with_hta`` is False when every file's header lists no device
    (:func:`hta_report.load.devices.all_declare_no_gpu`): their ranks are
    analyzed without HTA, and a worker that meets GPU events all the same
    imports it then. 8 ranks of the kineto-text benchmark (CPU only), 8
    alternating runs each: 2.91 -> 2.71 s wall, 5.12 -> 4.92 s of CPU; on
    the fractional (GPU) set, with the parser also imported here: 3.78 ->
    3.68 s (5 each)."""
    import hta.common.trace  # noqa: F401 - the parser's Trace (also imported by hta.trace_analysis)

    from ..analysis import rank  # noqa: F401
    from ..load import fastparse  # noqa: F401

    if with_hta:
        import hta.trace_analysis  # noqa: F401 - what load.traces.hta_view imports in the workers


def _size(size, path) -> int:
    """The stored size of ``path`` (bytes) to balance the workers; 0 when it
    cannot be read (the parse then reports why, naming the file)."""
    try:
        return size(path)
    except Exception:  # noqa: BLE001 - any failure here is the parse's to report
        return 0


def _collect(futures: List[Future], done_label: str, unit: str, each=None) -> list:
    """The futures' results in order, with progress as they come; ``each``
    (if given) is called on each result as it arrives.

    Raises:
        BrokenProcessPool: a worker died.
    """
    stages = progress.current()
    workers.idle()
    out = []
    for k, future in enumerate(futures, 1):
        got = future.result()
        if each is not None:
            each(got)
        out.append(got)
        stages.update(f"{done_label} {k}/{len(futures)} {unit}")
    return out


def _parse_held(index: int, path: str, max_trace_bytes: int, loader: str, cache_dir: Optional[str],
                spill_dir: Optional[str] = None, one_core: bool = True,
                store: Optional[Dict[int, Union["ParsedRank", str]]] = None):
    """Phase 1 in a worker: parse ``path`` and keep the parse under ``index``;
    its :class:`~hta_report.load.rank_file.FileParse`, or the reason it is
    unreadable. With ``spill_dir``, the parse this worker holds in memory is
    first written there (:func:`_spill_held`), so that it holds one at a time.
    ``one_core``: this is a forked worker, one of the machine's cores (the
    parse forks no workers of its own); :class:`_HereRunner` leaves that to
    ``HTA_REPORT_WORKERS``. ``store``: where parses are held (default
    :data:`_HELD`, the worker's)."""
    from ..load.rank_file import parse_file

    if one_core:
        os.environ["HTA_REPORT_WORKERS"] = "1"  # this worker is one of the machine's cores already
    t0 = time.perf_counter()
    store = _HELD if store is None else store
    spilled = _spill_held(spill_dir, store) if spill_dir is not None else 0
    spill_s = time.perf_counter() - t0
    try:
        summary, parsed = parse_file(path, max_trace_bytes, loader, cache_dir)
    except TraceError as exc:
        return exc.message
    store[index] = parsed
    if spilled:
        summary.stages.insert(0, ("spill the worker's previous parse to disk", spill_s))
    return summary


def _spill_held(spill_dir: str, store: Dict[int, Union["ParsedRank", str]]) -> int:
    """Write each parse of ``store`` held in memory to ``spill_dir`` (a
    pickle) and keep its path instead; how many were written.

    Raises:
        OSError: a spill file cannot be written (a full disk).
    """
    import pickle

    spilled = 0
    for index in list(store):
        parsed = store[index]
        if isinstance(parsed, str):
            continue
        path = os.path.join(spill_dir, f"{os.getpid()}-{index}.pickle")
        with open(path, "wb") as fh:
            pickle.dump(parsed, fh, protocol=pickle.HIGHEST_PROTOCOL)
        store[index] = path
        spilled += 1
        del parsed
    if spilled:  # hand the parse's pages back before the next one is made (freed by reference
        workers.trim_heap()  # counts: a full collection took most of each 80-90 ms spill)
    return spilled


def _spill_worker(spill_dir: str) -> None:
    """In a worker of :class:`_ForkedRunner` that waits for the memory cap: write
    the parse it holds to ``spill_dir`` and hand its pages back, so that it holds
    none while it waits (:func:`_spill_held`)."""
    if _spill_held(spill_dir, _HELD):
        workers.release_free_memory()


def _held(index: int, store: Dict[int, Union["ParsedRank", str]]) -> "ParsedRank":
    """The parse held in ``store`` under ``index`` (read back from its spill
    file, which is then removed), no longer held."""
    import pickle

    held = store.pop(index)
    if not isinstance(held, str):
        return held
    try:
        with open(held, "rb") as fh:
            parsed: ParsedRank = pickle.load(fh)  # our own file, in our own private folder
    finally:
        with contextlib.suppress(OSError):
            os.unlink(held)
    return parsed


def _analyze_held_pickled(index: int, info, plan, loader: str):
    """:func:`_analyze_held` in a worker of :class:`_ForkedRunner`, its
    ``RankResult`` sent pickled (``bytes``): the parent keeps each rank as
    those bytes until every rank is done and the workers stopped, and only
    then builds the results (:func:`_unpickled`)."""
    import pickle

    status, value, seconds = _analyze_held(index, info, plan, loader)
    return status, (pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL) if status == "ok" else value), seconds


def _unpickled(got: list) -> list:
    """:func:`_analyze_held_pickled`'s answers with each result rebuilt from
    its bytes, its strings shared with the ranks' before it
    (:func:`~.per_rank.share_result_strings`), each rank's bytes dropped as
    it is built. A rank held as bytes takes about a third of the memory of
    its built result (18 against 50 kB on a 1.6 MB rank of ``two_ranks``),
    so the workers run beside this process's smaller half (1,024 ranks of
    ``bench/scale.py``: see docs/scale.md)."""
    import pickle

    share = per_rank.share_result_strings()
    for k, (status, value, seconds) in enumerate(got):
        if status == "ok":
            got[k] = status, pickle.loads(value), seconds
            share(got[k])
            if k % TRIM_EVERY == TRIM_EVERY - 1:  # the bytes freed so far go back to the OS, not kept beside
                workers.trim_heap()
    return got


#: :func:`_unpickled` hands the freed bytes back every this many ranks: on 256 ranks of
#: ``bench/scale.py`` the process peaked at 158.6 MB while building them, 166.3 MB without.
TRIM_EVERY = 64


def _analyze_held(index: int, info, plan, loader: str, store: Optional[Dict[int, Union["ParsedRank", str]]] = None):
    """Phase 3 in a worker: analyze the parse held under ``index`` (then drop
    it): ``("ok", RankResult, seconds)`` or ``("error", (message, step), seconds)``.
    ``store``: where it is held (default :data:`_HELD`, the worker's)."""
    store = _HELD if store is None else store
    from ..analysis.rank import analyze_rank
    from ..load.rank_file import loaded_rank

    t0 = time.perf_counter()
    parsed = _held(index, store)
    try:
        result = analyze_rank(loaded_rank(parsed, info, plan, loader, copy=False), info)
    except TraceError as exc:
        return "error", (exc.message, exc.step), time.perf_counter() - t0
    finally:
        del parsed
        if not store:  # this worker's last rank: hand its memory back while the others finish
            workers.release_free_memory()
    return "ok", result, time.perf_counter() - t0
