"""Reporters: each a pure ``render(result) -> str`` over the result model."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..model import AnalysisResult, Comparison

FORMATS = ("html", "md", "json")


def format_for_path(path: str, explicit: Optional[str] = None) -> str:
    """The output format: ``explicit`` if given, else from the file extension
    (``.md``/``.markdown`` -> md, ``.json`` -> json, anything else -> html)."""
    if explicit:
        return explicit
    suffix = Path(path).suffix.lower()
    return {".md": "md", ".markdown": "md", ".json": "json"}.get(suffix, "html")


def render(result: AnalysisResult, fmt: str) -> str:
    """Render ``result`` as ``html``, ``md`` or ``json``.

    Raises:
        ValueError: unknown format.
    """
    if fmt == "html":
        from .html import render as render_html
        return render_html(result)
    if fmt == "md":
        from .markdown import render as render_md
        return render_md(result)
    if fmt == "json":
        return result.to_json()
    raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")


def render_comparison(comparison: Comparison, fmt: str) -> str:
    """Render a comparison as ``html``, ``md`` or ``json``.

    Raises:
        ValueError: unknown format.
    """
    if fmt == "html":
        from .html import render_comparison as render_html
        return render_html(comparison)
    if fmt == "md":
        from .markdown import render_comparison as render_md
        return render_md(comparison)
    if fmt == "json":
        return comparison.to_json()
    raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
