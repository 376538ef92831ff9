"""A per-parameter Python loop updating an exponential moving average of the weights each step."""
import copy
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

PATTERN = "ema_update"
VARIANTS = {
    "many-small": "a 64-layer MLP of width 32 (130 small tensors), batch 32",
    "few-large": "a 4-layer MLP of width 512 (10 tensors), batch 128",
}
RULES: frozenset = frozenset()  # a probe: no rule names this yet
FIX = "torch._foreach_lerp_(ema_params, params, 1 - decay): one multi-tensor op instead of a loop"
#: The moving average's decay per step.
DECAY = 0.999


def build(fix: bool, variant: str):
    """One training step of an MLP followed by its weights' EMA update."""
    torch.manual_seed(0)
    width, layers, batch = (32, 64, 32) if variant == "many-small" else (512, 4, 128)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*mods, torch.nn.Linear(width, 10))
    ema = copy.deepcopy(model).requires_grad_(False)
    params, ema_params = list(model.parameters()), list(ema.parameters())
    opt = torch.optim.SGD(params, lr=1e-2, momentum=0.9, foreach=True)
    next_batch = harness.batches(torch.randn(16 * batch, width), torch.randint(0, 10, (16 * batch,)), batch=batch)

    def step():
        x, y = next_batch()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        with torch.no_grad():
            if fix:
                torch._foreach_lerp_(ema_params, params, 1 - DECAY)
            else:
                for e, p in zip(ema_params, params):
                    e.mul_(DECAY).add_(p, alpha=1 - DECAY)

    return step


if __name__ == "__main__":
    sys.exit(harness.main(sys.modules[__name__]))
