"""Hostile or unlucky output targets, saved results and full disks (issue 31, items 7, 9, 15, 16).

* ``-o`` writes through what it should not replace: every kind of target
  (regular file, new name, FIFO, character device, this process's file
  descriptor, symbolic links to each, a directory, a socket) keeps its kind;
  regular files are still replaced atomically, links stay links.
* Any legal output name works, 255 bytes included (the temporary name is not
  longer than the file system allows).
* A saved result with absurd but finite figures (``1e308``) prints no number
  as hundreds of digits; one holding an integer past the float range is a
  one-line error; a result saved with a UTF-8 byte order mark is a result.
* A saved result larger than the cap is refused before it is read.
* ``collect`` on a full disk (or past the file size limit) names the real
  cause and leaves no temporary file.
"""
from __future__ import annotations

import errno
import json
import os
import re
import socket
import stat
import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path

import pytest

from hta_report.errors import CollectError, InputError, OutputError
from hta_report.output import write_all_atomic
from kineto import simple_gpu_trace

POSIX = os.name == "posix"
PROC_FD = Path("/proc/self/fd").is_dir()
TEXT = "# the report\n" + "line of the report\n" * 5000  # larger than a pipe's buffer: real streaming
#: Runs of this many digits (thousands separators included) mean a number printed in full.
LONG_NUMBER = re.compile(r"\d[\d,]{39,}")


def _kind(path: Path) -> str:
    """What ``path`` itself is (not following a link)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "missing"
    for name, test in (("link", stat.S_ISLNK), ("file", stat.S_ISREG), ("fifo", stat.S_ISFIFO),
                       ("chardev", stat.S_ISCHR), ("dir", stat.S_ISDIR), ("socket", stat.S_ISSOCK)):
        if test(mode):
            return name
    return "other"


def _leftovers(*folders: Path):
    return sorted(p.name for d in folders for p in d.iterdir() if p.name.startswith("."))


class _Reader:
    """Reads a FIFO (or a pipe's read end) to its end in a thread."""

    def __init__(self, path=None, fd=None):
        self.data = b""
        self._path, self._fd = path, fd
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        fd = os.open(self._path, os.O_RDONLY) if self._path is not None else self._fd
        with os.fdopen(fd, "rb") as fh:
            self.data = fh.read()

    def result(self) -> bytes:
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "the reader never saw the end of the report"
        return self.data


def _null_device(folder: Path) -> Path:
    """A character device like /dev/null (1, 3) in ``folder``; skips the test where mknod is not allowed."""
    node = folder / "null"
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, OSError, AttributeError) as exc:
        pytest.skip(f"cannot create a character device here ({exc}); needs root")
    return node


# --------------------------------------------------------------------------------------------------------------
# item 7: every kind of target keeps its kind; regular files alone are replaced


