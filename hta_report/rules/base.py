"""The rule record, verdicts and helpers shared by the rule modules.

A rule is a small pure function ``check(result, config, fired) -> Verdict``
registered with :func:`rule`: it reads only the result model, the
configuration and (for symptom rules) which rules fired before it on which
ranks, and returns a finding, "fine" with what it measured, or "not checked"
with what the traces lack.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, FrozenSet, List, Mapping, Optional

from ..model import AnalysisResult, Finding, RankResult
from .config import AdviceConfig

DOCS_TUNING = "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"
DOCS_DATALOADER = "https://pytorch.org/docs/stable/data.html#multi-process-data-loading"
DOCS_PINNED = "https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html"
DOCS_HTA_IDLE = "https://hta.readthedocs.io/en/latest/source/features/idle_time_breakdown.html"
DOCS_HTA_LAUNCH = "https://hta.readthedocs.io/en/latest/source/features/cuda_kernel_launch_stats.html"
DOCS_HTA_COUNTERS = "https://hta.readthedocs.io/en/latest/source/features/counters.html"
DOCS_HTA_COMM = "https://hta.readthedocs.io/en/latest/source/features/comm_comp_overlap.html"
DOCS_DDP = "https://pytorch.org/docs/stable/notes/ddp.html"
DOCS_AMP = "https://pytorch.org/docs/stable/amp.html"
DOCS_TF32 = "https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices"
DOCS_OPTIM = "https://pytorch.org/docs/stable/optim.html#algorithms"
DOCS_ZERO_GRAD = "https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.zero_grad.html"
DOCS_COMPILE = "https://pytorch.org/docs/stable/generated/torch.compile.html"
DOCS_CUDA_GRAPHS = "https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs"
DOCS_PROFILER = "https://pytorch.org/tutorials/recipes/recipes/profiler_recipe.html"

FIRED, FINE, NOT_CHECKED, DISABLED = "fired", "fine", "not checked", "disabled"


@dataclass
class Verdict:
    """What a rule concluded: a finding, or a status with its detail."""

    status: str
    detail: str = ""
    finding: Optional[Finding] = None


def fine(detail: str) -> Verdict:
    """Checked and under the threshold; ``detail`` says what was measured."""
    return Verdict(FINE, detail)


def not_checked(reason: str) -> Verdict:
    """The traces lack the data the rule needs; ``reason`` says which."""
    return Verdict(NOT_CHECKED, reason)


#: Rules that fired before this one: rule id -> the ranks in its finding.
Fired = Mapping[str, FrozenSet[int]]
Check = Callable[[AnalysisResult, AdviceConfig, Fired], Verdict]


@dataclass(frozen=True)
class Rule:
    """One rule of the catalogue.

    Attributes:
        id: stable kebab-case id.
        number: its number in ``ADVICE_RULES.md`` (``C1``...).
        title: what it detects, for the catalogue.
        source: where the threshold comes from ("proposal" when unpublished).
        threshold: the trigger in words for a given configuration.
        doc_url: documentation of the fix.
        check: the rule function.
        symptom: True for rules that describe GPU idle time and subtract what
            the cause rules that fired already explain; they run last.
    """

    id: str
    number: str
    title: str
    source: str
    threshold: Callable[[AdviceConfig], str]
    doc_url: str
    check: Check
    symptom: bool = False


REGISTRY: List[Rule] = []


def rule(id: str, number: str, title: str, source: str, threshold: Callable[[AdviceConfig], str], doc_url: str,
         symptom: bool = False) -> Callable[[Check], Check]:
    """Register the decorated function as a rule of the catalogue.

    Raises:
        ValueError: a rule with this id or number is registered already.
    """
    def wrap(fn: Check) -> Check:
        taken = [r for r in REGISTRY if r.id == id or r.number == number]
        if taken:
            raise ValueError(f"rule {id} ({number}) clashes with {taken[0].id} ({taken[0].number})")
        REGISTRY.append(Rule(id=id, number=number, title=title, source=source, threshold=threshold,
                             doc_url=doc_url, check=fn, symptom=symptom))
        return fn
    return wrap


def severity(gain_pct: float, cfg: AdviceConfig) -> str:
    """``high`` / ``medium`` / ``low`` from the estimated gain in % of the step."""
    if gain_pct >= cfg.high_pct:
        return "high"
    if gain_pct >= cfg.medium_pct:
        return "medium"
    return "low"


def pct_of_step(us: float, r: RankResult) -> float:
    """``us`` as % of the rank's analyzed step (or traced window without steps)."""
    return 100 * us / r.window_us if r.window_us > 0 else 0.0


def per(r: RankResult) -> str:
    """``"per step"``, or ``"over the trace"`` without ``ProfilerStep`` annotations."""
    return "per step" if r.steps.count else "over the trace (no ProfilerStep)"


def step_words(r: RankResult) -> str:
    """``"the 12.30 ms step"`` or ``"the 40.00 ms traced window"``."""
    return f"the {ms(r.window_us)} step" if r.steps.count else f"the {ms(r.window_us)} traced window"


def ms(us: float) -> str:
    """µs as ``"1.23 ms"`` (evidence strings carry their own units)."""
    return f"{us / 1e3:,.2f} ms"


def ranks_text(ranks: List[int]) -> str:
    """``"rank 3"``, ``"ranks 0, 1"`` or ``"12 ranks"``."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(str(r) for r in ranks) if len(ranks) <= 8 else f"{len(ranks)} ranks"


def make_finding(cfg: AdviceConfig, worst: RankResult, gain_us: float, title: str, evidence: List[str],
                 fix: str, ranks: List[int], doc_url: str = "") -> Verdict:
    """A fired verdict: the finding with its gain on the worst rank (µs per
    step -> ms and % of that rank's step) and severity. The engine adds what
    the rule states once (:func:`complete`): its id, number, threshold text
    and, unless ``doc_url`` is given here, its documentation link."""
    gain_pct = pct_of_step(gain_us, worst)
    f = Finding(
        id="", title=title, severity=severity(gain_pct, cfg), evidence=evidence, fix=fix, doc_url=doc_url,
        ranks=sorted(ranks), share_pct=gain_pct, gain_ms_per_step=gain_us / 1e3, gain_pct=gain_pct,
    )
    return Verdict(FIRED, f"{gain_pct:.1f} % of the step at stake", f)


def complete(f: Finding, r: Rule, cfg: AdviceConfig) -> Finding:
    """``f`` (from :func:`make_finding` in ``r``'s check) with the rule's id,
    number, threshold in words with its source, and documentation link (when
    the check gave none)."""
    f.id, f.rule = r.id, r.number
    f.threshold = f"{r.threshold(cfg)} ({r.source})"
    f.doc_url = f.doc_url or r.doc_url
    return f
