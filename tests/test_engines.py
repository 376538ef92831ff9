"""Engines and trace URLs: the same result wherever the ranks are analyzed and however the files are addressed.

- ``--engine ray`` on a local Ray head started here (``ray start --head
  --num-cpus 2``, stopped after) gives the JSON result of ``--engine local``
  on 16 ranks (real traces given their own ``distributedInfo.rank``), an
  unreadable rank included, and ``-v`` shows the Ray stages; skipped when
  Ray is not installed (``pip install "ray>=2.10"``);
- without Ray, ``--engine ray`` is a one-line error;
- traces addressed by URL (fsspec's ``memory://`` and ``file://``) give the
  result of the same files by path.
"""
import gzip
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

import pytest

from conftest import REPO, shared


def _scrub(data, paths=False):
    data["inventory"]["analyzed_at"] = ""
    if paths:
        data["inventory"]["input_dir"] = ""
        for f in data["inventory"]["files"] + data["inventory"]["unreadable"]:
            f["path"] = f["path"].rsplit("/", 1)[-1]
        for r in data["ranks"]:
            r["file"] = r["file"].rsplit("/", 1)[-1]
    return data


def _sixteen_ranks(tmp_path):
    """16 rank files: the two real ranks of ../shared's two_ranks, each copied
    8 times with its own distributedInfo.rank (and world_size 16), plus one
    truncated file that must be reported unreadable."""
    src = sorted(shared("two_ranks").glob("*.json.gz"))
    d = tmp_path / "job"
    d.mkdir()
    docs = [json.loads(gzip.open(p).read()) for p in src]
    for rank in range(16):
        doc = docs[rank % 2]
        doc["distributedInfo"] = dict(doc.get("distributedInfo") or {}, rank=rank, world_size=16)
        with gzip.open(d / f"trace_{rank:02d}.json.gz", "wt") as fh:
            json.dump(doc, fh)
    (d / "trace_16.json").write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur"')
    return d


def _cli(*args, env=None):
    proc = subprocess.run([sys.executable, "-m", "hta_report", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=600)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture
def ray_head(request):
    """A Ray head on this machine (2 CPUs, no dashboard, token auth off), its
    address; stopped afterwards. ``request.param``, where given: more
    arguments of ``ray start`` (e.g. ``["--memory", "30000000"]``)."""
    yield from _ray_head(getattr(request, "param", []))


def _ray_head(extra):
    pytest.importorskip("ray")
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    temp = tempfile.mkdtemp(prefix="htar-", dir="/tmp")  # Ray's socket paths must stay under 108 bytes
    stop = [sys.executable, "-m", "ray.scripts.scripts", "stop", "--force"]
    for attempt in range(3):  # Ray gives its raylet 30 s to start, which a loaded machine can miss
        start = subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--num-cpus", "2",
                                "--port", str(port), "--include-dashboard=false", "--disable-usage-stats",
                                "--temp-dir", temp, *extra],
                               capture_output=True, text=True, env=env, timeout=300)
        found = re.search(r"--address='([^']+)'", start.stdout + start.stderr)
        if start.returncode == 0 and found:
            break
        subprocess.run(stop, capture_output=True, env=env, timeout=300)
    try:
        assert start.returncode == 0 and found, start.stdout + start.stderr
        yield found.group(1), env
    finally:
        subprocess.run(stop, capture_output=True, env=env, timeout=300)
        shutil.rmtree(temp, ignore_errors=True)


def test_ray_engine_gives_the_local_result(tmp_path, ray_head):
    address, env = ray_head
    d = _sixteen_ranks(tmp_path)
    code, _, err = _cli("analyze", d, "-o", tmp_path / "local.json", "--no-cache")
    assert code == 1, err  # the truncated file: reported, the rest analyzed
    code, _, err = _cli("analyze", d, "-o", tmp_path / "ray.json", "--no-cache", "-v", "--engine", "ray",
                        "--ray-address", address, env=env)
    assert code == 1, err
    for stage in ("ray: connect", "ray: parse 17 files", "ray: analyze 16 ranks", "(ray worker)",
                  "cross-rank analyses"):
        assert stage in err, err
    local, ray = (_scrub(json.loads((tmp_path / f"{n}.json").read_text())) for n in ("local", "ray"))
    assert [r["rank"] for r in ray["ranks"]] == list(range(16))
    assert [u["path"] for u in ray["inventory"]["unreadable"]] == [str(d / "trace_16.json")]
    assert ray == local


