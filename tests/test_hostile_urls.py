"""Hostile and unlucky URLs and Ray addresses (issue 31, items 4, 10 and 14).

- a URL's login (``http://alice:s3cr3tpass@host/``) and secret query
  parameters (presigned signatures, tokens, keys) never reach a report, a
  saved result, the cache, stdout or stderr: :func:`hta_report.escape.redact_url`
  is applied where a location becomes a shown or stored string, while the
  files are read with the full URL (``memory://`` with a login in its path,
  and a real ``http.server`` when ``aiohttp`` is installed);
- a URL that fails (a missing fsspec package, connection refused, a missing
  file, a file inside an archive) is one line naming the URL (redacted) and
  the cause, never the "unexpected error" path; ``ftp://`` and the other
  protocols that keep the host and login apart from the path are refused up
  front; ``file://localhost/abs`` and ``file:///abs`` are the absolute path;
- ``--engine ray`` with an unreachable ``--ray-address`` ends within seconds
  with one line of ours naming the address, none of Ray's own log lines
  (skipped without Ray).
"""
import functools
import http.server
import importlib.util
import json
import os
import random
import re
import socket
import string
import subprocess
import sys
import threading
import time

import pytest

from conftest import REPO

SECRET = "s3cr3tpass"
SAMPLES = REPO / "sample_traces"
TWO_RANKS = SAMPLES / "cpu_ddp_2ranks"


def _cli(*args, env=None, timeout=300):
    """The CLI in a fresh process: (exit code, stdout, stderr, seconds)."""
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "hta_report", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, env=dict(os.environ, **(env or {})), timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - t0


def _no_secret_in(folder):
    """The files under ``folder`` that hold :data:`SECRET` (bytes, any encoding of it as UTF-8)."""
    return [str(p) for p in folder.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]


# --- redact_url -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("http://alice:s3cr3tpass@host/run/", "http://***@host/run/"),
    ("https://alice@host:8443/a/b.json", "https://***@host:8443/a/b.json"),
    ("http://alice:p@ss@host/x", "http://***@host/x"),  # an unencoded @ in the password: up to the last one
    ("memory://alice:s3cr3tpass@host/run/x.json.gz", "memory://***@host/run/x.json.gz"),
    ("zip://run::http://alice:pw@h/t.zip", "zip://run::http://***@h/t.zip"),
    ("https://b.s3.amazonaws.com/k.json?X-Amz-Algorithm=AWS4&X-Amz-Credential=AKIA%2F2024&X-Amz-Date=1"
     "&X-Amz-Signature=deadbeef&X-Amz-Security-Token=tok",
     "https://b.s3.amazonaws.com/k.json?X-Amz-Algorithm=***&X-Amz-Credential=***&X-Amz-Date=***"
     "&X-Amz-Signature=***&X-Amz-Security-Token=***"),
    ("https://h/x?AWSAccessKeyId=AK&Signature=abc&Expires=9", "https://h/x?AWSAccessKeyId=***&Signature=***&Expires=9"),
    ("gs://b/x?X-Goog-Signature=1&GoogleAccessId=me", "gs://b/x?X-Goog-Signature=***&GoogleAccessId=***"),
    ("https://a.blob.core.windows.net/c/x?sv=2024&sig=abc%3D", "https://a.blob.core.windows.net/c/x?sv=2024&sig=***"),
    ("https://h/x?access_token=1&id_token=2&api_key=3&key=4&token=5&password=6&page=7",
     "https://h/x?access_token=***&id_token=***&api_key=***&key=***&token=***&password=***&page=7"),
    ("s3://b/x.json?X-Amz-Signature=abc: cannot read it", "s3://b/x.json?X-Amz-Signature=***: cannot read it"),
    ("a, http://u:p@h/x?sig=abc, b", "a, http://***@h/x?sig=***, b"),
    ("error at url='http://u:p@h:9/x': refused", "error at url='http://***@h:9/x': refused"),
    # nothing to redact: local paths, an @ in a path, harmless parameters, names that only contain "key"
    ("/tmp/a@b/trace.json", "/tmp/a@b/trace.json"),
    ("s3://bucket/run@v2/x.json", "s3://bucket/run@v2/x.json"),
    ("http://h/x?keyword=1&monkey=2&page=3", "http://h/x?keyword=1&monkey=2&page=3"),
    ("rank 0: kernel a@b c=d", "rank 0: kernel a@b c=d"),
])
def test_redact_url(text, expected):
    from hta_report.escape import redact_url

    assert redact_url(text) == expected
    assert redact_url(expected) == expected  # idempotent


