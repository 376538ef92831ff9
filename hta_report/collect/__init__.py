"""``hta-report collect``: profile PyTorch training and write Kineto traces.

* :class:`profile` — the Python API (re-exported as ``hta_report.profile``).
* :mod:`.command` — the ``collect`` click command (built-in workloads, user scripts).

Importing this package does not import torch.
"""
from .session import profile

__all__ = ["profile"]
