"""HTA's parser path, behind our validating reader.

A file the fast parser does not reproduce exactly (or every file, with the
``hta`` loader) is read here: the JSON is read (:func:`read_squeezed`: a large
file's runs of whitespace cut short) and parsed once by :func:`read_document`, checked (:func:`~hta_report.load.validation.check_document`)
and cleaned of the events HTA cannot analyze
(:func:`~hta_report.load.validation.clean_events`, which counts them); then
:func:`parse_with_hta` builds the event dataframe from that document with HTA's
own functions, in the order ``hta.common.trace.parse_trace_file`` calls them
for its JSON backend. ``tests/test_fast_loader.py`` checks that the result
equals HTA's ``parse_trace_file`` on clean traces.
"""
from __future__ import annotations

import json
from typing import Any, Dict, Optional, Tuple

from ..errors import TraceError
from ..files import Location, open_text_stream
from . import sizecap, validation
from .fastnative import PARSER_USED
from .repair import REPAIRED_NAMES, repair_names
from .whitespace import Collapser


def read_document(path: Location, kinds: Optional[Dict[str, str]] = None,
                  max_bytes: Optional[int] = None) -> Tuple[Dict[str, Any], validation.EventReport]:
    """The trace document of ``path`` (UTF-8 JSON, gzipped or not), checked,
    with the events HTA cannot analyze left out, and the report of what was
    left out.

    Args:
        path: a ``.json`` or ``.json.gz`` file.
        kinds: arg name -> value kind of the args that become columns
            (:func:`~hta_report.load.validation.arg_kinds`).
        max_bytes: the size cap of a gzipped file (see :func:`read_squeezed`).

    Raises:
        hta_report.errors.TraceError: the file cannot be read or decoded, is
            not a Kineto trace, or holds no event HTA can analyze (one-line
            reason naming ``path``).
    """
    repaired = 0
    try:
        raw = read_squeezed(path, max_bytes)
        text = validation.decode_text(raw, str(path))
        del raw
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as original:  # names Kineto left unescaped? (repair.py)
            fixed, repaired = repair_names(text.encode("utf-8", "surrogatepass"))
            try:
                doc = json.loads(fixed) if repaired else None
            except json.JSONDecodeError:
                doc = None  # invalid for another reason too: the file's own error is the one to tell
            if doc is None:
                raise original from None
            del text
    except TraceError:
        raise
    except Exception as exc:  # OSError, gzip, JSON, RecursionError, MemoryError
        raise TraceError(validation.describe_error(exc), str(path)) from exc
    events = validation.check_document(doc, str(path))
    kept, report = validation.clean_events(events, kinds)
    report.repaired_names = repaired
    if not report.duration_events:
        raise TraceError(report.empty_reason(), str(path))
    doc["traceEvents"] = kept
    return doc, report


#: Files larger than this (decompressed) are read with their runs of whitespace cut short.
SQUEEZE_AFTER = 64 << 20
_CHUNK = 16 << 20


def read_squeezed(path: Location, max_bytes: Optional[int] = None) -> bytes:
    """The decompressed bytes of ``path``; past :data:`SQUEEZE_AFTER`, each
    run of whitespace outside strings is cut to its first byte
    (:class:`~hta_report.load.whitespace.Collapser`), so that the memory
    follows the content of the file, not its bytes (a 3.4 MB gzip can hold
    3.5 GB of spaces). The JSON value is the same; line and column numbers in
    a JSON error then count the squeezed text. A gzip that inflates past
    ``max_bytes`` (None: no cap) is refused as soon as it does
    (:mod:`~hta_report.load.sizecap`).

    Raises:
        hta_report.errors.TraceError: over ``max_bytes``.
        OSError, EOFError, zlib.error: the file cannot be read or decompressed.
    """
    gz = validation.is_gzip_name(path)
    inflated = 0
    chunks = []
    total = 0
    collapser = None
    with open_text_stream(path) as fh:
        while True:
            chunk = fh.read(_CHUNK)
            if not chunk:
                break
            inflated += len(chunk)
            if gz:
                sizecap.check(path, inflated, max_bytes)
            if collapser is not None:
                chunks.append(collapser.feed(chunk))
                continue
            chunks.append(chunk)
            total += len(chunk)
            if total > SQUEEZE_AFTER:
                collapser = Collapser()
                chunks = [collapser.feed(c) for c in chunks]
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def parse_with_hta(path: Location, cfg, exact_times: bool = False,
                   max_bytes: Optional[int] = None) -> Tuple[tuple, validation.EventReport]:
    """``(meta, df, symbol_table)`` for ``path`` as HTA's ``parse_trace_file``
    returns them with the JSON backend and ``cfg`` (HTA's ``ParserConfig``),
    built from :func:`read_document`'s checked document; and the report of the
    events left out. With ``exact_times``, the df also holds the exact times
    HTA rounds (:func:`~hta_report.load.exact.add_exact_times`);
    ``max_bytes``: the size cap of a gzipped file.

    Raises:
        hta_report.errors.TraceError: as :func:`read_document`.
        Exception: whatever HTA raises on a document it cannot handle (the
            caller names the file).
    """
    doc, report = read_document(path, validation.arg_kinds(cfg.get_args()), max_bytes)
    meta, df, table = hta_frame(doc, cfg, exact_times)
    if report.repaired_names:
        meta[REPAIRED_NAMES] = report.repaired_names
    meta[PARSER_USED] = "hta"
    return (meta, df, table), report