def test_redact_url_hides_any_login_and_any_secret_parameter():
    """Property: random logins (any character a URL's login may hold, an
    unencoded ``@`` and ``:`` included; ``/``, ``?`` and ``#`` end it, RFC
    3986 §3.2) and random secret values under every secret parameter
    name never survive, wherever the URL stands in a line."""
    from hta_report.escape import redact_url

    rng = random.Random(31)
    alphabet = string.ascii_letters + string.digits + "-._~!$&'()*+,;=:@%"
    names = ["X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token", "X-Goog-Signature", "X-Goog-Credential",
             "Signature", "sig", "token", "access_token", "key", "api_key", "apikey", "password", "secret",
             "client_secret", "AWSAccessKeyId", "GoogleAccessId", "auth"]
    for _ in range(500):
        secret = "S" + "".join(rng.choice(string.ascii_letters + string.digits + "+%-_") for _ in range(12))
        login = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 10))) + secret + \
            "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 5)))
        scheme = rng.choice(["http", "https", "s3", "gs", "memory", "webdav+http"])
        url = f"{scheme}://{login}@host.example:8080/run/x.json"
        line = rng.choice(["{}", "error: {}: refused", "'{}'", "a, {}, b", "({})"]).format(url)
        assert secret not in redact_url(line), line
        value = "".join(rng.choice(string.ascii_letters + string.digits + "+/%-_.:") for _ in range(20)) + secret
        url = f"https://h/run/?page=2&{rng.choice(names)}={value}&x=1"
        line = rng.choice(["{}", "error: {}: refused", "'{}'", "a, {}, b"]).format(url)
        assert secret not in redact_url(line), line


# --- item 4: a login in a URL reaches no output -------------------------------------------------------------------

@pytest.fixture
def memory_run():
    """The 2-rank sample run in fsspec's memory filesystem under a path
    holding a login, ``memory://alice:s3cr3tpass@host/run/`` (the memory
    filesystem keeps it as part of the path: a URL read with its login)."""
    fsspec = pytest.importorskip("fsspec")
    pytest.importorskip("upath")
    mem = fsspec.filesystem("memory")
    root = f"/alice:{SECRET}@host"
    for p in TWO_RANKS.iterdir():
        mem.pipe(f"{root}/run/{p.name}", p.read_bytes())
    try:
        yield f"memory://alice:{SECRET}@host/run/"
    finally:
        mem.rm(root, recursive=True)


def test_login_in_a_url_reaches_no_report_result_cache_or_stream(tmp_path, memory_run, run_cli):
    out = tmp_path / "out"
    out.mkdir()
    cache = tmp_path / "cache"
    for attempt in range(2):  # computed, then from the result cache
        code, stdout, stderr = run_cli("analyze", memory_run, "-o", out / "r.html", "--json", out / "r.json",
                                       "-v", "--cache-dir", cache)
        assert code == 0, stderr
        assert SECRET not in stdout + stderr
        assert ("analysis result (from cache)" in stderr) == (attempt == 1)
        for ext in ("md", "sarif"):
            code, stdout, stderr = run_cli("analyze", memory_run, "-o", out / f"r.{ext}", "--cache-dir", cache)
            assert code == 0 and SECRET not in stdout + stderr, stderr
    assert _no_secret_in(out) == [] and _no_secret_in(cache) == []
    data = json.loads((out / "r.json").read_text())
    inv = data["inventory"]
    assert inv["input_dir"] == "memory://***@host/run"
    assert [f["path"] for f in inv["files"]] == [f"memory://***@host/run/{p.name}"
                                                 for p in sorted(TWO_RANKS.glob("*.json.gz"))]
    assert all(r["file"].startswith("memory://***@host/run/") for r in data["ranks"])
    assert len(data["ranks"]) == 2  # read with the full URL: both ranks analyzed
    assert "memory://***@host/run" in (out / "r.html").read_text()


