"""The scripted client of the question bank: each question of ``bank.json``
answered through ``hta-report mcp``'s tools with a fixed recipe (no LLM),
over the MCP SDK's own client (in-memory transport, the server of
:func:`hta_report.mcp_server.build_server`), then checked against the
reference answer read from the trace (:mod:`bank`, :mod:`reference`).

Prints one line per question (correct, tool calls, bytes the tools returned,
bytes of the raw events the reference read) and the totals::

    python bench/questions/bank.py     # (re)write bank.json from the traces
    python bench/questions/run.py [--cache-dir DIR] [--only KIND] [--json out.json]

Bytes returned are each ``CallToolResult`` as JSON (text and structured
content both: what reaches the client).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import anyio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))  # this checkout's hta_report
from bank import TRACES  # noqa: E402


def _rel(expected: float, got: float) -> float:
    return abs(got - expected) / abs(expected) if expected else abs(got)


async def answer(client, q: Dict[str, Any], root: Path) -> Tuple[Any, List[int]]:
    """Our answer to ``q`` and the bytes of each tool call made for it."""
    sizes: List[int] = []
    path = str(root / q["run"])
    p = q["params"]
    rank = {"rank": p["rank"]} if p.get("rank") is not None else {}

    async def call(name: str, **args: Any) -> Dict[str, Any]:
        res = await client.call_tool(name, args)
        sizes.append(len(res.model_dump_json(by_alias=True, exclude_none=True)))
        if res.is_error:
            raise RuntimeError(res.content[0].text)
        return res.structured_content["result"]

    kind = q["kind"]
    if kind in ("top_kernel", "top_kernel_calls", "top_kernel_total_us", "kernel_calls"):
        r = await call("top_kernels", path=path, k=1, **rank)
        top = r["kernels"][0]
        return {"top_kernel": top["name"], "top_kernel_calls": top["count"], "top_kernel_total_us": top["total_us"],
                "kernel_calls": r["kernel_count"]}[kind], sizes
    if kind in ("longest_kernel_us", "longest_call_id"):
        r = await call("top_kernels", path=path, k=1, order_by="longest", **rank)
        top = r["kernels"][0]
        if kind == "longest_kernel_us":
            return top["max_us"], sizes
        ref = top["longest"]
        return [ref["stream"], ref["correlation"], ref.get("trace_ts_us")], sizes
    if kind == "step_us":
        r = await call("time_breakdown", path=path, step=p["step"], **rank)
        return r["steps"][0]["duration_us"], sizes
    if kind == "device":
        r = await call("analyze", path=path)
        return r["ranks"][0]["devices"][0], sizes
    if kind in ("idle_us_per_step", "idle_cause"):
        r = await call("idle_gaps", path=path, k=1, **rank)
        per = r["per_step_us"]
        if kind == "idle_us_per_step":
            return per["idle_us"], sizes
        parts = {"queued": per["stream_wait_us"], "sync": per["sync_us"]}
        parts["host"] = per["idle_us"] - sum(parts.values())  # launch, host ops, DataLoader, copies, the rest
        return max(parts, key=lambda c: parts[c]), sizes
    if kind in ("sync_call", "sync_line", "optimizer_kernels", "optimizer_host_us", "optimizer_launch_us"):
        # the line: the chains of user frames (code_times) summed by their innermost frame; 10 chains a cause
        r = await call("top_ops", path=path, k=10 if kind == "sync_line" else 1, **rank)
        if kind == "sync_call":
            return max(r["sync_events"], key=lambda e: e["total_us"])["name"] if r["sync_events"] else None, sizes
        if kind == "sync_line":
            lines: Dict[str, float] = {}
            for t in r["code_times"]:
                if t["category"] == "sync" and t["frames"]:
                    lines[t["frames"][0]] = lines.get(t["frames"][0], 0.0) + t["time_us"]
            return (max(lines, key=lambda n: lines[n]) if lines else None), sizes
        field = {"optimizer_kernels": "kernels_per_step", "optimizer_host_us": "step_us_per_step",
                 "optimizer_launch_us": "launch_us_per_step"}[kind]
        return r["optimizer"][field], sizes
    if kind == "regressed":
        r = await call("compare_runs", base=path, new=str(root / p["new"]), k=1)
        return r["verdict"], sizes
    raise ValueError(kind)


def check(q: Dict[str, Any], got: Any) -> bool:
    """Whether ``got`` is the reference answer within the question's tolerance."""
    want, kind = q["answer"], q["kind"]
    if kind == "top_kernel":
        totals = q["params"]["totals"]
        return got == want or (got in totals and totals[got] >= 0.995 * totals[want])
    if kind == "top_kernel_calls":
        return got == want or got in q["params"].get("tied_calls", [])
    if kind == "longest_call_id":
        return any(got[:2] == w[:2] and got[2] is not None and abs(got[2] - w[2]) <= 1.0 for w in want)
    if kind in ("top_kernel_total_us", "longest_kernel_us"):
        return _rel(want, float(got)) <= 0.01
    if kind == "step_us":
        return _rel(want, float(got)) <= 0.005
    if kind == "idle_us_per_step":
        return abs(float(got) - want) <= max(0.05 * abs(want), 20.0)
    if kind == "sync_call":
        totals = q["params"]["totals"]
        return got == want or (got in totals and totals[got] >= 0.99 * totals[want])
    if kind == "sync_line":
        frames = q["params"]["frames"]

        def where(f: str) -> str:
            return f.split(":")[0].strip() if f else ""
        ok = [n for n, v in frames.items() if v >= 0.99 * frames[want]]
        return got is not None and any(where(got) == where(n) for n in ok)
    if kind == "optimizer_kernels":
        return abs(float(got) - want) <= 0.5
    if kind == "optimizer_host_us":
        return _rel(want, float(got)) <= 0.02
    if kind == "optimizer_launch_us":
        return abs(float(got) - want) <= max(0.05 * abs(want), 5.0)
    return got == want


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache-dir", default=None, help="hta-report's result cache for the server (default: none)")
    ap.add_argument("--only", default=None, help="ask only the questions of this kind")
    ap.add_argument("--json", dest="json_out", default=None, help="write every question's outcome here")
    ap.add_argument("-v", "--verbose", action="store_true", help="a line on stderr as each question is answered")
    ap.add_argument("--bank", default=str(HERE / "bank.json"), help="the questions (default: bank.json)")
    ap.add_argument("--traces", default=None, help="the bank's trace root (default: ../shared/traces)")
    args = ap.parse_args(argv)

    from mcp import Client

    from hta_report.mcp_server import build_server

    bank = json.loads(Path(args.bank).read_text())
    if args.only:
        bank = [q for q in bank if q["kind"] == args.only]
    root = Path(args.traces).resolve() if args.traces else TRACES.resolve()
    rows: List[Dict[str, Any]] = []

    async def go() -> None:
        async with Client(build_server([str(root)], args.cache_dir), mode="legacy") as client:
            for q in bank:
                t0 = time.perf_counter()
                try:
                    got, sizes = await answer(client, q, root)
                    ok = check(q, got)
                except Exception as exc:  # noqa: BLE001 - a failed answer is a wrong answer, shown
                    got, sizes, ok = f"error: {exc}", [], False
                rows.append({"id": q["id"], "run": q["run"], "kind": q["kind"], "ok": ok, "calls": max(len(sizes), 1),
                             "tool_bytes": sum(sizes), "raw_bytes": q["raw_bytes"], "answer": q["answer"], "got": got,
                             "seconds": round(time.perf_counter() - t0, 2)})
                if args.verbose:
                    print(f"{q['id']} {rows[-1]['seconds']:7.2f} s {'ok' if ok else 'NO'} {q['run']}", file=sys.stderr,
                          flush=True)

    t0 = time.perf_counter()
    anyio.run(go)
    wall = time.perf_counter() - t0
    print(f"{'id':5} {'ok':3} {'calls':>5} {'tool B':>8} {'raw B':>11}  kind / run")
    for r in rows:
        print(f"{r['id']:5} {'yes' if r['ok'] else 'NO':3} {r['calls']:>5} {r['tool_bytes']:>8} {r['raw_bytes']:>11}  "
              f"{r['kind']} / {r['run']}" + ("" if r["ok"] else f"  want {str(r['answer'])[:60]!r} got {str(r['got'])[:60]!r}"))
    n = len(rows)
    ok = sum(r["ok"] for r in rows)
    calls = sum(r["calls"] for r in rows) / n
    tool, raw = sum(r["tool_bytes"] for r in rows), sum(r["raw_bytes"] for r in rows)
    worst = max(r["tool_bytes"] / r["raw_bytes"] for r in rows if r["raw_bytes"])
    print(f"\n{n} questions over {len({r['run'] for r in rows})} runs: {ok} correct ({100 * ok / n:.1f} %), "
          f"{calls:.2f} tool calls per question, tool bytes {tool:,} vs raw event bytes {raw:,} "
          f"(1/{raw / tool:.0f}; worst question {worst:.3f}), {wall:.0f} s")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
