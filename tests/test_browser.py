"""The report in a real browser: headless Chromium, no console errors, no network requests.

Skips cleanly where Chromium is absent (.ci/run installs Debian's `chromium`).
Screenshots go to $HTA_REPORT_SCREENSHOTS when set (else the test's tmp dir).
"""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import SHARED_TRACES
from hta_report.api import analyze
from hta_report.api import write_reports
from hta_report.compare import compare
from hta_report.render import render_comparison
from kineto import TraceBuilder

BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
pytestmark = pytest.mark.skipif(BROWSER is None, reason="Chromium is not installed")

LONG = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<at::native::"
        "BinaryFunctor<float, float, float, at::native::MulFunctor<float> > >(at::TensorIteratorBase&, "
        "at::native::BinaryFunctor<float, float, float, at::native::MulFunctor<float> > const&)::"
        "{lambda(int)#1}>(int, at::native::gpu_kernel_impl<...>::{lambda(int)#1})")


def _browse(html: Path, shot: Path, width: int, tmp: Path):
    """Load ``html`` in headless Chromium; returns (console lines, page-initiated URLs)."""
    netlog = tmp / f"net-{width}.json"
    proc = subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp / f'profile-{width}'}", "--enable-logging=stderr", "--v=0",
         f"--log-net-log={netlog}", "--hide-scrollbars", f"--window-size={width},2400",
         f"--screenshot={shot}", html.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", proc.stderr[-2000:]
    console = [l for l in proc.stderr.splitlines() if ":CONSOLE" in l]
    events = json.loads(netlog.read_text())["events"]
    urls = set()
    for e in events:
        p = e.get("params") or {}
        # requests the page made carry the page's (file://) network isolation key;
        # Chromium's own background requests do not
        if "url" in p and "file://" in str(p.get("network_isolation_key", "")):
            urls.add(p["url"])
    return console, {u for u in urls if not u.startswith(("file:", "data:"))}


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser")
    traces = tmp / "traces"
    traces.mkdir()
    for rank in (0, 1):
        b = TraceBuilder(rank=rank, world_size=2)
        for i in range(5):
            t0 = i * 2000
            b.step(i + 1, t0, 2000 + 100 * rank)
            b.cpu_op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0 + 5, 300, cat="user_annotation")
            b.memcpy("HtoD", "Pageable", t0 + 350, 60, 4_000_000)
            b.kernel(LONG, t0 + 450, 500)
            b.kernel("<script>alert(1)</script>", t0 + 1000, 200)
            b.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", t0 + 1250, 300, stream=20)
        b.write(traces / f"rank-{rank}.json")
    result = analyze(traces)
    out = {"built": write_reports(result, [(tmp / "built.html", None)])[0]}
    (tmp / "cmp.html").write_text(render_comparison(compare(result, result), "html"))
    out["compare"] = tmp / "cmp.html"
    control = SHARED_TRACES / "trace_diff" / "control"
    if control.is_dir():
        out["control"] = write_reports(analyze(control), [(tmp / "control.html", None)])[0]
    return tmp, out


@pytest.mark.parametrize("width", [1280, 420])
def test_report_in_browser(reports, width):
    tmp, pages = reports
    shots = Path(os.environ.get("HTA_REPORT_SCREENSHOTS", tmp))
    shots.mkdir(parents=True, exist_ok=True)
    for name, page in pages.items():
        console, requests = _browse(page, shots / f"{name}-{width}.png", width, tmp)
        assert console == [], f"{name}: console messages: {console}"
        assert requests == set(), f"{name}: network requests: {requests}"


def test_checker_catches_console_errors_and_requests(tmp_path):
    """The checks above can fail: a page with a script error and a remote image trips both
    (the image points at a closed loopback port: nothing leaves the machine)."""
    page = tmp_path / "bad.html"
    page.write_text('<html><body><img src="http://127.0.0.1:9/x.png"><script>undefined_fn()</script></body></html>')
    console, requests = _browse(page, tmp_path / "bad.png", 800, tmp_path)
    assert any("undefined_fn" in line for line in console)
    assert requests == {"http://127.0.0.1:9/x.png"}
