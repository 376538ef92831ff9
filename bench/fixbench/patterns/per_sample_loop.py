"""The model called once per sample, the losses summed, one backward."""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

PATTERN = "per_sample_loop"
VARIANTS = {
    "small-images": "a 2-conv CNN (32, 64 channels) on 3x32x32 images, batch 16",
    "large-images": "the same CNN on 3x64x64 images, batch 8",
}
RULES = frozenset({"tiny-batches"})
FIX = "one batched forward: loss = cross_entropy(model(x), y)"


def build(fix: bool, variant: str):
    """One training step of a CNN on a synthetic batch."""
    torch.manual_seed(0)
    batch, size = (16, 32) if variant == "small-images" else (8, 64)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(4),
        torch.nn.Flatten(), torch.nn.Linear(1024, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9, foreach=True)
    next_batch = harness.batches(torch.randn(8 * batch, 3, size, size), torch.randint(0, 10, (8 * batch,)),
                                 batch=batch)

    def step():
        x, y = next_batch()
        opt.zero_grad()
        if fix:
            loss = F.cross_entropy(model(x), y)
        else:
            loss = sum(F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]) for i in range(len(x))) / len(x)
        loss.backward()
        opt.step()

    return step


if __name__ == "__main__":
    sys.exit(harness.main(sys.modules[__name__]))
