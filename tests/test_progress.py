"""Progress with numbers: bytes read, of how many, the rate, on a terminal
(tqdm) and as plain lines in a pipe or a CI log."""
import io
import time

from hta_report import progress
from hta_report.progress import Progress, add_bytes, using


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_plain_lines_say_bytes_share_rate_and_time_when_not_a_terminal(monkeypatch):
    monkeypatch.setattr(progress, "TICK_S", 0.01)
    out = io.StringIO()
    with using(Progress(stream=out, heartbeat=0.05)) as p, p.stage("parsing 1 file"):
        p.expect_bytes(10_000_000)
        add_bytes(2_500_000)
        time.sleep(0.4)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 2, lines  # one every heartbeat while the stage runs
    assert all(line.startswith("hta-report: ") and " s  parsing 1 file...: " in line for line in lines), lines
    assert "2.5 MB of 10.0 MB read (25 %)" in lines[-1] and "MB/s" in lines[-1]


def test_no_line_outside_a_stage_and_none_without_a_heartbeat(monkeypatch):
    monkeypatch.setattr(progress, "TICK_S", 0.01)
    quiet, idle = io.StringIO(), io.StringIO()
    with using(Progress(stream=quiet)) as p, p.stage("parsing"):
        time.sleep(0.1)
    with using(Progress(stream=idle, heartbeat=0.02)):
        time.sleep(0.1)
    assert quiet.getvalue() == "" and idle.getvalue() == ""


def test_the_terminal_line_is_tqdms_with_bytes(monkeypatch):
    monkeypatch.setattr(progress, "TICK_S", 0.01)
    tty = Tty()
    with using(Progress(stream=tty)) as p, p.stage("parsing 2 files"):
        p.expect_bytes(4_000_000)
        add_bytes(1_000_000)
        time.sleep(0.2)
    text = tty.getvalue()
    assert "\r" in text and "parsing 2 files" in text and "25%" in text


def test_the_python_api_prints_nothing(capsys):
    add_bytes(123)  # outside a command: nothing shown
    assert progress.current() is progress._NULL
    assert capsys.readouterr().err == ""


def test_bytes_are_shown_while_their_stage_runs_only(monkeypatch):
    monkeypatch.setattr(progress, "TICK_S", 0.01)
    out = io.StringIO()
    with using(Progress(stream=out, heartbeat=0.05)) as p:
        with p.stage("parse 1 file(s) in all"):
            p.expect_bytes(1_000_000)
            add_bytes(1_000_000)
            time.sleep(0.15)
        with p.stage("analyze rank 0"):
            time.sleep(0.15)
    lines = out.getvalue().splitlines()
    assert any("parse 1 file(s) in all...: 1.0 MB of 1.0 MB read (100 %)" in line for line in lines), lines
    assert [line for line in lines if "analyze rank 0" in line] and \
        all("read" not in line for line in lines if "analyze rank 0" in line), lines
