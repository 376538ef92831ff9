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
  optimizer step, waiting for other ranks in collectives, waiting for the
  collectives' own transfer (``host:communication``), and ``host:other``
  for the rest; each part is at most what the step has left after the parts
  before it, so they add up to the step.

These pools are disjoint pieces of the step, so their sizes add up to at most
the step. A rule states which pools its finding's time comes from and how
much (:meth:`Ledger.take`); the engine commits the claims of every finding in
turn (:meth:`Ledger.commit`), and a later rule sees only what is left. So the
gains of one rank's findings add up to at most its step, and a rule whose
time is already claimed reports ``covered`` (:func:`~hta_report.rules.base.covered_by`).

Which rule owns which pool is written once, in :data:`OWNERSHIP` (docs/ARCHITECTURE.md,
"Which rule owns which time", is the same table in words): the owner, the rules
that find a cause inside the pool and claim their part first, the rules that
see the owner's events another way and defer to it, and the rules that take
what is left. The ledger holds every claim to it: :meth:`Ledger.take` gives a
deferring rule nothing on a rank where the owner claimed, and a claim the
table does not allow raises :class:`OwnershipError`; :func:`check_order`
checks that the engine runs each owner after the rules that claim first and
before the rules that defer to it or take the rest.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple

from ..model import IDLE_CAUSES, UNCLAIMABLE_CAUSES, RankResult

#: The GPU idle categories a finding may claim, in the order the analysis
#: hands idle time out (not the time the trace shows the GPU busy in: the
#: ``unrecorded`` stretch of :class:`~hta_report.model.IdleAttribution`).
IDLE_CATEGORIES = tuple(c for c in IDLE_CAUSES if c not in UNCLAIMABLE_CAUSES)
#: Every idle pool, in that order.
IDLE = tuple(f"idle:{c}" for c in IDLE_CATEGORIES)
#: The host-time pools of a rank without GPU activity, in order.
HOST = ("host:warmup", "host:dataloader", "host:sync", "host:zero_grad", "host:optimizer", "host:collective_wait",
        "host:communication", "host:other")
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
    if part == "communication":  # the step thread's wait for its collectives beyond the wait for peers
        return max(0.0, r.comm.host_exposed_us_per_step - r.comm.sync_wait_us_per_step)
    return float("inf")  # other: the rest


#: A rule's claims: rank -> pool -> µs per step.
Claims = Mapping[int, Mapping[str, float]]


class OwnershipError(RuntimeError):
    """A rule claimed time :data:`OWNERSHIP` does not give it, or out of turn: a bug in the rules."""


@dataclass(frozen=True)
class Owner:
    """Who may claim one pool, and in which order.

    Attributes:
        owner: the rule whose cause the pool measures; it claims after
            :attr:`first` and before the others (None: no cause is known for
            the pool's time; the rules of :attr:`rest` share what is left).
        first: rules that find a specific cause inside the pool and claim
            their part of it before the owner (a synchronization's lost lead
            inside host-bound idle, say).
        defer: rules that see the owner's events another way (a code pattern,
            a cause behind them). On a rank where the owner of any pool a rule
            defers on claimed time, that rule claims none of those pools: its
            events are among the ones the owner's finding counts.
        rest: rules that claim what the owner and the rules before it left
            (the straggler's extra step time, step outliers, the symptoms).
    """

    owner: Optional[str]
    first: Tuple[str, ...] = ()
    defer: Tuple[str, ...] = ()
    rest: Tuple[str, ...] = ()

    @property
    def claimants(self) -> Tuple[str, ...]:
        """Every rule that may claim the pool, the owner included."""
        return self.first + ((self.owner,) if self.owner else ()) + self.defer + self.rest


_STRAGGLER = "rank-straggler"
#: The rules that claim only what every cause left: step outliers, then the symptoms.
_RESIDUAL = ("step-time-outliers", "low-gpu-utilization", "gpu-gaps")
_GPU_REST = (_STRAGGLER,) + _RESIDUAL
_HOST_REST = (_STRAGGLER, "step-time-outliers")

