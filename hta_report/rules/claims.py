"""The ledger of time that findings claim, so that no two findings count the same time.

A rank's analyzed step (µs per step, or the traced window without
``ProfilerStep``) splits into disjoint *pools* read from the result model:

* ``idle:<category>``: the GPU idle categories of
  :class:`~hta_report.model.IdleAttribution` (warm-up, stream wait,
  DataLoader, pageable copy, blocking copy, synchronization, zero_grad,
  optimizer, launch, host ops, unattributed), which add up to the GPU idle;
* ``copy:pageable``, ``copy:blocking``, ``copy:other``: copy time with no
  kernel running (:class:`~hta_report.model.MemcpySummary`);
* ``comm:exposed``: communication kernel time with no compute kernel running;
* ``compute``: the rest of the time a kernel runs (kernel-busy time minus
  exposed communication);
* ``host:<part>``: on ranks without GPU activity, the step's host time:
  one-off warm-up calls, the DataLoader, synchronization, ``zero_grad``, the
  optimizer step, waiting for other ranks in collectives, and ``host:other``
  for the rest; each part is at most what the step has left after the parts
  before it, so they add up to the step.

These pools are disjoint pieces of the step, so their sizes add up to at most
the step. A rule states which pools its finding's time comes from and how
much (:meth:`Ledger.take`); the engine commits the claims of every finding in
turn (:meth:`Ledger.commit`), and a later rule sees only what is left. So the
gains of one rank's findings add up to at most its step, and a rule whose
time is already claimed reports ``covered`` (:func:`covered_by`).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Dict, FrozenSet, Iterable, List, Mapping, Sequence

from ..model import IDLE_CAUSES, UNCLAIMABLE_CAUSES, RankResult

#: The GPU idle categories a finding may claim, in the order the analysis
#: hands idle time out (not the time the trace shows the GPU busy in: the
#: ``unrecorded`` stretch of :class:`~hta_report.model.IdleAttribution`).
IDLE_CATEGORIES = tuple(c for c in IDLE_CAUSES if c not in UNCLAIMABLE_CAUSES)
#: Every idle pool, in that order.
IDLE = tuple(f"idle:{c}" for c in IDLE_CATEGORIES)
#: The host-time pools of a rank without GPU activity, in order.
HOST = ("host:warmup", "host:dataloader", "host:sync", "host:zero_grad", "host:optimizer", "host:collective_wait",
        "host:other")
#: Every pool of a rank.
POOLS = IDLE + ("copy:pageable", "copy:blocking", "copy:other", "comm:exposed", "compute") + HOST


def _host_measure(r: RankResult, part: str) -> float:
    if part == "warmup":
        return r.warmup.us_per_step
    if part == "dataloader":
        return r.cpu.dataloader_us_per_step
    if part == "sync":
        return r.cpu.sync_us_per_step
    if part == "zero_grad":
        return r.optimizer.zero_grad_us_per_step
    if part == "optimizer":
        return r.optimizer.step_us_per_step
    if part == "collective_wait":
        return r.comm.sync_wait_us_per_step if r.comm.collective_basis == "host" else 0.0
    return float("inf")  # other: the rest

#: A rule's claims: rank -> pool -> µs per step.
Claims = Mapping[int, Mapping[str, float]]


def pool_size(r: RankResult, pool: str) -> float:
    """The time (µs per step) in ``pool`` on rank ``r`` (see the module docstring).

    Raises:
        KeyError: ``pool`` is not one of :data:`POOLS`.
    """
    if pool not in POOLS:
        raise KeyError(pool)
    if pool.startswith("host:"):
        if r.has_gpu:
            return 0.0
        left = max(0.0, r.window_us)
        for p in HOST:
            size = min(max(0.0, _host_measure(r, p[5:])), left)
            if p == pool:
                return size
            left -= size
        return 0.0
    if not r.has_gpu:
        return 0.0
    if pool.startswith("idle:"):
        return max(0.0, getattr(r.idle_attribution, f"{pool[5:]}_us"))
    m = r.memcpy
    if pool == "copy:pageable":
        return max(0.0, m.pageable_exposed_us_per_step)
    if pool == "copy:blocking":
        return max(0.0, m.blocking_exposed_us_per_step)
    if pool == "copy:other":
        return max(0.0, m.other_exposed_us_per_step)
    if pool == "comm:exposed":
        return max(0.0, r.comm.exposed_us_per_step)
    return max(0.0, r.idle_attribution.kernel_busy_us - r.comm.exposed_us_per_step)  # compute


class Ledger:
    """What the findings so far claimed, per rank and pool (µs per step), and
    which rules fired on which ranks. Rules read it; only the engine commits."""

    def __init__(self) -> None:
        self._claimed: Dict[tuple, float] = defaultdict(float)
        self._by: Dict[tuple, List[str]] = defaultdict(list)
        self._fired: Dict[str, FrozenSet[int]] = {}

    def free(self, r: RankResult, pool: str) -> float:
        """Time left in ``pool`` on rank ``r`` (µs per step)."""
        return max(0.0, pool_size(r, pool) - self._claimed[(r.rank, pool)])

    def free_in(self, r: RankResult, pools: Iterable[str]) -> float:
        """Time left in all of ``pools`` on rank ``r`` (µs per step)."""
        return sum(self.free(r, p) for p in pools)

    def take(self, r: RankResult, pools: Sequence[str], up_to: float) -> Dict[str, float]:
        """A claim of at most ``up_to`` µs per step on rank ``r`` from
        ``pools``, in their order (nothing is committed): pool -> µs."""
        out: Dict[str, float] = {}
        left = max(0.0, float(up_to))
        for p in pools:
            if left <= 0:
                break
            got = min(self.free(r, p), left)
            if got > 0:
                out[p] = got
                left -= got
        return out

    def claimers(self, rank: int, pools: Iterable[str]) -> List[str]:
        """The rules that claimed time in ``pools`` on ``rank``, in order."""
        seen: List[str] = []
        for p in pools:
            for rule_id in self._by[(rank, p)]:
                if rule_id not in seen:
                    seen.append(rule_id)
        return seen

    def fired(self, rule_id: str) -> FrozenSet[int]:
        """The ranks of ``rule_id``'s finding (empty when it did not fire)."""
        return self._fired.get(rule_id, frozenset())

    def get(self, rule_id: str, default=()) -> FrozenSet[int]:
        """Mapping-style access to :meth:`fired`."""
        return self._fired.get(rule_id, frozenset(default))

    def commit(self, rule_id: str, ranks: Iterable[int], claims: Claims) -> None:
        """Record a finding of ``rule_id`` on ``ranks`` and its claims."""
        self._fired[rule_id] = frozenset(ranks)
        for rank, parts in claims.items():
            for pool, us in parts.items():
                if us > 0:
                    self._claimed[(rank, pool)] += us
                    self._by[(rank, pool)].append(rule_id)
