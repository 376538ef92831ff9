"""Fuzzing the markdown and terminal renderers with hostile strings (issue 18).

Every string of real results (kernel, op and device names, file paths, run
labels, finding titles and evidence, check details, failed steps, warnings,
manifest values...) is replaced by hostile text: markdown and HTML payloads,
GitHub mentions, references, emoji and URLs, terminal escape sequences,
line breaks and bidirectional overrides, random text. Each case renders the
analyze markdown, the compare markdown (the hostile result against another),
the terminal summary, the compare summary and the stderr lines, and checks,
against the same documents with every hostile string replaced by a harmless
token (distinct strings stay distinct, so the documents have the same shape):

* markdown, rendered by GitHub's own parser (cmarkgfm), holds no tag, link
  or image the harmless document does not hold, and no text that GitHub
  would turn into a mention, a reference, an emoji or a link;
* terminal output holds no control character and no more lines.

``HTA_REPORT_FUZZ_MARKUP_CASES`` sets the number of cases (default 600).
"""
from __future__ import annotations

import collections
import copy
import dataclasses
import os
import random

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import markup
from hta_report.api import analyze
from hta_report.compare import compare
from hta_report.model import AnalysisResult, SectionFailure, UnreadableTrace
from hta_report.names import family
from hta_report.render import markdown, terminal
from kineto import simple_gpu_trace, training_trace

CASES = int(os.environ.get("HTA_REPORT_FUZZ_MARKUP_CASES", "600"))

#: Payloads against markdown, HTML, GitHub's text filters and terminals.
PAYLOADS = [
    "`", "``", "```", "~~~", "<img src=https://evil.example/x.png>", "![i](https://evil.example/i.png)",
    "[x](https://evil.example)", "[x]: https://evil.example", "<https://evil.example>", "<script>alert(1)</script>",
    "</summary><img src=x>", "</details>", "<!-- c -->", "&#64;octocat", "&lt;b&gt;", "@octocat", "@org/team",
    "#1", "org/repo#12", "GH-12", "https://evil.example/", "http://e.x", "www.evil.example", "mailto:a@b.co",
    "a@b.co", ":+1:", ":octocat:", ":x:", "$x$", "$$\\frac{1}{2}$$", "\\", "\\`", "*em*", "**b**", "_em_",
    "~~s~~", "| a | b |", "|", "\n# heading", "\n---\n", "\r\n", "\n\n", "1. ", "2) ", "- ", "+ ", "> ",
    "    indented", "  ", "=", "[^1]", "\x1b[2J", "\x1b]0;title\x07", "\x1b[31m", "\x9b31m", "\x07", "\x00",
    "\x7f", "\t", "\u202e", "\u2066", "\u2028", "\x85", "\ud800", "\u2060", "\u200b", "核函数",
]
hostile_text = st.one_of(
    st.sampled_from(PAYLOADS),
    st.lists(st.sampled_from(PAYLOADS), min_size=2, max_size=4).map("x".join),
    st.text(max_size=24),
    st.tuples(st.text(max_size=8), st.sampled_from(PAYLOADS), st.text(max_size=8)).map("".join),
)

# ---------------------------------------------------------------- the models


def _str_slots(obj, out):
    """Every string field (and string list item) of a dataclass tree: (owner, key) pairs."""
    if dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if isinstance(value, str):
                out.append((obj, f.name))
            elif f.name == "manifest":
                out.extend((value, k) for k in value)
            else:
                _str_slots(value, out)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            if isinstance(v, str):
                out.append((obj, i))
            else:
                _str_slots(v, out)
    return out


def _get(owner, key):
    return getattr(owner, key) if dataclasses.is_dataclass(owner) else owner[key]


def _set(owner, key, value):
    if dataclasses.is_dataclass(owner):
        setattr(owner, key, value)
    else:
        owner[key] = value


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    """Two results with many strings: simulated training with findings, a
    rank analyzed in part, unreadable traces, warnings and a manifest."""
    out = []
    for name, builder in (("a", training_trace(rank=0, steps=6, item_every_step=True, pinned=False,
                                                 optimizer="single", set_to_none=False)),
                          ("b", simple_gpu_trace(rank=1, steps=4))):
        d = tmp_path_factory.mktemp(name)
        builder.write(d / "rank.json")
        result = analyze(d)
        result.ranks[0].failures.append(SectionFailure(step="temporal breakdown (HTA)", reason="AssertionError: x"))
        result.inventory.unreadable.append(UnreadableTrace(path=str(d / "bad.json"), reason="truncated JSON"))
        result.inventory.warnings.append("a warning")
        result.inventory.manifest = {"command": "python train.py", "host": "node-1"}
        result.inventory.devices = ["NVIDIA H100"]
        out.append(result)
    assert out[0].findings and out[0].checks and out[0].ranks[0].top_kernels
    return out