def _target(kind: str, tmp: Path):
    """``(path, after, got)`` for one kind of target made in ``tmp``: the
    path given to ``-o``, what that path must still be afterwards, and
    ``got()``: the bytes that arrived where it leads (None for a device
    that keeps nothing), once checked that what it leads to kept its kind."""
    real = tmp / "real.md"

    def regular(path, mode=None):
        def got():
            assert _kind(path) == "file"
            if mode is not None:
                assert stat.S_IMODE(path.stat().st_mode) == mode  # the replaced file's permissions are kept
            return path.read_bytes()
        return got

    if kind == "new file":
        return tmp / "new.md", "file", regular(tmp / "new.md")
    if kind == "regular file":
        real.write_text("yesterday")
        os.chmod(real, 0o640)
        return real, "file", regular(real, 0o640)
    if kind == "symlink to a regular file":
        real.write_text("yesterday")
        os.chmod(real, 0o640)
        (tmp / "link.md").symlink_to("real.md")
        return tmp / "link.md", "link", regular(real, 0o640)
    if kind == "symlink to a symlink to a regular file in another folder":
        other = tmp / "elsewhere"
        other.mkdir()
        (other / "r.md").write_text("yesterday")
        (other / "hop.md").symlink_to("r.md")
        (tmp / "link.md").symlink_to(other / "hop.md")
        inner = regular(other / "r.md")

        def got():
            assert _kind(other / "hop.md") == "link" and _leftovers(other) == []
            return inner()
        return tmp / "link.md", "link", got
    if kind == "dangling symlink":
        (tmp / "link.md").symlink_to("created.md")
        return tmp / "link.md", "link", regular(tmp / "created.md")
    if kind in ("fifo", "symlink to a fifo"):
        os.mkfifo(tmp / "pipe")
        reader = _Reader(tmp / "pipe")
        path = tmp / "pipe"
        if kind != "fifo":
            path = tmp / "link.md"
            path.symlink_to("pipe")

        def got():
            assert _kind(tmp / "pipe") == "fifo"
            return reader.result()
        return path, _kind(path), got
    if kind in ("character device", "symlink to a character device"):
        node = _null_device(tmp)
        path = node
        if kind != "character device":
            path = tmp / "link.md"
            path.symlink_to("null")

        def got():
            assert _kind(node) == "chardev" and os.stat(node).st_rdev == os.makedev(1, 3)
            return None
        return path, _kind(path), got
    if kind in ("this process's descriptor", "symlink to this process's descriptor"):
        if not PROC_FD:
            pytest.skip("no /proc/self/fd")
        r, w = os.pipe()
        reader = _Reader(fd=r)
        path = Path(f"/proc/self/fd/{w}")
        if kind.startswith("symlink"):
            path = tmp / "out.md"
            path.symlink_to(f"/proc/self/fd/{w}")

        def got():
            os.close(w)  # the report went through a copy of the descriptor: closing ours ends the stream
            return reader.result()
        return path, _kind(path), got
    raise AssertionError(kind)


KINDS = ["new file", "regular file", "symlink to a regular file",
         "symlink to a symlink to a regular file in another folder", "dangling symlink", "fifo",
         "symlink to a fifo", "character device", "symlink to a character device", "this process's descriptor",
         "symlink to this process's descriptor"]


@pytest.mark.skipif(not POSIX, reason="FIFOs, devices and /proc are POSIX")
def test_every_kind_of_target_keeps_its_kind(tmp_path):
    """The property, over every kind of target: the name given stays what it
    was (a link a link, a FIFO a FIFO, a device a device), the text arrives
    where the target leads, and no temporary file is left anywhere."""
    skipped = []
    for kind in KINDS:
        folder = tmp_path / re.sub(r"\W+", "-", kind)
        folder.mkdir()
        try:
            path, after, got = _target(kind, folder)
        except pytest.skip.Exception as exc:
            skipped.append(f"{kind}: {exc}")
            continue
        assert write_all_atomic([(path, TEXT)]) == [path], kind
        assert _kind(path) == after, f"{kind}: {path} is now a {_kind(path)}"
        data = got()
        assert data is None or data == TEXT.encode(), f"{kind}: {data[:60]!r}"
        assert _leftovers(folder) == [], kind
    assert len(skipped) <= 2, skipped  # only the devices need root


@pytest.mark.skipif(not POSIX, reason="FIFOs, devices and /proc are POSIX")
@pytest.mark.parametrize("kind", KINDS)
def test_cli_writes_through_each_kind_of_target(kind, tmp_path, run_cli):
    """``analyze -o TARGET --format md --json r.json``: the regular output is
    written and the target keeps its kind (a report, or /dev/null in the
    gates-only idiom)."""
    traces = tmp_path / "traces"
    traces.mkdir()
    simple_gpu_trace(rank=0).write(traces / "a.json")
    out = tmp_path / "out"
    out.mkdir()
    path, after, got = _target(kind, out)
    code, _, err = run_cli("analyze", traces, "-o", path, "--format", "md", "--json", out / "r.json", "-q",
                           "--no-cache")
    assert code == 0, err
    assert _kind(path) == after
    data = got()
    assert data is None or data.startswith(b"## hta-report"), data[:80]
    json.loads((out / "r.json").read_text())
    assert _leftovers(out) == []


