"""The parse cache: one parsed trace file per entry, as an Arrow IPC file.

An entry holds what :func:`hta_report.load.fastparse.parse_trace_file` returns
for a file (HTA's metadata, event dataframe and local symbol table) under
``parse-v1/<key>.arrow`` of a :class:`hta_report.cache.Cache`; the key covers
the file's content, the parser configuration, the parser code and HTA's and
pandas' versions (:meth:`ParseCache.key`). Reading an entry back gives the
same dataframe (columns, dtypes, values, index) as parsing the file again.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Optional

from ..cache import CACHE_FORMAT, Cache, code_fingerprint, make_key
from ..output import replace_atomically

logger = logging.getLogger(__name__)


class NotCacheable(Exception):
    """A dataframe column this cache cannot store exactly."""


class ParseCache:
    """Parsed trace files in a :class:`~hta_report.cache.Cache`. Every failure
    to read or write an entry is logged at debug level and treated as a miss;
    none raises."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache

    def key(self, path: os.PathLike | str, cfg, loader: str, max_bytes: Optional[int] = None) -> str:
        """The entry key of ``path`` parsed with HTA's ``ParserConfig`` ``cfg`` by
        ``loader`` under the size cap ``max_bytes`` (enforced while reading: an
        entry made under a larger cap must not let a file past a smaller one).

        Raises:
            OSError: the file cannot be read.
        """
        import hta.version
        import pandas

        from .fastparse import PARSER_VERSION

        args = [[a.name, a.raw_name, a.value_type.name, repr(a.default_value)] for a in cfg.get_args()]
        return make_key({
            "format": CACHE_FORMAT, "file": self.cache.digest(path), "loader": loader, "parser": PARSER_VERSION,
            "code": code_fingerprint("parser"),
            "hta": getattr(hta.version, "__version__", ""), "pandas": pandas.__version__, "args": args,
            "backend": str(cfg.parser_backend), "parse_all_args": bool(cfg.parse_all_args),
            "max_bytes": max_bytes,
        })

    def _path(self, key: str) -> Path:
        return self.cache.root / f"parse-v{CACHE_FORMAT}" / f"{key}.arrow"

    def get(self, key: str):
        """``(meta, df, symbol_table)`` stored under ``key``, or None."""
        path = self._path(key)
        if not path.is_file():
            return None
        try:
            return _read_parsed(path, key)
        except Exception as exc:  # a corrupt or foreign entry is a miss
            logger.debug("ignoring cache entry %s: %s: %s", path, type(exc).__name__, exc)
            return None

    def put(self, key: str, meta: dict, df, table) -> bool:
        """Store a parse result; False (and nothing written) when it cannot be stored."""
        try:
            replace_atomically(self._path(key), lambda tmp: _write_parsed(tmp, key, meta, df, table))
            return True
        except Exception as exc:
            logger.debug("not caching %s: %s: %s", key, type(exc).__name__, exc)
            return False


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
                arrays.append(pa.array([json.dumps(v) for v in values], type=pa.string()))
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

    from .fastparse import STR_DTYPE

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
            arr = pd.array(tbl.column(f"c{i}").to_pylist(), dtype=STR_DTYPE)
        elif kind == "json":
            texts = tbl.column(f"c{i}").to_pylist()
            decoded = {t: json.loads(t) for t in set(texts)}  # equal values shared, as the parser leaves them
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
