"""Finding trace files (in directories, or named one by one) and the rank each one belongs to."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

from ..errors import InputError
from ..model import WorkerWindows

#: What ``analyze`` reads: a directory or a trace file, or a list of either.
Inputs = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]

#: File names that sit beside traces but are not traces.
NOT_TRACES = {"manifest.json"}

_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def is_trace_name(path: Path) -> bool:
    """True for ``*.json`` and ``*.json.gz`` files other than :data:`NOT_TRACES`."""
    name = path.name.lower()
    return (name.endswith(".json") or name.endswith(".json.gz")) and name not in NOT_TRACES


def is_hta_report_output(path: Path) -> bool:
    """True for a result or comparison saved by hta-report (``analyze --json``,
    ``compare -o x.json``): uncompressed JSON whose first key is ``schema_version``
    (after a UTF-8 byte order mark, if any)."""
    if not path.name.lower().endswith(".json"):
        return False
    try:
        with path.open("rb") as fh:
            head = fh.read(64)
    except OSError:
        return False
    head = head[3:] if head.startswith(b"\xef\xbb\xbf") else head
    return head.lstrip().startswith(b'{') and b'"schema_version"' in head


def input_paths(inputs: Inputs) -> List[Path]:
    """``inputs`` as a list of paths, in the order given (duplicates dropped).

    Raises:
        InputError: an empty list.
    """
    from ..files import location

    single = isinstance(inputs, (str, os.PathLike)) or hasattr(inputs, "iterdir")  # a path, or a UPath of a URL
    items = [inputs] if single else list(inputs)
    if not items:
        raise InputError("no trace directory or file given")
    return list(dict.fromkeys(location(p) for p in items))


def input_dir(inputs: Inputs) -> Path:
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


def _asking(path: Path, question):
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


def find_trace_files(trace_dir: Inputs, recursive: bool = False) -> List[Path]:
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
    files: List[Path] = []
    for path in input_paths(trace_dir):
        files += _asking(path, lambda: _found(path, recursive))
    return sorted(dict.fromkeys(files))


def _found(path: Path, recursive: bool) -> List[Path]:
    """The trace files ``path`` names (see :func:`find_trace_files`)."""
    from ..files import is_url, shown, unless_missing

    if not path.exists():
        if is_url(path):  # exists() says False for a server that does not answer too
            unless_missing(path)
        raise InputError("no such directory or file", shown(path))
    if path.is_dir():
        return _files_in(path, recursive)
    if is_hta_report_output(path):
        raise InputError("a result saved by hta-report, not a trace (compare reads it: "
                         "hta-report compare BASE NEW)", shown(path))
    if is_url(path) and "?" in path.name:
        raise InputError("a URL with a query (a presigned URL?) names no trace file hta-report can read: "
                         "the URL's path must end in .json or .json.gz", shown(path))
    if not is_trace_name(path):
        raise InputError("not a trace file (Kineto traces end in .json or .json.gz)", shown(path))
    return [path]


def _files_in(trace_dir: Path, recursive: bool) -> List[Path]:
    """The trace files of one directory (see :func:`find_trace_files`)."""
    pattern = "**/*" if recursive else "*"
    files = sorted(p for p in trace_dir.glob(pattern)
                   if p.is_file() and is_trace_name(p) and not is_hta_report_output(p))
    if not files:
        runs = find_runs(trace_dir)
        if len(runs) > 1 and not recursive:
            raise InputError(_runs_message(trace_dir, runs, "holds no trace files itself, but"), trace_dir)
        if len(runs) == 1 and not recursive:
            raise InputError(f"no trace files (*.json, *.json.gz) here; they are in {runs[0]}: "
                             "pass that folder (or use --recursive)", trace_dir)
        hint = "" if recursive else " (use --recursive to search subdirectories)"
        raise InputError(f"no trace files (*.json, *.json.gz) found{hint}", trace_dir)
    if recursive:
        runs = sorted({p.parent for p in files if (p.parent / "manifest.json").is_file()})
        if len(runs) > 1:
            raise InputError(_runs_message(trace_dir, runs, "holds", " (each with its manifest.json; "
                                                                     "--recursive would merge them)"), trace_dir)
    return files


def find_runs(folder: Path) -> List[Path]:
    """The subfolders of ``folder`` (at any depth) that directly hold trace
    files: each is one run. Sorted."""
    return sorted({p.parent for p in folder.glob("*/**/*")
                   if p.is_file() and is_trace_name(p) and not is_hta_report_output(p)})


def _runs_message(folder: Path, runs: List[Path], verb: str, why: str = "") -> str:
    """``holds 3 separate runs in subfolders (a, b, c): analyze one ... or compare two ...``."""
    names = [str(r.relative_to(folder)) for r in runs]
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    return (f"{verb} {len(runs)} separate runs in subfolders ({shown}){why}: analyze one "
            f"(hta-report analyze {runs[0]}) or compare two "
            f"(hta-report compare {runs[0]} {runs[1]})")


#: ``<worker>.<n>.pt.trace.json[.gz]``: a file of one profiling cycle of one
#: process (``tensorboard_trace_handler``: ``n`` is the time in ms;
#: ``hta-report collect``: the cycle number).
_WINDOW = re.compile(r"^(?P<worker>.+)\.(?P<n>\d+)\.pt\.trace\.json(?:\.gz)?$", re.IGNORECASE)
#: ``distributedInfo.rank`` in the head of a Kineto trace (written before ``traceEvents``).
_HEAD_RANK = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*"?(\d+)')


def split_windows(paths: Sequence[Path]) -> Tuple[List[Path], List[WorkerWindows]]:
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

    Args:
        paths: trace files, sorted.

    Returns:
        ``(files, windows)``: ``paths`` without the earlier windows (in their
        order), and one entry per process with several windows.
    """
    groups: Dict[Tuple[str, str], List[Tuple[int, Path]]] = {}
    for p in paths:
        m = _WINDOW.match(p.name)
        if m:
            groups.setdefault((str(p.parent), m["worker"]), []).append((int(m["n"]), p))
    set_aside: Dict[Path, None] = {}
    windows: List[WorkerWindows] = []
    for (_, worker), files in sorted(groups.items()):
        if len(files) < 2:
            continue
        files.sort(key=lambda f: f[0])
        ranks = {_head_rank(p) for _, p in files} - {None}
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


def _size(path: Path) -> int:
    """The stored size of ``path`` (bytes); 0 when it cannot be read (the loader says why)."""
    try:
        return int(path.stat().st_size)
    except Exception:  # noqa: BLE001 - a URL's filesystem raises its own errors; the loader says why
        return 0


def _head_rank(path: Path) -> Optional[int]:
    """``distributedInfo.rank`` as written in the first 64 KiB of ``path``
    (decompressed), or None (absent, or the file cannot be read: the loader
    says why later)."""
    from ..files import open_text_stream

    try:
        with open_text_stream(path) as fh:
            head = fh.read(1 << 16)
    except Exception:  # noqa: BLE001 - unreadable here is reported by the loader
        return None
    m = _HEAD_RANK.search(head)
    return int(m.group(1)) if m else None


def rank_from_file_name(path: Path) -> Optional[int]:
    """The rank in a file name such as ``rank-3``, ``rank3`` or ``rank_3``; None if absent."""
    match = _RANK_IN_NAME.search(path.name)
    return int(match.group(1)) if match else None