@pytest.mark.skipif(not POSIX or not os.access("/dev/null", os.W_OK), reason="needs a writable /dev/null")
def test_the_gates_only_idiom_needs_no_format(tmp_path, run_cli):
    """``analyze t -o /dev/null --json r.json``: a target that is no regular
    file and has no extension gets markdown; /dev/null stays a device."""
    traces = tmp_path / "traces"
    traces.mkdir()
    simple_gpu_trace(rank=0).write(traces / "a.json")
    before = os.stat("/dev/null")
    code, _, err = run_cli("analyze", traces, "-o", "/dev/null", "--json", tmp_path / "r.json", "-q", "--no-cache")
    assert code == 0, err
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev and after.st_ino == before.st_ino
    json.loads((tmp_path / "r.json").read_text())
    code, _, err = run_cli("analyze", traces, "-o", tmp_path / "noext", "-q", "--no-cache")
    assert code != 0 and "no report extension" in err  # a regular (new) file still needs its extension


@pytest.mark.skipif(not POSIX, reason="sockets and FIFOs are POSIX")
def test_directories_and_sockets_are_refused_before_anything_is_written(tmp_path):
    (tmp_path / "keep.md").write_text("keep")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dirlink").symlink_to("dir")
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tmp_path / "sock"))
    except OSError as exc:  # a path too long for a socket address
        pytest.skip(str(exc))
    try:
        for bad, words in ((tmp_path / "dir", "directory"), (tmp_path / "dirlink", "directory"),
                           (tmp_path / "sock", "socket"), (tmp_path / "keep.md" / "x.md", "not a directory")):
            with pytest.raises(OutputError) as info:
                write_all_atomic([(tmp_path / "keep.md", "new"), (bad, "x")])
            message = str(info.value)
            assert "\n" not in message and message.startswith(str(bad)) and words in message
            assert (tmp_path / "keep.md").read_text() == "keep"
            assert _kind(tmp_path / "dirlink") == "link" and _kind(tmp_path / "sock") == "socket"
            assert _leftovers(tmp_path) == []
    finally:
        sock.close()


