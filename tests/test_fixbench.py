"""bench/fixbench (docs/FIXBENCH.md): every pattern declares what the
recorder and the scorer read, and one pair recorded here (one round, both
sides in one process) is scored. The checks are on structure (a scored
pair, a finite error, a positive step), not on the figures: the bench
reports those against its targets."""
import json
import math
import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "bench" / "fixbench"))


def test_every_pattern_declares_what_the_bench_reads():
    pytest.importorskip("torch")
    import harness
    import patterns

    assert len(patterns.NAMES) >= 12
    for name in patterns.NAMES:
        module = patterns.load(name)
        assert module.PATTERN == name
        assert len(module.VARIANTS) >= 2, name
        assert all(isinstance(v, str) and d and isinstance(d, str) for v, d in module.VARIANTS.items()), name
        assert isinstance(module.RULES, frozenset) and all(isinstance(r, str) for r in module.RULES), name
        assert isinstance(module.FIX, str) and module.FIX and "\n" not in module.FIX, name
        assert callable(module.build), name
    import torch
    next_batch = harness.batches(torch.arange(6), batch=2)
    assert [next_batch()[0].tolist() for _ in range(4)] == [[0, 1], [2, 3], [4, 5], [0, 1]]
    assert harness.round_order(0) == (False, True) and harness.round_order(1) == (True, False)


def test_recorder_refuses_the_repository_and_too_few_rounds(tmp_path, capsys):
    import record

    with pytest.raises(SystemExit):
        record.main([str(REPO / "fixbench-out")])
    assert "inside the repository" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        record.main([str(tmp_path), "--rounds", "3"])
    assert "at least 4" in capsys.readouterr().err
    assert not (REPO / "fixbench-out").exists() and not any(tmp_path.iterdir())


@pytest.mark.slow
def test_one_recorded_pair_is_scored(tmp_path):
    pytest.importorskip("torch")
    import record
    import score

    key = "one-process/foreach_optimizer-adamw"
    index = record.record(tmp_path, ["one-process"], rounds=1, only="foreach_optimizer:adamw", steps=5,
                          unprofiled=3)
    assert list(index) == [key] and index[key]["errors"] == [] and len(index[key]["seconds"]) == 2
    assert sorted(p.name for p in (tmp_path / key).iterdir()) == ["0-after", "0-before", "unprofiled.json"]
    (pair,) = score.score(tmp_path)
    s = pair.shown
    assert s is not None, pair.note
    assert s.before_us > 0 and s.after_us > 0
    assert s.rule == "unfused-optimizer", s.fired  # a per-parameter step on the CPU: fires on the op count
    assert 1 <= s.position <= s.findings
    assert math.isfinite(s.predicted_us) and math.isfinite(s.error_pct) and math.isfinite(s.unprofiled_error_pct)
    assert s.rule in score.line(pair)
    (paired,) = score.score(tmp_path, paired=True)
    assert [r.label for r in paired.rounds] == ["round 0"] and paired.shown is paired.rounds[0]
    summ = score.summary([pair])
    assert summ["one-process"]["pairs"] == 1 and summ["one-process"]["predicted"] == 1
    assert any("median" in line for line in score.summary_lines(summ))
    doc = json.loads(json.dumps(score.to_json([pair], summ, False), allow_nan=False))
    assert doc["pairs"][0]["shown"]["rule"] == "unfused-optimizer"