def test_login_in_a_url_reaches_no_comparison(tmp_path, memory_run, run_cli):
    code, stdout, stderr = run_cli("compare", memory_run, SAMPLES / "cpu_healthy", "-o", tmp_path / "c.html",
                                   "--no-cache")
    assert code == 0, stderr
    assert SECRET not in stdout + stderr
    code, stdout, stderr = run_cli("compare", SAMPLES / "cpu_healthy", memory_run, "-o", tmp_path / "c.json",
                                   "--no-cache")
    assert code == 0, stderr
    assert _no_secret_in(tmp_path) == []
    data = json.loads((tmp_path / "c.json").read_text())
    assert data["new_label"] == "memory://***@host/run/"


def test_a_saved_result_holding_a_login_is_compared_without_it(tmp_path, run_cli):
    """A result saved by an older version (or edited) that names a URL with
    its login: ``compare`` shows it redacted."""
    code, _, stderr = run_cli("analyze", SAMPLES / "cpu_healthy", "-o", tmp_path / "a.json", "--no-cache")
    assert code == 0, stderr
    data = json.loads((tmp_path / "a.json").read_text())
    url = f"https://alice:{SECRET}@host/run/"
    data["inventory"]["input_dir"] = f"{url}?X-Amz-Signature={SECRET}"
    data["inventory"]["files"][0]["path"] = data["ranks"][0]["file"] = f"{url}rank-0.json"
    data["inventory"]["warnings"].append(f"{url}rank-0.json?token={SECRET}: a warning naming it")
    (tmp_path / "a.json").write_text(json.dumps(data))
    for ext in ("html", "json", "md"):
        code, stdout, stderr = run_cli("compare", tmp_path / "a.json", tmp_path / "a.json", "-o",
                                       tmp_path / f"c.{ext}")
        assert code == 0, stderr
        assert SECRET not in stdout + stderr + (tmp_path / f"c.{ext}").read_text()
    base = json.loads((tmp_path / "c.json").read_text())["base"]
    assert base["inventory"]["files"][0]["path"] == "https://***@host/run/rank-0.json"


@pytest.mark.parametrize("url", [
    f"http://alice:{SECRET}@127.0.0.1:9/run/",
    f"http://127.0.0.1:9/run/?X-Amz-Credential=AKIA&X-Amz-Signature={SECRET}&X-Amz-Security-Token={SECRET}",
])
def test_a_failing_url_is_one_line_naming_it_redacted(tmp_path, url, run_cli):
    """Whether aiohttp is installed (connection refused) or not (the missing
    package): one line, the URL redacted, no traceback, exit 1; ``--debug``'s
    traceback holds no secret either."""
    code, stdout, stderr = run_cli("analyze", url, "-o", tmp_path / "r.html", "--no-cache")
    assert code == 1
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert SECRET not in stdout + stderr
    assert lines[0].startswith("hta-report: error: http://"), lines
    assert "unexpected error" not in stderr and "***" in stderr
    assert ": cannot read" in lines[0]  # "cannot read http:// URLs here: ..." or "cannot read it: ... connect ..."
    code, stdout, stderr = run_cli("--debug", "analyze", url, "-o", tmp_path / "r.html", "--no-cache")
    assert code == 1 and SECRET not in stdout + stderr
    assert not (tmp_path / "r.html").exists()


