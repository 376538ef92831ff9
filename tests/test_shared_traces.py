"""Every real trace under ../shared/traces/hta analyzes through the CLI without a traceback."""
import json
import re

import pytest

from conftest import SHARED_FOLDERS, shared



@pytest.mark.parametrize("folder", SHARED_FOLDERS)
def test_folder_analyzes(folder, tmp_path, run_cli):
    path = shared(folder)
    code, out, err = run_cli("analyze", path, "-o", tmp_path / "r.html", "--json", tmp_path / "r.json")
    assert code == 0, err
    assert "Traceback" not in err + out
    html = (tmp_path / "r.html").read_text()
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["schema_version"] == 3
    assert len(data["ranks"]) == len(list(path.glob("*.json*")))
    for r in data["ranks"]:
        assert f'id="rank-{r["rank"]}"' in html


def test_two_ranks_reports_both(tmp_path, run_cli):
    path = shared("two_ranks")
    code, _, err = run_cli("analyze", path, "-o", tmp_path / "r.html", "--json", tmp_path / "r.json")
    assert code == 0, err
    data = json.loads((tmp_path / "r.json").read_text())
    assert [r["rank"] for r in data["ranks"]] == [0, 1]
    assert all(r["has_gpu"] for r in data["ranks"])
    assert data["aggregate"]["gpu_ranks"] == 2


def test_cpu_only_says_no_gpu_activity(tmp_path, run_cli):
    path = shared("cpu_only")
    code, out, err = run_cli("analyze", path, "-o", tmp_path / "r.html", "--json", tmp_path / "r.json")
    assert code == 0, err
    html = (tmp_path / "r.html").read_text()
    assert "The traces hold no GPU activity" in html
    prose = re.sub(r'<details id="checks".*?</details>', "", html, flags=re.S)  # rules say "not checked: ..."
    assert prose.count("no GPU activity") == 1  # said once, not again per rank and in the warnings
    assert "why is the GPU idle" not in html.lower() and "CPU-only traces" in html
    assert "No GPU activity" in out
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["ranks"][0]["rank"] == 34  # distributedInfo
    assert data["ranks"][0]["has_gpu"] is False
    assert data["ranks"][0]["steps"]["count"] >= 1
    assert data["ranks"][0]["cpu"]["top_ops"], "CPU-side section must still be filled"
    # a rule about GPU data never claims anything on a CPU-only trace
    assert not any(f["id"] in ("gpu-idle", "pageable-memcpy", "exposed-communication") for f in data["findings"])
