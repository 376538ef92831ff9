"""JSON Schemas (draft 2020-12) of what ``analyze --json`` and ``compare -o
x.json`` write, generated from the result model by msgspec (the model's
dataclasses are the single source; nothing is written by hand).

The published copies are ``docs/schema/result.schema.json`` and
``docs/schema/comparison.schema.json`` (a test keeps them equal to these);
``hta-report schema result`` prints the current one. A schema checks types
and which fields are required; ranges, finite numbers, known values and links
are checked by :mod:`hta_report.model_check` when hta-report reads a result.
"""
from __future__ import annotations

from typing import Any, Dict

from .model import SCHEMA_VERSION, AnalysisResult, Comparison

#: The documents a schema exists for: name -> (model class, title).
SCHEMAS: Dict[str, tuple[type, str]] = {
    "result": (AnalysisResult, "hta-report analysis result"),
    "comparison": (Comparison, "hta-report comparison"),
}


def schema(name: str) -> Dict[str, Any]:
    """The JSON Schema of ``name`` (``"result"`` or ``"comparison"``) as a
    dict, with ``$schema``, ``title`` and the ``schema_version`` it describes.

    Raises:
        KeyError: an unknown name.
    """
    import msgspec

    cls, title = SCHEMAS[name]
    body = _normalized(msgspec.json.schema(cls))
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title,
            "description": f"What hta-report writes as JSON (schema_version {SCHEMA_VERSION}); "
                           "generated from hta_report.model by msgspec.",
            **body}


def _normalized(node: Any) -> Any:
    """``node`` (a schema or a part of one) as every msgspec version writes
    it: descriptions as :func:`inspect.cleandoc` leaves a docstring (msgspec
    0.23 dedents them, 0.22 did not), and no ``default`` of ``[]`` or ``{}``
    (0.23 writes the value of a ``default_factory``, 0.22 did not), so the
    published copies stay equal to the generated ones whichever msgspec the
    package registry serves."""
    import inspect

    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "default" and value in ([], {}):
                continue
            out[key] = inspect.cleandoc(value) if key == "description" and isinstance(value, str) \
                else _normalized(value)
        return out
    if isinstance(node, list):
        return [_normalized(x) for x in node]
    return node
