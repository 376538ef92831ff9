"""Our numbers equal HTA's own, called directly on the same trace.

Slow tier, the whole module: every test runs HTA on a real trace of ../shared
(the ``control`` fixture alone takes 8 s on a loaded 2-core machine)."""
import pytest

pytestmark = pytest.mark.slow

from conftest import shared
from hta_report.api import analyze


@pytest.fixture(scope="module")
def control():
    path = shared("trace_diff/control")
    from hta.trace_analysis import TraceAnalysis

    (trace_file,) = sorted(path.glob("*.json.gz"))
    hta = TraceAnalysis(trace_files={3: str(trace_file)}, trace_dir=str(path))  # rank 3 per distributedInfo
    return analyze(path), hta


def test_rank_comes_from_distributed_info(control):
    result, _ = control
    assert [r.rank for r in result.ranks] == [3]
    assert result.inventory.files[0].rank_source == "distributedInfo"


def test_temporal_breakdown_equals_hta(control):
    result, hta = control
    ours = result.ranks[0].temporal
    theirs = hta.get_temporal_breakdown(visualize=False).set_index("rank").loc[3]
    assert ours.idle_pct == pytest.approx(theirs["idle_time_pctg"], abs=0.1)
    assert ours.compute_pct == pytest.approx(theirs["compute_time_pctg"], abs=0.1)
    assert ours.non_compute_pct == pytest.approx(theirs["non_compute_time_pctg"], abs=0.1)
    assert ours.idle_us == pytest.approx(theirs["idle_time(us)"])
    # and the values are not degenerate
    assert 5 < ours.idle_pct < 50 and ours.compute_pct > 30


def test_kernel_type_shares_equal_hta(control):
    result, hta = control
    theirs, _ = hta.get_gpu_kernel_breakdown(visualize=False)
    theirs = dict(zip(theirs["kernel_type"], theirs["percentage"]))
    for shares in (result.aggregate.kernel_types, result.ranks[0].kernel_types):
        ours = {k.kernel_type: k.pct for k in shares}
        assert set(ours) == set(theirs)
        for kind, pct in theirs.items():
            assert ours[kind] == pytest.approx(pct, abs=0.1), kind


def test_idle_breakdown_equals_hta_per_stream(control):
    result, hta = control
    theirs, _ = hta.get_idle_time_breakdown(ranks=[3], visualize=False)
    streams = {s.stream: s for s in result.ranks[0].idle.streams}
    assert set(streams) == set(int(s) for s in theirs["stream"])
    for stream, cat, t in zip(theirs["stream"], theirs["idle_category"], theirs["idle_time"]):
        assert getattr(streams[int(stream)], f"{cat}_us") == pytest.approx(t)


def test_comm_overlap_equals_hta(control):
    result, hta = control
    theirs = hta.get_comm_comp_overlap(visualize=False).set_index("rank").loc[3, "comp_comm_overlap_pctg"]
    assert result.ranks[0].comm.overlap_pct == pytest.approx(theirs, abs=0.1)
    assert result.ranks[0].comm.kernel_count > 0


def test_step_stats_from_profiler_steps(control):
    result, _ = control
    steps = result.ranks[0].steps
    # 6 ProfilerSteps in the file; HTA drops the last by default
    assert [s.number for s in steps.steps] == [1009, 1010, 1011, 1012, 1013]
    assert steps.steps[0].warmup and steps.warmup_excluded
    durations = [s.duration_us for s in steps.steps[1:]]
    assert steps.mean_us == pytest.approx(sum(durations) / len(durations))
    assert steps.max_us == max(durations)


def _htas_kernel_types(view):
    """HTA's own ``get_gpu_kernel_breakdown`` kernel-type table over ``view``'s ranks."""
    from hta_report.analysis.gpu_time import _shares

    types_df, _ = view.get_gpu_kernel_breakdown(visualize=False, num_kernels=1)
    return _shares(types_df)