@pytest.mark.parametrize("ray_head", [["--memory", str(30 * 10**6)]], indirect=True)
def test_ray_engine_asks_for_memory_no_larger_than_a_node_has(tmp_path, ray_head):
    """Each rank's task asks Ray for its estimated memory (55 MB for these
    ranks), clipped to the largest node's ``memory`` resource: on a head of
    30 MB the tasks run (one at a time) instead of waiting for a node that
    does not exist, with the local engine's result."""
    from hta_report.engines.ray_engine import memory_request
    from hta_report.engines.per_rank import rank_memory_bytes

    assert memory_request(4810, 30 * 10**6) == 30 * 10**6 < rank_memory_bytes(4810)
    assert memory_request(4810, None) == rank_memory_bytes(4810) == memory_request(4810, 10**12)
    address, env = ray_head
    d = _sixteen_ranks(tmp_path)
    (d / "trace_16.json").unlink()
    for name in [f"trace_{r:02d}.json.gz" for r in range(4, 16)]:
        (d / name).unlink()  # 4 ranks keep it short
    code, _, err = _cli("analyze", d, "-o", tmp_path / "local.json", "--no-cache")
    assert code == 0, err
    code, _, err = _cli("analyze", d, "-o", tmp_path / "ray.json", "--no-cache", "--engine", "ray",
                        "--ray-address", address, env=env)
    assert code == 0, err
    local, ray = (_scrub(json.loads((tmp_path / f"{n}.json").read_text())) for n in ("local", "ray"))
    assert ray == local


def test_ray_engine_without_ray_is_one_line(tmp_path, monkeypatch, run_cli):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    code, _, err = run_cli("analyze", shared("cpu_only"), "-o", tmp_path / "r.html", "--engine", "ray", "--no-cache")
    assert code == 1
    assert err.strip().splitlines() == [
        'hta-report: error: --engine ray needs Ray, which is not installed: pip install "ray>=2.10"']
    assert not (tmp_path / "r.html").exists()


def test_traces_by_url_give_the_result_by_path(tmp_path):
    fsspec = pytest.importorskip("fsspec")
    from hta_report.api import analyze

    src = shared("two_ranks")
    by_path = _scrub(json.loads(analyze(src).to_json()), paths=True)
    mem = fsspec.filesystem("memory")
    for p in src.iterdir():
        mem.pipe(f"/hta-report-test/two_ranks/{p.name}", p.read_bytes())
    try:
        result = analyze("memory:///hta-report-test/two_ranks")
    finally:
        mem.rm("/hta-report-test", recursive=True)
    assert [f.path.rsplit("/", 1)[-1] for f in result.inventory.files] == sorted(p.name for p in src.iterdir())
    assert result.inventory.files[0].path.startswith("memory://")
    assert _scrub(json.loads(result.to_json()), paths=True) == by_path
    by_url = analyze(f"file://{src.resolve()}")
    assert _scrub(json.loads(by_url.to_json()), paths=True) == by_path


def test_url_cache_and_errors(tmp_path, run_cli):
    """A URL's files are hashed for the cache like local ones; a missing URL
    directory is the same one-line error as a missing path."""
    pytest.importorskip("fsspec")
    src = shared("cpu_only")
    url = f"file://{src.resolve()}"
    outs = []
    for i in range(2):
        code, _, err = run_cli("analyze", url, "-o", tmp_path / f"r{i}.json", "-v", "--cache-dir", tmp_path / "c")
        assert code == 0, err
        outs.append(_scrub(json.loads((tmp_path / f"r{i}.json").read_text())))
    assert "analysis result (from cache)" in err and outs[0] == outs[1]
    code, _, err = run_cli("analyze", "memory:///no/such/dir", "-o", tmp_path / "x.html", "--no-cache")
    assert code == 1 and err.strip().splitlines() == ["hta-report: error: memory://no/such/dir: no such directory or file"]
