"""Finding trace files (in directories, or named one by one) and the rank each one belongs to."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

from ..errors import InputError
from ..files import Location, PathOrURL
from ..model import WorkerWindows

if TYPE_CHECKING:
    from typing_extensions import TypeIs

#: What ``analyze`` reads: a directory or a trace file (a path, a URL, or a
#: URL's ``upath.UPath``), or a list of either.
Inputs = Union[PathOrURL, Sequence[PathOrURL]]

_T = TypeVar("_T")

#: File names that sit beside traces but are not traces.
NOT_TRACES = {"manifest.json"}

_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
#: Ranks at or above this (from distributedInfo or a file name) are not
#: believed (:mod:`hta_report.load.traces` reads it from here).
MAX_RANK = 2 ** 31


def is_trace_name(path: Location) -> bool:
    """True for ``*.json`` and ``*.json.gz`` files other than :data:`NOT_TRACES`
    (a URL's name without its query, :func:`hta_report.files.bare_name`)."""
    from ..files import bare_name

    name = bare_name(path).lower()
    return (name.endswith(".json") or name.endswith(".json.gz")) and name not in NOT_TRACES


def _json_head(path: Location) -> Optional[bytes]:
    """The first 64 bytes of an uncompressed ``.json`` file (a URL's query
    aside), past a UTF-8 byte order mark; None for another name or a file
    that cannot be opened."""
    from ..files import bare_name

    if not bare_name(path).lower().endswith(".json"):
        return None
    try:
        with path.open("rb") as fh:
            head = fh.read(64)
    except OSError:
        return None
    return head[3:] if head.startswith(b"\xef\xbb\xbf") else head


def is_hta_report_output(path: Location) -> bool:
    """True for a result or comparison saved by hta-report (``analyze --json``,
    ``compare -o x.json``): uncompressed JSON whose first key is ``schema_version``
    (after a UTF-8 byte order mark, if any)."""
    head = _json_head(path)
    return head is not None and head.lstrip().startswith(b'{') and b'"schema_version"' in head


#: The start of a result or comparison saved by hta-report whose
#: ``schema_version`` was removed: its first key is then ``inventory`` (a
#: result) or ``kind`` (a comparison); no Kineto trace starts so.
_UNVERSIONED = re.compile(rb'\s*\{\s*"(?:inventory|kind)"\s*:')
#: What a saved result without a schema version is told.
UNVERSIONED_MESSAGE = ("a result saved by hta-report without a schema_version, so it cannot be read: put back the "
                       "\"schema_version\" it was written with (first in the file), or analyze its traces again")


def is_unversioned_result(path: Location) -> bool:
    """True for uncompressed JSON that starts as a result or comparison saved
    by hta-report does, but without ``schema_version`` (see
    :data:`_UNVERSIONED`): it is neither a trace nor a readable result."""
    head = _json_head(path)
    return head is not None and _UNVERSIONED.match(head) is not None


def _is_one(inputs: Inputs) -> TypeIs[PathOrURL]:
    """True when ``inputs`` names one file or folder (not a list of them)."""
    return isinstance(inputs, (str, os.PathLike)) or hasattr(inputs, "iterdir")  # a path, or a UPath of a URL


def input_paths(inputs: Inputs) -> List[Location]:
    """``inputs`` as a list of paths, in the order given (duplicates dropped).

    Raises:
        InputError: an empty list.
    """
    from ..files import location

    items: List[PathOrURL] = [inputs] if _is_one(inputs) else list(inputs)
    if not items:
        raise InputError("no trace directory or file given")
    return list(dict.fromkeys(location(p) for p in items))


def input_dir(inputs: Inputs) -> Location:
    """The folder of the run: the directory given, else the folder of the
    given files and directories (their deepest common folder); where
    ``manifest.json`` is looked for.

    Raises:
        InputError: a URL fails to answer (:func:`hta_report.files.url_error`).
    """
    paths = input_paths(inputs)
    if len(paths) == 1:
        return paths[0] if not _asking(paths[0], paths[0].is_file) else paths[0].parent
    folders = [p if _asking(p, p.is_dir) else p.parent for p in paths]
    if not all(isinstance(f, Path) for f in folders):  # URLs: the first one's folder
        return folders[0]
    try:
        return Path(os.path.commonpath([str(f.resolve()) for f in folders]))
    except ValueError:  # different drives
        return folders[0]


def input_label(inputs: Inputs) -> str:
    """The input as the user named it: one path, or several joined by ``", "``;
    a URL's login and secret query parameters redacted (:func:`hta_report.files.shown`)."""
    from ..files import shown

    return ", ".join(shown(p) for p in input_paths(inputs))


def _asking(path: Location, question: Callable[[], _T]) -> _T:
    """``question()`` (a look at ``path``); a URL that fails to answer
    (connection refused, a missing package or zip member, a server error) is
    one :class:`InputError` naming it (redacted) and the cause.

    Raises:
        InputError: as said.
    """
    from ..files import is_url, url_error

    try:
        return question()
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever a remote filesystem raises is the URL's failure
        if not is_url(path):
            raise
        raise url_error(exc, path) from exc


def find_trace_files(trace_dir: Inputs, recursive: bool = False) -> List[Location]:
    """Every trace file named by ``trace_dir``, sorted by path.

    Args:
        trace_dir: a directory as written by ``tensorboard_trace_handler`` or
            ``export_chrome_trace`` (one file per rank), a trace file
            (``.json``/``.json.gz``), or a list of either (the ranks of one run).
        recursive: also descend into subdirectories.

    Raises:
        InputError: a path does not exist; a file is no trace (or is a result
            saved by hta-report); a directory holds no ``.json``/``.json.gz``
            file (naming the runs in its subfolders when it is a folder of
            runs); ``recursive`` found several runs (folders with their own
            ``manifest.json``).
    """
    files: List[Location] = []
    for path in input_paths(trace_dir):
        files += _asking(path, lambda: _found(path, recursive))
    return sorted(dict.fromkeys(files))


def _found(path: Location, recursive: bool) -> List[Location]:
    """The trace files ``path`` names (see :func:`find_trace_files`)."""
    from ..files import has_query, is_url, shown, unless_missing

    if has_query(path) and not is_trace_name(path):
        raise InputError("cannot read a folder by a URL with a query (each file's URL would lose the query, "
                         "and the server would answer with the folder's listing): name the trace files, each with "
                         "its query (a presigned URL's path ends in .json or .json.gz)", shown(path))
    if not path.exists():
        if is_url(path):  # exists() says False for a server that does not answer too
            unless_missing(path)
        raise InputError("no such directory or file", shown(path))
    if path.is_dir():
        return _files_in(path, recursive)
    if is_hta_report_output(path):
        raise InputError("a result saved by hta-report, not a trace (compare reads it: "
                         "hta-report compare BASE NEW)", shown(path))
    if is_unversioned_result(path):
        raise InputError(UNVERSIONED_MESSAGE, shown(path))
    if not is_trace_name(path):
        raise InputError("not a trace file (Kineto traces end in .json or .json.gz)", shown(path))
    return [path]


def _files_in(trace_dir: Location, recursive: bool) -> List[Location]:
    """The trace files of one directory (see :func:`find_trace_files`)."""
    pattern = "**/*" if recursive else "*"
    files = sorted(p for p in trace_dir.glob(pattern)
                   if p.is_file() and is_trace_name(p) and not is_hta_report_output(p))
    if not files:
        runs = find_runs(trace_dir)
        if len(runs) > 1 and not recursive:
            raise InputError(_runs_message(trace_dir, runs, "holds no trace files itself, but"), str(trace_dir))
        if len(runs) == 1 and not recursive:
            raise InputError(f"no trace files (*.json, *.json.gz) here; they are in {runs[0]}: "
                             "pass that folder (or use --recursive)", str(trace_dir))
        hint = "" if recursive else " (use --recursive to search subdirectories)"
        raise InputError(f"no trace files (*.json, *.json.gz) found{hint}", str(trace_dir))
    if recursive:
        runs = sorted({p.parent for p in files if (p.parent / "manifest.json").is_file()})
        if len(runs) > 1:
            raise InputError(_runs_message(trace_dir, runs, "holds", " (each with its manifest.json; "
                                                                     "--recursive would merge them)"), str(trace_dir))
    return files


def find_runs(folder: Location) -> List[Location]:
    """The subfolders of ``folder`` (at any depth) that directly hold trace
    files: each is one run. Sorted."""
    return sorted({p.parent for p in folder.glob("*/**/*")
                   if p.is_file() and is_trace_name(p) and not is_hta_report_output(p)})


def _runs_message(folder: Location, runs: List[Location], verb: str, why: str = "") -> str:
    """``holds 3 separate runs in subfolders (a, b, c): analyze one ... or compare two ...``."""
    names = [_relative(r, folder) for r in runs]
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    return (f"{verb} {len(runs)} separate runs in subfolders ({shown}){why}: analyze one "
            f"(hta-report analyze {runs[0]}) or compare two "
            f"(hta-report compare {runs[0]} {runs[1]})")


def _relative(path: Location, folder: Location) -> str:
    """``path`` relative to ``folder``, which it was found under (both local
    paths, or both URLs of one filesystem).

    Raises:
        ValueError: ``path`` is not under ``folder``.
    """
    if isinstance(path, Path) and isinstance(folder, Path):
        return str(path.relative_to(folder))
    if not isinstance(path, Path) and not isinstance(folder, Path):
        return str(path.relative_to(folder))
    raise ValueError(f"{path!s} is not in the subpath of {folder!s}")


#: ``<worker>.<n>.pt.trace.json[.gz]``: a file of one profiling cycle of one
#: process (``tensorboard_trace_handler``: ``n`` is the time in ms;
#: ``hta-report collect``: the cycle number).
_WINDOW = re.compile(r"^(?P<worker>.+)\.(?P<n>\d+)\.pt\.trace\.json(?:\.gz)?$", re.IGNORECASE)
#: ``distributedInfo.rank`` in the head of a Kineto trace (written before ``traceEvents``).
_HEAD_RANK = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*"?(\d+)')


def split_windows(paths: Sequence[Location],
                  notes: Optional[List[str]] = None) -> Tuple[List[Location], List[WorkerWindows]]:
    """The files to analyze, and the processes that wrote several profiling
    windows (:class:`~hta_report.model.WorkerWindows`).

    Files of one folder named ``<worker>.<n>.pt.trace.json[.gz]`` with the
    same ``<worker>`` were written by one process, one per profiling cycle:
    they are windows of one rank, not ranks, and only the latest (the
    largest ``n``) is analyzed, unless it is less than half the size of the
    largest window: the profiler writes the cycle it was in when it stopped
    (the loop ended, ``repeat=0``), often a step or none, and the latest
    full window is analyzed then. Where their heads name different
    ``distributedInfo.rank`` values they are ranks after all, and all kept.
    A file whose head names a rank that is not one (past
    :data:`MAX_RANK`, a 5,000-digit number that
    ``int()`` refuses) is no window: it is kept as a file of its own (the
    loader says what is wrong with it), and a line naming it goes to ``notes``.

    Args:
        paths: trace files, sorted.
        notes: receives one warning per file set apart so (None: not said).

    Returns:
        ``(files, windows)``: ``paths`` without the earlier windows (in their
        order), and one entry per process with several windows.
    """
    groups: Dict[Tuple[str, str], List[Tuple[Tuple[int, str], Location]]] = {}
    for p in paths:
        m = _WINDOW.match(p.name)
        if m:
            groups.setdefault((str(p.parent), m["worker"]), []).append((_number_key(m["n"]), p))
    set_aside: Dict[Location, None] = {}
    windows: List[WorkerWindows] = []
    for (_, worker), files in sorted(groups.items()):
        if len(files) < 2:
            continue
        files.sort(key=lambda f: f[0])
        heads: Dict[Location, Optional[int]] = {}
        for _, p in files:
            try:
                heads[p] = _head_rank(p)
            except ValueError as exc:
                if notes is not None:
                    from ..files import shown

                    notes.append(f"{shown(p)}: {exc}; not taken for a profiling window of {worker}")
        files = [f for f in files if f[1] in heads]
        if len(files) < 2:
            continue
        ranks = set(heads.values()) - {None}
        if len(ranks) > 1:  # one name, several ranks: not windows of one process
            continue
        sizes = {p: _size(p) for _, p in files}
        full = [p for _, p in files if sizes[p] >= FULL_WINDOW_SHARE * max(sizes.values())]
        latest = full[-1]
        others = [p for _, p in files if p != latest]
        set_aside.update((p, None) for p in others)
        windows.append(WorkerWindows(worker=worker, analyzed=str(latest), others=[str(p) for p in others]))
    return [p for p in paths if p not in set_aside], windows


#: A window smaller than this share of a worker's largest window is a cycle cut
#: short (see :func:`split_windows`).
FULL_WINDOW_SHARE = 0.5


def _size(path: Location) -> int:
    """The stored size of ``path`` (bytes); 0 when it cannot be read (the loader says why)."""
    try:
        return int(path.stat().st_size)
    except Exception:  # noqa: BLE001 - a URL's filesystem raises its own errors; the loader says why
        return 0


def _number_key(digits: str) -> Tuple[int, str]:
    """A key that sorts strings of ASCII digits as the numbers they write,
    without ``int()`` (which refuses more than 4,300 digits)."""
    d = digits.lstrip("0") or "0"
    return len(d), d


def _head_rank(path: Location) -> Optional[int]:
    """``distributedInfo.rank`` as written in the first 64 KiB of ``path``
    (decompressed), or None (absent, or the file cannot be read: the loader
    says why later).

    Raises:
        ValueError: the head names a rank that is not one: at least
            :data:`MAX_RANK` (the message says how
            many digits it has, not the digits).
    """
    from ..files import open_text_stream

    try:
        with open_text_stream(path) as fh:
            head = fh.read(1 << 16)
    except Exception:  # noqa: BLE001 - unreadable here is reported by the loader
        return None
    m = _HEAD_RANK.search(head)
    if not m:
        return None
    digits = m.group(1).decode("ascii").lstrip("0") or "0"
    if len(digits) > len(str(MAX_RANK)) or int(digits) >= MAX_RANK:
        raise ValueError(f"distributedInfo.rank of {len(digits):,} digits is not a rank")
    return int(digits)


def rank_from_file_name(path: Location) -> Optional[int]:
    """The rank in a file name such as ``rank-3``, ``rank3`` or ``rank_3``; None if absent."""
    match = _RANK_IN_NAME.search(path.name)
    if not match or len(match.group(1).lstrip("0")) > len(str(MAX_RANK)):  # int() refuses 4,300 digits
        return None
    return int(match.group(1))
