"""The user's source lines behind each finding (``Finding.locations``).

The analysis recorded, per rank and cause, the time under each chain of
user frames (:class:`~hta_report.model.CodeTime`, from ``with_stack=True``
traces). This step, run by :func:`hta_report.api.analyze` after the rules
(and again on a cached result, since it reads the source files), turns them
into lines:

1. the finding's cause (:data:`CAUSES`: DataLoader, synchronization,
   pageable copies, optimizer step) and the rank among its ranks where that
   cause takes the most time;
2. per chain, "the user's frame": the innermost frame outside torch, the
   standard library, site-packages and the configuration's
   ``library_modules`` (:func:`hta_report.frames.is_user_frame`);
3. its file, found on disk under the source root only (:class:`SourceFinder`:
   as named, under the source root, the collector's working directory and
   the current directory where those lie inside the root, or by a match of
   the trace's trimmed path in the source tree), and
   its line: the trace gives the function's first line (or, for a function
   already running when tracing started, the line it was executing then),
   not the line of the call. With the source readable, the call is found in
   the function's body by what the frame called (``.item()``, ``next()`` or
   a ``for`` loop for the DataLoader's ``__next__``, ``.step()`` for the
   optimizer, ``.to()``/``.cuda()`` for copies): ``how="call"``. Several
   matching calls in one function are each listed with the whole time
   (``calls`` says how many; the trace does not tell them apart). Without
   the source, the frame's own line: ``how="def"`` or ``"frame"``.

What a trace names is untrusted (traces come from other people's jobs, and
reports are shared): a frame's path, or the collector's working directory in
a ``manifest.json`` beside the traces, never makes us read a file outside the
source root, ``--source-root``, else the git work tree of the current
directory. Without either (run from a home folder, say, where a frame could
name ``.jupyter/jupyter_server_config.py`` or any other file there) no source
is read at all: every line is the frame's own, and the report's warnings say
so once (:data:`NO_SOURCE_ROOT`). A path with a dot-folder in it
(``.jupyter``, ``.aws``, ``.venv``) is never read. Only regular ``.py`` files of at most
:data:`MAX_SOURCE_BYTES` are read, after symbolic links are resolved (a link
inside the root to a file outside it is outside). A line whose file was not
found keeps the path the trace gives as text only: it gets no URI, no link
and no excerpt.

URIs are relative to the source root (``/`` separators, no ``..``).
"""
from __future__ import annotations

import ast
import os
import re
import stat
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union
from urllib.parse import quote

from .files import read_regular
from .frames import called_name, is_user_frame, parse_frame
from .model import AnalysisResult, CodeTime, Finding, RankResult, SourceLocation

__all__ = ["CAUSES", "MAX_LOCATIONS", "MAX_SOURCE_BYTES", "MIN_SHARE_PCT", "NO_SOURCE_ROOT", "SourceFinder", "locate",
           "github_url", "git_work_tree", "source_root_for"]

#: Finding id -> the cause (:class:`~hta_report.model.CodeTime` category) whose lines it points at.
CAUSES = {
    "dataloader-bound": "dataloader",
    "dataloader-main-process": "dataloader",
    "sync-in-step": "sync",
    "pageable-memcpy": "pageable_copy",
    "unfused-optimizer": "optimizer",
}
#: Lines listed per finding, largest time first.
MAX_LOCATIONS = 5
#: Lines with less than this share of the cause's time are left out (%).
MIN_SHARE_PCT = 1.0
#: Source lines shown before and after the line.
EXCERPT_CONTEXT = 2
#: Characters kept of each excerpt line.
EXCERPT_WIDTH = 160
#: Files looked at when searching the source tree for a trimmed path.
SEARCH_LIMIT = 50_000
#: The largest source file read (bytes): larger ones are not read (the
#: frame's own line is given). The largest module of CPython's standard
#: library is under 0.3 MiB and of torch's Python sources about 1 MiB.
MAX_SOURCE_BYTES = 2 << 20
_SKIP_DIRS = {".git", ".hg", ".svn", ".venv", "venv", "env", "node_modules", "__pycache__", "site-packages",
              "dist-packages", ".tox", ".mypy_cache", ".pytest_cache", "build", "dist"}