def _kernel_types_both_ways(path):
    """(our combination of our per-rank tables, HTA's own table over all ranks)."""
    from hta_report.analysis.gpu_time import combine_kernel_type_shares, kernel_type_shares
    from hta_report.load import load_traces, quiet_hta

    loaded = load_traces(path)
    with quiet_hta():
        per_rank = [kernel_type_shares(loaded.analysis_for([r])) for r in loaded.ranks]
        return combine_kernel_type_shares(per_rank), _htas_kernel_types(loaded.analysis_for(loaded.ranks))


@pytest.mark.parametrize("htas_steps", [True, False], ids=["htas-steps", "htas-method"])
@pytest.mark.parametrize("folder", ["two_ranks", "alexnet", "amd_trace", "trace_diff/test"])
def test_kernel_type_table_of_a_rank_equals_htas_method(folder, htas_steps, monkeypatch):
    """:func:`kernel_type_shares` (HTA's steps for the table alone) equals
    HTA's ``get_gpu_kernel_breakdown`` value for value, per rank and over all
    ranks; and where HTA lacks those steps its method gives the same."""
    from hta_report.analysis import gpu_time
    from hta_report.analysis.gpu_time import kernel_type_shares
    from hta_report.load import load_traces, quiet_hta

    assert gpu_time._htas_type_steps() is not None  # this HTA has them
    if not htas_steps:
        monkeypatch.setattr(gpu_time, "_htas_type_steps", lambda: None)
    loaded = load_traces(shared(folder))
    with quiet_hta():
        for ranks in [[r] for r in loaded.ranks] + [loaded.ranks]:
            ours = kernel_type_shares(loaded.analysis_for(ranks))
            assert ours == _htas_kernel_types(loaded.analysis_for(ranks)) and ours, ranks


def test_kernel_types_of_all_ranks_equal_hta_on_two_ranks():
    ours, theirs = _kernel_types_both_ways(shared("two_ranks"))
    assert ours == theirs and len(theirs) >= 2


def test_kernel_types_of_all_ranks_equal_hta_on_simulated_ranks(tmp_path):
    from kineto import training_trace

    for rank, comm in ((0, 300.0), (1, 900.0), (2, 50.0)):  # different communication per rank
        training_trace(rank=rank, world_size=3, steps=4, allreduce_us=comm).write(tmp_path / f"rank{rank}.json")
    ours, theirs = _kernel_types_both_ways(tmp_path)
    assert ours == theirs
    assert {s.kernel_type for s in theirs} >= {"COMPUTATION", "COMMUNICATION"}
    assert sum(s.pct for s in theirs) == pytest.approx(100, abs=0.3)


GPU_FOLDERS = ["trace_diff/control", "trace_diff/test", "two_ranks", "alexnet", "amd_trace", "triton_example"]


@pytest.mark.parametrize("folder", GPU_FOLDERS)
def test_every_figure_from_hta_equals_htas_own_run(folder):
    """Each figure the report takes from HTA (temporal, idle per stream and cause,
    kernel-type shares, communication overlap, launch counts and medians, queue
    lengths) equals HTA's own ``TraceAnalysis`` on the same files, as the
    benchmark's parity check compares them (bench/load.py): HTA's analyses here
    see only the rows and columns they read (``load.traces.hta_rows``)."""
    import json
    import logging
    import sys
    import warnings

    from conftest import REPO

    sys.path.insert(0, str(REPO / "bench"))
    from load import compare_metrics, hta_metrics, report_metrics
    from hta.trace_analysis import TraceAnalysis

    path = shared(folder)
    logging.getLogger("hta").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = TraceAnalysis(trace_dir=str(path))
        ranks = t.t.get_ranks()
        idle, _ = t.get_idle_time_breakdown(ranks=ranks, visualize=False)
        kernel_types, _ = t.get_gpu_kernel_breakdown(visualize=False)
        theirs = hta_metrics(t.get_temporal_breakdown(visualize=False), idle, kernel_types,
                             t.get_comm_comp_overlap(visualize=False),
                             t.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False),
                             t.get_queue_length_summary(ranks=ranks))
        ours = report_metrics(json.loads(analyze(path).to_json()), theirs)
    parity = compare_metrics(theirs, ours)
    assert parity["compared"] > 5 and parity["ok"], parity
