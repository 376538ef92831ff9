"""Files of one process are windows of one rank, not ranks (issue 28, item 8):
``tensorboard_trace_handler`` writes ``<worker>.<ms>.pt.trace.json[.gz]`` per
profiling cycle; the latest is analyzed and the others are named."""
from kineto import simple_gpu_trace
from hta_report.api import analyze
from hta_report.load.discovery import split_windows
from hta_report.render import view


def test_two_cycles_of_one_worker_are_one_rank_analyzed_at_its_latest(tmp_path):
    early, late = tmp_path / "worker0.1623212756351.pt.trace.json", tmp_path / "worker0.1623213129365.pt.trace.json"
    simple_gpu_trace(rank=None, steps=3).write(early)
    simple_gpu_trace(rank=None, steps=4).write(late)
    result = analyze(tmp_path)
    assert [f.path for f in result.inventory.files] == [str(late)]
    assert len(result.ranks) == 1 and result.ranks[0].steps.count == 3  # 4 recorded, the last dropped
    assert not any(f.id == "rank-straggler" for f in result.findings)
    (w,) = result.inventory.windows
    assert (w.worker, w.analyzed, w.others) == ("worker0", str(late), [str(early)])
    note, *readers = view.reading_notes(result)
    assert readers == view.parser_notes(result)
    assert "worker0 wrote 2 profiling windows" in note and "analyzes the latest full one, worker0.1623213129365" in note
    assert "set aside: worker0.1623212756351.pt.trace.json" in note


def test_windows_are_per_worker_and_the_order_is_by_number_not_name(tmp_path):
    paths = [tmp_path / n for n in ("a.9.pt.trace.json", "a.10.pt.trace.json", "b.5.pt.trace.json",
                                    "rank-0.json")]
    for p in paths:
        simple_gpu_trace(rank=None, steps=2).write(p)
    files, windows = split_windows(sorted(paths))
    assert sorted(files) == sorted([paths[1], paths[2], paths[3]])
    (w,) = windows
    assert (w.worker, w.analyzed, w.others) == ("a", str(paths[1]), [str(paths[0])])


def test_one_name_with_different_ranks_in_the_header_is_ranks(tmp_path):
    paths = [tmp_path / "job.1.pt.trace.json", tmp_path / "job.2.pt.trace.json"]
    for rank, p in enumerate(paths):
        simple_gpu_trace(rank=rank, steps=2).write(p)
    files, windows = split_windows(paths)
    assert files == paths and windows == []
    assert [r.rank for r in analyze(tmp_path).ranks] == [0, 1]


def test_a_last_window_cut_short_is_passed_over_for_the_latest_full_one(tmp_path):
    """torch.profiler writes the cycle it is in when it stops (the loop ended
    with ``repeat=0``): often a step or none. The latest full window is analyzed."""
    full = [tmp_path / f"host_1.{n}.pt.trace.json" for n in (100, 200)]
    for p in full:
        simple_gpu_trace(rank=None, steps=4).write(p)
    cut = tmp_path / "host_1.300.pt.trace.json"
    simple_gpu_trace(rank=None, steps=1).write(cut)
    files, (w,) = split_windows(sorted(full + [cut]))
    assert files == [full[1]] and w.analyzed == str(full[1]) and w.others == [str(full[0]), str(cut)]
