"""Hostile inputs at the edges of hta-report (issue 56).

- no ``--source-root`` and no git work tree: no source file is read, and the
  report says so once (item 1);
- compare's noise band is a robust spread of the step times: one checkpoint
  step cannot hide a consistent regression (item 18);
- a huge device name cannot push the findings out of the markdown comment
  (item 19);
- odd but valid TOML in ``--config`` is a one-line configuration error or a
  working configuration, never the "unexpected error" path (item 22);
- a 5,000-digit rank in a profiling window's head is skipped with a warning;
  the report is still written (item 23);
- a presigned ``.json?X-Amz-...`` URL is a trace, a folder URL with a query
  is refused, and neither echoes its secrets (item 24);
- absurd figures in a saved result are "not available" rather than
  nonsense, with no numpy warning; a result without ``schema_version`` is
  called that, not "not a Kineto trace" (item 25).
"""
import json
import warnings

import pytest

from hta_report.api import analyze
from hta_report.render import render

SECRET = "AKIAIOSFODNN7SECRETKEY"


# --- item 1: no source root, no source ----------------------------------------------------------------------------

def _stack_trace(folder, frame):
    from kineto import training_trace

    folder.mkdir(parents=True, exist_ok=True)
    training_trace(rank=0, steps=6, item_per_layer=True, pinned=False, workers=False, dataloader_us=3000,
                   with_stack=frame).write(folder / "rank0.json")
    return folder


def _sync_location(result):
    (f,) = [f for f in result.findings if f.id == "sync-in-step"]
    return f.locations[0]


@pytest.mark.slow
def test_without_a_git_tree_or_source_root_no_source_is_read(tmp_path, monkeypatch):
    from hta_report.locate import NO_SOURCE_ROOT
    from test_hostile_sources import SECRET_PY

    home = tmp_path / "home"  # run from $HOME: no .git above it
    (home / ".jupyter").mkdir(parents=True)
    (home / ".jupyter" / "jupyter_server_config.py").write_text(SECRET_PY)
    (home / "train.py").write_text(SECRET_PY)
    monkeypatch.chdir(home)
    for frame in ("train.py", ".jupyter/jupyter_server_config.py"):
        result = analyze(_stack_trace(tmp_path / frame.replace("/", "_"), frame), cache=None)
        loc = _sync_location(result)
        assert not loc.found and not loc.excerpt and loc.how in ("def", "frame")
        assert result.inventory.warnings.count(NO_SOURCE_ROOT) == 1  # said once, not per finding
        for fmt in ("md", "json", "sarif", "html"):
            assert SECRET not in render(result, fmt), (frame, fmt)
        assert "no --source-root was given" in render(result, "html")
    # control: the same file is read once the folder is a git work tree, or named as the source root
    loc = _sync_location(analyze(tmp_path / "train.py", cache=None, source_root=home))
    assert loc.found and any(SECRET in x for x in loc.excerpt)
    (home / ".git").mkdir()
    result = analyze(tmp_path / "train.py", cache=None)
    assert _sync_location(result).found and NO_SOURCE_ROOT not in result.inventory.warnings
    # a dot-folder is never read, even inside the root
    assert not _sync_location(analyze(tmp_path / ".jupyter_jupyter_server_config.py", cache=None)).found
