"""hta-report: why is my GPU usage so low?

Python API::

    import hta_report
    result = hta_report.analyze("traces/")          # AnalysisResult
    hta_report.write_reports(result, [("report.html", None)])

The names are resolved on first use (``import hta_report`` imports neither
pandas nor HTA); ``dir(hta_report)`` and ``__all__`` list them.
"""
from typing import Any as _Any, List as _List

__version__ = "0.1.0"

#: The public API: name -> the module that defines it (imported on first use).
_API = {
    "analyze": "api", "write_reports": "api", "load_result": "api", "rule_catalogue": "api",
    "compare_paths": "api", "write_comparison": "api",
    "profile": "collect",
}
__all__ = ["__version__", *_API]


def __getattr__(name: str) -> _Any:  # lazy, so `import hta_report` stays light
    if name in _API:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_API[name]}"), name)
    raise AttributeError(f"module 'hta_report' has no attribute {name!r}")


def __dir__() -> _List[str]:
    return sorted(set(globals()) | set(_API))
