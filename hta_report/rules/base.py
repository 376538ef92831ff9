"""The rule record, verdicts and helpers shared by the rule modules.

A rule is a small pure function ``check(result, config, ledger) -> Verdict``
registered with :func:`rule`: it reads only the result model, the
configuration and the ledger of time the findings before it claimed
(:class:`~hta_report.rules.claims.Ledger`), and returns a finding with the
time it claims, "fine" with what it measured, "covered" when its time is
already claimed by another finding, or "not checked" with what the traces lack.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from ..model import (ATTRIBUTION_STEP, CHECK_STATUSES, COMMUNICATION_STEP, CPU_SIDE_STEP, MAX_EVIDENCE_EVENTS,
                     MEMCPY_STEP, STEP_TIMES_STEP, WINDOWS_STEP, AnalysisResult, EventRef, Finding, RankGain,
                     RankResult, WhatIf, combined_edit)
from ..replay_terms import EditLabel
from .claims import Claims, Ledger, raise_pools
from .config import AdviceConfig
from .wording import UNREPLAYED

DOCS_TUNING = "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"
DOCS_DATALOADER = "https://pytorch.org/docs/stable/data.html#multi-process-data-loading"
DOCS_PINNED = "https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html"
DOCS_HTA_IDLE = "https://hta.readthedocs.io/en/latest/source/features/idle_time_breakdown.html"
DOCS_HTA_LAUNCH = "https://hta.readthedocs.io/en/latest/source/features/cuda_kernel_launch_stats.html"
DOCS_HTA_COUNTERS = "https://hta.readthedocs.io/en/latest/source/features/counters.html"
DOCS_DDP = "https://pytorch.org/docs/stable/notes/ddp.html"
DOCS_AMP = "https://pytorch.org/docs/stable/amp.html"
DOCS_OPTIM = "https://pytorch.org/docs/stable/optim.html#algorithms"
DOCS_ZERO_GRAD = "https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.zero_grad.html"
DOCS_COMPILE = "https://pytorch.org/docs/stable/generated/torch.compile.html"
DOCS_PROFILER = "https://pytorch.org/tutorials/recipes/recipes/profiler_recipe.html"

FIRED, FINE, COVERED, NOT_CHECKED, DISABLED = CHECK_STATUSES  # the model lists them, in this order

#: Run phases: the trace window first, then specific causes, then general
#: causes (what is left of host time, compute), then the residual rules (step
#: outliers: the time no cause claimed), then the symptoms.
WINDOW, CAUSE, GENERAL, RESIDUAL, SYMPTOM = 0, 1, 2, 3, 4


@dataclass
class Verdict:
    """What a rule concluded: a finding (with the time it claims: rank ->
    pool -> µs per step, see :mod:`~hta_report.rules.claims`), or a status
    with its detail."""

    status: str
    detail: str = ""
    finding: Optional[Finding] = None
    claims: Dict[int, Dict[str, float]] = field(default_factory=dict)


def fine(detail: str) -> Verdict:
    """Checked and under the threshold; ``detail`` says what was measured."""
    return Verdict(FINE, detail)


def not_checked(reason: str) -> Verdict:
    """The traces lack the data the rule needs; ``reason`` says which."""
    return Verdict(NOT_CHECKED, reason)


def covered(detail: str) -> Verdict:
    """The rule's condition holds, but the time it would claim is already
    claimed by another finding; ``detail`` says what it measured and which."""
    return Verdict(COVERED, detail)


def covered_by(ledger: Ledger, ranks: Sequence[RankResult], pools: Sequence[str], what: str) -> Verdict:
    """A :func:`covered` verdict naming the rules that claimed ``pools`` on ``ranks``."""
    by: List[str] = []
    for r in ranks:
        by += [b for b in ledger.claimers(r.rank, pools) if b not in by]
    return covered(f"{what}; its time is counted under {', '.join(by) or 'other findings'}")


#: The ledger rules read: what fired so far, on which ranks, and the time it claimed.
Fired = Ledger
Check = Callable[[AnalysisResult, AdviceConfig, Ledger], Verdict]


@dataclass(frozen=True)
class Rule:
    """One rule of the catalogue.

    Attributes:
        id: stable kebab-case id.
        number: its internal number (``C1``...): the catalogue's order,
            and the ``rule`` field of findings and checks in saved results;
            never shown (the id is the rule's one public name).
        title: what it detects, for the catalogue.
        source: where the threshold comes from ("proposal" when unpublished).
        threshold: the trigger in words for a given configuration.
        doc_url: documentation of the fix.
        check: the rule function.
        phase: when it runs (:data:`WINDOW`, :data:`CAUSE`, :data:`GENERAL`,
            :data:`RESIDUAL`, :data:`SYMPTOM`); within a phase, in rule-number
            order (``claims.check_order`` checks it against who owns which time). Symptom
            rules describe GPU idle time that no cause explains; at most one
            of them gives a finding.
        needs: the analysis steps (``RankResult.failures`` names) whose
            figures it reads: a rank where one of them failed is left out of
            this rule alone, and its check says so (:data:`CORE` and more).
        description: what it checks, in a few sentences of markdown for
            ``docs/RULES.md`` and SARIF's ``fullDescription`` (no figure of a
            run, no threshold value: those depend on the configuration).
        fix: how to remove the cause, in markdown (SARIF's ``help``; a
            finding's own ``fix`` is the code for its run).
        edit: the edit of the execution graph the fix means, an
            :class:`~hta_report.replay_terms.EditLabel` (the labels of
            :data:`hta_report.analysis.replay.edits.EDITS`; ``""``: none; the
            finding's gain stays an upper bound). The engine gives the
            finding the replay's prediction for it (``Finding.whatif``).
        evidence: the GPU idle causes whose recorded events are the
            finding's evidence (``CauseEvents.cause`` of
            ``IdleAttribution.events``: ``sync``, ``dataloader``... or
            ``any``); the engine cites them in ``Finding.events``
            (:func:`cite`). Empty: the finding cites no events.
    """

    id: str
    number: str
    title: str
    source: str
    threshold: Callable[[AdviceConfig], str]
    doc_url: str
    check: Check
    phase: int = CAUSE
    needs: Tuple[str, ...] = ()
    description: str = ""
    fix: str = ""
    edit: str = ""
    evidence: Tuple[str, ...] = ()

    @property
    def symptom(self) -> bool:
        """True for the symptom rules (:data:`SYMPTOM` phase)."""
        return self.phase == SYMPTOM


REGISTRY: List[Rule] = []


#: What every rule reads: the steps and windows, the host side, and the
#: pools of the ledger (GPU idle by cause, exposed copies and communication).
CORE = (STEP_TIMES_STEP, CPU_SIDE_STEP, WINDOWS_STEP, MEMCPY_STEP, COMMUNICATION_STEP, ATTRIBUTION_STEP)


#: The rules that judge a rank from its GPU side and the runtime calls alone (kernels and their
#: names and arguments, copies, the GPU timeline, launch calls): a trace recorded with GPU activity
#: only (no ``ProfilerActivity.CPU``: no operator, annotation or Python event,
#: :attr:`~hta_report.model.Integrity.host_unrecorded`) holds all they read. Every other rule reads
#: the host's ops (what the host did while the GPU idled, the copy and sync ops, the optimizer's and
#: the DataLoader's annotations, op shapes) and is not checked on such a rank: without them it would
#: read the GPU's idle time as "no profiled host activity" and advise on a cause it cannot see.
GPU_SIDE_RULES = ("trace-window", "gpu-idle", "pageable-memcpy", "exposed-memcpy", "exposed-communication",
                  "tensor-cores-unused", "tf32-matmuls", "layout-conversions", "unfused-elementwise",
                  "low-sm-occupancy",
                  "launch-outliers", "full-launch-queue")


def rule(id: str, number: str, title: str, source: str, threshold: Callable[[AdviceConfig], str], doc_url: str,
         phase: int = CAUSE, needs: Sequence[str] = (), *, description: str, fix: str,
         edit: Optional[EditLabel] = None, evidence: Sequence[str] = ()) -> Callable[[Check], Check]:
    """Register the decorated function as a rule of the catalogue; it needs
    the analysis steps :data:`CORE` and ``needs``; ``description`` and
    ``fix`` document it (``docs/RULES.md``, SARIF's rule metadata); ``edit``
    names the replay's edit its fix means (:attr:`Rule.edit`); ``evidence``
    the idle causes whose events the finding cites (:attr:`Rule.evidence`).

    Raises:
        ValueError: a rule with this id or number is registered already, its
            description or fix is empty, or ``edit`` is not an
            :class:`~hta_report.replay_terms.EditLabel`.
    """
    def wrap(fn: Check) -> Check:
        taken = [r for r in REGISTRY if r.id == id or r.number == number]
        if taken:
            raise ValueError(f"rule {id} ({number}) clashes with {taken[0].id} ({taken[0].number})")
        if not description.strip() or not fix.strip():
            raise ValueError(f"rule {id} needs a description and a fix (docs/RULES.md, SARIF's help)")
        if edit is not None and not isinstance(edit, EditLabel):
            raise ValueError(f"rule {id} names edit {edit!r}, not an EditLabel (hta_report/replay_terms.py)")
        REGISTRY.append(Rule(id=id, number=number, title=title, source=source, threshold=threshold,
                             doc_url=doc_url, check=fn, phase=phase, needs=CORE + tuple(needs),
                             description=" ".join(description.split()), fix=" ".join(fix.split()),
                             edit=edit or "", evidence=tuple(evidence)))
        return fn
    return wrap


def severity(gain_pct: float, cfg: AdviceConfig) -> str:
    """``high`` / ``medium`` / ``low`` from the estimated gain in % of the
    step (``cfg.high_pct``, ``cfg.medium_pct``: 20 % and 5 % by default)."""
    if gain_pct >= cfg.high_pct:
        return "high"
    if gain_pct >= cfg.medium_pct:
        return "medium"
    return "low"


#: A rank's replay predicts a fix's saving for the severity of findings
#: (:func:`expected_pct`) only where it reproduces the rank's
#: measured step within this much (%): issue 30's fidelity bound ("none above
#: 10 %"). Elsewhere the finding's bound sets it.
FIDELITY_MAX_PCT = 10.0


def trusted(w: Optional[WhatIf], result: AnalysisResult) -> bool:
    """Whether the replay's prediction ``w`` is one the report stands by: it
    applies, on a rank of ``result`` that was replayed and whose replay
    reproduces its measured step within :data:`FIDELITY_MAX_PCT`."""
    if w is None or w.step_us_before <= 0 or not w.applies:
        return False
    rank = next((x for x in result.ranks if x.rank == w.rank), None)
    return rank is not None and rank.replay.steps > 0 and rank.replay.error_pct <= FIDELITY_MAX_PCT


def predicted_pct(w: WhatIf) -> float:
    """What the prediction ``w`` saves, % of its step (at least 0)."""
    return max(0.0, (w.step_us_before - w.step_us_after) / w.step_us_before * 100) if w.step_us_before > 0 else 0.0


def expected_pct(f: Finding, result: AnalysisResult) -> float:
    """What ``f``'s fix is expected to save, % of the step: the replay's
    prediction where there is one the report stands by (:func:`trusted`),
    else the finding's bound ``gain_pct``. A fix the replay says saves
    nothing (what it shortens is off the critical path) expects 0, whatever
    its bound; one it says saves more than the bound expects that. The
    engine sets findings' severity and order by it
    (:func:`hta_report.rules.engine.advise`): a finding predicted to save
    ``cfg.medium_pct`` or more is never rated low, unless the prediction's
    80 % interval reaches the step as measured (``WhatIf.measurable``) and
    it saves under :data:`~hta_report.rules.engine.NEVER_LOW_PCT`."""
    return predicted_pct(f.whatif) if f.whatif is not None and trusted(f.whatif, result) else f.gain_pct


def follow_prediction(f: Finding, v: "Verdict", rule_id: str, result: AnalysisResult, ledger: Ledger) -> None:
    """Make the time ``f`` claims on each rank the saving the replay predicts
    for its fix there (where it has a :func:`trusted` prediction of the
    finding's edit, ``f.whatif.edit``): less than the bound releases the rest
    for later findings; more takes it from what the ledger still has in the
    pools ``rule_id``'s fix empties (:func:`~.claims.raise_pools`: those it
    owns, those nobody owns, and those :data:`~.claims.ALSO_REMOVES` names),
    in their order; the finding's gain figures are then those claims
    (:func:`set_gains`). A finding's stated gain and its prediction so agree,
    and no two findings claim the same time. Where the ledger has less left
    than the prediction saves (another finding claimed that time first: two
    fixes that each remove it), the claim is what it has, and the stated gain
    the prediction: :func:`set_gains`'s ``floor``."""
    w = f.whatif
    if w is None:
        return
    ranks = {x.rank: x for x in result.ranks}
    floors: Dict[int, float] = {}
    for rank, parts in list(v.claims.items()):
        x = ranks.get(rank)
        hit = next((y for y in x.replay.whatifs if y.edit == w.edit), None) if x is not None else None
        if hit is None or not trusted(hit, result):
            continue
        target = max(0.0, hit.step_us_before - hit.step_us_after)
        now = sum(parts.values())
        if target < now:
            scale = target / now if now > 0 else 0.0
            v.claims[rank] = {p: us * scale for p, us in parts.items()}
        elif target > now and x is not None:
            pools = raise_pools(rule_id)
            free = ledger.take(x, pools, float("inf"))  # all the ledger has left in each pool it may claim
            merged, need = dict(parts), target - now
            for p in pools:
                got = min(max(0.0, free.get(p, 0.0) - merged.get(p, 0.0)), need)  # not what this claim holds
                if got > 0:
                    merged[p] = merged.get(p, 0.0) + got
                    need -= got
            v.claims[rank] = merged
        floors[rank] = target
    set_gains(f, [ranks[r] for r in f.ranks if r in ranks] or list(ranks.values()), v.claims, floors)
    if w.slowest_of:  # a job's figure: it saves what the job saves, whatever one rank saves alone
        f.gain_ms_per_step = max(0.0, w.step_us_before - w.step_us_after) / 1e3
        f.gain_pct = f.share_pct = predicted_pct(w)
    elif trusted(w, result):  # stated on the prediction's own step (a host that ran ahead: the GPU-paced one)
        f.gain_ms_per_step = max(f.gain_ms_per_step, (w.step_us_before - w.step_us_after) / 1e3)
        f.gain_pct = f.share_pct = max(f.gain_pct, predicted_pct(w))


def pct_of_step(us: float, r: RankResult) -> float:
    """``us`` (µs per step) as % of the rank's analyzed step
    (:attr:`~hta_report.model.RankResult.step_us`, or the traced window
    without steps); 0 without a window."""
    return 100 * us / r.step_us if r.window_us > 0 and r.step_us > 0 else 0.0


def per(r: RankResult) -> str:
    """``"per step"``, or ``"over the trace"`` without ``ProfilerStep`` annotations."""
    return "per step" if r.steps.count else "over the trace (no ProfilerStep)"


def step_words(r: RankResult) -> str:
    """``"the 12.30 ms step"`` or ``"the 40.00 ms traced window"``."""
    return f"the {ms(r.step_us)} step" if r.steps.count else f"the {ms(r.window_us)} traced window"


def of_step(r: RankResult) -> str:
    """``"of the step"``, or ``"of the trace"`` without ``ProfilerStep`` annotations."""
    return "of the step" if r.steps.count else "of the trace"


def ms(us: float) -> str:
    """µs as ``"1.23 ms"`` (evidence strings carry their own units)."""
    return f"{us / 1e3:,.2f} ms"


def make_finding(cfg: AdviceConfig, hits: Sequence[RankResult], claims: Claims, title: str, evidence: List[str],
                 fix: str, ranks: Optional[List[int]] = None, doc_url: str = "") -> Verdict:
    """A fired verdict. The gain on each rank is the time the finding claims
    there (``claims``: rank -> pool -> µs per step, from
    :meth:`~hta_report.rules.claims.Ledger.take`); the finding reports the
    worst rank's (µs per step -> ms and % of that rank's step), its severity
    follows it until the engine sets it from what the fix is expected to save
    (:func:`expected_pct`), and ``rank_gains`` lists every rank's. ``ranks`` (default: the
    ranks of ``hits``) are the ranks the finding names. The engine adds what
    the rule states once (:func:`complete`): its id, number, threshold text
    and, unless ``doc_url`` is given here, its documentation link."""
    by_rank = {r.rank: r for r in hits}
    f = Finding(id="", title=title, severity="low", evidence=evidence, fix=fix, doc_url=doc_url,
                ranks=sorted(ranks if ranks is not None else by_rank))
    worst = set_gains(f, hits, claims)
    f.bound_ms_per_step, f.bound_pct = f.gain_ms_per_step, f.gain_pct
    f.severity = severity(f.gain_pct, cfg)
    return Verdict(FIRED, f"{f.gain_pct:.1f} % {of_step(worst)} at stake", f,
                   claims={rank: dict(parts) for rank, parts in claims.items()})


def set_gains(f: Finding, hits: Sequence[RankResult], claims: Claims,
              floors: Optional[Dict[int, float]] = None) -> RankResult:
    """``f``'s gain figures from the time it claims on each rank of ``hits``
    (``claims``: rank -> pool -> µs per step): ``rank_gains`` lists every
    rank's claim, and the gain (``gain_ms_per_step``, ``gain_pct``,
    ``share_pct``) is the worst rank's (largest share of its step), at least
    ``floors[rank]`` there (µs per step: the saving the replay predicts, where
    it exceeds what the ledger had left). Returns the worst rank."""
    by_rank = {r.rank: r for r in hits}
    gains = {rank: sum(parts.values()) for rank, parts in claims.items() if rank in by_rank}
    stated = {rank: max(us, (floors or {}).get(rank, 0.0)) for rank, us in gains.items()}
    worst = max(hits, key=lambda r: pct_of_step(stated.get(r.rank, 0.0), r)) if stated else hits[0]
    gain_us = stated.get(worst.rank, 0.0)
    f.gain_pct = f.share_pct = pct_of_step(gain_us, worst)
    f.gain_ms_per_step = gain_us / 1e3
    f.rank_gains = [RankGain(rank=rank, gain_us=us, gain_pct=pct_of_step(us, by_rank[rank]),
                             sources={p: float(v) for p, v in claims[rank].items()})
                    for rank, us in sorted(gains.items()) if us > 0]
    return worst


#: How many ranks a finding's evidence shows (the worst first).
EVIDENCE_RANKS = 8

#: Where a rule's time is claimed from: the same pools on every rank, or each rank's own.
Pools = Union[Sequence[str], Callable[[RankResult], Sequence[str]]]


def pools_on(pools: Pools, r: RankResult) -> Sequence[str]:
    """``pools`` on rank ``r``: the list itself, or what the function gives for ``r``."""
    return pools(r) if callable(pools) else pools


def per_step(total: float, steps: int) -> float:
    """A figure summed over a rank's analyzed windows (µs, a count) per window.

    ``steps`` is how many windows the total covers (``RankResult.steps_used``,
    ``CpuSide.steps_used``); 0, as ``CpuSide`` has it without ``ProfilerStep``,
    means the whole trace was the one window, so the total is its own per-step
    figure. Only for totals over the analyzed windows: a whole-trace figure
    (``MemcpyDirection``'s counts, bytes and times, a kernel's ``total_us``)
    also holds the warm-up step and what lies outside the steps, so dividing
    it by the steps would be wrong; the rules show those as "in the trace".
    """
    return total / max(steps, 1)


def step_shares(ranks: Iterable[RankResult], us: Callable[[RankResult], float]) -> Dict[int, float]:
    """Rank -> ``us(r)`` as % of its step (:func:`pct_of_step`)."""
    return {r.rank: pct_of_step(us(r), r) for r in ranks}


def worst_first(ranks: Iterable[RankResult], key: Callable[[RankResult], float]) -> List[RankResult]:
    """``ranks`` by ``key``, largest first (ranks with equal keys keep their order)."""
    return sorted(ranks, key=key, reverse=True)


def largest(ranks: Iterable[RankResult], share: Mapping[int, float]) -> RankResult:
    """The rank with the largest ``share`` (rank -> value; the first of equals)."""
    return max(ranks, key=lambda r: share[r.rank])


def up_to(ranks: Iterable[RankResult], share: Mapping[int, float]) -> str:
    """``"up to 3.2 % of the step"``: the largest ``share`` (% of the step) of ``ranks``."""
    w = largest(ranks, share)
    return f"up to {share[w.rank]:.1f} % {of_step(w)}"


def shares_over(ranks: Sequence[RankResult], us: Callable[[RankResult], float], threshold: float,
                strict: bool = False) -> Tuple[Dict[int, float], List[RankResult]]:
    """Each rank's ``us(r)`` as % of its step (:func:`step_shares`), and the
    ranks whose share is at least ``threshold`` % (above it when ``strict``),
    the largest share first."""
    share = step_shares(ranks, us)
    return share, worst_first([r for r in ranks if share[r.rank] > threshold
                               or (not strict and share[r.rank] == threshold)], lambda r: share[r.rank])


def evidence_lines(hits: Sequence[RankResult], line: Callable[[RankResult], str]) -> List[str]:
    """``line(r)`` for the first :data:`EVIDENCE_RANKS` ranks of ``hits`` (worst first)."""
    return [line(r) for r in hits[:EVIDENCE_RANKS]]


@dataclass
class Claimed:
    """A rule's claims on the ranks where its condition holds (:func:`claim`).

    Attributes:
        hits: the ranks the finding names, worst first: those where it claims
            time, and those whose time no other finding holds (their own is 0,
            or the copies overlapped compute...).
        claims: rank -> pool -> µs per step, for :attr:`hits`.
        held: the ranks left out: their time is all claimed by other
            findings already, which :meth:`covered` names.
        what: what the rule measured, in words, for :meth:`covered`.
    """

    fired: Ledger
    pools: Pools
    hits: List[RankResult]
    claims: Dict[int, Dict[str, float]]
    held: List[RankResult]
    what: str = ""

    @property
    def worst(self) -> RankResult:
        """The first rank of :attr:`hits` (of :attr:`held` when none is left)."""
        return (self.hits or self.held)[0]

    def us(self, r: RankResult) -> float:
        """What the rule claims on rank ``r`` (µs per step)."""
        return sum(self.claims.get(r.rank, {}).values())

    def covered(self, what: str = "") -> Verdict:
        """The ``covered`` verdict: ``what`` the rule measured (default
        :attr:`what`) and the findings that hold its time on :attr:`held`."""
        ranks = self.held or self.hits
        pools: List[str] = []
        for r in ranks:
            pools += [p for p in pools_on(self.pools, r) if p not in pools]
        return covered_by(self.fired, ranks, pools, what or self.what)

    def verdict(self, cfg: AdviceConfig, title: str, evidence: List[str], fix: str,
                ranks: Optional[List[int]] = None) -> Verdict:
        """The finding (:func:`make_finding` on :attr:`hits` with :attr:`claims`),
        or :meth:`covered` (by :attr:`what`, else ``title``) when other
        findings hold the time of every rank."""
        if not self.hits:
            return self.covered(self.what or title)
        return make_finding(cfg, self.hits, self.claims, title, evidence, fix, ranks=ranks)


def claim(fired: Ledger, hits: Sequence[RankResult], pools: Pools, gain_us: Callable[[RankResult], float],
          what: str = "") -> Claimed:
    """Claim ``gain_us(r)`` µs per step from ``pools`` on each rank of ``hits``
    (:meth:`~hta_report.rules.claims.Ledger.take`, which defers to owners by
    :data:`~hta_report.rules.claims.OWNERSHIP`). A rank whose time is all
    held by other findings (a positive ``gain_us``, nothing left to claim,
    and another finding claimed in its pools there) is left out of the
    finding: the same time, or the same events, are not named twice. With no
    rank left, :meth:`Claimed.verdict` is ``covered``, saying ``what`` the
    rule measured and which findings hold its time."""
    every = claim_each(fired, hits, pools, gain_us)
    held = [r for r in hits if not every[r.rank] and gain_us(r) > 0 and fired.claimers(r.rank, pools_on(pools, r))]
    kept = [r for r in hits if all(r.rank != h.rank for h in held)]
    return Claimed(fired=fired, pools=pools, hits=kept, claims={r.rank: every[r.rank] for r in kept}, held=held,
                   what=what)


def claim_each(fired: Ledger, ranks: Iterable[RankResult], pools: Pools,
               gain_us: Callable[[RankResult], float]) -> Dict[int, Dict[str, float]]:
    """Rank -> what :meth:`~hta_report.rules.claims.Ledger.take` gives of
    ``gain_us(r)`` µs per step from ``pools`` on it (an empty claim included)."""
    return {r.rank: fired.take(r, pools_on(pools, r), gain_us(r)) for r in ranks}


def complete(f: Finding, r: Rule, cfg: AdviceConfig) -> Finding:
    """``f`` (from :func:`make_finding` in ``r``'s check) with the rule's id,
    number, threshold in words with its source, and documentation link (when
    the check gave none)."""
    f.id, f.rule = r.id, r.number
    f.threshold = f"{r.threshold(cfg)} ({r.source})"
    f.doc_url = f.doc_url or r.doc_url
    return f


def cite(f: Finding, r: Rule, result: AnalysisResult) -> Finding:
    """``f`` with its evidence events (``Finding.events``): the events its
    ranks recorded for the causes ``r.evidence`` names
    (``IdleAttribution.events``, each cause's largest gaps first), the
    rank with the largest gain first (``rank_gains``), cut at
    :data:`~hta_report.model.MAX_EVIDENCE_EVENTS`."""
    if not r.evidence:
        return f
    gain = {g.rank: g.gain_us for g in f.rank_gains}
    ranks = sorted((x for x in result.ranks if x.rank in f.ranks), key=lambda x: (-gain.get(x.rank, 0.0), x.rank))
    events: List[EventRef] = []
    for x in ranks:
        for cause in r.evidence:
            events += next((c.events for c in x.idle_attribution.events if c.cause == cause), [])
    f.events = events[:MAX_EVIDENCE_EVENTS]
    return f


def together(result: AnalysisResult, findings: Sequence[Finding], edits: Mapping[str, str]) -> Optional[WhatIf]:
    """What the fixes of ``findings`` with a prediction buy together (``edits``:
    rule id -> edit label): on each rank where two or more of them predict a
    step, the replay's what-if of all their edits together
    (:func:`~hta_report.model.combined_edit`); where the replay did not
    combine those (it combines every edit that changes the rank, and every
    subset of those that save time alone up to three of them), the largest
    subset it did combine, of two or more. Of those ranks, the one saving the
    largest share of its step. None when no rank has two such findings. A
    rank whose what-ifs were withheld (a window mostly warm-up) has none.
    Where the ranks wait for each other at collectives (:func:`coupled_ranks`),
    the job's figure instead (:func:`job_whatif`): every edit of the
    findings with a prediction, on each rank the largest combination of them
    the replay made there (else the one edit of them saving the most), what
    the largest own time (step less wait) saves."""
    if coupled_ranks(result):
        labels = sorted({edits[f.id] for f in findings if f.id in edits and f.whatif is not None})
        return job_whatif(result, lambda x: _largest_combination(x, labels), combined_edit(labels)) \
            if len(labels) >= 2 else None
    best: Optional[WhatIf] = None
    for x in result.ranks:
        by_edit = {w.edit: w for w in x.replay.whatifs}
        labels = sorted({edits[f.id] for f in findings if f.id in edits and f.whatif is not None
                         and x.rank in f.ranks and edits[f.id] in by_edit})
        hit = _largest_combination(x, labels, smallest=2)
        if hit is None or not hit.step_us_before > 0:
            continue
        if best is None or saved_share(hit) > saved_share(best):
            best = hit
    return best


def _largest_combination(x: RankResult, labels: Sequence[str], smallest: int = 1) -> Optional[WhatIf]:
    """Of rank ``x``'s what-ifs, the one combining the most of ``labels``, at
    least ``smallest`` of them (ties: the first saving the largest share), or
    None where it has none such."""
    by_edit = {w.edit: w for w in x.replay.whatifs}
    for size in range(len(labels), smallest - 1, -1):
        hits = [by_edit[combined_edit(c)] for c in combinations(labels, size) if combined_edit(c) in by_edit]
        if hits:
            return max(hits, key=saved_share)
    return None


def saved_share(w: WhatIf) -> float:
    """What the what-if ``w`` saves, as a share of its step (0-1)."""
    return (w.step_us_before - w.step_us_after) / w.step_us_before if w.step_us_before > 0 else 0.0


def coupled_ranks(result: AnalysisResult) -> List[RankResult]:
    """The ranks that wait for each other every step: those with collectives
    (``CommSummary.collective_basis``: communication kernels, or host time
    in collective ops such as ``gloo:all_reduce``), when two or more have
    them; else none. Data, tensor, pipeline and expert parallelism block at
    their collectives until every peer has arrived, so such a job runs at
    the pace of its slowest rank: a fix that makes one rank faster makes the
    job faster only as far as the slowest rank allows."""
    ranks = [x for x in result.ranks if x.comm.collective_basis]
    return ranks if len(ranks) >= 2 else []


def job_whatif(result: AnalysisResult, pick: Callable[[RankResult], Optional[WhatIf]],
               edit: str) -> Optional[WhatIf]:
    """A job's prediction for the edit ``edit`` where its ranks wait for each
    other (:func:`coupled_ranks`). The fix is in the code every rank runs, so
    each rank gets its own what-if (``pick(rank)``; None where the edit
    leaves the rank unchanged). A synchronous job steps at the pace of its
    slowest rank's own work: a rank's step is its own time plus its wait at
    the collectives for the last to arrive (``CommSummary.sync_wait_us_per_step``,
    kept as measured by its replay, which holds its collectives' measured
    durations). So the job saves what the largest own time (step less wait)
    saves: before, ``max(step_r - wait_r)``; after, ``max(after_r - wait_r)``,
    the interval's ends alike. A fix that shortens a waiting rank only
    lengthens its wait (no saving); one that shortens the last to arrive
    saves up to the next slowest's own time; one that shortens every rank
    alike saves what the slowest saves. The figures (``WhatIf.slowest_of``):
    ``step_us_before`` the largest measured step (the job's), the others
    that less the saving; ``rank`` the rank whose own time is the largest
    after the fix. Assumes the waits are for the last rank's arrival (one
    collective a step, or the same rank last at each). None (no job figure:
    the finding keeps its bound) without two coupled ranks, when one of them
    is not replayed within :data:`FIDELITY_MAX_PCT` or has no what-ifs
    (withheld: a window mostly warm-up), or when the edit changes no rank."""
    coupled = coupled_ranks(result)
    if not coupled or any(not x.replay.steps or x.replay.error_pct > FIDELITY_MAX_PCT or not x.replay.whatifs
                          for x in coupled):
        return None
    rows: List[Tuple[int, float, Tuple[float, float, float], Optional[WhatIf]]] = []  # rank, step, own after
    own_before = 0.0
    for x in coupled:
        w = pick(x)
        base = x.replay.whatifs[0].step_us_before  # every what-if of a rank starts from the same step
        wait = max(0.0, min(x.comm.sync_wait_us_per_step, base))
        own_before = max(own_before, base - wait)
        if w is None or not w.applies or not w.step_us_before > 0:
            rows.append((x.rank, base, (base - wait,) * 3, None))
        else:
            rows.append((x.rank, base, (max(0.0, w.step_us_after - wait), max(0.0, w.step_us_low - wait),
                                        max(0.0, w.step_us_high - wait)), w))
    changed: List[WhatIf] = [row[3] for row in rows if row[3] is not None]
    if not changed or not all(row[1] > 0 for row in rows):
        return None
    job = max(row[1] for row in rows)
    after, low, high = (job - (own_before - max(row[2][k] for row in rows)) for k in range(3))
    gate = max(rows, key=lambda row: (row[2][0], row[1]))
    described: WhatIf = gate[3] if gate[3] is not None else changed[0]
    return WhatIf(edit=edit, step_us_before=job, step_us_after=after, step_us_low=min(low, after),
                  step_us_high=max(high, after), description=described.description, rank=gate[0], applies=True,
                  slowest_of=len(rows))


def predicted(f: Finding, r: Rule, result: AnalysisResult) -> Optional[WhatIf]:
    """The replay's prediction for ``f``'s fix (``r.edit``): where the ranks
    wait for each other at collectives, the job's (:func:`job_whatif`: what
    the largest own time, step less wait, saves); else on the finding's worst
    rank that was replayed (largest ``gain_pct`` in ``f.rank_gains``, else
    the first of ``f.ranks``). None: no edit, no job figure for coupled
    ranks, or no rank of the finding has a prediction the report stands by
    (:func:`trusted`: the edit changed something there, on a rank the replay
    reproduces), and the finding keeps its bound. A fix that is not the one
    the edit replays (:data:`~.wording.UNREPLAYED`) gets none either."""
    if not r.edit or f.fix in UNREPLAYED:
        return None
    if coupled_ranks(result):
        return job_whatif(result, lambda x: next((w for w in x.replay.whatifs if w.edit == r.edit), None), r.edit)
    order = [g.rank for g in sorted(f.rank_gains, key=lambda g: -g.gain_pct)] or list(f.ranks)
    by_rank = {x.rank: x for x in result.ranks}
    for rank in order:
        x = by_rank.get(rank)
        hit = next((w for w in x.replay.whatifs if w.edit == r.edit), None) if x is not None else None
        if trusted(hit, result):
            return hit
    return None
