"""Model and data in float64 (CPU convolutions in double take the slow reference path)."""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

PATTERN = "float64"
VARIANTS = {
    "cnn": "a 2-conv CNN on 3x32x32 images, batch 32",
    "narrow-mlp": "a 32-layer MLP of width 64, batch 32 (many small ops, whose overhead does not depend on the type)",
}
RULES = frozenset({"slow-cpu-kernels"})
FIX = "float32 model and data (model.float(), x.float()) instead of .double()"


def build(fix: bool, variant: str):
    """One training step on a synthetic batch, in float64 before the fix."""
    torch.manual_seed(0)
    dtype = torch.float32 if fix else torch.float64
    if variant == "cnn":
        batch, shape = 32, (3, 32, 32)
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(4),
            torch.nn.Flatten(), torch.nn.Linear(512, 10))
    else:
        batch, shape = 32, (64,)
        mods = []
        for _ in range(32):
            mods += [torch.nn.Linear(64, 64), torch.nn.ReLU()]
        model = torch.nn.Sequential(*mods, torch.nn.Linear(64, 10))
    model = model.to(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9, foreach=True)
    next_batch = harness.batches(torch.randn(8 * batch, *shape, dtype=dtype), torch.randint(0, 10, (8 * batch,)),
                                 batch=batch)

    def step():
        x, y = next_batch()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return step


if __name__ == "__main__":
    sys.exit(harness.main(sys.modules[__name__]))
