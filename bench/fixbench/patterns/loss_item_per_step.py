"""``history.append(loss.item())`` every step (a host-device sync on a GPU; on the CPU a scalar read)."""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

PATTERN = "loss_item_per_step"
VARIANTS = {
    "small-mlp": "a 3-layer MLP of width 512, batch 256",
    "large-mlp": "a 3-layer MLP of width 1024, batch 256",
}
RULES = frozenset({"sync-in-step"})
FIX = "the per-step loss.item() removed (on the CPU nothing waits: no measurable gain expected)"


def build(fix: bool, variant: str):
    """One training step of an MLP that logs its loss."""
    torch.manual_seed(0)
    width, batch = (512, 256) if variant == "small-mlp" else (1024, 256)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                                torch.nn.ReLU(), torch.nn.Linear(width, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9, foreach=True)
    next_batch = harness.batches(torch.randn(8 * batch, width), torch.randint(0, 10, (8 * batch,)), batch=batch)
    history = []

    def step():
        x, y = next_batch()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if not fix:
            history.append(loss.item())

    return step


if __name__ == "__main__":
    sys.exit(harness.main(sys.modules[__name__]))
