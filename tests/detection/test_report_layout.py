"""The report's first screen in a real browser: headline first -- at 1280 x 900 the sentences of what was found and
the whole results table are above the fold; the figures follow, then the prose (notes) and the comparisons -- and
the Markdown says the same order."""

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


def test_the_markdown_says_the_result_then_the_table_then_the_figures_then_the_notes(tmp_path):
    md = _report(tmp_path)["markdown"].read_text()
    order = ["# Headline first", "## Result\n\n- r101 is ahead of vgg by 6.0 AP", "| name | backbone |", "## Figures",
             "## Notes", NOTES[0][:40], "## Comparisons", "## Glossary"]
    assert [md.index(part) for part in order] == sorted(md.index(part) for part in order)
    assert md.count("| name | backbone |") == 1  # one results table: the AP numbers appear once


def _layout(tmp_path, paths, size: str) -> dict:
    """Where the browser lays the report out: the viewport, the result sentences, the first table, each h2."""
    page = paths["html"].read_text().replace("</body>", (
        "<script>function box(e){var r=e.getBoundingClientRect();return [Math.round(r.top),Math.round(r.bottom),"
        "Math.ceil(r.right)]}var h={};document.querySelectorAll('h2').forEach(function(e){h[e.textContent]="
        "box(e)[0]});document.title=JSON.stringify({view:[window.innerWidth,window.innerHeight],"
        "said:box(document.querySelector('ul.headline')),table:box(document.querySelector('table')),h2:h})"
        "</script></body>"))
    probe = paths["html"].with_name("probe.html")
    probe.write_text(page)
    proc = subprocess.run([*CHROMIUM, f"--user-data-dir={tmp_path / 'profile2'}", f"--window-size={size}",
                           "--dump-dom", probe.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(html.unescape(proc.stdout.split("<title>")[1].split("</title>")[0]))


@pytest.mark.chromium
@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian chromium is not installed (optional)")
def test_the_result_sentence_and_the_whole_table_are_on_the_first_screen_at_1280x900(tmp_path):
    paths = _report(tmp_path)
    shot = tmp_path / "first_screen.png"
    proc = subprocess.run([*CHROMIUM, f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
                           "--window-size=1280,900", paths["html"].resolve().as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and shot.stat().st_size > 10000, proc.stderr[-2000:]
    found = _layout(tmp_path, paths, "1280,900")
    width, fold = found["view"]  # the page's viewport (the window less what headless Chromium keeps of it)
    assert width == 1280 and fold > 700, found
    assert found["said"][1] < found["table"][0], found  # the sentences, then the table
    assert found["table"][1] <= fold and found["table"][2] <= width, found  # the whole table on the first screen
    h2 = found["h2"]
    assert h2["Result"] < h2["Figures"] < h2["Notes"] < h2["Comparisons"] < h2["Glossary"], found


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
    assert len(rights) >= 4 and max(rights) <= 1280, rights  # results, comparisons, what differs, runs
