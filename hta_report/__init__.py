"""hta-report: why is my GPU usage so low?

Python API::

    import hta_report
    result = hta_report.analyze("traces/")          # AnalysisResult
    hta_report.write_reports(result, [("report.html", None)])
"""
__version__ = "0.1.0"


def __getattr__(name):  # lazy, so `import hta_report` stays light
    if name in ("analyze", "write_reports", "load_result", "rule_catalogue"):
        from . import api
        return getattr(api, name)
    if name == "profile":
        from .collect import profile
        return profile
    raise AttributeError(name)
