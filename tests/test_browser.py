"""The report in a real browser: headless Chromium, no console errors, no network
requests, no horizontal overflow on a phone-wide (420 px) screen, and charts whose
labels are distinct.

Skips cleanly where Chromium is absent (.ci/run installs Debian's `chromium`).
Screenshots go to $HTA_REPORT_SCREENSHOTS when set (else the test's tmp dir).
"""
import base64
import html as htmllib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, SHARED_TRACES
from hta_report.api import analyze
from hta_report.api import write_reports
from hta_report.compare import compare
from hta_report.render import render_comparison
from kineto import TraceBuilder

BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
pytestmark = pytest.mark.skipif(BROWSER is None, reason="Chromium is not installed")

#: Template variants a chart must tell apart (the issue's "vectorized_elementwise_kernel<4, at::nat..." twice).
FILL = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >"
        "(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)")
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
       "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)")
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
def reports(tmp_path_factory, sample_results):
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
            b.kernel(FILL, t0 + 1560, 150 + 10 * rank)
            b.kernel(ADD, t0 + 1720, 120)
        b.write(traces / f"rank-{rank}.json")
    result = analyze(traces)
    out = {"built": write_reports(result, [(tmp / "built.html", None)])[0]}
    (tmp / "cmp.html").write_text(render_comparison(compare(result, result), "html"))
    out["compare"] = tmp / "cmp.html"
    out["cpu"] = write_reports(sample_results["cpu_dataloader_bound"], [(tmp / "cpu.html", None)])[0]
    # findings with source lines and excerpts (issue 16), the script deep in a repository
    from test_source_lines import TRAIN_PY, _stack_trace

    deep = tmp / "repo" / "a_rather_long_directory_name" / "with_more_nesting_below_it" / "training_scripts"
    deep.mkdir(parents=True)
    (deep / "train.py").write_text(TRAIN_PY.replace("print(model(x).item())", "print(model(x).item())  # " + "x" * 200))
    (tmp / "stack").mkdir()
    lines = analyze(_stack_trace(tmp / "stack"), source_root=tmp / "repo")
    assert any(f.locations and f.locations[0].excerpt for f in lines.findings)
    out["lines"] = write_reports(lines, [(tmp / "lines.html", None)])[0]
    (tmp / "cpu-compare.html").write_text(render_comparison(
        compare(sample_results["cpu_healthy"], sample_results["cpu_dataloader_bound"]), "html"))
    out["cpu-compare"] = tmp / "cpu-compare.html"
    control, test = SHARED_TRACES / "trace_diff" / "control", SHARED_TRACES / "trace_diff" / "test"
    if control.is_dir() and test.is_dir():
        base, new = analyze(control), analyze(test)
        out["control"] = write_reports(base, [(tmp / "control.html", None)])[0]
        (tmp / "control-vs-test.html").write_text(render_comparison(compare(base, new, str(control), str(test)), "html"))
        out["control-vs-test"] = tmp / "control-vs-test.html"
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


#: Runs in the page that wraps the report in an iframe of the tested width (the
#: report's own CSP stays in force inside it); writes what it measured into the
#: wrapping page, which ``--dump-dom`` prints.
PROBE = """<script>
const f = document.getElementById('report');
f.addEventListener('load', () => {
  const doc = f.contentDocument, vw = f.contentWindow.innerWidth;
  const out = document.createElement('pre');
  out.id = 'probe';
  out.textContent = JSON.stringify({
    scrollWidth: doc.documentElement.scrollWidth, width: vw,
    images: [...doc.images].map(i => ({loaded: i.complete && i.naturalWidth > 0, natural: i.naturalWidth,
                                       shown: Math.round(i.getBoundingClientRect().width),
                                       narrow: i.currentSrc !== i.src})),
  });
  document.body.appendChild(out);
});
</script>"""


def _layout(page: Path, width: int, tmp: Path) -> dict:
    """Load ``page`` in an iframe ``width`` px wide; returns what :data:`PROBE` measured."""
    wrapper = tmp / f"probe-{page.stem}-{width}.html"
    wrapper.write_text('<!DOCTYPE html><html><head><meta charset="utf-8"></head><body style="margin:0">'
                       f'<iframe id="report" style="width:{width}px;height:2400px;border:0" '
                       f'srcdoc="{htmllib.escape(page.read_text(), quote=True)}"></iframe>{PROBE}</body></html>')
    proc = subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp / 'profile-probe'}", "--window-size=1400,1000", "--virtual-time-budget=10000",
         "--dump-dom", wrapper.as_uri()],
        capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="probe">(.*?)</pre>', proc.stdout, re.S)
    assert found, f"{page.name}: the probe did not run: {proc.stderr[-2000:]}"
    return json.loads(htmllib.unescape(found.group(1)))


