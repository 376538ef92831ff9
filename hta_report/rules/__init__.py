"""The advice engine: a catalogue of diagnostic rules over the result model.

Each rule is a small pure function registered in :mod:`.base` (one module per
area: input, copies, sync, launch, compute, comm, optimizer, steps, idle);
thresholds live in :class:`AdviceConfig`. :func:`advise` runs the catalogue;
:func:`catalogue` lists it.
"""
from .config import AdviceConfig, load_config
from .engine import RULE_IDS, RULES, Advice, advise, catalogue

__all__ = ["AdviceConfig", "load_config", "Advice", "advise", "catalogue", "RULES", "RULE_IDS"]