def hta_parse(path, cfg=None, exact_times: bool = False) -> tuple:
    """HTA's ``parse_trace_file`` for ``path``: HTA's own reader
    (``parse_trace_dict``, no validation) and :func:`hta_frame`.

    Raises:
        Exception: whatever HTA raises.
    """
    from hta.common.trace_parser import parse_trace_dict
    from hta.configs.parser_config import ParserConfig

    path = str(path)
    if not (path.endswith(".gz") or path.endswith(".json")):
        raise ValueError(f"expect the value of trace_file ({path}) ends with '.gz' or 'json'")
    meta, df, table = hta_frame(parse_trace_dict(path), cfg or ParserConfig.get_default_cfg(), exact_times)
    meta[PARSER_USED] = "hta"
    return meta, df, table


def hta_frame(doc: Dict[str, Any], cfg, exact_times: bool = False) -> tuple:
    """``(meta, df, symbol_table)`` from a parsed trace document with HTA's own
    functions, in the order ``hta.common.trace.parse_trace_file`` calls them
    for its JSON backend (``doc["traceEvents"]`` is consumed). With
    ``exact_times``, :func:`~hta_report.load.exact.add_exact_times` runs
    before HTA rounds the times.

    Raises:
        Exception: whatever HTA raises on a document it cannot handle.
    """
    import pandas as pd
    from hta.common.trace import add_fwd_bwd_links, add_iteration
    from hta.common.trace_parser import MetaDataKey, _compress_df, infer_gpu_type, round_down_time_stamps

    from .compat import (ENCLOSING_STEPS, EXTERNAL_ID_LINKS, SHARED_CORRELATIONS, correlation_to_index, drop_enclosing_steps,
                         modern_categories)
    from .exact import add_exact_times
    from .iteration import add_iteration as own_iteration, hta_can_number

    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    # hta.common.trace_parser._parse_trace_dataframe_json, from the document
    df = pd.DataFrame()
    table = None
    if "traceEvents" in doc:
        df = pd.DataFrame(doc.pop("traceEvents"))
        modern_categories(df)  # PyTorch 1.8-1.9
        if exact_times and "ts" in df.columns:
            add_exact_times(df)
        round_down_time_stamps(df)
        df.reset_index(inplace=True)
        df["index"] = pd.to_numeric(df["index"], downcast="integer")
        df, table = _compress_df(df, cfg)
    if table is None:
        from hta.common.trace_symbol_table import TraceSymbolTable

        table = TraceSymbolTable()
    meta[str(MetaDataKey.DEVICE_TYPE)] = infer_gpu_type(meta, table.get_sym_id_map())
    # hta.common.trace.parse_trace_file's steps after parsing
    if not df.empty:
        df, enclosing = drop_enclosing_steps(df, table)
        if enclosing:
            meta[ENCLOSING_STEPS] = enclosing
        add_fwd_bwd_links(df)
        df = correlation_to_index(df, table)
        if df.attrs.get(SHARED_CORRELATIONS):
            meta[SHARED_CORRELATIONS] = df.attrs.pop(SHARED_CORRELATIONS)
        if df.attrs.get(EXTERNAL_ID_LINKS):
            meta[EXTERNAL_ID_LINKS] = df.attrs.pop(EXTERNAL_ID_LINKS)
        if hta_can_number(table):
            add_iteration(df, table)
        else:  # a name HTA asserts on: not a step (see .iteration)
            own_iteration(df, table)
        df["end"] = df["ts"] + df["dur"]
    return meta, df, table
