"""Parsing the trace files of a directory: fast parser, parse cache, one process per file.

:func:`parse_files` yields, file by file in the given order, what HTA's
``parse_trace_file`` returns for it (a :class:`Parsed`); the caller merges
each into an ``hta.common.trace.Trace`` (:func:`hta_report.load.traces.add_parsed_rank`).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Generator, List, Optional

from .. import progress, workers
from ..cache import Cache
from ..files import Location

#: Loaders: ``fast`` (:mod:`hta_report.load.fastparse`) or ``hta`` (HTA's own parser,
#: the reference; also chosen by ``HTA_REPORT_LOADER=hta``).
LOADERS = ("fast", "hta")

#: The event args that become dataframe columns: those HTA's analyses and ours
#: read (``input_dims``/``input_type``: the misaligned-GEMM rule, C13). HTA's
#: default also parses strides and collective details, which no report metric uses.
REPORT_ARGS = ("stream", "correlation", "bytes", "input_dims", "input_type")
#: Kineto's occupancy args of CUDA kernels (the SM occupancy metrics, C14):
#: column name -> the ``args`` key. Read as numbers (default -1: absent, e.g.
#: on AMD); HTA's own spec reads ``blocks per SM`` as an object.
SM_ARGS = {"blocks_per_sm": "blocks per SM", "est_occupancy": "est. achieved occupancy %",
           "warps_per_sm": "warps per SM"}


def sm_arg_specs() -> list:
    """HTA ``AttributeSpec``s of :data:`SM_ARGS` (floats, default -1)."""
    from hta.configs.parser_config import DEFAULT_PARSE_VERSION, AttributeSpec, ValueType

    return [AttributeSpec(name, raw, ValueType.Float, -1.0, min_supported_version=DEFAULT_PARSE_VERSION)
            for name, raw in SM_ARGS.items()]


def resolve_loader(loader: Optional[str]) -> str:
    """``loader``, else ``$HTA_REPORT_LOADER``, else ``"fast"``.

    Raises:
        ValueError: not one of :data:`LOADERS`.
    """
    loader = loader or os.environ.get("HTA_REPORT_LOADER") or "fast"
    if loader not in LOADERS:
        raise ValueError(f"unknown loader {loader!r}; expected one of {', '.join(LOADERS)}")
    return loader


#: HTA's specs (``AVAILABLE_ARGS`` keys) of collective args the report reads beyond HTA's default
#: config: the process group of a communication kernel (``Process Group Name``, on NCCL kernels and
#: ``record_param_comms`` since PyTorch 2.2), which tells a tensor-parallel group's backward
#: reductions from a data-parallel group's (:mod:`hta_report.analysis.collectives`).
GROUP_ARGS = ("nccl::process_group_name",)


def report_parser_config():
    """HTA's default parser config restricted to :data:`REPORT_ARGS`, plus
    :data:`SM_ARGS` and :data:`GROUP_ARGS` (where this HTA has them)."""
    from hta.configs.parser_config import AVAILABLE_ARGS, ParserConfig

    cfg = ParserConfig.get_default_cfg()
    groups = [AVAILABLE_ARGS[k] for k in GROUP_ARGS if k in AVAILABLE_ARGS]
    cfg.set_args([a for a in cfg.get_args() if a.name in REPORT_ARGS] + sm_arg_specs() + groups)
    return cfg


@dataclass
class Parsed:
    """One file's parse: HTA's ``(meta, df, symbol_table)`` or the error raised;
    ``seconds`` of wall time, ``cached`` when read from the parse cache."""

    path: Location
    result: Optional[tuple] = None
    error: Optional[BaseException] = None
    seconds: float = 0.0
    cached: bool = False


def unlinked_gpu_format(df, table) -> bool:
    """True when the frame has GPU work (kernels, copies, memsets) and none of
    it on a stream, read without ``External id``: the ROCm 6.x roctracer
    format, whose GPU events carry ``External id`` alone
    (:func:`~hta_report.load.compat.link_by_external_id`), which needs that
    column the report's parser config leaves out."""
    import numpy as np

    if df is None or df.empty or "external_id" in df.columns or "stream" not in df.columns or "cat" not in df.columns:
        return False
    gpu = np.isin(df["cat"].to_numpy(), [i for i, s in enumerate(table.get_sym_table())
                                         if s in ("kernel", "gpu_memcpy", "gpu_memset")])
    return bool(gpu.any()) and not bool((df["stream"].to_numpy()[gpu] >= 0).any())


