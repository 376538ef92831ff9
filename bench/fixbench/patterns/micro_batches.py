"""Gradient accumulation over micro-batches of 2 samples."""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

PATTERN = "micro_batches"
VARIANTS = {
    "narrow-cnn": "a 2-conv CNN (12, 24 channels) on 3x32x32 images, 64 samples per optimizer step",
    "wide-cnn": "a 2-conv CNN (32, 64 channels) on 3x32x32 images, 64 samples per optimizer step",
}
RULES = frozenset({"tiny-batches"})
FIX = "micro-batches of 16 instead of 2: 4 forwards and backwards per step instead of 32 (same 64 samples)"
#: Samples per optimizer step.
SAMPLES = 64


def build(fix: bool, variant: str):
    """One optimizer step over :data:`SAMPLES` samples, accumulated over micro-batches."""
    torch.manual_seed(0)
    width = 12 if variant == "narrow-cnn" else 32
    micro = 16 if fix else 2
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, width, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(width, 2 * width, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(4),
        torch.nn.Flatten(), torch.nn.Linear(32 * width, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9, foreach=True)
    next_batch = harness.batches(torch.randn(4 * SAMPLES, 3, 32, 32), torch.randint(0, 10, (4 * SAMPLES,)),
                                 batch=SAMPLES)

    def step():
        x, y = next_batch()
        opt.zero_grad()
        for i in range(0, SAMPLES, micro):
            (F.cross_entropy(model(x[i:i + micro]), y[i:i + micro]) * micro / SAMPLES).backward()
        opt.step()

    return step


if __name__ == "__main__":
    sys.exit(harness.main(sys.modules[__name__]))