#: Which rule owns which pool (rule ids, as ``@rule`` states them); every pool of
#: :data:`POOLS` has a row. docs/ARCHITECTURE.md shows it as a table.
OWNERSHIP: Dict[str, Owner] = {
    "idle:warmup": Owner("trace-window", rest=_GPU_REST),
    "idle:stream_wait": Owner("gpu-idle", rest=_GPU_REST),
    "idle:dataloader": Owner("dataloader-bound", defer=("dataloader-main-process",), rest=_GPU_REST),
    "idle:pageable_copy": Owner("pageable-memcpy", rest=_GPU_REST),
    # a blocking copy op whose copies are all from pageable memory: pinning them removes its wait too
    "idle:blocking_copy": Owner("blocking-copy", first=("pageable-memcpy",), rest=_GPU_REST),
    "idle:sync": Owner("sync-in-step", rest=_GPU_REST),
    "idle:zero_grad": Owner("zero-grad-zeros", rest=_RESIDUAL),
    "idle:optimizer": Owner("unfused-optimizer", rest=_RESIDUAL),
    # the lead a synchronization threw away shows as launch, host-ops or unattributed idle after it
    "idle:launch": Owner("launch-bound", first=("sync-in-step",), rest=_GPU_REST),
    # a CUDA graph (launch-bound's fix) also removes the host's dispatch between the launches it captures
    # a Python loop over elements running while the GPU idles (per-sample-ops) is a cause inside it
    "idle:host_ops": Owner("host-bound", first=("sync-in-step", "launch-bound", "launch-outliers", _STRAGGLER,
                                                "non-nccl-backend", "per-sample-ops"), rest=_RESIDUAL),
    "idle:unattributed": Owner(None, rest=("sync-in-step", "launch-bound") + _GPU_REST),
    # a tensor filled on the CPU is copied by one of these copies; which one, the model does not say
    "copy:pageable": Owner("pageable-memcpy", defer=("cpu-tensor-copied",), rest=(_STRAGGLER,)),
    "copy:blocking": Owner("blocking-copy", defer=("cpu-tensor-copied",), rest=(_STRAGGLER,)),
    "copy:other": Owner("exposed-memcpy", defer=("cpu-tensor-copied",), rest=(_STRAGGLER,)),
    # exposed-communication claims the transfer, rank-straggler the wait for other ranks it leaves
    "comm:exposed": Owner("exposed-communication", defer=("no-sync-accumulation",), rest=(_STRAGGLER,)),
    # tensor-cores-unused's autocast also moves the TF32 matmuls tf32-matmuls names
    "compute": Owner("tensor-cores-unused", first=("misaligned-gemm", "zero-grad-zeros", "unfused-optimizer",
                                                   "train-mode-inference", "layout-conversions",
                                                   "unfused-elementwise"), defer=("tf32-matmuls",),
                     rest=("low-sm-occupancy",)),
    "host:warmup": Owner("trace-window", rest=_HOST_REST),
    "host:dataloader": Owner("dataloader-bound", defer=("dataloader-main-process",), rest=_HOST_REST),
    "host:sync": Owner("sync-in-step", rest=_HOST_REST),
    "host:zero_grad": Owner("zero-grad-zeros", rest=("step-time-outliers",)),
    "host:optimizer": Owner("unfused-optimizer", rest=("step-time-outliers",)),
    "host:collective_wait": Owner(_STRAGGLER, rest=("no-sync-accumulation", "step-time-outliers")),
    # the step thread waiting for its own collectives' transfer (a CPU backend): as comm:exposed
    "host:communication": Owner("exposed-communication", defer=("no-sync-accumulation",), rest=_HOST_REST),
    # the rest of the step: a Python loop over elements (per-sample-ops, or sync-in-step where it reads
    # .item()), active dropout, reference kernels, (N - 1)/N of N small passes (tiny-batches)
    "host:other": Owner(None, rest=("sync-in-step", "per-sample-ops", "train-mode-inference", "slow-cpu-kernels",
                                    "gpu-unused",
                                    "tiny-batches", _STRAGGLER, "no-sync-accumulation", "step-time-outliers")),
}


