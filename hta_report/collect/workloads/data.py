"""Synthetic datasets with optional CPU-heavy per-sample work ("slow data").

The slow-data knob models CPU-bound augmentation (JPEG decoding, random crops):
``slow_data_ms`` is the CPU time per *batch*; each ``__getitem__`` burns
``slow_data_ms / batch_size`` milliseconds of its thread's CPU time in a pure
Python loop.  It is CPU time, not wall time, so under CPU contention it takes
longer, like real work.  With ``num_workers=0`` it runs on the training thread
inside ``enumerate(DataLoader)#...``; with workers it runs in the worker
processes, in parallel with training.
"""
from __future__ import annotations

import time

import torch
from torch.utils.data import Dataset

VOCAB = 1000
IMAGE_SHAPE = (3, 32, 32)
NUM_CLASSES = 10


def burn_cpu(ms: float) -> None:
    """Busy-loop until this thread has used ``ms`` milliseconds of CPU time."""
    if ms <= 0:
        return
    end = time.thread_time() + ms / 1000.0
    x = 0
    while time.thread_time() < end:
        for i in range(200):  # some arithmetic between clock reads
            x += i * i
    return None


class SyntheticDataset(Dataset):
    """Deterministic random samples for one workload, drawn from an in-memory pool.

    Samples come from a pool of ``pool_size`` random tensors made once, so
    loading costs what an in-memory dataset costs (an index and a collate)
    plus the optional slow-data work.

    Args:
        kind: ``image`` (3x32x32 float image, class label) or ``tokens``
            (``seq_len`` input tokens and the next-token targets).
        length: number of samples.
        seq_len: tokens per sample (``tokens`` only).
        per_sample_ms: CPU milliseconds burned per ``__getitem__`` (see module doc).
        seed: seed of the pool.
        pool_size: distinct samples kept in memory.
    """

    def __init__(self, kind: str, length: int, seq_len: int = 32,
                 per_sample_ms: float = 0.0, seed: int = 0, pool_size: int = 256) -> None:
        if kind not in ("image", "tokens"):
            raise ValueError(f"unknown dataset kind {kind!r}")
        self.kind = kind
        self.length = length
        self.per_sample_ms = per_sample_ms
        gen = torch.Generator().manual_seed(seed)
        size = max(1, min(pool_size, length))
        if kind == "image":
            self.inputs = torch.randn((size, *IMAGE_SHAPE), generator=gen)
            self.targets = torch.randint(NUM_CLASSES, (size,), generator=gen)
        else:
            tokens = torch.randint(VOCAB, (size, seq_len + 1), generator=gen)
            self.inputs, self.targets = tokens[:, :-1], tokens[:, 1:]

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        burn_cpu(self.per_sample_ms)
        j = index % len(self.inputs)
        return self.inputs[j], self.targets[j]
