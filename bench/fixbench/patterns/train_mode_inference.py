"""Inference under ``torch.no_grad()`` with the model left in training mode (Dropout, BatchNorm active)."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

PATTERN = "train_mode_inference"
VARIANTS = {
    "dropout": "a 4-layer MLP of width 1024 with Dropout(0.2) after each layer, batch 256",
    "batchnorm": "a 3-conv CNN with BatchNorm2d on 3x32x32 images, batch 32",
}
RULES = frozenset({"train-mode-inference"})
FIX = "model.eval() before the loop: Dropout is skipped and BatchNorm uses its running statistics"


def build(fix: bool, variant: str):
    """One inference step (a forward under ``torch.no_grad()``) on a synthetic batch."""
    torch.manual_seed(0)
    if variant == "dropout":
        batch, shape = 256, (1024,)
        mods = []
        for _ in range(4):
            mods += [torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Dropout(0.2)]
        model = torch.nn.Sequential(*mods, torch.nn.Linear(1024, 10))
    else:
        batch, shape = 32, (3, 32, 32)
        mods, c = [], 3
        for width in (32, 64, 64):
            mods += [torch.nn.Conv2d(c, width, 3, padding=1, bias=False), torch.nn.BatchNorm2d(width), torch.nn.ReLU()]
            c = width
        model = torch.nn.Sequential(*mods, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(c, 10))
    model.train(not fix)
    next_batch = harness.batches(torch.randn(8 * batch, *shape), batch=batch)

    def step():
        (x,) = next_batch()
        with torch.no_grad():
            model(x).argmax(1)

    return step


if __name__ == "__main__":
    sys.exit(harness.main(sys.modules[__name__]))