#: Pools owned by another rule that a rule's fix is known to empty as well, beyond the pools
#: it owns and those no rule owns: what its claim may grow into when its prediction saves more
#: than its bound (:func:`hta_report.rules.base.follow_prediction`). A CUDA graph (launch-bound's
#: fix) replays the dispatch of the ops between its launches, which shows as host-ops idle.
ALSO_REMOVES: Dict[str, Tuple[str, ...]] = {"launch-bound": ("idle:host_ops",)}


def raise_pools(rule_id: str) -> List[str]:
    """The pools ``rule_id``'s claim may grow into to match its prediction, in
    :data:`POOLS` order: those it owns, those no rule owns, and its
    :data:`ALSO_REMOVES`. Time another cause owns stays that cause's: removing
    a sync lets the host run ahead, but the launch gaps it then fills are
    still launch-bound's to name."""
    extra = ALSO_REMOVES.get(rule_id, ())
    return [p for p in claimable_by(rule_id) if owner_of(p).owner in (rule_id, None) or p in extra]


def owner_of(pool: str) -> Owner:
    """The row of :data:`OWNERSHIP` for ``pool``.

    Raises:
        OwnershipError: ``pool`` has no row (a pool added without an owner).
    """
    try:
        return OWNERSHIP[pool]
    except KeyError:
        raise OwnershipError(f"the pool {pool!r} has no row in rules/claims.py OWNERSHIP") from None


def claimable_by(rule_id: str, pools: Iterable[str] = POOLS) -> List[str]:
    """The pools of ``pools`` that :data:`OWNERSHIP` lets ``rule_id`` claim, in their order."""
    return [p for p in pools if rule_id in owner_of(p).claimants]


