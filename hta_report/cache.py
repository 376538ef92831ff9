"""The on-disk cache: its directory, content keys, and the result cache.

Entries are keyed by the *content* of the trace files (a BLAKE2b hash of each
file's bytes as stored, so a gzipped trace is hashed in its compressed form:
about a tenth of the bytes that parsing reads, and a small fraction of its
time), the code's fingerprint, HTA's and pandas' versions and the options.
Renaming or touching a file keeps its entry; changing one byte does not.
Nothing is ever trusted without the key matching: an entry that cannot be
read, or that reads back wrong, is ignored (and rewritten by the next run).
Result entries are also signed (HMAC-SHA256) with a per-user key kept outside
the cache (:func:`signing_key`), so that an entry written by anyone else (a
forged result that would pass a ``--fail-on`` gate) is a miss; entries are
read only as regular files of bounded size (:func:`hta_report.files.read_regular`).

- ``parse-v1/<key>.arrow``: one parsed trace file
  (:class:`hta_report.load.parse_cache.ParseCache`);
- ``result-v1/<key>.json``: a whole :class:`~hta_report.model.AnalysisResult`
  for a directory (:class:`ResultCache`);
- ``result-v1/<key>.charts.json``: the report's chart images for a result,
  keyed by the result's own content (:meth:`ResultCache.charts`).

Writes go to a temporary file in the same directory, then are renamed into place
(:func:`hta_report.output.replace_atomically`, the writer reports use too).
The default location is the platform's cache folder (:func:`default_cache_dir`,
``~/.cache/hta-report`` on Linux); ``hta-report analyze --cache-dir DIR`` picks
another, ``--no-cache`` none. The cache holds at most 2 GiB
(``HTA_REPORT_CACHE_MAX_SIZE``): after each stored result the least recently
used entries are evicted (:func:`prune`); ``hta-report cache info`` shows it and
``hta-report cache clear`` empties it.
"""
from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import logging
import os
import stat
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

from .escape import is_image_data_uri
from .files import read_regular
from .output import replace_atomically
from .sizes import parse_size

logger = logging.getLogger(__name__)

CACHE_FORMAT = 1
_HASH_CHUNK = 1 << 20


#: The environment variable that caps the cache's size (``2GiB``, ``500MB``, bytes).
MAX_SIZE_ENV = "HTA_REPORT_CACHE_MAX_SIZE"
#: The cap without it: 2 GiB, about five 300 MB traces' parses (an entry
#: takes ~1.4x its trace's gzip size) and thousands of results.
DEFAULT_MAX_BYTES = 2 << 30
#: The entry folders under a cache root (each format's; older formats are
#: counted and evicted like the rest).
ENTRY_GLOBS = ("parse-v*", "result-v*")


