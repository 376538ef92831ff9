"""The SARIF reporter: findings as SARIF 2.1.0 for GitHub code scanning.

``render(result, charts)`` writes one SARIF log with one run:

* ``tool.driver.rules``: one reporting descriptor per rule of the catalogue
  (:data:`hta_report.rules.RULES`: every rule, fired or not), sorted by id,
  the same on every run (nothing in it comes from the result or the
  configuration): ``id`` (the rule's id, its one public name), ``name`` (the
  id in CamelCase), ``shortDescription`` (its title), ``fullDescription``
  (what it checks), ``help`` (the fix, as text and markdown), ``helpUri``
  (the documentation of the fix) and ``properties`` (``tags``: performance
  and the rule's area; ``precision``: ``high`` where the threshold has a
  published source, ``medium`` for a proposal). A finding whose rule this
  version lacks (a result saved by another version) gets a descriptor of its
  own after them.
* ``results``: one result per finding, in the result's order (largest gain
  first), none left out: its ``level`` from the severity (high ``error``,
  medium ``warning``, low ``note``), a message with the estimated gain, the
  evidence and the fix, ``partialFingerprints`` that stay the same from run
  to run (:func:`fingerprint`: the rule, the file and the title without its
  numbers), and exactly one location:

  1. the finding's first source line (the largest share of its time,
     :attr:`~hta_report.model.Finding.locations` with a repository-relative
     path, :func:`placeable`), its other lines as ``relatedLocations``;
  2. else, for a finding tied to no line (traces recorded without Python
     stacks, a cause no line explains, lines outside the source root), the
     run's anchor (:func:`anchor`) at line 1, and the message says that the
     finding is not tied to a line. The anchor is the first of, each only
     where it is a regular file inside the source root (after links are
     resolved; a path outside it is never looked at):

     a. the training script the run's ``manifest.json`` names (``hta-report
        collect -- python train.py``: ``run.command`` under ``run.cwd``; the
        ``profile()`` API: the script of ``command_line``, under the source
        root when relative);
     b. the trace folder's ``manifest.json``;
     c. the first trace file (by path);
     d. ``pyproject.toml`` at the source root (where ``[tool.hta-report]``
        sets the thresholds), then its ``README.md`` (:data:`FALLBACK_URIS`);

  3. else (none of those files exists) no physical location at all: SARIF
     allows a result with a message alone. The message and the property
     ``placed_on_file`` (false) say so; a location is never a file that the
     repository lacks.

  The source root is the ``--source-root`` the result's lines were located
  under (``inventory.source_root``), else the one
  :func:`hta_report.locate.source_root_for` gives without it: the git work
  tree of the current directory, else the current directory
  (:func:`sarif_log` takes another).
* ``invocations``: the run succeeded, with what each rule concluded on this
  run in its properties (``checks``).

GitHub code scanning needs a location on every result (an upload with one
result without it is rejected): hence the anchor, so that every finding
reaches the pull request; where the source root holds none of the anchor's
files there is no file to name (:func:`placement_note` says so on stderr). Every trace-derived string goes through
:func:`hta_report.escape.sarif_text`.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..escape import md_text, sarif_text
from ..model import AnalysisResult, Comparison, Finding, Inventory, SourceLocation, is_doc_url, saves
from .fmt import fixed, pct
from .view import HOW

#: The schema a SARIF 2.1.0 log names (the OASIS standard, errata 01).
SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
#: SARIF ``level`` of each finding severity.
LEVELS = {"high": "error", "medium": "warning", "low": "note"}
#: The key of :func:`fingerprint` in ``partialFingerprints`` (a new version, a new key).
FINGERPRINT_KEY = "hta-report/v1"
#: The last anchors (:func:`anchor`), each only where it is a file at the
#: source root: the repository's configuration file, then its README.
FALLBACK_URIS = ("pyproject.toml", "README.md")
#: The first of :data:`FALLBACK_URIS`.
FALLBACK_URI = FALLBACK_URIS[0]
#: Folders an anchor never lies in (environments, caches, version control).
_NOT_USER_DIRS = frozenset({"site-packages", "dist-packages", "node_modules", "__pycache__", ".git", ".hg", ".svn",
                            ".venv", "venv", ".tox", ".mypy_cache", ".pytest_cache"})
_PYTHON = re.compile(r"^python[0-9.]*(\.exe)?$")


@dataclass(frozen=True)
class Anchor:
    """Where findings without a source line are placed (:func:`anchor`):
    ``uri`` relative to the source root (empty: on no file, none exists),
    and ``what`` it is, in words."""

    uri: str
    what: str


def placeable(loc: SourceLocation) -> bool:
    """Whether ``loc`` may be a SARIF location: a path relative to the
    repository root, ``/`` separators, no ``..``, no scheme, no drive, no
    backslash, no leading ``~`` and no control character. Files found under the source root
    have such paths (:mod:`hta_report.locate`); a path the trace gave for a
    file that was not found is a location only when it has that shape too
    (``train.py`` recorded by a relative command line), never an absolute
    path, a URL (``https://``, ``javascript:``) or a way out (``../``)."""
    return _relative(loc.path)


def _relative(p: str) -> bool:
    if not p or p.startswith(("/", "\\", "~")) or "\\" in p or ":" in p:
        return False
    return all(part not in ("", ".", "..") for part in p.split("/")) and p.isprintable()


def _uri(path: str) -> str:
    """A relative path (:func:`placeable`) as a URI reference: characters a URI may not hold percent-encoded."""
    from urllib.parse import quote

    return quote(path, safe="/!$&'()*+,;=-._~")


# ---------------------------------------------------------------- the anchor

def _within(path: str, base: Optional[Path], root: Path) -> Optional[str]:
    """``path`` (under ``base`` when relative) relative to ``root``, ``/``
    separators, when it is a regular file inside ``root``: first by its
    words alone (nothing outside the root is looked at), then with links
    resolved. None otherwise."""
    if not isinstance(path, str) or not path or "\x00" in path or "://" in path:
        return None
    p = Path(path)
    if not p.is_absolute():
        if base is None:
            return None
        p = base / p
    lexical = Path(os.path.normpath(p))
    if not lexical.is_relative_to(root):
        return None
    try:
        real = lexical.resolve()
        if not real.is_relative_to(root) or not real.is_file():
            return None
    except (OSError, RuntimeError, ValueError):
        return None
    rel = real.relative_to(root).as_posix()
    parts = rel.split("/")
    if not _relative(rel) or any(x in _NOT_USER_DIRS for x in parts):
        return None
    return rel


def _script_words(manifest: Mapping[str, object]) -> Tuple[List[str], Optional[str]]:
    """The command that ran the script (``[python] script.py ...`` or
    ``[python] -m module ...``) and the folder it ran in, from the manifest
    ``hta-report collect`` wrote; ``([], None)`` for a built-in workload."""
    run = manifest.get("run")
    run = run if isinstance(run, dict) else {}
    cwd = run.get("cwd") if isinstance(run.get("cwd"), str) else None
    if run.get("mode") == "script":
        words = run.get("command")
    elif run.get("mode") in (None, "api"):  # profile() inside the user's script: its sys.argv
        words = manifest.get("command_line")
    else:
        return [], None
    if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
        return [], None
    return list(words), cwd


def _script_paths(words: Sequence[str]) -> List[str]:
    """The script a command runs, as candidate paths (``-m pkg.mod``:
    ``pkg/mod.py``, then ``pkg/mod/__main__.py``)."""
    words = list(words)
    if words and _PYTHON.match(PurePosixPath(words[0].replace("\\", "/")).name):
        words = words[1:]
        while words and words[0] in ("-u", "-B", "-O", "-OO", "-s", "-E", "-I"):
            words = words[1:]
    if not words or not words[0]:
        return []
    if words[0] == "-m":
        if len(words) < 2 or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", words[1]):
            return []
        mod = words[1].replace(".", "/")
        return [f"{mod}.py", f"{mod}/__main__.py"]
    return [] if words[0].startswith("-") else [words[0]]


def anchor(result: AnalysisResult, root: Optional[Path]) -> Anchor:
    """Where the findings of ``result`` without a source line are placed
    (see the module docstring): the collected script, the trace folder's
    ``manifest.json``, the first trace file, each where it is a file inside
    ``root``; else the first of :data:`FALLBACK_URIS` that is a file at
    ``root``; else ``Anchor("", ...)``: on no file. ``root`` None (the
    current directory was removed): on no file."""
    nowhere = Anchor("", "no file: no script, manifest or trace file of the run, and no "
                         + " or ".join(FALLBACK_URIS) + ", lies under the source root")
    try:
        root = root.resolve() if root is not None else None
    except (OSError, RuntimeError):
        root = None
    if root is None:
        return nowhere
    fallback = nowhere
    for name in FALLBACK_URIS:
        uri = _within(name, root, root)
        if uri:
            what = "the repository's configuration file" if name == "pyproject.toml" else "the repository's README"
            fallback = Anchor(uri, f"{what}: no script, manifest or trace file of the run lies under the "
                                   "source root")
            break
    inv = result.inventory
    manifest = inv.manifest if isinstance(inv.manifest, dict) else {}
    words, cwd = _script_words(manifest)
    for name in _script_paths(words):
        uri = _within(name, Path(cwd) if cwd else root, root)
        if uri:
            return Anchor(uri, "the collected script")
    try:
        here: Optional[Path] = Path.cwd()  # where the traces were named, relative ones included
    except OSError:
        here = None
    if manifest:
        folders = [inv.input_dir] + sorted({os.path.dirname(f.path) for f in inv.files})
        for folder in folders:
            uri = _within(os.path.join(folder, "manifest.json"), here, root) if folder else None
            if uri:
                return Anchor(uri, "the trace folder's manifest")
    for path in sorted(f.path for f in inv.files):
        uri = _within(path, here, root)
        if uri:
            return Anchor(uri, "the first trace file")
    return fallback


def _root_of(result: AnalysisResult) -> Optional[Path]:
    """The source root of ``result``: its ``--source-root`` when one was given
    (``inventory.source_root``), else the current directory's (:func:`_default_root`)."""
    given = result.inventory.source_root
    return Path(given) if given else _default_root()


def _default_root() -> Optional[Path]:
    from ..locate import source_root_for

    try:
        return source_root_for()
    except OSError:  # the current directory was removed
        return None


# ---------------------------------------------------------------- rules

def _camel(rule_id: str) -> str:
    return "".join(w[:1].upper() + w[1:] for w in re.split(r"[^A-Za-z0-9]+", rule_id) if w)


def _plain(markdown: str) -> str:
    """Our own markdown (the catalogue's texts) as SARIF plain text."""
    return sarif_text(markdown.replace("`", ""))


def rule_descriptors() -> List[Dict[str, object]]:
    """One reporting descriptor per rule of the catalogue, sorted by id (see the module docstring)."""
    from ..rules import RULES

    out: List[Dict[str, object]] = []
    for r in sorted(RULES, key=lambda r: r.id):
        area = r.check.__module__.rpartition(".")[2]
        desc: Dict[str, object] = {
            "id": r.id, "name": _camel(r.id),
            "shortDescription": {"text": _plain(r.title)},
            "fullDescription": {"text": _plain(r.description)},
            "help": {"text": _plain(f"Fix: {r.fix} Threshold source: {r.source}."),
                     "markdown": f"**Fix:** {r.fix}\n\n**What it checks:** {r.description}\n\n"
                                 f"**Threshold source:** {r.source}. The catalogue: `hta-report rules`, or "
                                 f"`docs/RULES.md#{r.id}` in hta-report's repository."},
            "properties": {"tags": ["performance", area],
                           "precision": "medium" if "proposal" in r.source.lower() else "high"},
        }
        if is_doc_url(r.doc_url):
            desc["helpUri"] = r.doc_url
        out.append(desc)
    return out


def _unknown_rule(rule_id: str) -> Dict[str, object]:
    """A descriptor for a finding's rule that this version's catalogue lacks (a saved result)."""
    said = (f"{rule_id}: a rule of the hta-report version that saved this result; not in this "
            "version's catalogue (hta-report rules)")
    text = sarif_text(said)
    # help.markdown is rendered as markdown by code scanning: the saved id is inert text there
    return {"id": rule_id, "name": _camel(rule_id) or "Rule", "shortDescription": {"text": text},
            "fullDescription": {"text": text}, "help": {"text": text, "markdown": md_text(said)},
            "properties": {"tags": ["performance"], "precision": "medium"}}


# ---------------------------------------------------------------- results

def fingerprint(f: Finding, uri: str) -> str:
    """What stays the same for one finding from run to run: a hash of its
    rule, the file it is placed in and its title without numbers (the share
    of the step changes every run; the line moves with edits)."""
    title = re.sub(r"\d+(?:[.,]\d+)*", "#", f.title)
    return hashlib.sha256(f"{f.id}\n{uri}\n{title}".encode("utf-8")).hexdigest()[:32]


def _location_message(loc: SourceLocation) -> str:
    calls = f", one of {loc.calls} such calls in {loc.function} (the trace does not say which)" \
        if loc.calls > 1 else ""
    how = HOW.get(loc.how, loc.how)
    return sarif_text(f"{loc.function or 'this line'}: {fixed(loc.time_us / 1e3, 2)} ms per step "
                      f"({loc.share_pct:.0f} % of the finding's time) {how}{calls}")


def _physical(uri: str, line: int) -> Dict[str, object]:
    return {"artifactLocation": {"uri": _uri(uri)}, "region": {"startLine": max(int(line), 1)}}


def _why_no_line(result: AnalysisResult, f: Finding) -> str:
    if f.locations:
        return "its source lines are not paths under the source root"
    if result.ranks and not any(r.code.has_stacks for r in result.ranks):
        return "the traces have no Python stacks, which with_stack=True records"
    return "no line of code is attributed to it"


def _message(f: Finding, unplaced: str = "") -> str:
    ranks = ", ".join(str(r) for r in f.ranks[:8]) + (" …" if len(f.ranks) > 8 else "")
    parts = [f"{f.title}."]
    if unplaced:
        parts.append(unplaced)
    w = f.whatif
    where = f"on the worst rank{'s' if len(f.ranks) > 1 else ''} ({ranks or 'all ranks'})"
    if w is not None and w.step_us_before > 0 and w.plausible:  # the finding's gain is its prediction (one figure)
        if w.slowest_of:
            where = f"for the job ({w.slowest_of} ranks that wait for each other at collectives)"
        parts.append(f"Predicted gain: {fixed(f.gain_ms_per_step, 2)} ms per step ({pct(f.gain_pct)} of the step) "
                     f"{where}" + ("." if w.measurable else ", within the noise: no measurable gain expected."))
        parts.append(f"Predicted after the fix (replay of the trace: {w.description}): step "
                     f"{fixed(w.step_us_before / 1e3, 2)} ms -> {fixed(w.step_us_after / 1e3, 2)} ms "
                     f"(80 %: {fixed(w.step_us_low / 1e3, 2)}-{fixed(w.step_us_high / 1e3, 2)} ms) "
                     + (f"for the job of {w.slowest_of} ranks, rank {w.rank} the slowest after the fix" if w.slowest_of
                        else f"on rank {w.rank}")
                     + ("." if saves(w) else ": no gain alone, what it shortens is off the replayed critical path "
                        "(the HTML report names it)."))
    else:
        parts.append(f"Estimated gain: up to {fixed(f.gain_ms_per_step, 2)} ms per step ({pct(f.gain_pct)} of the "
                     f"step) {where}.")
    if f.evidence:
        parts.append("Evidence: " + "; ".join(f.evidence) + ".")
    if f.fix:
        parts.append("Fix: " + " ".join(f.fix.split()))
    return sarif_text(" ".join(parts))


def _result(result: AnalysisResult, f: Finding, where: Anchor, index: Dict[str, int]) -> Dict[str, object]:
    placed = [loc for loc in f.locations if placeable(loc)]
    res: Dict[str, object] = {"ruleId": f.id, "ruleIndex": index[f.id], "level": LEVELS.get(f.severity, "note")}
    if placed:
        first, *others = placed
        res["message"] = {"text": _message(f)}
        res["locations"] = [{"physicalLocation": _physical(first.path, first.line),
                             "message": {"text": _location_message(first)}}]
        if others:
            res["relatedLocations"] = [{"id": i, "physicalLocation": _physical(loc.path, loc.line),
                                        "message": {"text": _location_message(loc)}}
                                       for i, loc in enumerate(others, 1)]
        uri = first.path
    else:
        why = _why_no_line(result, f)
        if where.uri:
            res["message"] = {"text": _message(f, f"Not tied to a source line: {why}; placed on {where.uri}, "
                                                  f"{where.what}.")}
            res["locations"] = [{"physicalLocation": _physical(where.uri, 1), "message": {"text": sarif_text(
                f"{where.uri}: {where.what}; this finding is not tied to a line of it: {why}")}}]
        else:  # SARIF allows a result without a location: never one on a file the repository lacks
            res["message"] = {"text": _message(f, f"Not tied to a source line: {why}; placed on {where.what}.")}
        uri = where.uri
    res["partialFingerprints"] = {FINGERPRINT_KEY: fingerprint(f, uri)}
    props: Dict[str, object] = {"severity": f.severity, "gain_ms_per_step": round(f.gain_ms_per_step, 3),
                                "gain_pct": round(f.gain_pct, 2), "ranks": list(f.ranks),
                                "placed_on_line": bool(placed), "placed_on_file": bool(placed or where.uri)}
    if f.whatif is not None and f.whatif.step_us_before > 0 and f.whatif.plausible:  # the replay's prediction
        props["predicted_step_ms"] = round(f.whatif.step_us_after / 1e3, 3)
    res["properties"] = props
    return res


def sarif_log(result: AnalysisResult, root: Optional[Path] = None) -> Dict[str, object]:
    """The SARIF log of ``result`` as plain JSON values (see the module
    docstring); ``root``: the source root findings without a line are
    anchored under (default: the ``--source-root`` the result was located
    with, else the current directory's, :func:`hta_report.locate.source_root_for`)."""
    if root is None:
        root = _root_of(result)
    rules = rule_descriptors()
    known = {str(r["id"]) for r in rules}
    rules += [_unknown_rule(i) for i in sorted({f.id for f in result.findings} - known)]
    index = {str(r["id"]): i for i, r in enumerate(rules)}
    where = anchor(result, root) if result.findings else None
    results = [_result(result, f, where, index) for f in result.findings] if where is not None else []
    driver: Dict[str, object] = {"name": "hta-report", "rules": rules}
    if result.inventory.tool_version:
        driver["version"] = result.inventory.tool_version
    checks = [{"ruleId": c.id, "status": c.status, "detail": sarif_text(c.detail)} for c in result.checks]
    run: Dict[str, object] = {"tool": {"driver": driver}, "results": results,
                              "invocations": [{"executionSuccessful": True, "properties": {"checks": checks}}]}
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def placement_note(result: AnalysisResult, root: Optional[Path] = None) -> str:
    """One line saying how many findings of ``result`` :func:`render` placed
    on no source line, and where: ``"2 of 3 findings have no source line;
    anchored to train.py (the collected script)"``; empty when every finding
    has its line (or there is none). ``root`` as :func:`sarif_log`'s."""
    unplaced = [f for f in result.findings if not any(placeable(loc) for loc in f.locations)]
    if not unplaced:
        return ""
    where = anchor(result, root if root is not None else _root_of(result))
    n, total = len(unplaced), len(result.findings)
    verb = "has" if n == 1 else "have"
    placed = f"anchored to {where.uri} ({where.what})" if where.uri else f"placed on {where.what}"
    return f"{n} of {total} finding{'s' if total > 1 else ''} {verb} no source line; {placed}"


def render(result: AnalysisResult, charts: Mapping[str, str]) -> str:
    """``result``'s findings as a SARIF 2.1.0 log (JSON text); ``charts`` is unused."""
    return json.dumps(sarif_log(result), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def render_comparison(comparison: Comparison) -> str:
    """The new side's findings as SARIF (what a pull request would merge);
    an empty run when the new side is not part of the comparison."""
    new = comparison.new if comparison.new is not None else AnalysisResult(inventory=Inventory(input_dir=""))
    return render(new, {})
