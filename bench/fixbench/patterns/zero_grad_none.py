"""``zero_grad(set_to_none=False)``: every large gradient written with zeros, then added into, each step."""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

PATTERN = "zero_grad_none"
VARIANTS = {
    "embedding": "an Embedding(32768, 128) table (16 MB, dense gradient) under a small MLP, batch 256 of 32 tokens",
    "linear-1024": "8 Linear(1024, 1024) layers (4 MB weights), batch 4",
}
RULES = frozenset({"zero-grad-zeros"})
FIX = "zero_grad(set_to_none=True): gradients are freed instead of zeroed, backward writes them fresh"


class BagOfTokens(torch.nn.Module):
    """Token embeddings averaged over the sequence, then a small MLP."""

    def __init__(self, vocab: int, dim: int):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.head = torch.nn.Sequential(torch.nn.Linear(dim, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))

    def forward(self, x):
        return self.head(self.emb(x).mean(1))


def build(fix: bool, variant: str):
    """One training step on a synthetic batch (foreach SGD)."""
    torch.manual_seed(0)
    if variant == "embedding":
        batch = 256
        model = BagOfTokens(32768, 128)
        data = torch.randint(0, 32768, (8 * batch, 32))
    else:
        batch = 4
        mods = []
        for _ in range(8):
            mods += [torch.nn.Linear(1024, 1024), torch.nn.ReLU()]
        model = torch.nn.Sequential(*mods, torch.nn.Linear(1024, 10))
        data = torch.randn(8 * batch, 1024)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=True)
    next_batch = harness.batches(data, torch.randint(0, 10, (8 * batch,)), batch=batch)

    def step():
        x, y = next_batch()
        opt.zero_grad(set_to_none=fix)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return step


if __name__ == "__main__":
    sys.exit(harness.main(sys.modules[__name__]))
