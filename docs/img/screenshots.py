"""The screenshots of docs/: reports rendered by hta-report, cut and annotated.

    python docs/img/screenshots.py docs/img

renders ``sample_traces/cpu_dataloader_bound`` (the README's picture) and the
TensorBoard plugin's V100 sample of ``../shared/traces/legacy`` (the annotated
pictures of docs/report.md) with this checkout's hta-report, then screenshots
them with headless Chromium (``chromium`` on PATH). Each picture hides the rest
of the page and puts red numbers on it with an injected style sheet; it is cut
at the page's end and saved with at most 64-96 colours (Pillow), so each stays
well under 300 KB.
"""
import os
import pathlib
import subprocess
import sys
import tempfile

from PIL import Image, ImageChops

REPO = pathlib.Path(__file__).resolve().parents[2]
D = tempfile.mkdtemp(prefix="hta-report-shots-") + "/"


def render(traces, out, cwd):
    """``hta-report analyze traces -o out`` with this checkout's package, from ``cwd``
    (the report's title line shows the path as given)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-m", "hta_report", "analyze", str(traces), "-o", out, "-q", "--no-cache"],
                   cwd=cwd, env=env, check=True)

BADGE = ("display:inline-block;background:#c62828;color:#fff;border-radius:50%;width:22px;height:22px;"
         "text-align:center;font:bold 13px/22px sans-serif;margin:0 6px;vertical-align:middle;")

def mark(selector, n, where="before"):
    return f'{selector}::{where}{{content:"{n}";{BADGE}}}\n'

def shot(src, out, css, width=1000, height=3000, max_colors=64):
    html = pathlib.Path(src).read_text()
    html = html.replace("</head>", f"<style>{css}</style></head>", 1)
    tmp = pathlib.Path(D + "_page.html"); tmp.write_text(html)
    png = D + "_raw.png"
    subprocess.run(["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size={width},{height}", f"--screenshot={png}", f"file://{tmp}"],
                   check=True, capture_output=True)
    im = Image.open(png).convert("RGB")
    bg = Image.new("RGB", im.size, im.getpixel((im.width - 1, im.height - 1)))
    box = ImageChops.difference(im, bg).getbbox()
    im = im.crop((0, 0, im.width, min(im.height, box[3] + 16)))
    im = im.quantize(colors=max_colors, method=Image.Quantize.MEDIANCUT)
    im.save(out, optimize=True)
    print(out, im.size, pathlib.Path(out).stat().st_size)

OUT = pathlib.Path(sys.argv[1]).resolve()
OUT.mkdir(parents=True, exist_ok=True)
render("sample_traces/cpu_dataloader_bound", D + "report.html", REPO)
render("tb_resnet50_num_workers_4", D + "gpu.html", REPO.parent / "shared" / "traces" / "legacy")
hide_all_but = lambda keep: ("main > *{display:none!important}\n" + "".join(f"main > {k}{{display:block!important}}\n" for k in keep))

# 1. the README's picture: the top of the sample's page, as it is.
shot(D + "report.html", OUT / "report.png",
     "#findings .finding ~ *, #charts, #ranks, section[id^=rank-], #inventory{display:none!important}\n"
     "#findings .finding + .finding{display:none!important}", width=1000, height=1100)

# 2. headline of a GPU page, annotated.
css = hide_all_but(["p.kicker", "h1", "p.sub", "#headline"])
css += "#headline .note{display:none!important}\n"
css += mark("p.sub", 1)
css += mark("#headline .card:nth-child(1) .v", 2, "after") + mark("#headline .card:nth-child(2) .v", 3, "after")
css += mark("#headline .card:nth-child(3) .v", 4, "after") + mark("#headline .card:nth-child(4) .v", 5, "after")
css += mark("#headline .card:nth-child(7) .k", 6)
css += mark("#headline > p.meta", 7) + mark("#headline > ol", 8) + "#headline > ol::before{float:left;margin-left:-34px}\n"
css += mark("#headline > p:nth-of-type(3)", 9)
shot(D + "gpu.html", OUT / "report-headline.png", css, width=1000)

# 3. one finding, annotated.
css = hide_all_but(["#findings"])
css += "#findings > *:not(#finding-launch-bound){display:none!important}\n"
css += mark("#finding-launch-bound h3", 1) + mark("#finding-launch-bound p.gain:nth-of-type(1)", 2)
css += mark("#finding-launch-bound p.gain:nth-of-type(2)", 3) + mark("#finding-launch-bound ul", 4)
css += "#finding-launch-bound ul::before{float:left;margin-left:-34px}\n"
css += mark("#finding-launch-bound > div:nth-of-type(1)", 5) + mark("#finding-launch-bound > div.meta", 6)
shot(D + "gpu.html", OUT / "report-finding.png", css, width=1000)

# 4. the charts and the per-rank table, annotated.
css = hide_all_but(["#charts", "#ranks"])
css += "#charts figure{position:relative}\n"
for n in (1, 2, 3):
    css += f'#charts figure:nth-of-type({n})::before{{content:"{n}";{BADGE}position:absolute;left:-4px;top:4px}}\n'
css += mark("#ranks table", 4) + "#ranks table::before{display:none}\n" + mark("#ranks > h2", 4, "after")
css += mark("#ranks > p.meta", 5)
shot(D + "gpu.html", OUT / "report-charts.png", css, width=1000, max_colors=96)
