"""The report's first screen in a real browser: headline first -- at 1280 x 800 the results table and the box AP
table with its calls are above the fold, the prose (notes) follows them -- and the Markdown says the same order."""

import html
import json
import shutil
import subprocess

import pytest

from detection.report import write_report
from fabricated_runs import COCO_R101, COCO_VGG, make_run

CHROMIUM = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"]
NOTES = [f"A paragraph of prose number {i}: what was run and what the numbers support, long enough to wrap over a "
         "line or two in a 1280-pixel window, as the main job's notes are." * 2 for i in range(7)]


def _report(tmp_path):
    runs = [make_run(tmp_path, f"{name}_{seed}", model, coco={k: v + seed for k, v in metrics.items()}, seed=seed)
            for name, model, metrics in (("vgg", "vgg16", COCO_VGG), ("r101", "resnet101", COCO_R101))
            for seed in (0, 1, 2)]
    return write_report(runs, tmp_path / "report", groups=["vgg"] * 3 + ["r101"] * 3, notes=NOTES,
                        title="Headline first")


def test_the_markdown_puts_the_tables_before_the_prose(tmp_path):
    md = _report(tmp_path)["markdown"].read_text()
    assert md.index("## Results") < md.index("## COCO-style box AP") < md.index("## Notes") < md.index(NOTES[0][:40])
    assert md.index("# Headline first") < md.index("## Results")


@pytest.mark.chromium
@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian chromium is not installed (optional)")
def test_the_results_and_their_calls_are_above_the_fold_at_1280_px(tmp_path):
    paths = _report(tmp_path)
    shot = tmp_path / "first_screen.png"
    proc = subprocess.run([*CHROMIUM, f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
                           "--window-size=1280,800", paths["html"].resolve().as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and shot.stat().st_size > 10000, proc.stderr[-2000:]
    page = paths["html"].read_text().replace("</body>", (
        "<script>var t=document.querySelectorAll('table');var h=[].slice.call(document.querySelectorAll('h2'));"
        "function hTop(s){var e=h.filter(function(x){return x.textContent==s})[0];"
        "return e?Math.round(e.getBoundingClientRect().top):null}"
        "document.title=JSON.stringify({view:[window.innerWidth,window.innerHeight],"
        "results:Math.round(t[0].getBoundingClientRect().bottom),calls:Math.round(t[2].getBoundingClientRect().top),"
        "notes:hTop('Notes'),right:Math.ceil(t[0].getBoundingClientRect().right)})</script></body>"))
    probe = paths["html"].with_name("probe.html")
    probe.write_text(page)
    proc = subprocess.run([*CHROMIUM, f"--user-data-dir={tmp_path / 'profile2'}", "--window-size=1280,800",
                           "--dump-dom", probe.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(html.unescape(proc.stdout.split("<title>")[1].split("</title>")[0]))
    width, fold = found["view"]  # the page's viewport (the window less what headless Chromium keeps of it)
    assert width == 1280 and fold > 600, found
    assert found["results"] <= fold and found["right"] <= width, found  # the whole results table on the first screen
    assert found["calls"] < fold, found  # the comparisons table (the calls) starts on it
    assert found["notes"] > found["calls"], found  # prose follows the tables


@pytest.mark.chromium
@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian chromium is not installed (optional)")
def test_the_table_of_what_differs_fits_1280_px_with_six_long_group_names(tmp_path):
    """The family preset's report: six groups whose names do not break (vgg16_bn_frozenbn_pretrained) as the columns
    of what differs made that table 1654 px wide; its headers now wrap anywhere."""
    names = ["vgg16_bn", "vgg11_bn", "plain18", "plain34", "resnet18", "resnet34"]
    runs = [make_run(tmp_path, f"{m}_frozenbn_pretrained", m, coco=COCO_VGG, width=0.25,
                     weights=str(tmp_path / "a_long_job_directory" / "pretrain" / f"{m}_p0" / "model_final.pth"))
            for m in names]
    paths = write_report(runs, tmp_path / "report", groups=[f"{m}_frozenbn_pretrained" for m in names])
    probe = paths["html"].with_name("probe.html")
    probe.write_text(paths["html"].read_text().replace("</body>", (
        "<script>var r=[];document.querySelectorAll('table').forEach(function(t){"
        "r.push(Math.ceil(t.getBoundingClientRect().right))});document.title=JSON.stringify(r)</script></body>")))
    proc = subprocess.run([*CHROMIUM, f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,800",
                           "--dump-dom", probe.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rights = json.loads(html.unescape(proc.stdout.split("<title>")[1].split("</title>")[0]))
    assert len(rights) >= 5 and max(rights) <= 1280, rights
