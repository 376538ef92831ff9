"""HTA's parser path, behind our validating reader.

A file the fast parser does not reproduce exactly (or every file, with the
``hta`` loader) is read here: the JSON is read and parsed once by
:func:`read_document`, checked (:func:`~hta_report.load.validation.check_document`)
and cleaned of the events HTA cannot analyze
(:func:`~hta_report.load.validation.clean_events`, which counts them); then
:func:`parse_with_hta` builds the event dataframe from that document with HTA's
own functions, in the order ``hta.common.trace.parse_trace_file`` calls them
for its JSON backend. ``tests/test_fast_loader.py`` checks that the result
equals HTA's ``parse_trace_file`` on clean traces.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from ..errors import TraceError
from . import validation
from ..files import open_text_stream


def read_document(path: Path, kinds: Optional[Dict[str, str]] = None) -> Tuple[Dict[str, Any],
                                                                            validation.EventReport]:
    """The trace document of ``path`` (UTF-8 JSON, gzipped or not), checked,
    with the events HTA cannot analyze left out, and the report of what was
    left out.

    Args:
        path: a ``.json`` or ``.json.gz`` file.
        kinds: arg name -> value kind of the args that become columns
            (:func:`~hta_report.load.validation.arg_kinds`).

    Raises:
        hta_report.errors.TraceError: the file cannot be read or decoded, is
            not a Kineto trace, or holds no event HTA can analyze (one-line
            reason naming ``path``).
    """
    try:
        with open_text_stream(path) as fh:
            raw = fh.read()
        text = validation.decode_text(raw, path)
        del raw
        doc = json.loads(text)
    except TraceError:
        raise
    except Exception as exc:  # OSError, gzip, JSON, RecursionError, MemoryError
        raise TraceError(validation.describe_error(exc), path) from exc
    del text
    events = validation.check_document(doc, path)
    kept, report = validation.clean_events(events, kinds)
    if not report.duration_events:
        raise TraceError(report.empty_reason(), path)
    doc["traceEvents"] = kept
    return doc, report


def parse_with_hta(path: Path, cfg) -> Tuple[tuple, validation.EventReport]:
    """``(meta, df, symbol_table)`` for ``path`` as HTA's ``parse_trace_file``
    returns them with the JSON backend and ``cfg`` (HTA's ``ParserConfig``),
    built from :func:`read_document`'s checked document; and the report of the
    events left out.

    Raises:
        hta_report.errors.TraceError: as :func:`read_document`.
        Exception: whatever HTA raises on a document it cannot handle (the
            caller names the file).
    """
    import pandas as pd
    from hta.common.trace import add_fwd_bwd_links, add_iteration, transform_correlation_to_index
    from hta.common.trace_parser import MetaDataKey, _compress_df, infer_gpu_type, round_down_time_stamps

    doc, report = read_document(path, validation.arg_kinds(cfg.get_args()))
    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    # hta.common.trace_parser._parse_trace_dataframe_json, from the document
    df = pd.DataFrame(doc.pop("traceEvents"))
    round_down_time_stamps(df)
    df.reset_index(inplace=True)
    df["index"] = pd.to_numeric(df["index"], downcast="integer")
    df, table = _compress_df(df, cfg)
    meta[str(MetaDataKey.DEVICE_TYPE)] = infer_gpu_type(meta, table.get_sym_id_map())
    # hta.common.trace.parse_trace_file's steps after parsing
    if not df.empty:
        add_fwd_bwd_links(df)
        df = transform_correlation_to_index(df, table)
        add_iteration(df, table)
        df["end"] = df["ts"] + df["dur"]
    return (meta, df, table), report