def with_external_id(cfg):
    """A copy of the parser config ``cfg`` that also reads ``External id``."""
    import copy

    from hta.configs.parser_config import AVAILABLE_ARGS

    out = copy.deepcopy(cfg)
    spec = AVAILABLE_ARGS.get("index::external_id")
    if spec is not None and all(a.name != spec.name for a in out.get_args()):
        out.set_args(list(out.get_args()) + [spec])
    return out


def _parse_one(path: str, cfg, cache_root: Optional[str], key: Optional[str], n_workers: int = 1,
               fallback: bool = True, max_bytes: Optional[int] = None) -> Parsed:
    from .fastparse import parse_trace_file
    from .parse_cache import ParseCache

    t0 = time.perf_counter()
    try:
        result = parse_trace_file(path, cfg, fallback=fallback, workers=n_workers, exact_times=True,
                                  max_bytes=max_bytes)
        if unlinked_gpu_format(result[1], result[2]):  # GPU work with no stream: read its External id too
            result = parse_trace_file(path, with_external_id(cfg), fallback=fallback, workers=n_workers,
                                      exact_times=True, max_bytes=max_bytes)
    except Exception as exc:  # reported by the caller, naming the file
        return Parsed(Path(path), error=exc, seconds=time.perf_counter() - t0)
    if cache_root is not None and key is not None and not result[1].empty:
        ParseCache(Cache(cache_root)).put(key, *result)
    return Parsed(Path(path), result=result, seconds=time.perf_counter() - t0)


def parse_files(paths: List[Location], cfg, cache: Optional[Cache] = None, loader: str = "fast",
                fallback: bool = True, max_bytes: Optional[int] = None) -> Generator[Parsed, None, None]:
    """Parse ``paths`` (in that order): cache hits are read, misses parsed with
    :func:`hta_report.load.fastparse.parse_trace_file`, several at once in worker
    processes (one per CPU core) when there are several (a lone large file
    is cut into pieces parsed side by side), and stored in ``cache``. With
    ``fallback`` False a file the fast parser does not reproduce exactly comes
    back as a :class:`Parsed` with its ``error`` (the caller parses it another way).
    ``max_bytes``: the size cap of gzipped files, enforced while reading them
    (:mod:`hta_report.load.sizecap`; part of the parse-cache key)."""
    from .parse_cache import ParseCache

    store = ParseCache(cache) if cache is not None else None
    keys: List[Optional[str]] = []
    hits: Dict[int, Parsed] = {}
    for i, p in enumerate(paths):
        # str(p): Cache.digest takes a path or a URL as a string (a URL's UPath is read through its string anyway)
        key = store.key(str(p), cfg, loader, max_bytes) if store is not None else None
        keys.append(key)
        if store is not None and key is not None:
            t0 = time.perf_counter()
            got = store.get(key)
            if got is not None:
                hits[i] = Parsed(p, result=got, seconds=time.perf_counter() - t0, cached=True)
    misses = [i for i in range(len(paths)) if i not in hits]
    root = str(cache.root) if cache is not None else None
    total = len(paths)
    done = len(hits)
    if len(misses) <= 1 or not workers.can_fork():
        for i in range(total):
            if i in hits:
                parsed = hits[i]
            else:
                progress.current().update(f"parsing {paths[i].name} ({done + 1}/{total})")
                parsed = _parse_one(str(paths[i]), cfg, root, keys[i], workers.count() if workers.can_fork() else 1,
                                    fallback, max_bytes)
                done += 1
            yield parsed
        return
    n = max(1, min(len(misses), workers.count()))
    with workers.pool(n) as pool:
        futures = {i: pool.submit(_parse_one, str(paths[i]), cfg, root, keys[i], 1, fallback, max_bytes)
                   for i in misses}
        progress.current().update(f"parsing {len(misses)} files in {n} processes")
        try:
            for i in range(total):
                if i in hits:
                    yield hits[i]
                    continue
                parsed = futures[i].result()
                done += 1
                progress.current().update(f"parsed {done}/{total} files")
                yield parsed
        finally:  # stopped early (an error in an earlier file): drop what has not started
            for f in futures.values():
                f.cancel()
