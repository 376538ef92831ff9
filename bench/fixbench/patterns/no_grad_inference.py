"""An inference loop without ``torch.no_grad()``: autograd records a graph nobody uses."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

PATTERN = "no_grad_inference"
VARIANTS = {
    "deep-narrow": "a 64-layer MLP of width 128 with LayerNorm, batch 64 (many small ops)",
    "wide": "a 4-layer MLP of width 1024, batch 256 (few large ops)",
}
RULES: frozenset = frozenset()  # a probe: no rule names this yet
FIX = "the loop under torch.inference_mode(): no graph recorded, no tensors kept for backward"


def build(fix: bool, variant: str):
    """One inference step (a forward and an argmax) on a synthetic batch."""
    torch.manual_seed(0)
    width, layers, batch = (128, 64, 64) if variant == "deep-narrow" else (1024, 4, 256)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.LayerNorm(width), torch.nn.GELU()]
    model = torch.nn.Sequential(*mods, torch.nn.Linear(width, 10)).eval()
    next_batch = harness.batches(torch.randn(8 * batch, width), batch=batch)

    def step():
        (x,) = next_batch()
        if fix:
            with torch.inference_mode():
                model(x).argmax(1)
        else:
            model(x).argmax(1)

    return step


if __name__ == "__main__":
    sys.exit(harness.main(sys.modules[__name__]))
