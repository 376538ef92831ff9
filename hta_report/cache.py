"""On-disk cache of parsed traces and of analysis results.

Entries are keyed by the *content* of the trace files (a BLAKE2b hash of each
file's bytes as stored, so a gzipped trace is hashed in its compressed form:
about a tenth of the bytes that parsing reads, and a small fraction of its
time), the parser's version, HTA's and pandas' versions and the parser
configuration. Renaming or touching a file keeps its entry; changing one byte
does not. Nothing is ever trusted without the key matching: an entry that cannot
be read, or that reads back wrong, is ignored (and rewritten by the next parse).

- ``parse-v1/<key>.arrow``: one parsed trace file (HTA's metadata, event
  dataframe and symbol table) as an Arrow IPC file;
- ``result-v1/<key>.json``: a whole :class:`~hta_report.model.AnalysisResult`
  for a directory, keyed by every file's hash, the options and the tool version.

Writes go to a temporary file in the same directory, then are renamed into place.
The default location is ``$XDG_CACHE_HOME/hta-report`` (``~/.cache/hta-report``);
``hta-report analyze --cache-dir DIR`` picks another, ``--no-cache`` none.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Dict, Optional, Tuple

logger = logging.getLogger(__name__)

CACHE_FORMAT = 1
_HASH_CHUNK = 1 << 20


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/hta-report``, else ``~/.cache/hta-report``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hta-report"


def file_digest(path: os.PathLike | str) -> str:
    """BLAKE2b-160 of the file's bytes, read in 1 MiB chunks."""
    h = hashlib.blake2b(digest_size=20)
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(_HASH_CHUNK)
        view = memoryview(buf)
        while True:
            n = f.readinto(buf)
            if not n:
                break
            h.update(view[:n])
    return h.hexdigest()


_CODE: Dict[str, str] = {}


def code_fingerprint(which: str = "all") -> str:
    """BLAKE2b of hta-report's own source (``"parser"``: the parser modules;
    ``"all"``: every module and template), so that a changed checkout never
    reads entries written by other code, version number or not."""
    if which not in _CODE:
        pkg = Path(__file__).resolve().parent
        if which == "parser":
            files = [pkg / "fastparse.py", pkg / "ingest.py", pkg / "cache.py"]
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


def _key(parts: dict) -> str:
    return hashlib.blake2b(json.dumps(parts, sort_keys=True).encode(), digest_size=20).hexdigest()


