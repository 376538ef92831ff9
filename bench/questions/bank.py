"""The question bank: questions over the real traces of ``../shared/traces``,
each with a reference answer read from the trace file by
:mod:`reference` (json alone), a checker and its tolerance, and the bytes
of the raw events the reference read.

``python bench/questions/bank.py`` writes ``bench/questions/bank.json``;
``--traces DIR --out FILE`` builds a bank over other traces (the held-out
set: ``--traces ../field/traces --out /tmp/heldout.json``; no compare pairs
there).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reference as R  # noqa: E402

HERE = Path(__file__).resolve().parent
TRACES = HERE.parents[1] / ".." / "shared" / "traces"

#: Pairs of runs for "did it regress" questions (base, new).
PAIRS = [("hta/trace_diff/control", "hta/trace_diff/test"), ("hta/trace_diff/test", "hta/trace_diff/control"),
         ("tracelens/h100_bert_small", "tracelens/mi300_bert_small"),
         ("tracelens/mi300_bert_small", "tracelens/h100_bert_small"),
         ("tracelens/h100_qwen_chat", "tracelens/mi300_qwen_chat"),
         ("tracelens/mi300_qwen_chat", "tracelens/h100_qwen_chat")]
#: A step-time change beyond this is a regression or an improvement (%), as hta-report's noise band.
BAND_PCT = 5.0


def runs(root: Path) -> List[Path]:
    """Every folder under ``root`` holding trace files (``.json``, ``.json.gz``), sorted."""
    return sorted({p.parent for p in root.rglob("*.json*") if p.name.endswith((".json", ".json.gz"))})


def questions(root: Path = TRACES, pairs=PAIRS) -> List[Dict[str, Any]]:
    """Every question of the bank over the runs under ``root`` (see the module docstring)."""
    out: List[Dict[str, Any]] = []
    root = root.resolve()

    def add(run: Path, kind: str, text: str, answer: Any, tol: str, raw: int, **params: Any) -> None:
        out.append({"id": f"q{len(out) + 1:03d}", "run": str(run.relative_to(root)), "kind": kind, "question": text,
                    "params": params, "answer": answer, "tolerance": tol, "raw_bytes": raw})

    for run in runs(root):
        files = sorted(p for p in run.glob("*.json*") if p.name.endswith((".json", ".json.gz")))
        for i, f in enumerate(files):
            try:
                doc = R.load(f)
            except (ValueError, UnicodeDecodeError, OSError):
                continue  # not JSON: no reference, no question
            if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
                continue
            rank = None
            dist = doc.get("distributedInfo") or {}
            if len(files) > 1:
                rank = int(dist.get("rank", i))
            ks, raw_k = R.analyzed_kernels(doc)
            tot = R.totals(ks)
            if tot:
                name, (calls, total) = max(tot.items(), key=lambda kv: kv[1][1])
                add(run, "top_kernel", "Which GPU kernel takes the most total time in the analyzed window?",
                    name, "exact name, or a kernel within 0.5 % of the top total", raw_k, rank=rank,
                    totals={n: t for n, (c, t) in sorted(tot.items(), key=lambda kv: -kv[1][1])[:5]})
                # kernels within 0.5 % of the top total are equally "the top kernel": each one's calls count
                tied = sorted({c for n, (c, t) in tot.items() if t >= 0.995 * total})
                add(run, "top_kernel_calls", "How many times did the top kernel run in the analyzed window?",
                    calls, "exact (the calls of any kernel within 0.5 % of the top total)", raw_k, rank=rank,
                    kernel=name, tied_calls=tied)
                add(run, "top_kernel_total_us", "How much GPU time (µs) did the top kernel take in the analyzed window?",
                    round(total, 3), "1 %", raw_k, rank=rank, kernel=name)
                longest = max(ks, key=lambda e: float(e.get("dur", 0)))
                add(run, "longest_kernel_us", "How long (µs) is the single longest kernel call in the analyzed window?",
                    float(longest["dur"]), "1 %", raw_k, rank=rank)
                tied = [e for e in ks if float(e.get("dur", 0)) == float(longest["dur"])]
                add(run, "longest_call_id", "Which kernel call is the longest in the analyzed window? "
                    "Cite it by stream, correlation and ts.",
                    [[int(e["args"].get("stream", -1)), int(e["args"].get("correlation", -1)), float(e["ts"])]
                     for e in tied][:20],
                    "the (stream, correlation) of one of the equally longest calls, its ts within 1 µs", raw_k,
                    rank=rank)
                add(run, "kernel_calls", "How many kernel calls are in the analyzed window?", len(ks), "exact", raw_k,
                    rank=rank)
            wins = R.step_windows(doc)
            analyzed = wins[:-1] if len(wins) >= 2 else wins
            _, raw_s = R.steps(doc)
            for number, start, end in analyzed[:2]:
                add(run, "step_us", f"How long (µs) is ProfilerStep#{number}?", round(end - start, 3), "0.5 %", raw_s,
                    rank=rank, step=number)
            if R.per_step_windows(doc) and R.kernels(doc):
                idle, split, raw_i = R.idle_gaps_per_step(doc)
                add(run, "idle_us_per_step", "How long (µs) is the GPU idle per analyzed step?", round(idle, 3),
                    "5 % (or 20 µs)", raw_i, rank=rank)
                big, second, _ = sorted(split, key=lambda c: -split[c])
                # asked only where the reference's split is clear: the largest part 1.5 times the next or more
                if split[big] >= 1.5 * split[second] and split[big] >= 50.0:
                    add(run, "idle_cause", "What holds most of the GPU idle time per step: gaps with work queued "
                        "on the GPU ('queued': waiting on another stream or rank), gaps that began in a host-device "
                        "synchronization ('sync'), or gaps while the host ran other work ('host')?", big,
                        "exact", raw_i, rank=rank, split={c: round(v, 3) for c, v in split.items()})
            sync, raw_y = R.sync_totals(doc)
            if sync and max(sync.values()) > 0:
                top = max(sync, key=lambda n: sync[n])
                add(run, "sync_call", "Which synchronizing call or op takes the most host time?", top,
                    "exact name, or one within 1 % of the top", raw_y, rank=rank,
                    totals={n: round(v, 3) for n, v in sorted(sync.items(), key=lambda kv: -kv[1])})
            line, frames, raw_l = R.sync_line(doc)
            if line:
                add(run, "sync_line", "Which line of the user's code spends the most time in host-device "
                    "synchronizations?", line, "the same file(line), or one within 1 % of the top", raw_l, rank=rank,
                    frames={n: round(v, 3) for n, v in sorted(frames.items(), key=lambda kv: -kv[1])[:5]})
            n_opt, k_opt, us_opt, launch_opt, raw_o = R.optimizer_per_step(doc)
            if n_opt:
                add(run, "optimizer_kernels", "How many GPU kernels does Optimizer.step launch per analyzed step?",
                    round(k_opt, 3), "exact (±0.5 kernel)", raw_o, rank=rank)
                add(run, "optimizer_host_us", "How much host time (µs) does Optimizer.step take per analyzed step?",
                    round(us_opt, 3), "2 %", raw_o, rank=rank)
                if k_opt:  # what fusing it would buy on the host: the launches of its kernels
                    add(run, "optimizer_launch_us", "How much host time (µs) per analyzed step do the kernel launches "
                        "of Optimizer.step take (the launch overhead a fused optimizer would save most of)?",
                        round(launch_opt, 3), "5 % (or 5 µs)", raw_o, rank=rank)
            dev, raw_d = R.device_name(doc)
            if dev and i == 0:
                add(run, "device", "Which GPU did the run use?", dev, "exact", raw_d, rank=rank)
    for base, new in pairs:
        means = []
        raw = 0
        for side in (base, new):
            f = sorted((root / side).glob("*.json.gz"))[0]
            wins = R.step_windows(R.load(f))
            analyzed = wins[:-1] if len(wins) >= 2 else wins
            means.append(sum(e - s for _, s, e in analyzed) / len(analyzed))
            raw += R.steps(R.load(f))[1]
        change = 100 * (means[1] - means[0]) / means[0]
        verdict = "regressed" if change > BAND_PCT else "improved" if change < -BAND_PCT else "unchanged"
        add(root / base, "regressed", f"Did the step time regress from {base} to {new}?", verdict,
            f"verdict by the mean analyzed ProfilerStep, {BAND_PCT:g} % band", raw, new=new, change_pct=round(change, 2))
    return out


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="Write the question bank.")
    ap.add_argument("--traces", default=None, help="the trace root (default: ../shared/traces, with its compare pairs)")
    ap.add_argument("--out", default=str(HERE / "bank.json"))
    a = ap.parse_args()
    bank = questions(Path(a.traces), pairs=[]) if a.traces else questions()
    Path(a.out).write_text(json.dumps(bank, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(bank)} questions over {len({q['run'] for q in bank})} runs")
