"""A Python loop over the batch in the step, normalizing each sample on its own."""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

PATTERN = "per_sample_preprocess"
VARIANTS = {
    "batch256": "batch 256 of 512 features, a 3-layer MLP of width 512",
    "batch32": "batch 32 of 1024 features, a 3-layer MLP of width 2048",
}
RULES = frozenset({"per-sample-ops"})
FIX = "x = (x - x.mean(1, keepdim=True)) / (x.std(1, keepdim=True) + 1e-5): one vectorized normalization"


def build(fix: bool, variant: str):
    """One training step that standardizes each sample of its batch first."""
    torch.manual_seed(0)
    batch, features, width = (256, 512, 512) if variant == "batch256" else (32, 1024, 2048)
    model = torch.nn.Sequential(torch.nn.Linear(features, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                                torch.nn.ReLU(), torch.nn.Linear(width, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9, foreach=True)
    next_batch = harness.batches(torch.randn(8 * batch, features) * 3 + 1, torch.randint(0, 10, (8 * batch,)),
                                 batch=batch)

    def step():
        x, y = next_batch()
        x = x.clone()
        if fix:
            x = (x - x.mean(1, keepdim=True)) / (x.std(1, keepdim=True) + 1e-5)
        else:
            for i in range(len(x)):
                x[i] = (x[i] - x[i].mean()) / (x[i].std() + 1e-5)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return step


if __name__ == "__main__":
    sys.exit(harness.main(sys.modules[__name__]))
