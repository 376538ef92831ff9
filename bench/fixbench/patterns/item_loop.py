"""Accuracy counted element by element with ``.item()`` in the step."""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

PATTERN = "item_loop"
VARIANTS = {
    "batch512": "a 3-layer MLP of width 256, batch 512: 1,024 .item() calls per step",
    "batch64": "a 3-layer MLP of width 1024, batch 64: 128 .item() calls per step",
}
RULES = frozenset({"sync-in-step"})
FIX = "correct += (pred == y).sum().item(): one vectorized comparison and one .item() per step"


def build(fix: bool, variant: str):
    """One training step of an MLP that also counts its correct predictions."""
    torch.manual_seed(0)
    width, batch = (256, 512) if variant == "batch512" else (1024, 64)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                                torch.nn.ReLU(), torch.nn.Linear(width, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9, foreach=True)
    next_batch = harness.batches(torch.randn(8 * batch, width), torch.randint(0, 10, (8 * batch,)), batch=batch)
    stats = {"correct": 0, "seen": 0}

    def step():
        x, y = next_batch()
        opt.zero_grad()
        out = model(x)
        F.cross_entropy(out, y).backward()
        opt.step()
        pred = out.argmax(1)
        if fix:
            stats["correct"] += (pred == y).sum().item()
        else:
            for i in range(len(y)):
                stats["correct"] += int(pred[i].item() == y[i].item())
        stats["seen"] += len(y)

    return step


if __name__ == "__main__":
    sys.exit(harness.main(sys.modules[__name__]))