def check_order(run_order: Sequence[str]) -> None:
    """Check :data:`OWNERSHIP` against the order the engine runs the rules in:
    every rule it names is in ``run_order``, each pool's :attr:`Owner.first`
    rules run before its owner and the owner before its :attr:`Owner.defer` and
    :attr:`Owner.rest` rules. (The symptoms, judged side by side, each run
    after every other rule.)

    Raises:
        OwnershipError: naming every row that does not hold.
    """
    at = {rule_id: i for i, rule_id in enumerate(run_order)}
    wrong: List[str] = []
    for pool, o in OWNERSHIP.items():
        unknown = [x for x in o.claimants if x not in at]
        if unknown:
            wrong.append(f"{pool}: no rule {', '.join(unknown)}")
            continue
        if o.owner is None:
            continue
        wrong += [f"{pool}: {x} claims first but runs after the owner {o.owner}" for x in o.first
                  if at[x] > at[o.owner]]
        wrong += [f"{pool}: {x} defers to the owner {o.owner} but runs before it" for x in o.defer + o.rest
                  if at[x] < at[o.owner]]
    if wrong:
        raise OwnershipError("rules/claims.py OWNERSHIP does not hold: " + "; ".join(wrong))


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
        return max(0.0, float(getattr(r.idle_attribution, f"{pool[5:]}_us")))
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
    which rules fired on which ranks. Rules read it; only the engine commits,
    and it names the rule whose check runs next (:meth:`turn`), so that
    :meth:`take` claims by :data:`OWNERSHIP` for that rule."""

    def __init__(self) -> None:
        self._claimed: Dict[Tuple[int, str], float] = defaultdict(float)
        self._by: Dict[Tuple[int, str], List[str]] = defaultdict(list)
        self._fired: Dict[str, FrozenSet[int]] = {}
        self._turn: Optional[str] = None
        self._edits: Dict[Tuple[int, str], str] = {}

    def turn(self, rule_id: Optional[str]) -> None:
        """The rule whose check runs next (None: no rule's, nothing is checked in :meth:`take`)."""
        self._turn = rule_id

    def free(self, r: RankResult, pool: str) -> float:
        """Time left in ``pool`` on rank ``r`` (µs per step)."""
        return max(0.0, pool_size(r, pool) - self._claimed[(r.rank, pool)])

    def free_in(self, r: RankResult, pools: Iterable[str]) -> float:
        """Time left in all of ``pools`` on rank ``r`` (µs per step)."""
        return sum(self.free(r, p) for p in pools)

    def deferred(self, rule_id: str, rank: int) -> bool:
        """True when ``rule_id`` defers to an owner that claimed on ``rank``
        (:attr:`Owner.defer`): it then claims none of the pools it defers on there."""
        return any(rule_id in o.defer and o.owner in self._by[(rank, p)] for p, o in OWNERSHIP.items())

    def take(self, r: RankResult, pools: Sequence[str], up_to: float) -> Dict[str, float]:
        """A claim of at most ``up_to`` µs per step on rank ``r`` from
        ``pools``, in their order (nothing is committed): pool -> µs. For the
        rule whose turn it is, nothing from a pool it defers on where its
        owner claimed on ``r`` (:meth:`deferred`).

        Raises:
            OwnershipError: :data:`OWNERSHIP` does not let that rule claim one of ``pools``.
        """
        if self._turn is not None:
            barred = [p for p in pools if self._turn not in owner_of(p).claimants]
            if barred:
                raise OwnershipError(f"{self._turn} may not claim {', '.join(barred)} (rules/claims.py OWNERSHIP)")
            if self.deferred(self._turn, r.rank):
                pools = [p for p in pools if self._turn not in owner_of(p).defer]
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

    def edit_owner(self, rank: int, edit: str) -> Optional[str]:
        """The rule whose finding claims what the replay's edit ``edit`` saves
        on ``rank`` (None: none yet). One fix's saving is claimed once: a
        second rule whose fix is the same edit (``blocking-copy`` after
        ``pageable-memcpy``) is covered by the first."""
        return self._edits.get((rank, edit))

    def own_edit(self, rank: int, edit: str, rule_id: str) -> None:
        """Record that ``rule_id``'s finding claims what ``edit`` saves on ``rank``."""
        self._edits.setdefault((rank, edit), rule_id)

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

    def get(self, rule_id: str, default: Iterable[int] = ()) -> FrozenSet[int]:
        """Mapping-style access to :meth:`fired`."""
        return self._fired.get(rule_id, frozenset(default))

    def commit(self, rule_id: str, ranks: Iterable[int], claims: Claims) -> None:
        """Record a finding of ``rule_id`` on ``ranks`` and its claims.

        Raises:
            OwnershipError: a claim :data:`OWNERSHIP` does not allow: a pool
                ``rule_id`` may not claim, a claim first made after the owner's,
                or a deferring claim on a rank where the owner claimed.
        """
        for rank, parts in claims.items():
            for pool, us in parts.items():
                if us > 0:
                    self._check(rule_id, rank, pool)
        self._fired[rule_id] = frozenset(ranks)
        for rank, parts in claims.items():
            for pool, us in parts.items():
                if us > 0:
                    self._claimed[(rank, pool)] += us
                    self._by[(rank, pool)].append(rule_id)

    def _check(self, rule_id: str, rank: int, pool: str) -> None:
        o = owner_of(pool)
        if rule_id not in o.claimants:
            raise OwnershipError(f"{rule_id} claimed {pool} on rank {rank}; rules/claims.py OWNERSHIP gives "
                                 f"it to {o.owner or 'no rule'}")
        owner_claimed = o.owner is not None and o.owner in self._by[(rank, pool)]
        if rule_id in o.first and owner_claimed:
            raise OwnershipError(f"{rule_id} claimed {pool} on rank {rank} after its owner {o.owner}")
        if rule_id in o.defer and self.deferred(rule_id, rank):
            raise OwnershipError(f"{rule_id} claimed {pool} on rank {rank}, where an owner it defers to claimed")
