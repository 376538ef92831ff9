"""Small models for the built-in workloads; ``width`` and ``depth`` scale them."""
from __future__ import annotations

import torch
from torch import nn

from .data import NUM_CLASSES, VOCAB


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 conv + batch norm, identity (or 1x1) shortcut."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class ResNetSmall(nn.Module):
    """Stem conv (stride 2), then ``depth`` stages of one basic block each (channels double,
    resolution halves from stage 2 on), global pooling, linear classifier.

    Args:
        width: channels of the first stage.
        depth: number of stages (>= 1).
    """

    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 2, 1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU(inplace=True))
        blocks, cin = [], width
        for stage in range(depth):
            cout = width * 2 ** stage
            blocks.append(BasicBlock(cin, cout, 1 if stage == 0 else 2))
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(cin, NUM_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class LSTMLanguageModel(nn.Module):
    """Embedding, ``depth``-layer LSTM of ``width`` units, projection to the vocabulary."""

    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.lstm = nn.LSTM(width, width, num_layers=depth, batch_first=True)
        self.head = nn.Linear(width, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embed(tokens))
        return self.head(out)


class TransformerLanguageModel(nn.Module):
    """Token + learned position embeddings, ``depth`` pre-norm encoder layers
    (``width`` model dim, 4 heads, 4x feed-forward) with a causal mask, vocabulary head."""

    def __init__(self, width: int, depth: int, max_len: int = 512) -> None:
        super().__init__()
        heads = 4 if width % 4 == 0 else 1
        self.embed = nn.Embedding(VOCAB, width)
        self.pos = nn.Parameter(torch.zeros(max_len, width))
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.1,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.head = nn.Linear(width, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seq = tokens.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(seq, device=tokens.device)
        x = self.embed(tokens) + self.pos[:seq]
        return self.head(self.encoder(x, mask=mask, is_causal=True))


def build_model(name: str, width: int, depth: int) -> nn.Module:
    """The model of workload ``name`` (``cnn``, ``rnn`` or ``transformer``)."""
    if name == "cnn":
        return ResNetSmall(width, depth)
    if name == "rnn":
        return LSTMLanguageModel(width, depth)
    if name == "transformer":
        return TransformerLanguageModel(width, depth)
    raise ValueError(f"unknown workload {name!r}")