# --- item 14: URL failures are one line naming the URL ---------------------------------------------------------

def test_a_missing_fsspec_package_is_one_line(tmp_path, monkeypatch, run_cli):
    fsspec = pytest.importorskip("fsspec")
    real = fsspec.get_filesystem_class

    def without_s3fs(protocol):
        if protocol in ("s3", "s3a"):
            raise ImportError("Install s3fs to access S3")
        return real(protocol)

    monkeypatch.setattr(fsspec, "get_filesystem_class", without_s3fs)
    code, _, stderr = run_cli("analyze", f"s3://bucket/run/?X-Amz-Signature={SECRET}", "-o", tmp_path / "r.html")
    assert code == 1
    assert stderr.strip().splitlines() == [
        "hta-report: error: s3://bucket/run/?X-Amz-Signature=***: cannot read s3:// URLs here: "
        "Install s3fs to access S3"]


@pytest.fixture
def refusing_protocol():
    """A protocol ``htarefused://`` whose filesystem refuses every
    connection, as a server that is down does (registered with fsspec)."""
    fsspec = pytest.importorskip("fsspec")
    pytest.importorskip("upath")
    from fsspec.spec import AbstractFileSystem

    class Refused(AbstractFileSystem):
        protocol = "htarefused"

        def info(self, path, **kwargs):
            raise ConnectionRefusedError(111, "Connection refused")

        def ls(self, path, detail=True, **kwargs):
            raise ConnectionRefusedError(111, "Connection refused")

        def _open(self, path, mode="rb", **kwargs):
            raise ConnectionRefusedError(111, "Connection refused")

    fsspec.register_implementation("htarefused", Refused, clobber=True)
    try:
        yield "htarefused"
    finally:
        from fsspec.registry import _registry

        _registry.pop("htarefused", None)


def test_connection_refused_is_one_line_naming_the_url(tmp_path, refusing_protocol, run_cli):
    for args in (["analyze", f"htarefused://alice:{SECRET}@host/run/", "-o", tmp_path / "r.html"],
                 ["compare", f"htarefused://alice:{SECRET}@host/run/", SAMPLES / "cpu_healthy", "-o",
                  tmp_path / "c.html"]):
        code, _, stderr = run_cli(*args, "--no-cache")
        assert code == 1
        assert stderr.strip().splitlines() == [
            "hta-report: error: htarefused://***@host/run: cannot read it: Connection refused"], stderr


@pytest.mark.parametrize("scheme", ["ftp", "sftp", "smb", "hdfs"])
def test_protocols_that_lose_their_host_are_refused_up_front(tmp_path, scheme, run_cli):
    """``ftp://`` (and the others whose host and login fsspec keeps apart
    from the path) lost both between listing and reading, then called a valid
    trace "not a Kineto trace" with four "Exception ignored" tracebacks:
    refused before any connection."""
    pytest.importorskip("upath")
    t0 = time.monotonic()
    code, _, stderr = run_cli("analyze", f"{scheme}://alice:{SECRET}@127.0.0.1:9/run/", "-o", tmp_path / "r.html")
    assert code == 1
    assert stderr.strip().splitlines() == [
        f"hta-report: error: {scheme}://***@127.0.0.1:9/run/: {scheme}:// is not supported: its files cannot be "
        "named by URL without losing the host and login, which fsspec keeps apart; copy the traces to a local "
        "folder (or serve them over http(s)://) first"]
    assert time.monotonic() - t0 < 30


@pytest.mark.parametrize("member", ["run", "run/nope.json", "nope"])
def test_a_file_inside_an_archive_is_one_line(tmp_path, member, run_cli):
    """``zip://member::file:///a.zip``: a missing member ended on "unexpected
    error", a present one on "seek of closed file"; now one line saying why
    it is not read."""
    import zipfile

    pytest.importorskip("upath")
    archive = tmp_path / "t.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for p in TWO_RANKS.iterdir():
            z.write(p, f"run/{p.name}")
    code, _, stderr = run_cli("analyze", f"zip://{member}::file://{archive}", "-o", tmp_path / "r.html")
    assert code == 1
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "unexpected error" not in stderr, stderr
    assert lines[0].startswith(f"hta-report: error: zip://{member}::file://{archive}: zip://…::… is not supported")


