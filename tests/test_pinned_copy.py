"""The pinned host-to-device copy rate the replay's "copies pinned and async"
edit copies at (``hta_report.analysis.pinned_copy``)."""

import pytest

from hta_report.analysis.events import RankEvents
from hta_report.analysis.pinned_copy import PCIE_EFFICIENCY, PCIE_X16_GBPS, pinned_htod_gbps
from hta_report.load import load_traces
from kineto import TraceBuilder

MIB = 1 << 20


def _events(tmp_path, b: TraceBuilder) -> RankEvents:
    b.write(tmp_path / "rank-0.json")
    loaded = load_traces(tmp_path, include_last_step=True)
    return RankEvents.from_loaded(loaded, loaded.files[0].rank)


def _copies(pinned_rates_gbps, pageable=True) -> TraceBuilder:
    b = TraceBuilder(rank=0, gpu_name="NVIDIA A100-SXM4-80GB")
    b.step(1, 0, 100_000)
    t = 100.0
    if pageable:  # a slow pageable copy: never a sample of the pinned rate
        b.memcpy("HtoD", "Pageable", t, 8 * MIB / 3e3, 8 * MIB)
        t += 10_000
    for gbps in pinned_rates_gbps:
        dur = 4 * MIB / (gbps * 1e3)
        b.memcpy("HtoD", "Pinned", t, dur, 4 * MIB)
        t += dur + 100
    b.memcpy("HtoD", "Pinned", t, 10.0, 4096)  # too small to count: its fixed cost dominates
    return b


def test_the_trace_s_own_pinned_copies_give_the_rate(tmp_path):
    rate, source = pinned_htod_gbps(_events(tmp_path, _copies([20.0, 22.0, 40.0])), ["NVIDIA A100-SXM4-80GB"])
    assert rate == pytest.approx(22.0, rel=1e-3)  # the median, not the table's 25.2
    assert "measured on 3 pinned" in source


def test_the_largest_pinned_copies_give_the_rate(tmp_path):
    """A 1 MiB copy pays its fixed cost at a low rate; two 32 MiB copies run near the link's."""
    b = TraceBuilder(rank=0, gpu_name="NVIDIA A100-SXM4-80GB")
    b.step(1, 0, 100_000)
    for i, (mib, gbps) in enumerate([(1, 4.0), (1, 4.0), (1, 5.0), (32, 20.0), (32, 21.0)]):
        b.memcpy("HtoD", "Pinned", 100 + 5000 * i, mib * MIB / (gbps * 1e3), mib * MIB)
    rate, source = pinned_htod_gbps(_events(tmp_path, b), [])
    assert rate == pytest.approx(20.5, rel=1e-3) and "measured on 2 pinned" in source


def test_without_pinned_copies_the_device_s_link_gives_the_rate(tmp_path):
    ev = _events(tmp_path, _copies([]))
    rate, source = pinned_htod_gbps(ev, ["NVIDIA A100-SXM4-80GB"])
    assert rate == pytest.approx(PCIE_X16_GBPS[4] * PCIE_EFFICIENCY) and "PCIe gen 4" in source
    assert pinned_htod_gbps(ev, ["NVIDIA H200"])[0] == pytest.approx(PCIE_X16_GBPS[5] * PCIE_EFFICIENCY)
    assert pinned_htod_gbps(ev, ["Tesla V100-SXM2-16GB"])[0] == pytest.approx(PCIE_X16_GBPS[3] * PCIE_EFFICIENCY)


@pytest.mark.parametrize("name", ["NVIDIA GH200 480GB", "Some Future GPU", ""])
def test_no_known_link_gives_no_rate(tmp_path, name):
    rate, source = pinned_htod_gbps(_events(tmp_path, _copies([])), [name])
    assert rate is None and "no pinned copy" in source