@pytest.mark.skipif(not POSIX, reason="FIFOs are POSIX")
def test_a_failure_leaves_regular_files_and_never_opens_the_fifo(tmp_path, monkeypatch):
    """Regular files are staged and renamed first: when that fails, nothing was
    written anywhere, the FIFO included (it is not even opened)."""
    from hta_report import output

    (tmp_path / "keep.md").write_text("keep")
    os.mkfifo(tmp_path / "pipe")

    def fail(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(output.os, "replace", fail)
    with pytest.raises(OutputError, match="No space left on device"):
        write_all_atomic([(tmp_path / "pipe", "to the pipe"), (tmp_path / "keep.md", "new")])
    assert (tmp_path / "keep.md").read_text() == "keep"
    fd = os.open(tmp_path / "pipe", os.O_RDONLY | os.O_NONBLOCK)  # no writer ever opened it: no data
    try:
        assert os.read(fd, 100) == b""
    finally:
        os.close(fd)
    assert _kind(tmp_path / "pipe") == "fifo" and _leftovers(tmp_path) == []


@pytest.mark.skipif(not PROC_FD, reason="no /proc/self/fd")
def test_stdout_as_output_in_a_subprocess_is_not_replaced(tmp_path):
    """``-o /proc/self/fd/1`` with stdout sent to a file: the report lands in
    that file through the descriptor (after nothing, before the summary)."""
    traces = tmp_path / "traces"
    traces.mkdir()
    simple_gpu_trace(rank=0).write(traces / "a.json")
    captured = tmp_path / "stdout.txt"
    with open(captured, "wb") as fh:
        done = subprocess.run([sys.executable, "-m", "hta_report", "analyze", str(traces), "-o", "/proc/self/fd/1",
                               "--format", "md", "--no-cache"], stdout=fh, stderr=subprocess.PIPE, text=True,
                              timeout=300)
    assert done.returncode == 0, done.stderr
    text = captured.read_text()
    assert text.startswith("## hta-report") and "wrote /proc/self/fd/1" in text
    assert text.index("## hta-report") < text.index("wrote /proc/self/fd/1")


# --------------------------------------------------------------------------------------------------------------
# item 16 (third part): any legal name, its temporary name too


@pytest.mark.parametrize("name", ["a" * 250 + ".html", "b" * 252 + ".md", "é" * 126 + ".md", "x" * 255])
def test_the_longest_legal_names_are_written(tmp_path, name):
    try:
        (tmp_path / name).write_text("probe")  # legal here?
        (tmp_path / name).unlink()
    except OSError as exc:
        pytest.skip(f"the file system refuses a {len(os.fsencode(name))}-byte name: {exc}")
    (path,) = write_all_atomic([(tmp_path / name, TEXT)])
    assert path.read_text() == TEXT
    (path,) = write_all_atomic([(tmp_path / name, "again")])  # replacing it too
    assert path.read_text() == "again"
    assert _leftovers(tmp_path) == []


def test_a_250_character_report_name_through_the_cli(tmp_path, run_cli):
    traces = tmp_path / "traces"
    traces.mkdir()
    simple_gpu_trace(rank=0).write(traces / "a.json")
    name = tmp_path / ("r" * 245 + ".html")
    code, _, err = run_cli("analyze", traces, "-o", name, "-q", "--no-cache")
    assert code == 0, err
    assert name.read_text().startswith("<!DOCTYPE html>")


# --------------------------------------------------------------------------------------------------------------
# saved results: absurd figures, a byte order mark, the size cap (items 16 and 9)


@pytest.fixture
def saved(tmp_path, run_cli):
    """A result saved by ``analyze --json`` (path) and its document."""
    traces = tmp_path / "traces"
    traces.mkdir()
    simple_gpu_trace(rank=0).write(traces / "a.json")
    path = tmp_path / "base.json"
    code, _, err = run_cli("analyze", traces, "-o", tmp_path / "base.md", "--json", path, "-q", "--no-cache")
    assert code == 0, err
    return path, json.loads(path.read_text())


def _absurd(doc: dict, value) -> dict:
    doc = json.loads(json.dumps(doc))
    doc["aggregate"]["mean_step_us"] = value
    doc["aggregate"]["max_rank_step_us"] = value
    for r in doc["ranks"]:
        r["steps"]["mean_us"] = value
    for f in doc["findings"]:
        f["gain_ms_per_step"] = abs(value)
    return doc


@pytest.mark.parametrize("value", [1e308, -1e308, 1.7976931348623157e308, 1e200, 3e16])
def test_absurd_figures_print_no_number_of_hundreds_of_digits(saved, tmp_path, run_cli, value):
    base, doc = saved
    new = tmp_path / "new.json"
    new.write_text(json.dumps(_absurd(doc, value)))
    for ext in ("md", "html", "sarif", "json"):
        out = tmp_path / f"c.{ext}"
        code, stdout, err = run_cli("compare", base, new, "-o", out, "--fail-on", "step_time_regression>5%",
                                    "--fail-on", "idle_pct>-1", "--no-cache")
        assert code in (0, 2), err
        for where, text in (("stdout", stdout), ("stderr", err), (out.name, out.read_text())):
            long = LONG_NUMBER.findall(text)
            assert not long, f"{where}: {long[0][:60]}… ({len(long[0])} characters)"
        if ext == "md":
            assert "e+" in out.read_text()  # shown, in scientific notation


def test_an_integer_past_the_float_range_is_a_one_line_error(saved, tmp_path, run_cli):
    base, doc = saved
    new = tmp_path / "new.json"
    new.write_text(json.dumps(_absurd(doc, 10 ** 400)))
    code, _, err = run_cli("compare", base, new, "-o", tmp_path / "c.md", "--no-cache")
    assert code == 1
    assert err.count("\n") == 1 and str(new) in err and "expected a finite number" in err, err
    assert "unexpected error" not in err and not LONG_NUMBER.search(err)


def test_fmt_never_writes_hundreds_of_digits():
    from hta_report.render import fmt

    for value in (1e308, -1e308, 10 ** 30, -(10 ** 400), 2 ** 63, 1e15, 999_999_999_999_999.0):
        for text in (fmt.ms(value), fmt.pct(value), fmt.num(value, 2), fmt.size(value), fmt.gbps(value),
                     fmt.fixed(value, 1, sign=True)):
            assert len(text) < 30, text
    assert fmt.num(1234567.891, 1) == "1,234,567.9" and fmt.ms(2500) == "2.50 ms" and fmt.pct(38.25) == "38.2 %"


def test_a_result_saved_with_a_byte_order_mark_is_a_result(saved, tmp_path, run_cli):
    from hta_report.api import load_result

    base, doc = saved
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + base.read_bytes())
    assert load_result(bom).to_dict() == load_result(base).to_dict()
    code, stdout, err = run_cli("compare", base, bom, "-o", tmp_path / "c.md", "--no-cache")
    assert code == 0, err
    assert "unchanged" in stdout and "not a Kineto trace" not in err
    code, _, err = run_cli("analyze", bom, "-o", tmp_path / "r.md", "--no-cache")  # and analyze knows what it is
    assert code == 1 and "a result saved by hta-report, not a trace" in err, err


