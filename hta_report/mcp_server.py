"""``hta-report mcp``: the tools of :mod:`hta_report.mcp_tools` served over
MCP (stdio) with the official ``mcp`` SDK (``pip install "hta-report[mcp]"``).

Only this module imports ``mcp`` (``import hta_report`` and every other
command work without it). No network, no API key: the server reads trace
directories and saved results under its ``roots`` and writes only to its
``cache`` folder, if given.

Each tool of :data:`hta_report.mcp_tools.TOOLS` is registered with the SDK's
:class:`mcp.server.mcpserver.MCPServer` under its name, with the function's
own parameters (the workspace left out) as its input schema and its
docstring as its description. An error the caller can act on
(:class:`hta_report.errors.HtaReportError`: a path outside the roots, an
unknown finding id, an unreadable trace) comes back as an MCP tool error
(``isError: true``, one line); anything else as the SDK's generic error.
A tool that analyzes (``ToolSpec.progress``) sends the analysis' stages as
MCP progress notifications when the client asked for them.
"""
from __future__ import annotations

import inspect
import os
import typing
from typing import Any, Dict, Optional, Sequence

from . import progress as progress_mod
from .errors import HtaReportError, one_line
from .mcp_tools import TOOLS, ToolSpec, Workspace, clip

#: What ``hta-report mcp`` prints when the extra is not installed (exit 1).
MISSING_SDK = ('hta-report mcp needs the MCP SDK: pip install "hta-report[mcp]" '
               '(the package "mcp", version 2.3 or later)')

INSTRUCTIONS = (
    "Answers about PyTorch profiler (Kineto) traces from hta-report. Start with `analyze` on a trace "
    "directory or a saved result (analyze --json): it lists the ranks, steps, headline figures and the "
    "findings by id. Then ask narrower tools. Times are µs, shares %; events are cited by rank, stream, "
    "correlation and ts_us (µs from the trace directory's start); steps by their ProfilerStep number. "
    "Every list is bounded (k, offset/limit) and says its total.")


class _StageProgress(progress_mod.Progress):
    """A :class:`hta_report.progress.Progress` that hands each stage's name to
    ``send(n, message)`` (n counts the stages started)."""

    def __init__(self, send) -> None:
        super().__init__(verbose=False, live=False, heartbeat=None)
        self._send = send
        self._n = 0

    def update(self, message: str) -> None:  # noqa: D102 - the base class's
        super().update(message)
        self._n += 1
        try:
            self._send(self._n, clip(message, 100))
        except Exception:  # noqa: BLE001 - a client gone must not stop the analysis
            pass

    def start(self) -> None:  # no status line, no thread: stderr belongs to the client's log
        pass

    def done(self) -> None:
        pass


def _register(server, ws: Workspace, spec: ToolSpec) -> None:
    """Add ``spec`` to ``server``: a function with the tool's parameters
    (less the workspace; plus the SDK's ``Context`` where it reports progress)."""
    import anyio.from_thread
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver.exceptions import ToolError

    hints = typing.get_type_hints(spec.fn)
    params = [p.replace(annotation=hints.get(p.name, Any))
              for p in list(inspect.signature(spec.fn).parameters.values())[1:]]
    annotations: Dict[str, Any] = {p.name: p.annotation for p in params}
    if spec.progress:
        params.append(inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context))
        annotations["ctx"] = Context
    annotations["return"] = Dict[str, Any]

    def call(**kwargs: Any) -> Dict[str, Any]:
        ctx = kwargs.pop("ctx", None)
        try:
            if ctx is None:
                return spec.fn(ws, **kwargs)

            def send(n: int, message: str) -> None:
                anyio.from_thread.run(lambda: ctx.report_progress(n, None, message))

            with progress_mod.using(_StageProgress(send)):
                return spec.fn(ws, **kwargs)
        except HtaReportError as exc:
            raise ToolError(one_line(clip(str(exc), 600))) from None

    call.__name__ = spec.name
    call.__doc__ = spec.fn.__doc__
    call.__signature__ = inspect.Signature(params, return_annotation=Dict[str, Any])  # type: ignore[attr-defined]
    call.__annotations__ = annotations
    server.add_tool(call, name=spec.name, description=inspect.cleandoc(spec.fn.__doc__ or ""),
                    structured_output=True)


def build_server(roots: Sequence[os.PathLike | str] = (), cache: Optional[os.PathLike | str] = None):
    """The MCP server (an :class:`mcp.server.mcpserver.MCPServer`) with every
    tool of :data:`hta_report.mcp_tools.TOOLS`, over a
    :class:`hta_report.mcp_tools.Workspace` of ``roots`` (default: the
    current directory) and ``cache`` (None: nothing is written).

    Raises:
        ImportError: the ``mcp`` SDK is not installed.
    """
    from mcp.server.mcpserver import MCPServer

    from . import __version__

    ws = Workspace.of(list(roots), cache)
    server = MCPServer(name="hta-report", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    for spec in TOOLS.values():
        _register(server, ws, spec)
    return server


def serve(roots: Sequence[os.PathLike | str] = (), cache: Optional[os.PathLike | str] = None) -> None:
    """Run the server on stdin/stdout until the client closes them."""
    build_server(roots, cache).run("stdio")