#: Calls that stand for a cause when the frame's callee names none in the
#: source (``torch/optim/optimizer.py(509): wrapper`` is the decorator around ``step``).
CAUSE_CALLS = {
    "dataloader": ("__next__",),
    "sync": ("item", "cpu", "tolist", "numpy", "synchronize"),
    "pageable_copy": ("to", "cuda", "copy_"),
    "optimizer": ("step",),
}


def github_url(uri: str, line: int, env: Optional[Mapping[str, str]] = None) -> str:
    """The GitHub link of ``uri`` (relative to the repository root) at
    ``line``: ``$GITHUB_SERVER_URL/$GITHUB_REPOSITORY/blob/$GITHUB_SHA/uri#Lline``
    when ``GITHUB_REPOSITORY`` and ``GITHUB_SHA`` are set (GitHub Actions
    sets them) and well formed; empty otherwise, and for an absolute ``uri``."""
    env = os.environ if env is None else env
    repo, sha = env.get("GITHUB_REPOSITORY", ""), env.get("GITHUB_SHA", "")
    server = env.get("GITHUB_SERVER_URL", "") or "https://github.com"
    if not (re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repo) and re.fullmatch(r"[0-9a-fA-F]{7,64}", sha)
            and re.fullmatch(r"https?://[A-Za-z0-9.:-]+", server)):
        return ""
    if uri.startswith("/") or uri.startswith("file:") or ".." in uri.split("/"):
        return ""
    return f"{server}/{repo}/blob/{sha}/{quote(uri, safe='/')}#L{int(line)}"


#: The warning a report gets when no source was read: no ``--source-root``
#: and the current directory is not inside a git work tree.
NO_SOURCE_ROOT = ("source lines not read: no --source-root was given and the current directory is not inside a "
                  "git work tree, so no file the traces name was opened (the lines shown are the frames' own); "
                  "pass --source-root REPO to point the findings at your code")


def git_work_tree(path: Path) -> Optional[Path]:
    """The git work tree holding ``path`` (already resolved): the nearest of
    ``path`` and its parents with a ``.git`` entry (a folder, or the file a
    linked work tree or submodule has); None when there is none. Nothing is
    run (no ``git`` process)."""
    for p in [path] + list(path.parents):
        try:
            if os.path.lexists(p / ".git"):
                return p
        except (OSError, ValueError):
            continue
    return None


def source_root_for(source_root: Optional[os.PathLike | str] = None,
                    cwd: Optional[os.PathLike | str] = None) -> Path:
    """The source root, resolved: ``source_root`` (``--source-root``) when
    given, else the git work tree holding ``cwd`` (default: the current
    directory), else ``cwd`` itself (where SARIF anchors findings; :func:`locate`
    reads no source there, see :data:`NO_SOURCE_ROOT`).

    Raises:
        OSError: the current directory was removed (and neither is given).
    """
    if source_root:
        return Path(source_root).resolve()
    here = Path(cwd).resolve() if cwd else Path.cwd().resolve()
    return git_work_tree(here) or here


