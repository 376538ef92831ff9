"""``torch.set_num_threads(1)`` on a 2-core machine with a compute-heavy model."""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

PATTERN = "threads"
VARIANTS = {
    "large-gemms": "a 3-layer MLP of width 1024, batch 256 (large GEMMs)",
    "small-ops": "a 32-layer MLP of width 128, batch 64 (small ops: splitting them costs more than it saves)",
}
RULES = frozenset({"cpu-threads"})
FIX = "2 intra-op threads (torch.set_num_threads(2), this machine's cores) instead of 1"


def build(fix: bool, variant: str):
    """One training step on a synthetic batch with 1 intra-op thread (2 after the fix).

    The thread count is set at the start of each step, so that both sides
    can share one process (``record.py --mode one-process``)."""
    torch.manual_seed(0)
    threads = 2 if fix else 1
    width, layers, batch = (1024, 2, 256) if variant == "large-gemms" else (128, 32, 64)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*mods, torch.nn.Linear(width, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9, foreach=True)
    next_batch = harness.batches(torch.randn(8 * batch, width), torch.randint(0, 10, (8 * batch,)), batch=batch)

    def step():
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        x, y = next_batch()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return step


if __name__ == "__main__":
    sys.exit(harness.main(sys.modules[__name__]))