def test_no_horizontal_overflow_on_a_phone_wide_screen(reports):
    """At 420 px nothing makes the page scroll sideways (wide tables scroll in
    their own box), and the charts are their narrow drawings, shown at no
    less than 80 % of their size (text stays readable)."""
    tmp, pages = reports
    for name, page in pages.items():
        m = _layout(page, 420, tmp)
        assert m["width"] == 420, m
        assert m["scrollWidth"] <= 420, f"{name}: the page is {m['scrollWidth']} px wide at 420 px"
        for img in m["images"]:
            assert img["loaded"] and img["narrow"], f"{name}: {img}"
            assert img["shown"] >= 0.8 * img["natural"], f"{name}: a chart scaled down to {img}"
    wide = _layout(pages["built"], 1280, tmp)
    assert wide["scrollWidth"] <= 1280 and not any(i["narrow"] for i in wide["images"])


def test_the_overflow_probe_sees_overflow(tmp_path):
    """The check above can fail: a page with a 300-character unbreakable line overflows."""
    page = tmp_path / "wide.html"
    page.write_text("<html><body><p>" + "x" * 300 + "</p></body></html>")
    assert _layout(page, 420, tmp_path)["scrollWidth"] > 1000


def _chart_tick_labels(svg: str, axis: str = "y") -> list:
    """The tick labels of a matplotlib SVG, one string per tick (a wrapped label's lines joined)."""
    labels = []
    for chunk in svg.split(f'<g id="{axis}tick_')[1:]:
        group = re.search(r'<g id="text_\d+">(.*?)</g>', chunk, re.S)
        lines = re.findall(r"<text[^>]*>(.*?)</text>", group.group(1), re.S) if group else []
        labels.append("\n".join(htmllib.unescape(line) for line in lines))
    return labels


def test_chart_labels_are_distinct(reports):
    """Every chart on every page, wide and narrow drawings: no two bars share a label."""
    _, pages = reports
    checked = 0
    for name, page in pages.items():
        for uri in re.findall(r'(?:src|srcset)="data:image/svg\+xml;base64,([^"]+)"', page.read_text()):
            labels = [l for l in _chart_tick_labels(base64.b64decode(uri).decode()) if l]
            assert len(labels) == len(set(labels)), f"{name}: duplicate chart labels {labels}"
            checked += bool(labels)
    assert checked >= 4
    svgs = [base64.b64decode(u).decode() for u in
            re.findall(r'(?:src|srcset)="data:image/svg\+xml;base64,([^"]+)"', pages["built"].read_text())]
    kernel_labels = {l.replace("\n", "") for svg in svgs for l in _chart_tick_labels(svg)}
    assert {"vectorized_elementwise_kernel<FillFunctor>",
            "vectorized_elementwise_kernel<CUDAFunctor_add>"} <= kernel_labels


def _visible_text(page: Path) -> str:
    body = re.sub(r"<(style|script)[^>]*>.*?</\1>", " ", page.read_text(encoding="utf-8"), flags=re.S)
    return htmllib.unescape(re.sub(r"<[^>]+>", " ", body))


def test_compare_pages_name_both_sides_devices(reports):
    """The compare pages the browser loads say what each side ran on, and warn
    when the sides differ (an A100 rank 3 of 8 against a V100 rank 1 of 2)."""
    _, out = reports
    cpu = " ".join(_visible_text(out["cpu-compare"]).split())
    assert cpu.count("AMD EPYC (2 logical cores)") >= 2 and "CPU ops that changed most" in cpu
    if "control-vs-test" not in out:
        pytest.skip("the shared trace_diff traces are absent")
    gpu = " ".join(_visible_text(out["control-vs-test"]).split())
    assert "NVIDIA A100-PG509-200" in gpu and "Tesla V100-SXM2-16GB" in gpu
    assert "rank 3 of 8" in gpu and "rank 1 of 2" in gpu and "different devices" in gpu