def test_file_urls_with_localhost_or_no_host_are_absolute_paths(tmp_path, run_cli):
    """RFC 8089: ``file://localhost/abs`` and ``file:///abs`` are ``/abs``
    (``file://localhost/abs`` was read as the relative path ``localhost/abs``);
    another host is refused in one line."""
    from hta_report.files import location

    assert location(f"file://localhost{TWO_RANKS}") == TWO_RANKS
    assert location(f"file://LOCALHOST{TWO_RANKS}") == TWO_RANKS
    assert location(f"file://{TWO_RANKS}") == TWO_RANKS
    results = []
    for url in (str(TWO_RANKS), f"file://localhost{TWO_RANKS}", f"file://{TWO_RANKS}"):
        code, _, stderr = run_cli("analyze", url, "-o", tmp_path / "r.json", "--no-cache")
        assert code == 0, stderr
        data = json.loads((tmp_path / "r.json").read_text())
        data["inventory"]["analyzed_at"] = ""
        results.append(data)
    assert results[0] == results[1] == results[2]
    code, _, stderr = run_cli("analyze", f"file://alice:{SECRET}@fileserver{TWO_RANKS}", "-o", tmp_path / "x.html")
    assert code == 1
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and SECRET not in stderr
    assert lines[0].startswith(f"hta-report: error: file://***@fileserver{TWO_RANKS}: a file:// URL names an "
                               "absolute path on this machine")


# --- a real HTTP server (fsspec's http filesystem needs aiohttp) --------------------------------------------------

@pytest.fixture
def http_server():
    """``http.server`` serving ``sample_traces/`` on 127.0.0.1 (directory
    listings included, which fsspec's http filesystem reads); its port."""
    pytest.importorskip("aiohttp", reason="fsspec's http:// filesystem needs aiohttp (pip install aiohttp)")
    pytest.importorskip("upath")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(SAMPLES)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_http_with_a_login_end_to_end(tmp_path, http_server):
    port = http_server
    base = f"http://alice:{SECRET}@127.0.0.1:{port}"
    out = tmp_path / "out"
    out.mkdir()
    code, stdout, stderr, _ = _cli("analyze", f"{base}/cpu_ddp_2ranks/", "-o", out / "r.html", "--json",
                                   out / "r.json", "--cache-dir", tmp_path / "cache")
    assert code == 0, stderr
    assert SECRET not in stdout + stderr
    data = json.loads((out / "r.json").read_text())
    assert data["inventory"]["input_dir"].startswith(f"http://***@127.0.0.1:{port}/cpu_ddp_2ranks")
    assert len(data["ranks"]) == 2
    code, stdout, stderr, _ = _cli("compare", f"{base}/cpu_ddp_2ranks/", f"{base}/cpu_healthy/", "-o",
                                   out / "c.html", "--cache-dir", tmp_path / "cache")
    assert code == 0, stderr
    assert SECRET not in stdout + stderr
    assert _no_secret_in(out) == [] and _no_secret_in(tmp_path / "cache") == []
    code, _, stderr, _ = _cli("analyze", f"{base}/no-such-run/", "-o", out / "x.html")
    assert code == 1
    assert stderr.strip().splitlines() == [
        f"hta-report: error: http://***@127.0.0.1:{port}/no-such-run/: no such directory or file"]
    code, _, stderr, _ = _cli("analyze", f"http://alice:{SECRET}@127.0.0.1:9/run/", "-o", out / "x.html")
    assert code == 1
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and SECRET not in stderr
    assert lines[0].startswith("hta-report: error: http://***@127.0.0.1:9/run/: cannot read it: ")
    assert "connect" in lines[0].lower()


