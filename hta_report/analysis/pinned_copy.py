"""How fast a host-to-device copy from pinned memory runs on a rank (GB/s),
for the replay's "copies pinned and async" edit.

The driver copies pageable memory through a pinned staging buffer, at a
fraction of the host link's speed: on an H200 here the same 64 MiB batch
took 7.97 ms from pageable memory (8.4 GB/s) and 1.21 ms from pinned memory
(55.4 GB/s) (``bench/record_cuda.py``, case ``pageable-copy``, 2026-11-26). A
prediction that keeps the pageable duration misses most of what pinning buys
where the copy sits on the GPU's critical path.

The pinned rate of a rank comes from, in order:

1. its own pinned host-to-device copies of at least :data:`MIN_SAMPLE_BYTES`
   and at least half the size of the largest: their median rate (what this
   machine did for large copies: on the A100 traces of ../shared/traces/hta,
   pinned copies of 1 MiB and more median 5.7 GB/s, those of 53 MiB 10 GB/s);
   without such copies, its pinned device-to-host copies by the same rule
   (PCIe carries each direction at the same rate);
2. the device's host link by name, else by compute capability (:data:`PCIE_GENERATION`) at
   :data:`PCIE_X16_GBPS` per direction times :data:`PCIE_EFFICIENCY`;
3. none: the edit keeps the measured durations (NVLink-C2C hosts such as
   GH200/GB200 and unknown devices).
"""
from __future__ import annotations

import re
from typing import Optional, Sequence, Tuple

import numpy as np
import pandas as pd

from .copies import dtoh_to, htod_from
from .events import RankEvents
from .kernels import by_device_name

#: Smallest pinned copy whose rate counts (bytes): below ~1 MiB a copy's fixed cost dominates its rate.
MIN_SAMPLE_BYTES = 1 << 20
#: PCIe x16 bandwidth per direction (GB/s) by generation (PCI-SIG: 8, 16, 32 GT/s per lane
#: with 128b/130b encoding: 15.75, 31.5, 63.0 GB/s).
PCIE_X16_GBPS = {3: 15.75, 4: 31.5, 5: 63.0}
#: Share of the link a large pinned copy reaches: 0.8, below the 0.88 measured on the H200
#: above (55.4 of 63 GB/s), so a prediction from the table does not overstate the gain.
PCIE_EFFICIENCY = 0.8
#: Device name part -> PCIe generation of its host link (vendors' datasheets); the first
#: match wins, so the NVLink-C2C superchips (None: not PCIe) come before their GPUs' names.
PCIE_GENERATION: Sequence[Tuple[re.Pattern, Optional[int]]] = tuple(
    (re.compile(p, re.IGNORECASE), gen) for p, gen in (
        (r"GH200|GB200|GB300", None),
        (r"H100|H200|H800|H20\b|B200|B100|B300|RTX PRO 6000|RTX 50\d0|MI300|MI325|MI350|MI355", 5),
        (r"A100|A800|A10G?\b|A30\b|A40\b|A6000|L4\b|L40|RTX 30\d0|RTX 40\d0|MI250|MI210|MI100", 4),
        (r"V100|T4\b|P100|P40\b|RTX 20\d0|TITAN V", 3),
        # no name matched: the compute capability (:func:`~.kernels.capability_name`), each
        # class's PCIe generation (Pascal to Turing gen 3; Ampere and Ada gen 4; Hopper and
        # Blackwell gen 5; their NVLink-C2C superchips are named above)
        (r"^compute capability [67]\.\d+$", 3), (r"^compute capability 8\.\d+$", 4),
        (r"^compute capability (9|10|12)\.\d+$", 5),
    ))


def pinned_htod_gbps(ev: RankEvents, device_names: Sequence[str] = ()) -> Tuple[Optional[float], str]:
    """The rank's pinned host-to-device copy rate (GB/s, 1e9 bytes per
    second) and where it comes from (see the module doc): ``(rate, "measured
    on N pinned copies in this trace")``, ``(rate, "PCIe gen G x16 ...")``, or
    ``(None, reason)``. ``device_names``: the trace's ``deviceProperties``
    names. Never raises on missing columns: a rank without copies or bytes
    falls through to the table."""
    gpu = ev.gpu
    if not gpu.empty and "bytes" in gpu.columns:
        # PCIe runs each direction at the same rate: pinned copies to the host measure the link
        # where the trace has no large pinned copy to the device
        for pinned, what in ((gpu[htod_from(gpu["s_name"], "Pinned")], "host-to-device"),
                             (gpu[dtoh_to(gpu["s_name"], "Pinned")], "device-to-host")):
            size = pd.to_numeric(pinned["bytes"], errors="coerce").to_numpy(dtype=float)
            dur = pinned["dur"].to_numpy(dtype=float)
            ok = (size >= MIN_SAMPLE_BYTES) & (dur > 0)
            if ok.any():  # the largest copies come nearest the link's rate (a copy's fixed cost weighs less)
                ok &= size >= size[ok].max() / 2
                rate = float(np.median(size[ok] / dur[ok])) / 1e3  # bytes per µs -> GB/s
                return rate, f"measured on {int(ok.sum())} pinned {what} copies in this trace"
    gen = by_device_name(PCIE_GENERATION, device_names)
    if gen is not None:
        rate = PCIE_X16_GBPS[gen] * PCIE_EFFICIENCY
        return rate, f"PCIe gen {gen} x16 ({PCIE_X16_GBPS[gen]:g} GB/s) at {PCIE_EFFICIENCY:.0%}"
    return None, "no pinned copy in the trace and no known host link for the device"
