"""``hta-report mcp`` driven by the MCP SDK's own client, in process
(initialize, list tools, call each tool, errors as MCP tool errors), the
server's bounds on paths and untrusted trace strings, and the CLI without
the SDK."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

mcp = pytest.importorskip("mcp")

import anyio  # noqa: E402 - the SDK's dependency

from hta_report.mcp_tools import MAX_ITEMS, MAX_TEXT, TOOLS  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"
HEALTHY = str(SAMPLES / "cpu_healthy")
LOADER = str(SAMPLES / "cpu_dataloader_bound")

#: Arguments of one call of each tool on the sample traces.
CALLS = {
    "analyze": {"path": HEALTHY},
    "list_findings": {"path": LOADER, "limit": 2},
    "explain_finding": None,  # the first finding's id of LOADER, found at run time
    "top_kernels": {"path": HEALTHY, "k": 3, "kernel_types": True},
    "top_ops": {"path": LOADER, "k": 3},
    "time_breakdown": {"path": LOADER},
    "idle_gaps": {"path": LOADER, "k": 3},
    "compare_runs": {"base": HEALTHY, "new": LOADER, "k": 3},
    "what_if": {"path": LOADER},
}


#: One result cache for the module's servers: each sample is analyzed once.
CACHE = {}


@pytest.fixture(autouse=True, scope="module")
def _shared_cache(tmp_path_factory):
    CACHE["dir"] = str(tmp_path_factory.mktemp("mcp-cache"))
    yield
    CACHE.clear()


def _client_run(fn, roots=(str(SAMPLES),), cache=None):
    """Run ``await fn(client)`` against a fresh server over ``roots`` (the
    module's result cache unless ``cache`` names another)."""
    cache = cache or CACHE.get("dir")
    from mcp import Client

    from hta_report.mcp_server import build_server

    async def main():
        async with Client(build_server(list(roots), cache), mode="legacy") as client:
            return await fn(client)

    return anyio.run(main)


def _tree(folder: Path):
    return sorted((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*"))


def test_initialize_lists_every_tool_with_schemas():
    async def go(client):
        return client.server_capabilities, (await client.list_tools()).tools

    caps, tools = _client_run(go)
    assert caps.tools is not None
    assert [t.name for t in tools] == list(TOOLS) and len(tools) <= 10
    for t in tools:
        assert t.input_schema["type"] == "object" and t.output_schema is not None
        assert t.description and "µs" in "".join(x.description for x in tools)
    kernels = next(t for t in tools if t.name == "top_kernels")
    assert set(kernels.input_schema["properties"]) == {"path", "rank", "kernel_type", "name_contains", "order_by", "k", "kernel_types"}
    assert kernels.input_schema["required"] == ["path"]


def test_every_tool_answers_on_the_sample_traces(tmp_path):
    before = _tree(SAMPLES)

    async def go(client):
        out = {}
        for name, args in CALLS.items():
            if args is None:
                listed = out["list_findings"].structured_content["result"]["findings"]
                args = {"path": LOADER, "finding_id": listed[0]["id"]}
            res = await client.call_tool(name, args)
            assert not res.is_error, (name, res.content)
            out[name] = res
        return out

    out = _client_run(go, cache=str(tmp_path / "cache"))
    assert _tree(SAMPLES) == before  # nothing written beside the traces
    data = {k: v.structured_content["result"] for k, v in out.items()}
    assert all(d["schema_version"] == 3 and d["schema"].endswith(("AnalysisResult", "Finding", "KernelStat", "NamedTime",
                                                                    "StepBreakdown", "IdleAttribution", "Comparison",
                                                                    "Replay")) for d in data.values())
    overview = data["analyze"]
    assert overview["ranks_total"] == 1 and overview["ranks"][0]["steps_used"] > 0
    assert data["list_findings"]["total"] >= 1 and len(data["list_findings"]["findings"]) <= 2
    assert data["list_findings"]["findings"][0]["id"] == "dataloader-bound"
    assert data["explain_finding"]["finding"]["id"] == "dataloader-bound" and data["explain_finding"]["finding"]["evidence"]
    assert data["top_kernels"]["kernels"] == [] and isinstance(data["top_kernels"]["kernel_types"], list)  # CPU only
    assert len(data["top_ops"]["ops"]) == 3 and data["top_ops"]["dataloader_us_per_step"] > 0
    assert data["compare_runs"]["verdict"] in ("regressed", "improved", "unchanged", "mixed", "not comparable")
    assert data["compare_runs"]["step_time_change_pct"] > 0  # the DataLoader-bound run is slower
    # the text content carries the same JSON as the structured content
    assert json.loads(out["analyze"].content[0].text) == out["analyze"].structured_content["result"]


def test_errors_come_back_as_mcp_tool_errors(tmp_path):
    async def go(client):
        return [await client.call_tool(name, args) for name, args in (
            ("analyze", {"path": "/etc"}),                                  # outside the roots
            ("analyze", {"path": str(SAMPLES / "no_such_run")}),            # missing
            ("explain_finding", {"path": LOADER, "finding_id": "no-such-finding"}),
            ("time_breakdown", {"path": LOADER, "step": 999999}),
            ("top_kernels", {"path": LOADER, "rank": 77}),
            ("what_if", {"path": LOADER, "edit": "no-such-edit"}),
            ("top_kernels", {"path": 12}),                                  # bad argument type
        )]

    results = _client_run(go)
    assert all(r.is_error for r in results)
    texts = [r.content[0].text for r in results]
    assert "outside the folders" in texts[0]
    assert "no such trace directory" in texts[1]
    assert "no finding 'no-such-finding'" in texts[2] and "dataloader-bound" in texts[2]
    assert "no step 999999" in texts[3] and "no rank 77" in texts[4] and "no edit matching" in texts[5]
    assert all("Traceback" not in t and "\n" not in t for t in texts[:6])


def test_a_link_out_of_the_root_is_refused(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "out").symlink_to(SAMPLES / "cpu_healthy")

    async def go(client):
        return await client.call_tool("analyze", {"path": "out"})

    res = _client_run(go, roots=(str(root),))
    assert res.is_error and "outside the folders" in res.content[0].text


def test_hostile_trace_strings_stay_bounded_and_inert(tmp_path):
    from hta_report import api

    result = api.analyze(HEALTHY)
    hostile = "\x1b]0;pwned\x07\u202eevil" + "A" * 5000 + "\n## injected heading"
    rank = result.ranks[0]
    rank.cpu.top_ops[0].name = hostile
    result.findings[0].evidence = [hostile] * 500 if result.findings else []
    saved = tmp_path / "hostile.json"
    saved.write_text(result.to_json())

    async def go(client):
        ops = await client.call_tool("top_ops", {"path": str(saved), "k": 50})
        fs = await client.call_tool("list_findings", {"path": str(saved)})
        ids = [f["id"] for f in fs.structured_content["result"]["findings"]]
        detail = await client.call_tool("explain_finding", {"path": str(saved), "finding_id": ids[0]}) if ids else None
        return ops, detail

    ops, detail = _client_run(go, roots=(str(tmp_path),))
    names = [o["name"] for o in ops.structured_content["result"]["ops"]]
    shown = next(n for n in names if "pwned" in n)
    assert len(shown) <= MAX_TEXT and shown.endswith("…")
    assert not any(c in shown for c in "\x1b\x07\u202e\n") and "\\x1b" in shown and "\\u202e" in shown
    if detail is not None:
        ev = detail.structured_content["result"]["finding"]["evidence"]
        assert len(ev) <= MAX_ITEMS and all(len(e) <= MAX_TEXT and "\x1b" not in e for e in ev)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hostile.json"]  # nothing written


def test_progress_is_reported_while_analyzing():
    seen = []

    async def go(client):
        async def on_progress(progress, total, message):
            seen.append(message)

        return await client.call_tool("analyze", {"path": HEALTHY}, progress_callback=on_progress)

    res = _client_run(go)
    assert not res.is_error and any("advice" in (m or "") for m in seen)


def test_import_stays_light_and_the_cli_says_when_the_sdk_is_missing(tmp_path):
    light = subprocess.run([sys.executable, "-c", "import sys, hta_report, hta_report.mcp_tools; "
                            "print('mcp' in sys.modules)"], capture_output=True, text=True, cwd=REPO)
    assert light.stdout.strip() == "False"
    code = ("import sys; sys.modules['mcp'] = None; from hta_report.cli import main; sys.exit(main(['mcp']))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == ['Error: hta-report mcp needs the MCP SDK: pip install '
                                               '"hta-report[mcp]" (the package "mcp", version 2.3 or later)']


def test_the_stdio_server_answers_the_sdk_client(tmp_path):
    """The real command over stdio: initialize, one call, nothing written in the work folder."""
    from mcp import StdioServerParameters, stdio_client
    from mcp.client.session import ClientSession

    params = StdioServerParameters(command=sys.executable, args=["-m", "hta_report", "mcp", "--root", str(SAMPLES)],
                                   cwd=str(tmp_path), env={**os.environ, "PYTHONPATH": str(REPO)})

    async def main():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            res = await session.call_tool("list_findings", {"path": LOADER, "limit": 1})
            return tools, res

    tools, res = anyio.run(main)
    assert len(tools.tools) == len(TOOLS)
    assert not res.is_error and res.structured_content["result"]["findings"][0]["id"] == "dataloader-bound"
    assert list(tmp_path.iterdir()) == []
