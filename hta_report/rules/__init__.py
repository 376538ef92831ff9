"""The advice engine: a catalogue of diagnostic rules over the result model.

Each rule is a small pure function registered with :func:`.base.rule` in a
module of this package (one module per area: input, copies, sync, launch,
compute, comm, optimizer, steps, idle); every such module is found and
imported by :mod:`.engine`. Thresholds live in :class:`AdviceConfig`.
:func:`advise` runs the catalogue; :func:`catalogue` lists it.
"""
from .config import AdviceConfig
from .engine import RULE_IDS, RULES, Advice, advise, catalogue, load_config

__all__ = ["AdviceConfig", "load_config", "Advice", "advise", "catalogue", "RULES", "RULE_IDS"]