# --- item 10: an unreachable Ray address ends in seconds, in one line ----------------------------------------------

ray_installed = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                   reason="Ray is not installed (pip install \"ray>=2.10\")")


@pytest.mark.ray
@ray_installed
def test_ray_address_nothing_listens_on_is_one_line_in_seconds(tmp_path):
    """It hung past 500 s printing Ray's connection log: now a TCP look
    first, then one line of ours, exit 1; a login in the address redacted."""
    for address in ("127.0.0.1:1", f"ray://alice:{SECRET}@127.0.0.1:1"):
        code, stdout, stderr, seconds = _cli("analyze", TWO_RANKS, "-o", tmp_path / "r.html", "--no-cache",
                                             "--engine", "ray", "--ray-address", address, timeout=120)
        assert code == 1
        shown = address.replace(f"alice:{SECRET}", "***")
        assert stderr.strip().splitlines() == [
            f"hta-report: error: cannot connect to the Ray cluster at {shown}: connection refused: no Ray head "
            "listens there (is the address right, is `ray start --head` running?)"]
        assert seconds < 60
        assert not (tmp_path / "r.html").exists()


@pytest.mark.ray
@ray_installed
def test_ray_address_that_answers_but_is_no_ray_head_is_bounded(tmp_path):
    """A port that accepts connections but speaks no Ray (Ray's own connect
    retries for minutes): given up after HTA_REPORT_RAY_CONNECT_TIMEOUT
    seconds, one line, none of Ray's log lines."""
    with socket.socket() as listener:
        listener.bind(("0.0.0.0", 0))
        listener.listen(16)
        port = listener.getsockname()[1]
        code, stdout, stderr, seconds = _cli("analyze", TWO_RANKS, "-o", tmp_path / "r.html", "--no-cache",
                                             "--engine", "ray", "--ray-address", f"127.0.0.1:{port}",
                                             env={"HTA_REPORT_RAY_CONNECT_TIMEOUT": "4"}, timeout=120)
    assert code == 1
    assert stderr.strip().splitlines() == [
        f"hta-report: error: cannot connect to the Ray cluster at 127.0.0.1:{port}: no Ray cluster answered "
        "within 4 s (set HTA_REPORT_RAY_CONNECT_TIMEOUT to wait longer)"], stderr
    assert seconds < 60


@pytest.mark.ray
@ray_installed
@pytest.mark.parametrize("value", ["nan", "0", "-3", "soon", "inf"])
def test_a_bad_ray_connect_timeout_is_one_line(tmp_path, value):
    code, _, stderr, _ = _cli("analyze", TWO_RANKS, "-o", tmp_path / "r.html", "--no-cache", "--engine", "ray",
                              "--ray-address", "127.0.0.1:1", env={"HTA_REPORT_RAY_CONNECT_TIMEOUT": value},
                              timeout=120)
    assert code == 1
    assert stderr.strip().splitlines() == [
        f"hta-report: error: HTA_REPORT_RAY_CONNECT_TIMEOUT={value!r}: expected a number of seconds above 0"]


@pytest.mark.ray
@ray_installed
def test_ray_host_port_parsing():
    from hta_report.engines.ray_engine import _host_port

    assert _host_port("10.0.0.1:6379") == ("10.0.0.1", 6379)
    assert _host_port("head-node:6379") == ("head-node", 6379)
    assert _host_port("[::1]:6379") == ("::1", 6379)
    assert _host_port("ray://alice:pw@head:10001") == ("head", 10001)
    assert _host_port("auto") is None and _host_port("head-node") is None and _host_port("x:port") is None


def test_docs_name_the_ray_timeout_and_url_redaction():
    readme = (REPO / "docs" / "scale.md").read_text(encoding="utf-8")
    assert "HTA_REPORT_RAY_CONNECT_TIMEOUT" in readme
    assert re.search(r"redact", readme, re.IGNORECASE)
    assert "ftp://" in readme
