"""A single-tensor optimizer step (``foreach=False``) over many small parameters."""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

PATTERN = "foreach_optimizer"
VARIANTS = {
    "adamw": "AdamW over a 48-layer MLP of width 32 (98 small tensors), batch 32",
    "sgd": "SGD(momentum=0.9) over a 24-layer MLP of width 128 (50 tensors), batch 64",
}
RULES = frozenset({"unfused-optimizer"})
FIX = "foreach=True: the optimizer updates all parameters with a few multi-tensor ops"


def build(fix: bool, variant: str):
    """One training step of an MLP on a synthetic batch."""
    torch.manual_seed(0)
    width, layers, batch = (32, 48, 32) if variant == "adamw" else (128, 24, 64)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*mods, torch.nn.Linear(width, 10))
    if variant == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=fix)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9, foreach=fix)
    next_batch = harness.batches(torch.randn(16 * batch, width), torch.randint(0, 10, (16 * batch,)), batch=batch)

    def step():
        x, y = next_batch()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return step


if __name__ == "__main__":
    sys.exit(harness.main(sys.modules[__name__]))
