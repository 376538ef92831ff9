"""The training loop of the built-in workloads, single process or DDP under torchrun."""
from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler

from ..environment import RankInfo
from .data import SyntheticDataset
from .models import build_model

SEQ_LEN = {"rnn": 32, "transformer": 64}


@dataclass
class WorkloadConfig:
    """Knobs of a built-in workload.

    Attributes:
        name: ``cnn``, ``rnn`` or ``transformer``.
        steps: training steps (optimizer steps) per rank.
        batch_size: samples per step per rank.
        width, depth: model size (see :mod:`.models`).
        num_workers: DataLoader worker processes (0: load on the training thread).
        pin_memory: DataLoader ``pin_memory``; None means on for CUDA, off for CPU.
        slow_data_ms: CPU milliseconds of per-sample work per batch (see :mod:`.data`).
        sync_every_step: call ``loss.item()`` every step (a host-device sync on CUDA).
        amp: bf16 autocast for forward and loss.
        device: ``cpu`` or ``cuda``.
        seed: random seed for data and weights.
    """

    name: str
    steps: int
    batch_size: int
    width: int
    depth: int
    num_workers: int = 0
    pin_memory: Optional[bool] = None
    slow_data_ms: float = 0.0
    sync_every_step: bool = False
    amp: bool = False
    device: str = "cpu"
    seed: int = 0

    def as_dict(self) -> Dict[str, Any]:
        """The knobs as a JSON-ready dict (for the manifest)."""
        return asdict(self)


def init_distributed(ranks: RankInfo, device: str) -> Optional[str]:
    """Initialise the default process group under torchrun (gloo on CPU, nccl on CUDA).

    Returns:
        the backend name, or None when not distributed.
    """
    if not ranks.distributed:
        return None
    backend = "nccl" if device == "cuda" else "gloo"
    if device == "cuda":
        torch.cuda.set_device(ranks.local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
    return backend


def run_workload(cfg: WorkloadConfig, prof: Any, ranks: RankInfo) -> Dict[str, Any]:
    """Train ``cfg.name`` for ``cfg.steps`` steps, calling ``prof.step()`` after each.

    The process group (if any) must already be initialised by :func:`init_distributed`.

    Args:
        cfg: the workload knobs.
        prof: anything with a ``step()`` method (an :class:`..session.profile`).
        ranks: this process's rank (DDP wraps the model when ``world_size > 1``).

    Returns:
        ``{"final_loss": float, "steps": int}``.
    """
    torch.manual_seed(cfg.seed)
    device = torch.device("cuda", ranks.local_rank) if cfg.device == "cuda" else torch.device("cpu")
    pin = cfg.pin_memory if cfg.pin_memory is not None else cfg.device == "cuda"
    per_sample_ms = cfg.slow_data_ms / cfg.batch_size
    kind = "image" if cfg.name == "cnn" else "tokens"
    dataset = SyntheticDataset(kind, cfg.steps * cfg.batch_size * ranks.world_size,
                               seq_len=SEQ_LEN.get(cfg.name, 32),
                               per_sample_ms=per_sample_ms, seed=cfg.seed)
    sampler: Optional[DistributedSampler[int]] = (
        DistributedSampler(dataset, ranks.world_size, ranks.rank, shuffle=True, seed=cfg.seed)
        if ranks.distributed else None)
    loader = DataLoader(dataset, batch_size=cfg.batch_size, shuffle=sampler is None,
                        sampler=sampler, num_workers=cfg.num_workers, pin_memory=pin,
                        drop_last=True, persistent_workers=cfg.num_workers > 0)

    model: nn.Module = build_model(cfg.name, cfg.width, cfg.depth).to(device)
    if ranks.distributed:
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[ranks.local_rank] if cfg.device == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    def autocast():
        if not cfg.amp:
            return contextlib.nullcontext()
        return torch.autocast(device_type=cfg.device, dtype=torch.bfloat16)

    epoch = 0
    batches = iter(loader)
    model.train()
    loss = torch.zeros(())
    for _ in range(cfg.steps):
        try:
            inputs, targets = next(batches)
        except StopIteration:
            epoch += 1
            if sampler is not None:
                sampler.set_epoch(epoch)
            batches = iter(loader)
            inputs, targets = next(batches)
        inputs = inputs.to(device, non_blocking=pin)
        targets = targets.to(device, non_blocking=pin)
        with autocast():
            out = model(inputs)
            loss = loss_fn(out.reshape(-1, out.shape[-1]), targets.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if cfg.sync_every_step:
            loss.item()
        prof.step()
    return {"final_loss": float(loss.detach().float().item()), "steps": cfg.steps}