def test_a_trace_saved_with_a_byte_order_mark_is_a_trace(tmp_path, run_cli):
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "a.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(simple_gpu_trace(rank=0).document()).encode())
    code, _, err = run_cli("analyze", traces, "-o", tmp_path / "r.md", "-q", "--no-cache")
    assert code == 0, err


def _sparse_result(path: Path, size: int) -> Path:
    """A file that starts like a saved result and is ``size`` bytes long (sparse: no disk used)."""
    with open(path, "wb") as fh:
        fh.write(b'{\n  "schema_version": 3,\n  "inventory": "')
        fh.truncate(size)
    return path


def test_an_oversized_result_is_refused_before_it_is_read(saved, tmp_path, run_cli):
    from hta_report.api import DEFAULT_MAX_RESULT_BYTES, load_result

    base, _ = saved
    big = _sparse_result(tmp_path / "big.json", DEFAULT_MAX_RESULT_BYTES + 1)
    tracemalloc.start()
    try:
        code, _, err = run_cli("compare", base, big, "-o", tmp_path / "c.md", "--no-cache")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 1 and err.count("\n") == 1, err
    assert str(big) in err and "128 MiB" in err and "--max-result-size" in err
    assert peak < DEFAULT_MAX_RESULT_BYTES // 4, f"{peak:,} bytes allocated to refuse it"
    assert not (tmp_path / "c.md").exists()
    # the cap is the caller's: lowered, a small result is refused; raised, a large one is read
    with pytest.raises(InputError, match="cap of 1 kB"):
        load_result(base, max_bytes=1000)
    code, _, err = run_cli("compare", base, base, "-o", tmp_path / "c.md", "--max-result-size", "1kB", "--no-cache")
    assert code == 1 and "cap of 1 kB" in err, err
    code, _, err = run_cli("compare", base, base, "-o", tmp_path / "c.md", "--max-result-size", "10MB", "--no-cache")
    assert code == 0, err


@pytest.mark.skipif(not POSIX, reason="FIFOs are POSIX")
def test_a_result_from_a_stream_is_read_only_up_to_the_cap(saved, tmp_path):
    """No size to look at (a FIFO, a URL's stream): at most cap + 1 bytes are read."""
    from hta_report.api import load_result

    os.mkfifo(tmp_path / "stream.json")
    sent = []

    def write():
        try:
            with open(tmp_path / "stream.json", "wb") as fh:
                for _ in range(64):
                    fh.write(b" " * 65536)
                    sent.append(65536)
        except BrokenPipeError:
            pass

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    with pytest.raises(InputError) as info:
        load_result(tmp_path / "stream.json", max_bytes=100_000)
    writer.join(timeout=30)
    message = str(info.value)
    assert "larger than the --max-result-size cap" in message and str(tmp_path / "stream.json") in message
    assert sum(sent) < 64 * 65536  # the reader stopped early


# --------------------------------------------------------------------------------------------------------------
# item 15: collect on a full disk names the cause and leaves no temporary file


class _Exporting:
    """A profiler whose export writes a small trace."""

    def export_chrome_trace(self, path):
        Path(path).write_text(json.dumps({"traceName": path, "traceEvents": [{"ph": "X", "name": "x" * 4000}]}))


