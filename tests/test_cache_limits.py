"""A bounded cache: the platform's folder, a size cap with least-recently-used
eviction, and ``hta-report cache info|clear``."""
import os
import time
from pathlib import Path

import pytest

from hta_report import cache

REPO = Path(__file__).resolve().parent.parent


def _entry(root: Path, folder: str, name: str, size: int, age_s: float) -> Path:
    p = root / folder / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(b"x" * size)
    t = time.time() - age_s
    os.utime(p, (t, t))
    return p


def test_the_default_folder_is_the_platforms(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    import platformdirs

    assert cache.default_cache_dir() == Path(platformdirs.user_cache_dir("hta-report", appauthor=False))
    if os.name == "posix" and not os.uname().sysname == "Darwin":
        assert cache.default_cache_dir() == tmp_path / "hta-report"


def test_prune_evicts_the_least_recently_used_first(tmp_path):
    old = _entry(tmp_path, "parse-v1", "a.arrow", 400, age_s=300)
    mid = _entry(tmp_path, "result-v1", "b.json", 400, age_s=200)
    new = _entry(tmp_path, "parse-v1", "c.arrow", 400, age_s=100)
    orphan = _entry(tmp_path, "parse-v0", "d.arrow", 400, age_s=50)  # an older format: evicted like the rest
    cache.touch(old)  # read just now: kept longest
    writing = _entry(tmp_path, "parse-v1", ".e.arrow.x.tmp", 400, age_s=1000)  # being written: not an entry
    assert cache.usage(tmp_path, max_bytes=0).size_bytes == 1600
    assert cache.prune(tmp_path, max_bytes=900) == 800
    assert [p.exists() for p in (mid, new, orphan, old, writing)] == [False, False, True, True, True]
    assert cache.prune(tmp_path, max_bytes=900) == 0  # already under the cap


def test_the_cap_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(cache.MAX_SIZE_ENV, raising=False)
    assert cache.max_cache_bytes() == cache.DEFAULT_MAX_BYTES == 2 << 30
    monkeypatch.setenv(cache.MAX_SIZE_ENV, "500MB")
    assert cache.max_cache_bytes() == 500 * 10**6
    monkeypatch.setenv(cache.MAX_SIZE_ENV, "lots")
    with pytest.raises(ValueError, match="not a size"):
        cache.max_cache_bytes()


def test_analyze_holds_the_cache_to_its_cap(tmp_path, run_cli, monkeypatch):
    stale = _entry(tmp_path / "c", "parse-v1", "stale.arrow", 50_000, age_s=10_000)
    monkeypatch.setenv(cache.MAX_SIZE_ENV, "60kB")
    code, _, err = run_cli("analyze", REPO / "sample_traces" / "cpu_healthy", "-o", tmp_path / "r.md",
                           "--cache-dir", tmp_path / "c")
    assert code == 0, err
    assert not stale.exists()  # evicted for the new entries
    assert cache.usage(tmp_path / "c").size_bytes <= 60_000


def test_a_bad_cap_is_a_one_line_error_before_any_work(tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv(cache.MAX_SIZE_ENV, "lots")
    code, _, err = run_cli("analyze", REPO / "sample_traces" / "cpu_healthy", "-o", tmp_path / "r.md",
                           "--cache-dir", tmp_path / "c")
    assert code == 1 and err.strip().count("\n") == 0 and "HTA_REPORT_CACHE_MAX_SIZE: 'lots' is not a size" in err
    assert not (tmp_path / "r.md").exists()
    code, _, _ = run_cli("analyze", REPO / "sample_traces" / "cpu_healthy", "-o", tmp_path / "r.md", "--no-cache")
    assert code == 0  # no cache, no cap to read


def test_cache_info_and_clear(tmp_path, run_cli):
    _entry(tmp_path, "parse-v1", "a.arrow", 2_000_000, age_s=10)
    _entry(tmp_path, "result-v1", "b.json", 1_000_000, age_s=10)
    code, out, err = run_cli("cache", "info", "--cache-dir", tmp_path)
    assert code == 0, err
    assert f"folder:  {tmp_path}" in out and "entries: 2" in out and "3 MB of at most 2 GiB" in out
    code, out, _ = run_cli("cache", "clear", "--cache-dir", tmp_path)
    assert code == 0 and out.startswith("removed 3 MB from")
    assert cache.usage(tmp_path).entries == 0