def _atomic_write(path: Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class NotCacheable(Exception):
    """A dataframe column this cache cannot store exactly."""


class Cache:
    """The cache under one directory. Every failure to read or write an entry
    is logged at debug level and treated as a miss; none raises."""

    def __init__(self, root: os.PathLike | str) -> None:
        self.root = Path(root)
        self._digests: Dict[Tuple[str, int, int], str] = {}

    # ---------------------------------------------------------------- keys
    def digest(self, path: os.PathLike | str) -> str:
        """:func:`file_digest`, memoized for this run by (path, size, mtime)."""
        st = os.stat(path)
        memo = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
        if memo not in self._digests:
            self._digests[memo] = file_digest(path)
        return self._digests[memo]

    def parse_key(self, path: os.PathLike | str, cfg, loader: str) -> str:
        import hta.version
        import pandas

        from .fastparse import PARSER_VERSION

        args = [[a.name, a.raw_name, a.value_type.name, repr(a.default_value)] for a in cfg.get_args()]
        return _key({
            "format": CACHE_FORMAT, "file": self.digest(path), "loader": loader, "parser": PARSER_VERSION,
            "code": code_fingerprint("parser"),
            "hta": getattr(hta.version, "__version__", ""), "pandas": pandas.__version__, "args": args,
            "backend": str(cfg.parser_backend), "parse_all_args": bool(cfg.parse_all_args),
        })

    # ---------------------------------------------------------------- parsed traces
    def _parse_path(self, key: str) -> Path:
        return self.root / f"parse-v{CACHE_FORMAT}" / f"{key}.arrow"

    def get_parsed(self, key: str):
        """``(meta, df, symbol_table)`` stored under ``key``, or None."""
        path = self._parse_path(key)
        if not path.is_file():
            return None
        try:
            return _read_parsed(path, key)
        except Exception as exc:  # a corrupt or foreign entry is a miss
            logger.debug("ignoring cache entry %s: %s: %s", path, type(exc).__name__, exc)
            return None

    def put_parsed(self, key: str, meta: dict, df, table) -> bool:
        """Store a parse result; False (and nothing written) when it cannot be stored."""
        try:
            _atomic_write(self._parse_path(key), lambda tmp: _write_parsed(tmp, key, meta, df, table))
            return True
        except Exception as exc:
            logger.debug("not caching %s: %s: %s", key, type(exc).__name__, exc)
            return False

    # ---------------------------------------------------------------- results
    def result_key(self, trace_dir: Path, recursive: bool, include_last_step: Optional[bool], loader: str,
                   options: Optional[dict] = None) -> Optional[str]:
        """Everything an analysis result depends on: the files' contents and
        paths, the manifest, the options (``options``: e.g. the size cap and the
        rule configuration) and the versions. None when a file cannot be read
        (no caching then: the analysis reports the file)."""
        import hta.version

        from . import __version__
        from .discovery import find_trace_files

        trace_dir = Path(trace_dir)
        paths = find_trace_files(trace_dir, recursive)
        manifest = trace_dir / "manifest.json"
        try:
            files = [[str(p), self.digest(p)] for p in paths]
            manifest_digest = self.digest(manifest) if manifest.is_file() else None
        except OSError:
            return None
        return _key({
            "format": CACHE_FORMAT, "tool": __version__, "code": code_fingerprint("all"),
            "hta": str(getattr(hta.version, "__version__", "")),
            "loader": loader, "dir": str(trace_dir), "recursive": bool(recursive),
            "include_last_step": include_last_step,
            "files": files, "manifest": manifest_digest, "options": options or {},
        })

    def cached_result(self, key: str):
        """The :class:`~hta_report.model.AnalysisResult` stored under ``key``
        (its ``analyzed_at`` set to now), or None."""
        import datetime as dt

        from .model import AnalysisResult

        text = self.get_result(key)
        if text is None:
            return None
        try:
            result = AnalysisResult.from_json(text)
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        result.inventory.analyzed_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        attach(result, self, key)
        return result


    def get_result(self, key: str) -> Optional[str]:
        path = self.root / f"result-v{CACHE_FORMAT}" / f"{key}.json"
        try:
            text = path.read_text(encoding="utf-8")
            data = json.loads(text)
            if data.get("key") != key:
                return None
            return data["result"]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def get_charts(self, key: str) -> Optional[Dict[str, str]]:
        """Chart images rendered earlier for the result stored under ``key``."""
        path = self.root / f"result-v{CACHE_FORMAT}" / f"{key}.charts.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("key") != key or not isinstance(data.get("charts"), dict):
                return None
            return {str(k): str(v) for k, v in data["charts"].items()}
        except (OSError, ValueError, TypeError, AttributeError):
            return None

    def put_charts(self, key: str, charts: Dict[str, str]) -> None:
        """Store the chart images of the result under ``key`` (best effort)."""
        self._put_json(f"{key}.charts.json", {"key": key, "charts": charts}, "charts")

    def put_result(self, key: str, result_json: str) -> None:
        """Store a result's JSON under ``key`` (best effort)."""
        self._put_json(f"{key}.json", {"key": key, "result": result_json}, "result")

    def _put_json(self, name: str, payload: dict, what: str) -> None:
        path = self.root / f"result-v{CACHE_FORMAT}" / name
        try:
            text = json.dumps(payload)
            _atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
        except Exception as exc:
            logger.debug("not caching %s %s: %s", what, name, exc)


# -------------------------------------------------------------------- Arrow IPC layout
#
# Columns are stored one Arrow column each, named by position ("c0", "c1", ...);
# the schema metadata holds the column names and how to rebuild each one:
#   "num": a numpy dtype (int*, float*, bool) stored as is (NaN stays NaN);
#   "str": pandas' string dtype (nulls are NaN);
#   "obj": Python ints, floats and strings (HTA's pid/tid when some are names):
#          a type code column plus one column per type.


def _write_parsed(tmp: str, key: str, meta: dict, df, table) -> None:
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    arrays, names, layout = [], [], []
    for i, col in enumerate(df.columns):
        s = df[col]
        if isinstance(s.dtype, pd.StringDtype):
            arrays.append(pa.array(s.to_numpy(dtype=object, na_value=None), type=pa.string()))
            names.append(f"c{i}")
            layout.append({"name": col, "kind": "str"})
        elif s.dtype == object:
            values = s.to_numpy()
            types = set(map(type, values))
            if not types <= {int, float, str}:
                if not types <= {int, float, str, list}:
                    raise NotCacheable(f"column {col!r} holds {sorted(t.__name__ for t in types)}")
                # shapes and dtypes (``input_dims``...): Python lists of ints and strings; JSON
                # keeps ints, floats, strings and lists as they are
                import json as _json

                arrays.append(pa.array([_json.dumps(v) for v in values], type=pa.string()))
                names.append(f"c{i}")
                layout.append({"name": col, "kind": "json"})
                continue
            code = np.fromiter((0 if t is int else 1 if t is float else 2 for t in map(type, values)),
                               dtype=np.uint8, count=len(values))
            ints = np.zeros(len(values), dtype=np.int64)
            floats = np.zeros(len(values), dtype=np.float64)
            strs = np.full(len(values), None, dtype=object)
            for c, dest in ((0, ints), (1, floats), (2, strs)):
                m = code == c
                if m.any():
                    dest[m] = values[m]
            for suffix, arr in (("code", code), ("i", ints), ("f", floats)):
                arrays.append(pa.array(arr))
                names.append(f"c{i}{suffix}")
            arrays.append(pa.array(strs, type=pa.string()))
            names.append(f"c{i}s")
            layout.append({"name": col, "kind": "obj"})
        elif s.dtype.kind in "iufb":
            arrays.append(pa.array(s.to_numpy()))
            names.append(f"c{i}")
            layout.append({"name": col, "kind": "num", "dtype": s.dtype.str})
        else:
            raise NotCacheable(f"column {col!r} of dtype {s.dtype}")
    index = df.index
    if isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1:
        index_kind = "range"
    else:
        index_kind = "values"
        arrays.append(pa.array(index.to_numpy(dtype=np.int64)))
        names.append("index")
    info = {"format": CACHE_FORMAT, "key": key, "columns": layout, "index": index_kind, "rows": len(df),
            "meta": meta, "symbols": list(table.get_sym_table())}
    schema_meta = {b"hta_report": json.dumps(info).encode()}
    tbl = pa.Table.from_arrays(arrays, names=names).replace_schema_metadata(schema_meta)
    options = pa.ipc.IpcWriteOptions(compression="lz4") if pa.Codec.is_available("lz4") else None
    with pa.OSFile(tmp, "wb") as sink:
        with pa.ipc.new_file(sink, tbl.schema, options=options) as writer:
            writer.write_table(tbl)


def _read_parsed(path: Path, key: str):
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    from hta.common.trace_symbol_table import TraceSymbolTable

    from .fastparse import _STR_DTYPE

    with pa.OSFile(str(path), "rb") as src:
        tbl = pa.ipc.open_file(src).read_all()
    info = json.loads(tbl.schema.metadata[b"hta_report"])
    if info.get("key") != key or info.get("format") != CACHE_FORMAT:
        raise ValueError("key mismatch")
    n = int(info["rows"])

    def num(name: str) -> np.ndarray:
        return tbl.column(name).to_numpy().copy()

    from .fastparse import shared_values

    cols = {}
    for i, spec in enumerate(info["columns"]):
        kind = spec["kind"]
        if kind == "num":
            arr = num(f"c{i}").astype(np.dtype(spec["dtype"]), copy=False)
        elif kind == "str":
            arr = pd.array(tbl.column(f"c{i}").to_pylist(), dtype=_STR_DTYPE)
        elif kind == "json":
            import json as _json

            texts = tbl.column(f"c{i}").to_pylist()
            decoded = {t: _json.loads(t) for t in set(texts)}  # equal values shared, as the parser leaves them
            arr = np.empty(n, dtype=object)
            arr[:] = [decoded[t] for t in texts]
        elif kind == "obj":
            code = num(f"c{i}code")
            arr = np.empty(n, dtype=object)
            for c, part in ((0, f"c{i}i"), (1, f"c{i}f"), (2, f"c{i}s")):
                m = code == c
                if m.any():
                    if c == 2:
                        vals = tbl.column(part).filter(pa.array(m)).to_pylist()
                    else:
                        vals = num(part)[m].tolist()
                    part_arr = np.empty(len(vals), dtype=object)
                    part_arr[:] = shared_values(vals)
                    arr[m] = part_arr
        else:
            raise ValueError(f"unknown column kind {kind}")
        if len(arr) != n:
            raise ValueError("column length mismatch")
        cols[spec["name"]] = arr
    index = pd.RangeIndex(n) if info["index"] == "range" else pd.Index(num("index"), dtype=np.int64)
    df = pd.DataFrame(cols, index=index, copy=False)
    table = TraceSymbolTable()
    table.add_symbols(info["symbols"])
    return info["meta"], df, table


def lookup_result(cache: "Cache", trace_dir, recursive: bool, include_last_step, loader: str,
                  max_trace_bytes: int, config) -> tuple:
    """``(key, result)``: the result-cache key of an analysis with these
    options (None when a file cannot be hashed) and the cached
    :class:`~hta_report.model.AnalysisResult`, or None on a miss. Hashes each
    trace file once; pass the key on to store the result after a miss."""
    key = cache.result_key(Path(trace_dir), recursive, include_last_step, loader,
                           options=result_options(max_trace_bytes, config))
    return key, (cache.cached_result(key) if key is not None else None)


def result_options(max_trace_bytes: int, config) -> dict:
    """What else a cached result depends on: the size cap (bytes) and the rule
    configuration (an ``AdviceConfig`` dataclass, or None for the defaults)."""
    import dataclasses
    import json

    cfg = dataclasses.asdict(config) if config is not None and dataclasses.is_dataclass(config) else None
    return {"max_trace_bytes": int(max_trace_bytes), "config": json.loads(json.dumps(cfg, default=str))}


def attach(result, cache: "Cache", key: str) -> None:
    """Remember where ``result`` is cached, so that its charts are stored beside it
    (:func:`cached_charts`); not part of the result model."""
    try:
        object.__setattr__(result, "_hta_report_cache", (cache, key))
    except AttributeError:  # pragma: no cover - slotted result
        pass


def cached_charts(result, compute):
    """``compute()`` (a dict of chart images for ``result``), read from or stored
    in the cache entry of ``result`` when it has one."""
    ref = getattr(result, "_hta_report_cache", None)
    if ref is None:
        return compute()
    cache, key = ref
    charts = cache.get_charts(key)
    if charts is None:
        charts = compute()
        cache.put_charts(key, charts)
    return charts
