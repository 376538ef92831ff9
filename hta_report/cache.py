"""The on-disk cache: its directory, content keys, and the result cache.

Entries are keyed by the *content* of the trace files (a BLAKE2b hash of each
file's bytes as stored, so a gzipped trace is hashed in its compressed form:
about a tenth of the bytes that parsing reads, and a small fraction of its
time), the code's fingerprint, HTA's and pandas' versions and the options.
Renaming or touching a file keeps its entry; changing one byte does not.
Nothing is ever trusted without the key matching: an entry that cannot be
read, or that reads back wrong, is ignored (and rewritten by the next run).

- ``parse-v1/<key>.arrow``: one parsed trace file
  (:class:`hta_report.load.parse_cache.ParseCache`);
- ``result-v1/<key>.json``: a whole :class:`~hta_report.model.AnalysisResult`
  for a directory (:class:`ResultCache`);
- ``result-v1/<key>.charts.json``: the report's chart images for a result,
  keyed by the result's own content (:meth:`ResultCache.charts`).

Writes go to a temporary file in the same directory, then are renamed into place
(:func:`hta_report.output.replace_atomically`, the writer reports use too).
The default location is ``$XDG_CACHE_HOME/hta-report`` (``~/.cache/hta-report``);
``hta-report analyze --cache-dir DIR`` picks another, ``--no-cache`` none.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

from .escape import is_image_data_uri
from .output import replace_atomically

logger = logging.getLogger(__name__)

CACHE_FORMAT = 1
_HASH_CHUNK = 1 << 20


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/hta-report``, else ``~/.cache/hta-report``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hta-report"


def file_digest(path: os.PathLike | str) -> str:
    """BLAKE2b-160 of the file's bytes, read in 1 MiB chunks (hex string).

    Raises:
        OSError: the file cannot be read.
    """
    from .files import open_bytes

    h = hashlib.blake2b(digest_size=20)
    with open_bytes(path) as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


_CODE: Dict[str, str] = {}
#: The modules whose code decides what a parse produces (relative to the package).
PARSER_MODULES = ("load/fastparse.py", "load/parse.py", "load/parse_cache.py")


def code_fingerprint(which: str = "all") -> str:
    """BLAKE2b of hta-report's own source (``"parser"``: :data:`PARSER_MODULES`;
    ``"all"``: every module and template), so that a changed checkout never
    reads entries written by other code, version number or not."""
    if which not in _CODE:
        pkg = Path(__file__).resolve().parent
        if which == "parser":
            files = [pkg / m for m in PARSER_MODULES]
        else:
            files = sorted(pkg.rglob("*.py")) + sorted((pkg.parent / "templates").glob("*"))
            try:
                from importlib import resources

                files += sorted(Path(str(f)) for f in resources.files("hta_report.templates").iterdir())
            except Exception:  # pragma: no cover - templates not importable
                pass
        h = hashlib.blake2b(digest_size=16)
        for f in files:
            try:
                h.update(f.name.encode() + b"\0" + f.read_bytes())
            except OSError:
                continue
        _CODE[which] = h.hexdigest()
    return _CODE[which]


def make_key(parts: dict) -> str:
    """A cache key: BLAKE2b-160 of ``parts`` as canonical JSON (hex string)."""
    return hashlib.blake2b(json.dumps(parts, sort_keys=True).encode(), digest_size=20).hexdigest()


class Cache:
    """One cache directory: the place and the file digests (memoized for this
    run). :class:`ResultCache` and :class:`hta_report.load.parse_cache.ParseCache`
    store their entries in it."""

    def __init__(self, root: os.PathLike | str) -> None:
        self.root = Path(root)
        self._digests: Dict[Tuple[str, int, Optional[float]], str] = {}

    def digest(self, path: os.PathLike | str) -> str:
        """:func:`file_digest`, memoized for this run by (path, size, mtime).

        Raises:
            OSError: the file cannot be read.
        """
        from .files import version_key

        memo = version_key(path)
        if memo not in self._digests:
            self._digests[memo] = file_digest(path)
        return self._digests[memo]


def as_cache(cache) -> Optional[Cache]:
    """``cache`` as a :class:`Cache`: a Cache as is, a directory wrapped, None stays None."""
    if cache is None or isinstance(cache, Cache):
        return cache
    return Cache(cache)


class ResultCache:
    """Whole analysis results and their charts, in a :class:`Cache`. Every
    failure to read or write an entry is logged at debug level and treated as
    a miss; none raises."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self.dir = cache.root / f"result-v{CACHE_FORMAT}"

    def key(self, spec, config) -> Optional[str]:
        """Everything a result depends on: the run (``spec``, a
        :class:`~hta_report.load.spec.RunSpec`: its files' contents and
        names, the windows set aside, its options), the manifest, the rule
        configuration (an ``AdviceConfig`` or None) and the versions. None
        when a file cannot be read (no caching then: the analysis reports the file)."""
        import hta.version

        from . import __version__

        manifest = spec.folder / "manifest.json"
        try:
            files = [[str(p), self.cache.digest(p)] for p in spec.files]
            manifest_digest = self.cache.digest(manifest) if manifest.is_file() else None
        except OSError:
            return None
        cfg = dataclasses.asdict(config) if dataclasses.is_dataclass(config) and not isinstance(config, type) else None
        return make_key({
            "format": CACHE_FORMAT, "tool": __version__, "code": code_fingerprint("all"),
            "hta": str(getattr(hta.version, "__version__", "")), "run": spec.key_fields(),
            "files": files, "manifest": manifest_digest, "config": json.loads(json.dumps(cfg, default=str)),
        })

    def get(self, key: str):
        """The :class:`~hta_report.model.AnalysisResult` stored under ``key``
        (its ``analyzed_at`` set to now), or None. The entry is checked like a
        saved result (:func:`hta_report.model_check.check_result`): one that
        fails (edited by hand, damaged) is a miss, logged at debug level, and
        rewritten by the run."""
        import datetime as dt

        from .model import AnalysisResult
        from .model_check import check_result

        data = self._read(f"{key}.json", key)
        if data is None or not isinstance(data.get("result"), str):
            return None
        try:
            doc = json.loads(data["result"])
            check_result(doc)
            result = AnalysisResult.from_dict(doc)
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            logger.debug("ignoring result cache entry %s: %s", key, exc)
            return None
        result.inventory.analyzed_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        return result

    def put(self, key: str, result) -> None:
        """Store ``result`` (an ``AnalysisResult``) under ``key`` (best effort)."""
        self._write(f"{key}.json", {"key": key, "result": result.to_json()}, "result")

    def charts(self, result, compute: Callable[[], Dict[str, str]]) -> Dict[str, str]:
        """``compute()`` (the chart images of ``result``, name -> data URI), read
        from the cache when drawn before for a result with the same content
        (``analyzed_at`` and gates aside) by the same code, else drawn and stored. An
        entry holding anything but chart data (:func:`~hta_report.escape.is_image_data_uri`)
        is not used."""
        content = dataclasses.replace(result, inventory=dataclasses.replace(result.inventory, analyzed_at=""),
                                      gates=[])  # gates are this command's, not the charts'

        key = make_key({"format": CACHE_FORMAT, "code": code_fingerprint("all"),
                        "result": hashlib.blake2b(content.to_json().encode(), digest_size=20).hexdigest()})
        data = self._read(f"{key}.charts.json", key)
        if data is not None and isinstance(data.get("charts"), dict) \
                and all(isinstance(k, str) and is_image_data_uri(v) for k, v in data["charts"].items()):
            return dict(data["charts"])  # else (an entry edited to name a URL): drawn again
        charts = compute()
        self._write(f"{key}.charts.json", {"key": key, "charts": charts}, "charts")
        return charts

    def _read(self, name: str, key: str) -> Optional[dict]:
        try:
            data = json.loads((self.dir / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and data.get("key") == key else None

    def _write(self, name: str, payload: dict, what: str) -> None:
        try:
            text = json.dumps(payload)
            replace_atomically(self.dir / name, lambda tmp: _write_utf8(tmp, text))
        except Exception as exc:
            logger.debug("not caching %s %s: %s", what, name, exc)


def _write_utf8(path: str, text: str) -> None:
    """``text`` written to ``path`` as UTF-8 (a writer for :func:`~hta_report.output.replace_atomically`)."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