@dataclass
class SourceFinder:
    """Finds the files a trace's frames name, and their URIs, under one root.

    Attributes:
        root: the source root (resolved): nothing outside it is read, URIs
            are relative to it; its tree is searched for trimmed paths.
        bases: directories a relative name is tried under, in order (the
            source root, the collector's working directory, the current one);
            those outside ``root`` are ignored.
    """

    root: Path
    bases: List[Path] = field(default_factory=list)
    #: False: nothing is read (no source root was chosen): every frame keeps its own line.
    read: bool = True
    _found: Dict[tuple, Optional[Path]] = field(default_factory=dict)
    _trees: Dict[Path, Optional[Tuple[List[str], ast.AST]]] = field(default_factory=dict)
    _index: Optional[Dict[str, List[Path]]] = None

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()
        bases = []
        for b in self.bases:
            try:
                b = Path(b).resolve()
            except (OSError, RuntimeError, ValueError):
                continue
            if b.is_relative_to(self.root) and b not in bases:
                bases.append(b)
        self.bases = bases

    def find(self, name: str, line: int, function: str, entered: bool) -> Optional[Path]:
        """The file a frame's path ``name`` names: the first candidate (the
        path itself when absolute; under each base; else files of the source
        tree whose path ends with ``name``) that is readable source
        (:meth:`readable`) and defines ``function`` where the frame says
        (:func:`_scope`), so that a ``train.py`` of another project is not
        taken for the traced one. None when none does."""
        key = (name, line, function, entered)
        if key not in self._found:
            self._found[key] = next((c for c in self._candidates(name)
                                     if self._defines(c, line, function, entered)), None)
        return self._found[key]

    def _defines(self, file: Path, line: int, function: str, entered: bool) -> bool:
        src = self.source(file)
        return src is not None and line <= len(src[0]) and _scope(src[1], line, function, entered) is not None

    def _candidates(self, name: str) -> List[Path]:
        if not name or "\x00" in name:
            return []
        p = Path(name)
        out = [p] if p.is_absolute() else [base / p for base in self.bases]
        want = p.as_posix().lstrip("/")
        if want and ".." not in Path(want).parts:
            out += [h for h in self._search().get(p.name, []) if h.as_posix().endswith("/" + want)]
        return [c for c in dict.fromkeys(self._resolved(c) for c in out) if c is not None]

    def _resolved(self, candidate: Path) -> Optional[Path]:
        """``candidate`` with links resolved, when it is readable source (:meth:`readable`)."""
        try:
            real = candidate.resolve()
        except (OSError, RuntimeError, ValueError):
            return None
        return real if self.readable(real) else None

    def readable(self, file: Path) -> bool:
        """Whether ``file`` (resolved) may be read: inside the root, named
        ``*.py``, a regular file of at most :data:`MAX_SOURCE_BYTES`."""
        if not self.read or file.suffix != ".py" or not file.is_relative_to(self.root):
            return False
        if any(part.startswith(".") for part in file.relative_to(self.root).parts):
            return False  # dot-folders hold tools' settings and secrets (.jupyter, .aws, .venv), never the step
        try:
            st = file.stat()
        except (OSError, ValueError):
            return False
        return stat.S_ISREG(st.st_mode) and st.st_size <= MAX_SOURCE_BYTES

    def _search(self) -> Dict[str, List[Path]]:
        """Files of the source tree (the root) by name (none when nothing may be read)."""
        if self._index is None:
            self._index = defaultdict(list)
            if not self.read:
                return self._index
            seen = 0
            for d, dirs, files in os.walk(self.root):
                dirs[:] = [x for x in dirs if x not in _SKIP_DIRS and not x.startswith(".")]
                for f in files:
                    if f.endswith(".py"):
                        self._index[f].append(Path(d) / f)
                seen += len(files)
                if seen > SEARCH_LIMIT:
                    break
        return self._index

    def uri(self, file: Path) -> str:
        """``file`` (found by :meth:`find`) relative to the source root, ``/`` separators."""
        return file.relative_to(self.root).as_posix()

    def source(self, file: Path) -> Optional[Tuple[List[str], ast.AST]]:
        """The file's lines and syntax tree, or None when it may not be read
        (:meth:`readable`), cannot be, or is not Python."""
        if file not in self._trees:
            self._trees[file] = None
            real = self._resolved(file)
            if real is not None:
                try:
                    data = _read_checked(real)
                    if data is not None:
                        text = data.decode("utf-8")
                        self._trees[file] = (text.splitlines(), ast.parse(text))
                except (OSError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError, MemoryError):
                    pass
        return self._trees[file]


