"""The JSON reporter: the result model as saved by ``analyze --json``."""
from __future__ import annotations

from typing import Iterator, Mapping

from ..model import AnalysisResult, Comparison


def render(result: AnalysisResult, charts: Mapping[str, str]) -> str:
    """:meth:`AnalysisResult.to_json` (``schema_version`` first); charts are not saved."""
    return result.to_json()


def render_parts(result: AnalysisResult) -> Iterator[str]:
    """:func:`render`'s text in parts made as they are written
    (:meth:`AnalysisResult.json_parts`): a result of many ranks is never
    held whole as text."""
    return result.json_parts()


def render_comparison(comparison: Comparison) -> str:
    """:meth:`Comparison.to_json`: both full results and the deltas."""
    return comparison.to_json()
