"""Built-in training workloads (``--workload cnn|rnn|transformer``) on synthetic data.

Modules here import torch at module level; :mod:`..command` imports them lazily.
"""
from __future__ import annotations

from typing import Dict, Tuple

#: name -> (description, default width, default depth, default batch size)
WORKLOADS: Dict[str, Tuple[str, int, int, int]] = {
    "cnn": ("ResNet-style conv net, 3x32x32 images, 10 classes", 8, 2, 32),
    "rnn": ("LSTM language model, 1000-token vocabulary, 32-token sequences", 128, 2, 16),
    "transformer": ("transformer encoder language model, 1000-token vocabulary, "
                    "64-token sequences, causal mask", 64, 2, 16),
}
