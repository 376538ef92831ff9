"""Results in Jupyter: ``_repr_html_`` of a result and of a comparison (HTA's
users live in notebooks). The report page goes into a sandboxed ``<iframe
srcdoc>``, so that its stylesheet stays off the notebook's and the notebook's
off it; the page holds no script and loads nothing."""
from __future__ import annotations

import html

from ..model import AnalysisResult, Comparison

#: The frame's height in CSS pixels (the page scrolls inside it).
FRAME_HEIGHT_PX = 720


def framed(page: str) -> str:
    """``page`` (a whole HTML document) inside a sandboxed iframe, escaped into its ``srcdoc``."""
    return (f'<iframe sandbox srcdoc="{html.escape(page, quote=True)}" '
            f'style="width:100%;height:{FRAME_HEIGHT_PX}px;border:0"></iframe>')


def result_html(result: AnalysisResult) -> str:
    """The HTML report of ``result`` (charts drawn), framed for a notebook."""
    from . import render

    return framed(render(result, "html"))


def comparison_html(comparison: Comparison) -> str:
    """The comparison page of ``comparison``, framed for a notebook."""
    from . import render_comparison

    return framed(render_comparison(comparison, "html"))