class _KinetoGivingUp:
    """A profiler that behaves as Kineto on a full disk: it writes ``<path>.tmp``
    as far as it can, logs, and returns without raising or renaming."""

    def export_chrome_trace(self, path):
        Path(path + ".tmp").write_bytes(b'{"traceEvents": [' + b" " * 5000)


def _no_room(monkeypatch, traces, free=0):
    class Fs:
        f_bavail = f_bfree = free
        f_frsize = 4096

    monkeypatch.setattr(traces.os, "statvfs", lambda path: Fs())


@pytest.mark.parametrize("errno_, words", [(errno.ENOSPC, "no space left on device"),
                                           (errno.EFBIG, "file too large")])
def test_a_full_disk_while_compressing_is_named_and_cleaned_up(tmp_path, monkeypatch, errno_, words):
    from hta_report.collect import traces

    def copy_then_fail(src, dst, old, new, chunk=1 << 20):
        dst.write(src.read(100))
        raise OSError(errno_, os.strerror(errno_))

    monkeypatch.setattr(traces, "_copy_replacing", copy_then_fail)
    with pytest.raises(OSError) as info:
        traces.write_trace_atomically(_Exporting(), tmp_path / "rank-0.h_1.1.pt.trace.json.gz")
    assert info.value.errno == errno_
    assert traces.write_error_reason(info.value).startswith(words)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("cause", ["ENOSPC", "EFBIG", "unknown"])
def test_kineto_giving_up_silently_is_named_and_its_partial_file_removed(tmp_path, monkeypatch, cause):
    from hta_report.collect import traces

    if cause == "ENOSPC":
        _no_room(monkeypatch, traces)
    else:
        _no_room(monkeypatch, traces, free=1 << 30)
    monkeypatch.setattr(traces, "file_size_limit", lambda: 5000 if cause == "EFBIG" else None)
    with pytest.raises(OSError) as info:
        traces.write_trace_atomically(_KinetoGivingUp(), tmp_path / "rank-0.h_1.1.pt.trace.json.gz")
    reason = traces.write_error_reason(info.value)
    assert info.value.errno == {"ENOSPC": errno.ENOSPC, "EFBIG": errno.EFBIG, "unknown": errno.EIO}[cause]
    assert {"ENOSPC": "no space left on device", "EFBIG": "file too large",
            "unknown": "the profiler stopped writing the trace after 5,017 bytes"}[cause] in reason
    assert "No such file or directory" not in reason
    assert list(tmp_path.iterdir()) == []  # no .…json.tmp.tmp left behind


def test_collect_session_reports_the_cause_and_records_it_in_the_manifest(tmp_path, monkeypatch):
    """The run's error is one line naming the trace and the real cause, and
    the manifest beside no trace says why there is none."""
    from hta_report.collect import session, traces

    monkeypatch.delenv("RANK", raising=False)
    _no_room(monkeypatch, traces)
    out = tmp_path / "out"
    prof = session.profile(out, wait=0, warmup=0, active=1, quiet=True)
    session.prepare_output_dir(out)

    class Stopped:
        def stop(self):
            pass

    prof._prof = Stopped()
    prof._on_trace_ready(_KinetoGivingUp())  # the cycle completes: its trace cannot be written
    with pytest.raises(CollectError) as info:
        prof.stop()
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(out))
    assert "no space left on device" in message and "rank-0." in message and "No such file" not in message
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["trace_files"] == []
    assert "no space left on device" in manifest["write_errors_rank0"][0]
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json"]


@pytest.mark.skipif(not POSIX, reason="ulimit -f is POSIX")
def test_collect_past_the_file_size_limit_says_file_too_large(tmp_path):
    """The real collector (torch) with ``ulimit -f`` below a trace's size."""
    pytest.importorskip("torch")
    import resource

    out = tmp_path / "t"

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (100 * 1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    done = subprocess.run([sys.executable, "-m", "hta_report", "collect", "-o", str(out), "--workload", "cnn",
                           "--steps", "4", "--wait", "1", "--warmup", "1", "--active", "2", "-q"],
                          preexec_fn=limit, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "file too large" in last and "No such file or directory" not in last, done.stderr
    assert _leftovers(out) == [], "a partial temporary file was left"
