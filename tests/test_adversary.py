"""Regression tests of issue 18: what a hostile or unlucky user did to hta-report.

Each test is built from the repro of one item of the issue (numbered as
there): payloads in traces, file names and saved results, gates that failed
open, outputs that overwrote inputs, file modes, huge values, malformed
ranks, and a rank where one of HTA's analyses fails. The collector's items
(fork, os.chdir...) are in tests/test_collect_scripts.py.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

import markup
from conftest import shared
from hta_report.api import analyze, load_result
from hta_report.compare import compare
from hta_report.errors import InputError
from hta_report.render import render, render_comparison
from kineto import TraceBuilder, simple_gpu_trace

EVIL_IMG = "<img src=https://evil.example/x.png>"


def _trace_dir(tmp_path: Path, name: str, builder: TraceBuilder, file: str = "rank-0.json") -> Path:
    d = tmp_path / name
    d.mkdir()
    builder.write(d / file)
    return d


# --- item 2: markdown injection ----------------------------------------------------------------------


def _optimizer_trace(marker: str, kernel: str = "void gemm_kernel<float, 128>(float*)") -> TraceBuilder:
    b = TraceBuilder(rank=0)
    for i in range(4):
        t0 = i * 1000.0
        b.step(i + 1, t0, 1000)
        b.cpu_op(f"Optimizer.step#{marker}.step", t0 + 600, 200, cat="user_annotation")
        b.kernel(kernel, t0 + 100, 300)
        b.kernel("multi_tensor_apply_kernel", t0 + 650, 100, launch_ts=t0 + 610)
    return b


def test_analyze_markdown_optimizer_marker_is_inert(tmp_path):
    """Repro: an ``Optimizer.step#Fused<img src=…>`` annotation gave a remote
    image in the checks table; @mentions, URLs and ESC bytes passed through."""
    d = _trace_dir(tmp_path, "t", _optimizer_trace(f"Fused{EVIL_IMG} @octocat http://evil.example \x1b[2J"))
    result = analyze(d)
    assert any(EVIL_IMG in c.detail for c in result.checks)  # it reaches the model raw
    benign = analyze(_trace_dir(tmp_path, "b", _optimizer_trace("Fused")))
    assert markup.markdown_problems(render(result, "md"), render(benign, "md")) == []


def test_compare_markdown_is_inert(tmp_path):
    """Repro: a kernel name or run label with a backtick broke out of its code
    span; finding titles were not escaped."""
    evil_kernel = f"k` {EVIL_IMG} [x](https://evil.example) `"
    base = analyze(_trace_dir(tmp_path, "base", simple_gpu_trace(kernel_name=evil_kernel, rank=0)))
    new = analyze(_trace_dir(tmp_path, "new", simple_gpu_trace(kernel_name="void gemm_kernel<float, 128>(float*)",
                                                               rank=0, steps=4)))
    new.findings[0].title = f"title ** {EVIL_IMG} @octocat #1 `x"
    c = compare(base, new, base_label=f"run` {EVIL_IMG} `", new_label="@octocat/team")
    md = render_comparison(c, "md")
    benign_new = analyze(tmp_path / "new")
    plain_base = analyze(_trace_dir(tmp_path, "plain", simple_gpu_trace(kernel_name="k", rank=0)))
    benign = render_comparison(compare(plain_base, benign_new, base_label="run", new_label="x"), "md")
    assert markup.markdown_problems(md, benign) == []
    assert f"k` {EVIL_IMG}" in markup.render_gfm(md).replace("&lt;", "<").replace("&gt;", ">")  # shown, as code


# --- item 7: terminal escapes in file names ---------------------------------------------------------


def test_unreadable_file_name_cannot_drive_the_terminal(tmp_path, run_cli):
    """Repro: a file name with OSC/CSI sequences retitled and cleared the terminal
    on the ``unreadable:`` line."""
    simple_gpu_trace(rank=0).write(tmp_path / "rank-0.json")
    (tmp_path / "rank-1\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e.json").write_text("{")
    code, out, err = run_cli("analyze", tmp_path, "-o", tmp_path / "r.html")
    assert code == 1
    assert markup.terminal_problems(err, lines=2) == []
    assert markup.terminal_problems(out, lines=out.count("\n") + 1 - out.endswith("\n")) == []
    assert "rank-1\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\u202e.json" in err