def _read_checked(real: Path) -> Optional[bytes]:
    """At most :data:`MAX_SOURCE_BYTES` of ``real`` (a path already resolved
    and checked by :meth:`SourceFinder.readable`) through
    :func:`~hta_report.files.read_regular` (no link followed, a regular
    file), or None when the file opened is not the one checked: it must have
    the device and inode that ``real`` names once more, with no link on the
    way to it. So a file or folder swapped for a link between the check and
    the read (to a file outside the source root) is not read.

    Raises:
        OSError: the file cannot be opened or read.
    """
    def same(opened: os.stat_result) -> bool:
        if Path(real).resolve() != real:
            return False
        now = os.stat(real, follow_symlinks=False)
        return (now.st_dev, now.st_ino) == (opened.st_dev, opened.st_ino)

    return read_regular(real, MAX_SOURCE_BYTES, same)


def _first_line(fn: Union[ast.FunctionDef, ast.AsyncFunctionDef]) -> int:
    decos = getattr(fn, "decorator_list", [])
    return min([fn.lineno] + [d.lineno for d in decos])


def _scope(tree: ast.AST, line: int, function: str, entered: bool) -> Optional[ast.AST]:
    """The function (or module, for ``<module>``) a frame ran: one named
    ``function`` whose first line is ``line`` when the frame was entered in
    the trace, else the innermost one of that name holding ``line``."""
    defs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.name == function]
    if entered:
        for n in defs:
            if line in (n.lineno, _first_line(n)):
                return n
    holding = [n for n in defs if _first_line(n) <= line <= (n.end_lineno or n.lineno)]
    if holding:
        return max(holding, key=_first_line)
    if function == "<module>":
        return tree
    return None


def _own_nodes(scope: ast.AST) -> Iterable[ast.AST]:
    """The nodes of ``scope``'s body, not those of functions or classes defined in it."""
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield n
        todo.extend(ast.iter_child_nodes(n))


#: Calls whose result is never a DataLoader (``for epoch in range(n)``), and
#: those that pass one of their arguments through (``enumerate(loader)``).
_NOT_LOADER_CALLS = frozenset({"range", "len", "items", "keys", "values", "split", "splitlines", "named_parameters",
                               "parameters", "modules", "children", "named_modules"})
_WRAPPER_CALLS = frozenset({"enumerate", "zip", "iter", "reversed", "tqdm", "islice"})


def _name_words(node: ast.AST) -> List[str]:
    """The names and attributes an expression mentions (``self.train_loader`` -> ``self``, ``train_loader``)."""
    return [n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node)
            if isinstance(n, (ast.Name, ast.Attribute))]


def _may_be_loader(node: ast.AST) -> bool:
    """Whether iterating ``node`` can call a DataLoader's ``__next__``: not a
    literal, a comprehension or a call of :data:`_NOT_LOADER_CALLS`
    (``range(n)``, ``d.items()``); a call of :data:`_WRAPPER_CALLS` when
    one of its arguments may be."""
    if isinstance(node, (ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.ListComp, ast.SetComp,
                         ast.DictComp, ast.JoinedStr)):
        return False
    if isinstance(node, ast.Call):
        f = node.func
        called = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        if called in _NOT_LOADER_CALLS:
            return False
        if called in _WRAPPER_CALLS:
            return any(_may_be_loader(a) for a in node.args)
    return True