def _hostile_pair(result: AnalysisResult, texts, rng: random.Random):
    """(hostile, benign) copies of ``result``: every string replaced by one of
    ``texts`` (hostile) or by a token standing for that text (benign).

    Texts that the reports group as one kernel (one :func:`hta_report.names.family`,
    e.g. ``""`` and ``"\r\n"``) get tokens of one family too (``t3``,
    ``t3<1>``; ``""``, ``" "``), so that both documents have the same shape
    and only markup made by the text itself differs."""
    hostile, benign = copy.deepcopy(result), copy.deepcopy(result)
    tokens, classes = {}, {}
    for (h_owner, key), (b_owner, _) in zip(_str_slots(hostile, []), _str_slots(benign, [])):
        text = rng.choice(texts)
        _set(h_owner, key, text)
        if text not in tokens:
            members = classes.setdefault(family(text), [])
            k = list(classes).index(family(text))
            if family(text) == "":  # names the reports show as blank: blank tokens, "" for "" alone
                tokens[text] = " " * (len([m for m in members if m]) + 1) if text else ""
            else:
                tokens[text] = f"t{k}" + (f"<{len(members)}>" if members else "")
            members.append(text)
        _set(b_owner, key, tokens[text])
    return hostile, benign


def _lines(text: str) -> int:
    return text.count("\n") + 1 - text.endswith("\n")


# ---------------------------------------------------------------- the test

STATS = collections.Counter()


@seed(18)
@settings(max_examples=CASES, deadline=None, database=None, derandomize=False,
          suppress_health_check=list(HealthCheck))
@given(texts=st.lists(hostile_text, min_size=1, max_size=6), which=st.integers(0, 2 ** 32 - 1))
def _fuzz(bases, texts, which):
    rng = random.Random(which)
    base = bases[which % 2]
    other = bases[1 - which % 2]
    hostile, benign = _hostile_pair(base, texts, rng)
    problems = {}
    problems["analyze md"] = markup.markdown_problems(markdown.render(hostile, {}), markdown.render(benign, {}))
    labels = [rng.choice(texts), rng.choice(texts)]
    h_cmp = compare(other, hostile, base_label=labels[0], new_label=labels[1])
    b_cmp = compare(other, benign, base_label="base", new_label="new" if labels[0] != labels[1] else "base")
    problems["compare md"] = markup.markdown_problems(markdown.render_comparison(h_cmp), markdown.render_comparison(b_cmp))
    for name, h_text, b_text in (
            ("summary", terminal.render(hostile, labels), terminal.render(benign, ["w0", "w1"])),
            ("stderr", "\n".join(terminal.incomplete_lines(hostile)), "\n".join(terminal.incomplete_lines(benign))),
            ("compare summary", terminal.comparison_summary(h_cmp, labels), terminal.comparison_summary(b_cmp, ["a", "b"]))):
        problems[name] = markup.terminal_problems(h_text, _lines(b_text))
    bad = {k: v for k, v in problems.items() if v}
    STATS["cases"] += 1
    assert not bad, (texts, bad)


def test_hostile_strings_never_become_markup_or_escape_sequences(bases):
    STATS.clear()
    _fuzz(bases)
    print(f"\nfuzz markup: {STATS['cases']} cases, 0 surviving markup or escape sequences")
    assert STATS["cases"] >= CASES


def test_the_oracle_sees_markup_and_escapes():
    """The checks fail on what they should catch (so a pass means something)."""
    benign = "## hta-report\n\n- x\n"
    for md in ("## hta-report\n\n- <img src=x>\n", "## hta-report\n\n- [a](https://e)\n", "## hta-report\n\n- @octocat\n",
               "## hta-report\n\n- *x*\n", "## hta-report\n\n- www.e.com\n", "## hta-report\n\n- #12\n",
               "## hta-report\n\n- :x:\n", "## hta-report\n\n- \x1b[2J\n"):
        assert markup.markdown_problems(md, benign), md
    assert markup.markdown_problems(benign, benign) == []
    assert markup.terminal_problems("a\x1b[2Jb", 1) and markup.terminal_problems("a\nb", 1)
    assert markup.terminal_problems("a\u202eb", 1) and markup.terminal_problems("a\x9bb", 1)
    assert markup.terminal_problems("a b", 1) == []