def default_cache_dir() -> Path:
    """The platform's cache folder for hta-report (``platformdirs.user_cache_dir``:
    ``$XDG_CACHE_HOME/hta-report`` or ``~/.cache/hta-report`` on Linux,
    ``~/Library/Caches/hta-report`` on macOS, ``%LOCALAPPDATA%\\hta-report\\Cache``
    on Windows)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("hta-report", appauthor=False))


def max_cache_bytes() -> int:
    """The cache's size cap in bytes: :data:`MAX_SIZE_ENV` when set, else
    :data:`DEFAULT_MAX_BYTES`.

    Raises:
        ValueError: the variable is not a size (``2GiB``, ``500MB``, bytes).
    """
    raw = os.environ.get(MAX_SIZE_ENV, "").strip()
    return parse_size(raw) if raw else DEFAULT_MAX_BYTES


@dataclasses.dataclass(frozen=True)
class CacheUsage:
    """What a cache folder holds: ``entries`` files of ``size_bytes`` bytes in
    all, under ``root``, against the cap ``max_bytes``."""

    root: Path
    entries: int
    size_bytes: int
    max_bytes: int


def _entries(root: Path) -> list[tuple[float, int, Path]]:
    """``(mtime, size, path)`` of every entry file under ``root`` (temporary
    files being written left out), oldest first."""
    out = []
    for pattern in ENTRY_GLOBS:
        for folder in root.glob(pattern):
            if not folder.is_dir() or folder.is_symlink():
                continue
            for f in folder.iterdir():
                if f.name.startswith("."):
                    continue
                try:
                    st = f.lstat()
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    out.append((st.st_mtime, st.st_size, f))
    return sorted(out, key=lambda e: (e[0], str(e[2])))


def usage(root: os.PathLike | str, max_bytes: Optional[int] = None) -> CacheUsage:
    """The entries under ``root`` and their total size (a missing folder is empty)."""
    entries = _entries(Path(root))
    cap = max_cache_bytes() if max_bytes is None else max_bytes
    return CacheUsage(Path(root), len(entries), sum(size for _, size, _ in entries), cap)


def prune(root: os.PathLike | str, max_bytes: Optional[int] = None) -> int:
    """Evict the least recently used entries (a read refreshes an entry's
    mtime, :func:`touch`) until the entries under ``root`` total at most
    ``max_bytes`` (default :func:`max_cache_bytes`). Entries of older code or
    formats, never read again, are evicted first. Returns the bytes removed;
    a file that cannot be removed is skipped (logged at debug level)."""
    entries = _entries(Path(root))
    cap = max_cache_bytes() if max_bytes is None else max_bytes
    total = sum(size for _, size, _ in entries)
    removed = 0
    for _, size, path in entries:
        if total - removed <= cap:
            break
        try:
            path.unlink()
            removed += size
        except OSError as exc:
            logger.debug("cannot evict %s: %s", path, exc)
    return removed


def clear(root: os.PathLike | str) -> int:
    """Remove every entry under ``root``; returns the bytes removed."""
    return prune(root, max_bytes=0)


def touch(path: Path) -> None:
    """Mark an entry as just used (its mtime), so that :func:`prune` keeps it longest."""
    try:
        os.utime(path)
    except OSError:
        pass


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
        """Store ``result`` (an ``AnalysisResult``) under ``key`` (best effort),
        then hold the whole cache to its cap (:func:`prune`: the least recently
        used parses and results go first)."""
        self._write(f"{key}.json", {"key": key, "result": result.to_json()}, "result")
        try:
            prune(self.cache.root)
        except (OSError, ValueError) as exc:  # a bad HTA_REPORT_CACHE_MAX_SIZE was refused by the CLI already
            logger.debug("cache not pruned: %s", exc)

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
        """The entry ``name`` when it is a regular file of at most
        :data:`MAX_ENTRY_BYTES` holding ``key`` and signed by this user
        (:func:`signing_key`, :func:`_mac`); else None (a miss)."""
        secret = signing_key()
        if secret is None:
            return None
        try:
            raw = read_regular(self.dir / name, MAX_ENTRY_BYTES)
            data = json.loads(raw.decode("utf-8")) if raw is not None else None
        except (OSError, ValueError):
            return None
        if not (isinstance(data, dict) and data.get("key") == key and isinstance(data.get("mac"), str)):
            return None
        body = {k: v for k, v in data.items() if k != "mac"}
        if not hmac.compare_digest(data["mac"], _mac(secret, body)):
            logger.debug("ignoring cache entry %s: not signed by this user's key", name)
            return None
        touch(self.dir / name)
        return body

    def _write(self, name: str, payload: dict, what: str) -> None:
        secret = signing_key()
        if secret is None:
            return
        try:
            text = json.dumps({**payload, "mac": _mac(secret, payload)})
            replace_atomically(self.dir / name, lambda tmp: _write_utf8(tmp, text))
        except Exception as exc:
            logger.debug("not caching %s %s: %s", what, name, exc)


def _write_utf8(path: str, text: str) -> None:
    """``text`` written to ``path`` as UTF-8 (a writer for :func:`~hta_report.output.replace_atomically`)."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


#: The largest result-cache entry read (bytes): a result of thousands of ranks is tens of MB;
#: past this (or a device file a link names) the entry is a miss, not a read without end.
MAX_ENTRY_BYTES = 1 << 30
#: The environment variable naming the file of the key that signs result-cache entries
#: (default: ``cache-signing.key`` in the platform's per-user data folder).
SIGNING_KEY_ENV = "HTA_REPORT_CACHE_KEY"
_SIGNING: Dict[str, Optional[bytes]] = {}


def signing_key() -> Optional[bytes]:
    """This user's secret (32 random bytes) that signs result-cache entries
    (:class:`ResultCache`), kept outside every cache folder: the file
    :data:`SIGNING_KEY_ENV` names, else ``cache-signing.key`` in
    ``platformdirs.user_data_dir("hta-report")``; created with mode 0600 on
    first use. A cache shared between users or machines (``--cache-dir`` on
    a shared disk, for Ray) is shared only where they share this file too:
    another key's entries are misses. None when the file can be neither read
    nor created (no result is read from or written to the cache then)."""
    import platformdirs

    env = os.environ.get(SIGNING_KEY_ENV, "").strip()
    path = Path(env) if env else Path(platformdirs.user_data_dir("hta-report", appauthor=False)) / "cache-signing.key"
    memo = str(path)
    if memo not in _SIGNING:
        _SIGNING[memo] = _load_or_create_key(path)
    return _SIGNING[memo]


def _load_or_create_key(path: Path) -> Optional[bytes]:
    for _ in range(2):
        try:
            data = read_regular(path, 4096)
            if data is not None and len(data) >= 32:
                return data
            if data is not None:
                return None  # a short key: not ours to overwrite
        except FileNotFoundError:
            pass
        except OSError:
            return None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except FileExistsError:
            continue  # another process made it first: read that one
        except OSError as exc:
            logger.debug("no cache signing key at %s: %s", path, exc)
            return None
        with os.fdopen(fd, "wb") as fh:
            fh.write(os.urandom(32))
    try:
        return read_regular(path, 4096)
    except OSError:
        return None


def _mac(secret: bytes, body: dict) -> str:
    """The HMAC-SHA256 of an entry's content (its JSON with sorted keys) under ``secret``."""
    return hmac.new(secret, json.dumps(body, sort_keys=True).encode("utf-8"), hashlib.sha256).hexdigest()