def _loader_names(tree: ast.AST) -> set:
    """Names bound to a call of something named ``*Loader*`` (``loader = DataLoader(...)``) anywhere in ``tree``."""
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Assign, ast.AnnAssign)) and isinstance(n.value, ast.Call) and \
                any("loader" in w.lower() for w in _name_words(n.value.func)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                out.update(_name_words(t))
    return out


def _loader_loops(scope: ast.AST, loops: List[Tuple[int, ast.AST]], tree: Optional[ast.AST] = None) -> List[int]:
    """The lines of the loops ``loops`` (``(line, iterable)``) that iterate
    the DataLoader: those whose iterable may be one (:func:`_may_be_loader`:
    not ``for epoch in range(n)``), and of those, the ones whose iterable
    names a loader (a name with ``loader`` in it, or one bound to a call of
    a ``*Loader*``, :func:`_loader_names`) when some do."""
    maybe = [(line, it) for line, it in loops if _may_be_loader(it)]
    bound = _loader_names(tree if tree is not None else scope)
    named = [line for line, it in maybe
             if any("loader" in w.lower() or w in bound for w in _name_words(it))]
    return named or [line for line, _ in maybe]


def _call_lines(scope: ast.AST, names: Sequence[str], tree: Optional[ast.AST] = None) -> List[int]:
    """Lines in ``scope`` that call one of ``names`` (``x.name(...)`` or
    ``name(...)``); ``__next__`` also matches ``next(...)``, and the ``for``
    loops and comprehensions that iterate a DataLoader (:func:`_loader_loops`;
    ``tree``: the module, where the loader may be bound)."""
    out = set()
    loops: List[Tuple[int, ast.AST]] = []
    for n in _own_nodes(scope):
        if isinstance(n, ast.Call):
            f = n.func
            called = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if called in names or (called == "next" and "__next__" in names):
                out.add(n.lineno)
        elif "__next__" in names and isinstance(n, (ast.For, ast.AsyncFor)):
            loops.append((n.lineno, n.iter))
        elif "__next__" in names and isinstance(n, ast.comprehension):
            loops.append((n.iter.lineno, n.iter))
    out.update(_loader_loops(scope, loops, tree))
    return sorted(out)


#: The loops :func:`_loop_around` looks for.
_Loop = Union[ast.For, ast.AsyncFor, ast.While]


def _loop_around(scope: ast.AST, line: int) -> Optional[_Loop]:
    loops: List[_Loop] = [n for n in _own_nodes(scope) if isinstance(n, (ast.For, ast.AsyncFor, ast.While))
             and n.lineno <= line <= (n.end_lineno or n.lineno)]
    return max(loops, key=lambda n: n.lineno) if loops else None


def _lines_for(tree: ast.AST, line: int, function: str, entered: bool, callee: str,
               cause: str) -> Tuple[str, List[int]]:
    """``(how, lines)`` for one user frame (see the module docstring)."""
    fallback = ("def" if entered else "frame", [line])
    scope = _scope(tree, line, function, entered) if callee else None
    if scope is None:  # no call to look for (the time is in the frame itself), or no such function
        return fallback
    name = called_name(callee) if callee else ""
    lines = _call_lines(scope, (name,), tree) if name else []
    if not lines:
        lines = _call_lines(scope, CAUSE_CALLS.get(cause, ()), tree)
    if len(lines) > 1 and not entered:
        loop = _loop_around(scope, line)  # tracing starts inside the training loop: prefer its calls
        if loop is not None:
            inside = [x for x in lines if loop.lineno <= x <= (loop.end_lineno or loop.lineno)]
            lines = inside or lines
    return ("call", lines) if lines else fallback


def _worst(result: AnalysisResult, f: Finding, cause: str) -> Optional[RankResult]:
    ranks = [r for r in result.ranks if r.rank in f.ranks and r.code.has_stacks] or \
        [r for r in result.ranks if r.code.has_stacks]
    scored = [(sum(t.time_us for t in r.code.times if t.category == cause), r) for r in ranks]
    scored = [(t, r) for t, r in scored if t > 0]
    return max(scored, key=lambda tr: tr[0])[1] if scored else None


def _user_frame(t: CodeTime, library: Sequence[str]) -> Optional[Tuple[int, Tuple[str, int, str]]]:
    """The index of the first user frame of ``t`` and its ``(path, line, function)``; None when none is."""
    for i, frame in enumerate(t.frames):
        parsed = parse_frame(frame)
        if parsed and is_user_frame(parsed[0], library):
            return i, parsed
    return None


def finding_locations(result: AnalysisResult, f: Finding, finder: SourceFinder,
                      library: Sequence[str] = ()) -> List[SourceLocation]:
    """The source lines behind ``f`` (empty when its cause has no recorded
    time under user frames), largest time first, at most :data:`MAX_LOCATIONS`."""
    cause = CAUSES.get(f.id)
    if not cause:
        return []
    r = _worst(result, f, cause)
    if r is None:
        return []
    times = [t for t in r.code.times if t.category == cause]
    total = sum(t.time_us for t in times)
    acc: Dict[Tuple[str, int], Dict] = {}
    for t in times:
        user = _user_frame(t, library)
        if user is None:
            continue
        i, (path, line, function) = user
        entered = t.entered[i] if i < len(t.entered) else True
        callee = t.callees[i] if i < len(t.callees) else ""
        file = finder.find(path, line, function, entered)
        src = finder.source(file) if file is not None else None
        how, lines = _lines_for(src[1], line, function, entered, callee, cause) if src else \
            ("def" if entered else "frame", [line])
        for ln in lines:
            key = (str(file) if file else path, ln)
            loc = acc.setdefault(key, {"file": file, "path": path, "line": ln, "function": function, "how": how,
                                       "time": 0.0, "calls": len(lines)})
            loc["time"] += t.time_us
    out: List[SourceLocation] = []
    for loc in sorted(acc.values(), key=lambda d: (-d["time"], d["path"], d["line"])):
        share = float(100 * loc["time"] / total) if total > 0 else 0.0
        if share < MIN_SHARE_PCT or len(out) >= MAX_LOCATIONS:
            continue
        file = loc["file"]
        src = finder.source(file) if file is not None else None
        excerpt: List[str] = []
        start = 0
        if src is not None:
            text = src[0]
            lo = max(loc["line"] - 1 - EXCERPT_CONTEXT, 0)
            hi = min(loc["line"] + EXCERPT_CONTEXT, len(text))
            excerpt = [x if len(x) <= EXCERPT_WIDTH else x[:EXCERPT_WIDTH - 1] + "…" for x in text[lo:hi]]
            start = lo + 1
        uri = finder.uri(file) if file is not None else loc["path"]
        out.append(SourceLocation(path=uri, line=int(loc["line"]),
                                  url=github_url(uri, loc["line"]) if file is not None else "",
                                  function=loc["function"], how=loc["how"], time_us=float(loc["time"]),
                                  share_pct=min(share, 100.0), excerpt=excerpt, excerpt_start=start,
                                  found=file is not None, calls=loc["calls"]))
    return out


def locate(result: AnalysisResult, source_root: Optional[os.PathLike | str] = None,
           library: Sequence[str] = (), cwd: Optional[os.PathLike | str] = None) -> AnalysisResult:
    """Fill ``locations`` of every finding of ``result`` (in place; returns it).

    Args:
        result: an analysis with findings.
        source_root: the repository the traced code lives in (``--source-root``):
            the only tree read; default: the git work tree of ``cwd``
            (:func:`git_work_tree`). Without either nothing is read, and
            :data:`NO_SOURCE_ROOT` is added to the result's warnings (once)
            when a finding has source lines.
        library: more top-level modules or path prefixes that are library
            code (``library_modules`` of the configuration).
        cwd: the current directory (default: the process's): relative names
            are tried under it last, where it lies inside the root.

    Raises:
        OSError: no ``source_root`` is given and the current directory was removed.
    """
    root = source_root_for(source_root, cwd)
    read = bool(source_root) or git_work_tree(root) is not None
    bases = [root]
    run = result.inventory.manifest.get("run") if isinstance(result.inventory.manifest, dict) else None
    if isinstance(run, dict) and isinstance(run.get("cwd"), str):
        bases.append(Path(run["cwd"]))  # kept only inside the root (SourceFinder)
    try:
        bases.append(Path(cwd) if cwd else Path.cwd())
    except OSError:  # the current directory was removed
        pass
    finder = SourceFinder(root=root, bases=bases, read=read)
    for f in result.findings:
        f.locations = finding_locations(result, f, finder, library)
    if not read and any(f.locations for f in result.findings) and NO_SOURCE_ROOT not in result.inventory.warnings:
        result.inventory.warnings.append(NO_SOURCE_ROOT)
    return result
