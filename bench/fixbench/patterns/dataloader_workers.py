"""Per-sample augmentation in ``Dataset.__getitem__`` on the training thread (``DataLoader(num_workers=0)``)."""
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

PATTERN = "dataloader_workers"
VARIANTS = {
    "heavy-aug": "crop, flip, rotation, colour jitter, blur and noise per 3x32x32 image; an MLP of width 256",
    "light-aug": "crop and flip per 3x32x32 image; an MLP of width 1024",
}
RULES = frozenset({"dataloader-bound", "dataloader-main-process"})
FIX = "DataLoader(num_workers=2, persistent_workers=True): the augmentation runs in worker processes"
#: Samples per batch.
BATCH = 64


class Augmented(Dataset):
    """Synthetic images (a pool of 256, seeded) augmented per sample as a vision pipeline does."""

    def __init__(self, heavy: bool, size: int = 32):
        g = torch.Generator().manual_seed(0)
        self.images = torch.randn(256, 3, size, size, generator=g)
        self.labels = torch.randint(0, 10, (256,), generator=g)
        self.size, self.heavy = size, heavy
        self.blur = torch.full((3, 1, 3, 3), 1 / 9)
        self.mean, self.std = torch.tensor([0.5, 0.4, 0.3]).view(3, 1, 1), torch.tensor([0.2, 0.3, 0.4]).view(3, 1, 1)

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, i: int):
        img = F.pad(self.images[i % 256], (4, 4, 4, 4), mode="reflect")
        dx, dy = (i * 7) % 9, (i * 13) % 9  # random crop
        img = img[:, dy:dy + self.size, dx:dx + self.size]
        if i % 2:
            img = img.flip(-1)
        if self.heavy:
            angle = torch.tensor((i % 31 - 15) * math.pi / 180)  # rotation by up to 15 degrees
            theta = torch.stack([torch.stack([angle.cos(), -angle.sin(), torch.tensor(0.0)]),
                                 torch.stack([angle.sin(), angle.cos(), torch.tensor(0.0)])]).unsqueeze(0)
            grid = F.affine_grid(theta, [1, 3, self.size, self.size], align_corners=False)
            img = F.grid_sample(img.unsqueeze(0), grid, align_corners=False).squeeze(0)
            img = (img * (0.8 + 0.4 * torch.rand(1)) - img.mean()) * (0.8 + 0.4 * torch.rand(1)) + img.mean()
            img = F.conv2d(img.unsqueeze(0), self.blur, padding=1, groups=3).squeeze(0)
            img = (img + 0.05 * torch.randn(img.shape)).clamp(-3, 3)
        return ((img - self.mean) / self.std).contiguous(), self.labels[i % 256]


def build(fix: bool, variant: str):
    """One training step of an MLP on a batch of images from the DataLoader."""
    torch.manual_seed(0)
    heavy = variant == "heavy-aug"
    width = 256 if heavy else 1024
    loader = DataLoader(Augmented(heavy), batch_size=BATCH, num_workers=2 if fix else 0, persistent_workers=fix)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)
    it = iter(loader)

    def step():
        x, y = next(it)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return step


if __name__ == "__main__":
    sys.exit(harness.main(sys.modules[__name__]))
