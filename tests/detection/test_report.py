"""tools/report.py on fabricated runs with known numbers."""

import csv
import html
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest

from classification.engine.run_files import detection_run_files
from conftest import run_tool
from detection.report import ReportSection, load_run, write_report
from detection.report.comparison import t_quantile
from detection.report.power import simulated_mde
from fabricated_runs import COCO_R101, COCO_VGG, classification_run, make_run, paper_config


def test_report_has_exactly_the_numbers_and_deltas(tmp_path):
    vgg = make_run(tmp_path, "vgg", "vgg16", coco=COCO_VGG, per_cat={"person": 40.0, "dog": 10.0},
                   extra_cfg=paper_config("coco", "VGG-16"))  # the paper's own designs: a paper column
    r101 = make_run(tmp_path, "r101", "resnet101", coco=COCO_R101, per_cat={"person": 50.0},  # no "dog"
                    extra_cfg=paper_config("coco", "ResNet-101"))
    paths = write_report([r101, vgg], tmp_path / "report")
    report = json.loads(paths["json"].read_text())
    assert report["tables"]["coco"]["baseline"] == "vgg"  # the VGG-16 run, wherever it is listed
    _, rows = _results(paths)
    assert rows["r101"]["AP"] == "27.2" and rows["r101"]["AP50"] == "48.4" and rows["vgg"]["APl"] == "30.0"
    assert _comparisons(paths)[("r101", "vgg")]["Δ (A − B)"] == "+6.00"  # the paper's +6.0
    assert report["headline"] == ["r101 vs vgg: ΔAP +6.0 (1 vs 1 pretraining runs), no call: r101 has one pretraining "
                                  "run: its spread is unknown (run at least 2 pretraining runs per group)."]
    assert rows["r101"]["paper AP50 / AP"] == "48.4 / 27.2"
    md = paths["markdown"].read_text()
    assert "| r101 | resnet101 |" in md and "paper Table 8" in md
    assert load_run(r101).per_category == {"person": 50.0}  # "dog" is absent, shown as a gap in the plot
    csv_text = paths["csv"].read_text()
    assert "27.2" in csv_text and csv_text.startswith("table,")


def test_html_is_well_formed_and_its_images_exist(tmp_path):
    runs = [make_run(tmp_path, "vgg", "vgg16", coco=COCO_VGG, per_cat={"a": 1.0}),
            make_run(tmp_path, "r101", "resnet101", coco=COCO_R101, per_cat={"a": 2.0})]
    paths = write_report(runs, tmp_path / "report", notes=["Chance level: AP50 0.26 & <co>"])
    root = ET.fromstring(paths["html"].read_text().split("\n", 1)[1])  # strict XML parser: well-formed
    assert "Chance level: AP50 0.26 & <co>" in "".join(root.itertext())
    ns = {"h": "http://www.w3.org/1999/xhtml"}
    images = [img.get("src") for img in root.iter("{http://www.w3.org/1999/xhtml}img")]
    assert set(images) == {"pr_curves.png", "per_category_ap.png", "training_curves.png", "ap_vs_flops.png"}
    for src in images:
        assert (tmp_path / "report" / src).stat().st_size > 2000
    # the results table (model-zoo columns), the comparisons, what differs, the run status
    assert len(root.findall(".//h:table", ns)) == 4


def test_partial_and_mixed_inputs(tmp_path):
    runs = [make_run(tmp_path, "coco_vgg", "vgg16", coco=COCO_VGG),
            make_run(tmp_path, "voc_r101", "resnet101", voc={"AP50": 76.4, "mAP50_voc07": 76.4, "mAP50_area": 78.0,
                                                              "AP": 50.0, "AP75": 55.0}, per_cat={"cat": 80.0}),
            make_run(tmp_path, "still_training", "plain34"),
            make_run(tmp_path, "crashed", "resnet50")]
    (runs[3] / "log.txt").write_text("...\nTraceback (most recent call last):\n  boom\n")
    (runs[2] / "metrics.json").write_text('{"iteration": 0, "total_loss": 1.0}\n{"iteration": 20, "tot')
    paths = write_report(runs, tmp_path / "report")
    tables = json.loads(paths["json"].read_text())["results"]
    assert set(tables) == {"coco", "voc"}  # separate tables
    voc_rows = {r[0]: r for r in tables["voc"]["rows"]}
    assert "76.4" in voc_rows["voc_r101"] and "coco_vgg" not in voc_rows
    statuses = {r["name"]: r["status"] for r in json.loads(paths["json"].read_text())["runs"]}
    assert statuses == {"coco_vgg": "finished", "voc_r101": "finished",
                        "still_training": "no metrics (training or crashed)", "crashed": "crashed (see log.txt)"}
    assert "still_training" not in {r[0] for r in tables["coco"]["rows"]}  # no result: in the runs table only
    assert "| still_training | no metrics (training or crashed) |" in paths["markdown"].read_text()


@pytest.mark.slow
def test_report_cli(tmp_path):
    make_run(tmp_path, "vgg", "vgg16", coco=COCO_VGG)
    make_run(tmp_path, "r101", "resnet101", coco=COCO_R101)
    proc = run_tool("tools/report.py", tmp_path / "vgg", tmp_path / "r101", "--output-dir", tmp_path / "out",
                    "--names", "VGG-16", "ResNet-101")
    assert proc.returncode == 0, proc.stderr
    assert "| ResNet-101 | resnet101 |" in proc.stdout and "report.html" in proc.stdout


@pytest.mark.chromium
@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian chromium is not installed (optional)")
def test_report_renders_in_headless_chromium(tmp_path):
    runs = [make_run(tmp_path, "vgg", "vgg16", coco=COCO_VGG), make_run(tmp_path, "r101", "resnet101",
                                                                        coco=COCO_R101)]
    paths = write_report(runs, tmp_path / "report")
    shot = tmp_path / "page.png"
    proc = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                           "--no-first-run", "--disable-background-networking", "--disable-component-update",
                           "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
                           "--window-size=1200,1600", paths["html"].resolve().as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert shot.stat().st_size > 10000


@pytest.mark.chromium
@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian chromium is not installed (optional)")
def test_every_table_of_the_main_jobs_report_fits_a_1280_px_window(tmp_path):
    """The main job's report at 1280 px, as the earlier `make demo-full` wrote it: 2 pretraining runs x 2 detection
    seeds (wide t intervals, "41.2 [-15.1, 97.5]"), from-scratch controls, long weights paths in "what differs", a
    section with its own table. Every table's right edge, measured by the browser's layout, is within the viewport; a
    results cell is at most two lines (the mean, the interval under it); the title stays the report's."""
    runs, labels = [], []
    weights = tmp_path / "a_long_output_directory_name" / "main_job" / "pretrain"
    for model, base in (("vgg16_bn", COCO_VGG), ("resnet101", COCO_R101)):
        for init in ("pretrained", "scratch"):
            for seed in ((0, 1, 2, 3) if init == "pretrained" else (0, 1)):
                metrics = {k: v * (1 if init == "pretrained" else 0.1) + 0.37 * seed + 6.0 * (seed // 2)
                           for k, v in base.items()}
                runs.append(make_run(tmp_path, f"{model}_{init}_{seed}", model, coco=metrics, seed=seed, width=0.25,
                                     dataset="embedded_val", train=["embedded_train"],
                                     weights=str(weights / f"{model}_p{seed // 2}" / "model_final.pth")
                                     if init == "pretrained" else ""))
                labels.append(f"{model}_{init}")
    section = ReportSection("Degradation", lines=("cifar_plain56 vs cifar_plain20: Δtraining error +27.51",),
                            table=(["net", "blocks", "depth", "seeds", "training error %", "val error %"],
                                   [["cifar_plain56", "plain", "56", "2", "89.9 ± 0.0", "90.4 ± 0.1"]]))
    paths = write_report(runs, tmp_path / "report", groups=labels, title="The main job", figures=[section],
                         chance={"embedded_val": {"AP": 0.04, "AP50": 0.26}})
    page = paths["html"].read_text().replace("</body>", (
        "<script>var r=[];document.querySelectorAll('table').forEach(function(t){"
        "r.push(Math.ceil(t.getBoundingClientRect().right))});"
        "var h=[];document.querySelector('table').querySelectorAll('td').forEach(function(c){"
        "h.push(Math.round(c.getBoundingClientRect().height))});"
        "document.title=JSON.stringify({right:r,view:window.innerWidth,cells:h,"
        "h1:document.querySelector('h1').textContent})</script></body>"))
    probe = paths["html"].with_name("probe.html")
    probe.write_text(page)
    proc = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                           "--no-first-run", "--disable-background-networking", "--disable-component-update",
                           "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,900",
                           "--dump-dom", probe.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(html.unescape(proc.stdout.split("<title>")[1].split("</title>")[0]))
    assert found["view"] == 1280 and found["h1"] == "The main job"
    assert len(found["right"]) == 5  # results, the section's, comparisons, what differs, runs
    assert max(found["right"]) <= found["view"], f"table right edges {found['right']} px in a 1280 px window"
    assert max(found["cells"]) < 40, found["cells"]  # at most two lines of text per cell


def test_a_section_keeps_the_reports_title_and_shows_its_table_and_figures(tmp_path):
    runs = [make_run(tmp_path, "vgg", "vgg16", coco=COCO_VGG), make_run(tmp_path, "r101", "resnet101",
                                                                        coco=COCO_R101)]
    (tmp_path / "report").mkdir()
    shutil.copy(tmp_path / "vgg" / "config.yaml", tmp_path / "report" / "curves.png")  # any file: only its name
    section = ReportSection("Degradation (paper Figs. 1, 6, 7)", lines=("plain-56 vs plain-20",),
                            table=(["net", "val error %"], [["cifar_plain56", "90.4 ± 0.1"]]),
                            figures=(("curves.png", "training and val error"),))
    paths = write_report(runs, tmp_path / "report", title="Main job & <friends>", figures=[section])
    md = paths["markdown"].read_text()
    assert md.startswith("# Main job &amp; &lt;friends&gt;\n")  # the title, not the section's
    assert ("## Degradation (paper Figs. 1, 6, 7)\n\n| net | val error % |\n|---|---|\n"
            "| cifar_plain56 | 90.4 ± 0.1 |") in md
    assert "![training and val error](curves.png)" in md
    root = ET.fromstring(paths["html"].read_text().split("\n", 1)[1])
    ns = {"h": "http://www.w3.org/1999/xhtml"}
    assert [h.text for h in root.iter("{http://www.w3.org/1999/xhtml}h1")] == ["Main job & <friends>"]
    assert root.find(".//h:title", ns).text == "Main job & <friends>"
    assert "cifar_plain56" in [td.text for td in root.iter("{http://www.w3.org/1999/xhtml}td")]


def test_results_cells_are_text_in_json_and_csv_and_two_lines_in_html(tmp_path):
    runs = [make_run(tmp_path, f"vgg_{s}", "vgg16", coco={**COCO_VGG, "AP": 20.0 + s}, seed=s) for s in (0, 1)]
    paths = write_report(runs, tmp_path / "report")
    rows = json.loads(paths["json"].read_text())["results"]["coco"]["rows"]
    assert "20.5 [14.1, 26.9]" in rows[0]  # mean [95% t interval over the 2 runs]: 20.5 ± 12.71 * 0.5
    assert "20.5 [14.1, 26.9]" in paths["csv"].read_text() and "| 20.5 [14.1, 26.9] |" in paths["markdown"].read_text()
    assert '20.5<br/><span class="spread">[14.1, 26.9]</span>' in paths["html"].read_text()


def _results(paths, kind="coco"):
    """The results table: (its columns, name -> {column: cell})."""
    table = json.loads(paths["json"].read_text())["results"][kind]
    return table["columns"], {r[0]: dict(zip(table["columns"], r)) for r in table["rows"]}


def _comparisons(paths, kind="coco"):
    """The comparisons table: (A, B) -> {column: cell}."""
    table = json.loads(paths["json"].read_text())["tables"][kind]
    return {(r[0], r[1]): dict(zip(table["columns"], r)) for r in table["rows"]}


def test_paper_columns_only_where_splits_and_backbone_match_the_paper(tmp_path):
    # (tests/detection/test_report_paper.py checks each condition of the paper's design; here: splits and width)
    paper = [make_run(tmp_path, "vgg", "vgg16", coco=COCO_VGG, extra_cfg=paper_config("coco", "VGG-16")),
             make_run(tmp_path, "r101", "resnet101", coco=COCO_R101, extra_cfg=paper_config("coco", "ResNet-101"))]
    head, _ = _results(write_report(paper, tmp_path / "paper"))
    assert "paper AP50 / AP" in head
    for name, kw in (("coco2017", {"dataset": "coco_2017_val", "train": ["coco_2017_train"]}),
                     ("narrow", {"width": 0.25}),  # the paper's splits, but not the paper's backbone
                     ("embedded", {"dataset": "embedded_val", "train": ["embedded_train"]})):
        opts = ["MODEL.BACKBONES.WIDTH", str(kw.get("width", 1.0)),
                "DATASETS.TRAIN", str(tuple(kw.get("train", ["coco_2014_train"]))),
                "DATASETS.TEST", str((kw.get("dataset", "coco_2014_val"),))]
        runs = [make_run(tmp_path / name, "vgg", "vgg16", coco=COCO_VGG, **kw,
                         extra_cfg=paper_config("coco", "VGG-16", opts=opts)),
                make_run(tmp_path / name, "r101", "resnet101", coco=COCO_R101, **kw,
                         extra_cfg=paper_config("coco", "ResNet-101", opts=opts))]
        paths = write_report(runs, tmp_path / name / "report")
        head, _ = _results(paths)
        assert "paper AP50 / AP" not in head, name
        assert "No paper column" in paths["markdown"].read_text()
        assert _comparisons(paths)[("r101", "vgg")]["Δ (A − B)"] == "+6.00"  # the comparison stays


def test_seeds_are_grouped_with_mean_sd_and_compared_with_an_interval_over_runs(tmp_path):
    def coco(ap):
        return {**COCO_VGG, "AP": ap, "AP50": 2 * ap}

    runs = [make_run(tmp_path, f"vgg_s{s}", "vgg16", coco=coco(ap), seed=s) for s, ap in ((0, 20.0), (1, 22.0))]
    runs += [make_run(tmp_path, f"r101_s{s}", "resnet101", coco=coco(ap), seed=s) for s, ap in ((0, 21.0), (1, 23.0))]
    runs += [make_run(tmp_path, f"r50_s{s}", "resnet50", coco=coco(ap), seed=s) for s, ap in ((0, 30.0), (1, 31.0))]
    runs.append(make_run(tmp_path, "r18", "resnet18", coco=coco(25.0)))
    paths = write_report(runs, tmp_path / "report")
    _, rows = _results(paths)
    assert set(rows) == {"vgg", "r101", "r50", "r18"}
    # 2 runs: mean [95% t interval], 21.0 +- 12.71 * 1.414 / sqrt(2)
    assert rows["vgg"]["n"] == "2" and rows["vgg"]["AP"] == "21.0 [8.3, 33.7]" and rows["r18"]["AP"] == "25.0"
    cmp = _comparisons(paths)
    # 2 runs each (one set of weights: the run is the unit): Welch's t, df 2, half-width 4.303 * sqrt(2/2 + 2/2)
    assert cmp[("r101", "vgg")] == {
        "A": "r101", "B": "vgg", "metric": "AP", "Δ (A − B)": "+1.00", "95% CI": "[-5.08, +7.08]",
        "family-adjusted CI (level)": "[-9.82, +11.82] (98.33%)", "P(A > B)": "0.75", "units (df)": "2 vs 2 runs (2.0)",
        "call": f"no call (MDE {simulated_mde(((1.0, 2.0, 2), (-1.0, 2.0, 2)), 0.05 / 3).mde:.2f})"}
    # the MDE: Welch's test at its Holm step simulated at these spreads (report.power), 80% power
    # its 95% interval excludes 0, the table's family of 3 (Holm) does not: no call
    r50 = cmp[("r50", "vgg")]
    assert r50["95% CI"] == "[+2.58, +16.42]" and r50["family-adjusted CI (level)"].startswith("[-5.26, +24.26]")
    mde = simulated_mde(((1.0, 0.5, 2), (-1.0, 2.0, 2)), 0.05 / 3).mde
    assert r50["call"] == f"no call (MDE {mde:.2f})"
    assert cmp[("r18", "vgg")]["call"] == "no call: no interval (one run)"
    said = json.loads(paths["json"].read_text())["headline"]
    assert "r50 vs vgg: no difference this job could see: ΔAP +9.5 [-5.3, +24.3] (98.33% CI, Holm step-down over 3; " \
           f"2 vs 2 runs); the smallest difference it could see is {mde:.1f} AP." in said



def test_conditions_pretraining_scratch_control_and_chance_come_from_the_runs(tmp_path):
    ckpt = classification_run(tmp_path)
    kw = {"dataset": "embedded_val", "train": ["embedded_train"], "width": 0.25}
    runs = [make_run(tmp_path, "r101_pretrained", "resnet101", coco={**COCO_R101, "AP50": 30.0}, weights=str(ckpt),
                     **kw),
            make_run(tmp_path, "r101_scratch", "resnet101", coco={**COCO_R101, "AP50": 5.0}, **kw)]
    paths = write_report(runs, tmp_path / "report", chance={"embedded_val": {"AP": 0.05, "AP50": 0.26}})
    _, rows = _results(paths)
    assert rows["r101_pretrained"]["init"] == "pretrained" and rows["r101_scratch"]["init"] == "scratch"
    assert rows["r101_pretrained"]["top-1 err %"] == "41.0" and rows["r101_scratch"]["top-1 err %"] == "—"
    assert _comparisons(paths)[("r101_scratch", "r101_pretrained")]["Δ (A − B)"] == "+0.00"  # the same AP in both
    assert rows["chance (random boxes)"]["AP50"] == "0.3"
    md = paths["markdown"].read_text()
    assert "pretrained with tools/train_cls.py: resnet101 x0.25 on embedded, 32 px, 900 iterations of 64 " \
           "(57,600 images, lr 0.1), val top-1 error 41.0%" in md
    assert "r101_scratch: resnet101 x0.25, from scratch" in md
    differs = md.split("## What differs between the configurations\n\n")[1].split("\n\n")[0].splitlines()
    assert differs[0] == "| config key | r101_pretrained | r101_scratch |"  # a row per key, a column per group
    assert any(row.startswith("| MODEL.WEIGHTS | ") for row in differs)
    assert md.index("## Result") < md.index("## Comparisons") < md.index("## What differs") < md.index(
        "## Conditions")  # headline first: the result, the comparisons, then what differs and the conditions
    assert "## Pretraining" in md and (tmp_path / "report" / "pretraining.png").stat().st_size > 2000


def test_qualitative_panel_draws_ground_truth_and_the_predictions_file(tmp_path, monkeypatch):
    from PIL import Image

    from detection.report.panel import CELL_SIZE, DET_COLOUR, GT_COLOUR, HEADER

    data = tmp_path / "data"
    (data / "img").mkdir(parents=True)
    Image.new("RGB", (128, 128), (128, 128, 128)).save(data / "img" / "a.png")
    gt = {"images": [{"id": 7, "file_name": "img/a.png", "width": 128, "height": 128}],
          "annotations": [{"id": 1, "image_id": 7, "category_id": 1, "bbox": [10, 10, 50, 40], "area": 2000,
                           "iscrowd": 0}], "categories": [{"id": 1, "name": "bag"}]}
    (data / "gt.json").write_text(json.dumps(gt))
    runs = []
    for name, box in (("vgg", [60, 70, 40, 30]), ("r101", [20, 80, 30, 30])):
        run = make_run(tmp_path, name, "vgg16" if name == "vgg" else "resnet101", coco=COCO_VGG,
                       dataset="tiny_val", train=["tiny_train"])
        metrics = json.loads(detection_run_files(run).summary.read_text())
        metrics["datasets"] = {"tiny_val": {"json_file": str(data / "gt.json"), "image_root": str(data)}}
        detection_run_files(run).summary.write_text(json.dumps(metrics))
        preds = [{"image_id": 7, "category_id": 1, "bbox": box, "score": 0.9},
                 {"image_id": 7, "category_id": 1, "bbox": [100, 5, 20, 20], "score": 0.1}]  # below threshold
        (run / "inference" / "tiny_val" / "coco_instances_results.json").write_text(json.dumps(preds))
        runs.append(run)
    paths = write_report(runs, tmp_path / "report")
    panel = tmp_path / "report" / "qualitative.png"
    assert panel.stat().st_size > 1000 and "qualitative.png" in paths["markdown"].read_text()
    im = Image.open(panel).convert("RGB")
    cell, header, scale = CELL_SIZE, HEADER, CELL_SIZE / 128  # 128-px images at cell size: GT, vgg, r101

    def px(col, x, y):
        return im.getpixel((col * cell + round(x * scale), header + round(y * scale)))

    assert px(0, 10, 35) == GT_COLOUR  # left edge of the ground-truth box
    assert px(1, 60, 85) == DET_COLOUR and px(1, 10, 35) != GT_COLOUR  # vgg's own box, no GT drawn there
    assert px(2, 20, 95) == DET_COLOUR and px(2, 60, 85) != DET_COLOUR  # r101's box, not vgg's
    assert px(1, 100, 15) != DET_COLOUR  # the 0.1-score box is not drawn (1 object: the best box and >= 0.5)
    import errno

    import detection.report.writer as writer

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer, "draw_panel", full)  # a full disk is an error, not "panel not drawn" + exit 0
    with pytest.raises(OSError, match="No space left"):
        write_report(runs, tmp_path / "report2")


def test_report_cli_errors(tmp_path):
    make_run(tmp_path, "vgg", "vgg16", coco=COCO_VGG)
    proc = run_tool("tools/report.py", tmp_path / "vgg", "--output-dir", tmp_path / "out", "--baseline", "nope")
    assert proc.returncode != 0 and "--baseline 'nope' names no run" in proc.stderr


def test_the_gmacs_column_uses_the_backbone_the_run_recorded():
    """Stride placement changes the count: a run on torchvision weights (stride in the 3x3) is not reported with
    MSRA-placement FLOPs."""
    from detection.report.writer import run_gmacs

    def config(**backbones):
        base = {"NAME": "resnet50", "WIDTH": 1.0, "NORM": "FrozenBN", "FREEZE_AT": 2, "STRIDE_IN_1X1": True,
                "PREACT": False, "SHORTCUT": "", "FC_DROPOUT": 0.5, "STRICT_LOAD": True}
        return {"MODEL": {"BACKBONES": {**base, **backbones}}}

    msra, v15 = run_gmacs(config()), run_gmacs(config(STRIDE_IN_1X1=False))
    assert msra == pytest.approx(3.9, abs=0.15)  # paper Table 1: 3.8 x 10^9 (ours counts the fc too)
    assert v15 > msra * 1.03  # the 3x3 at full resolution before the stride: more work
    assert run_gmacs(config(WIDTH=0.5)) < msra / 3
    assert run_gmacs(config(NAME="not_a_model")) is None and run_gmacs({}) is None
    assert run_gmacs({"MODEL": {"BACKBONES": {"NAME": "resnet50"}}}) == msra  # unrecorded keys: the defaults


def test_report_json_holds_the_comparisons_as_numbers(tmp_path):
    runs = [make_run(tmp_path, f"vgg_s{s}", "vgg16", coco={"AP": 20.0 + s, "AP50": 40.0}, seed=s) for s in (0, 1)]
    runs += [make_run(tmp_path, f"r101_s{s}", "resnet101", coco={"AP": 26.0 + 2 * s, "AP50": 48.0}, seed=s)
             for s in (0, 1)]
    report = json.loads(write_report(runs, tmp_path / "report")["json"].read_text())
    [cmp] = [c for c in report["tables"]["coco"]["comparisons"] if c["a"].startswith("r101")]
    assert cmp["metric"] == "AP" and cmp["b"].startswith("vgg") and cmp["unit_a"] == cmp["unit_b"] == "run"
    assert cmp["delta"] == pytest.approx(27.0 - 20.5) and cmp["units"] == [2, 2] and cmp["p_a_better"] == 1.0
    se = (0.5 / 2 + 2.0 / 2) ** 0.5  # Welch: variances 0.5 (vgg) and 2.0 (r101) of 2 runs each
    df = se**4 / ((0.5 / 2) ** 2 + (2.0 / 2) ** 2)
    assert cmp["df"] == pytest.approx(df) and cmp["interval"][0] == pytest.approx(6.5 - t_quantile(0.975, df) * se)
    assert cmp["interval"][0] < 0 and cmp["call"] is None  # +6.5 AP from 2 runs each: not yet a call


def test_names_and_titles_cannot_inject_html_into_markdown_or_formulas_into_csv(tmp_path):
    runs = [make_run(tmp_path, "a", "vgg16", coco={"AP": 20.0, "AP50": 40.0}),
            make_run(tmp_path, "b", "resnet101", coco={"AP": 17.0, "AP50": 38.0})]
    paths = write_report(runs, tmp_path / "report", names=["<script>alert(1)</script>", "=HYPERLINK(\"http://x\")"],
                         title="<img src=x onerror=alert(2)>", notes=["a | b <b>bold</b>"])
    md = paths["markdown"].read_text()
    assert "<script>" not in md and "<img" not in md and "<b>" not in md
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in md and "# &lt;img src=x onerror=alert(2)&gt;" in md
    rows = list(csv.reader(paths["csv"].open()))
    cells = [c for row in rows for c in row]
    assert "'=HYPERLINK(\"http://x\")" in cells and not any(c.startswith("=") for c in cells)
    assert any(re.fullmatch(r"-\d+\.\d+", c) for c in cells)  # a negative delta stays a number


def test_a_run_written_before_metrics_json_became_the_detectron2_log_reads_the_same(tmp_path):
    """Runs written before 2026-12-06 kept the summary in metrics.json and the JSONWriter log in training_log.json;
    --eval-only runs had no log. Read beside a run in Detectron2's layout, every field but the path is the same."""
    from dataclasses import asdict

    per_cat = {"cat": 30.0, "dog": 24.4}
    new = load_run(make_run(tmp_path / "new", "r101", "resnet101", coco=COCO_R101, per_cat=per_cat))
    old_dir = make_run(tmp_path / "old", "r101", "resnet101", coco=COCO_R101, per_cat=per_cat, old_layout=True)
    old = load_run(old_dir)
    assert new.status == "finished" and new.metrics["AP"] == 27.2 and len(new.train_log) == 11

    def fields(run):
        return {k: v for k, v in asdict(run).items() if k not in ("path", "config")}

    assert fields(old) == fields(new)
    (old_dir / "training_log.json").unlink()  # an --eval-only run of the old layout
    eval_only = load_run(old_dir)
    assert eval_only.status == "finished" and eval_only.metrics == new.metrics and eval_only.train_log == []


def test_a_run_that_failed_or_stopped_early_is_not_reported_as_finished(tmp_path):
    """Detectron2 runs the final evaluation even after an exception (after_train), so evaluation.json can exist
    for a run that diverged or could not write its final checkpoint: failure.json (the trainer's record), a short
    iteration count or a missing model_final.pth each say it did not finish."""
    failed = make_run(tmp_path, "failed", "vgg16", coco={"AP": 0.0, "AP50": 0.0})
    (failed / "failure.json").write_text(json.dumps({"error": "FloatingPointError: parameters became inf/NaN",
                                                     "iteration": 0, "max_iter": 1}))
    short = make_run(tmp_path, "short", "vgg16", coco={"AP": 1.0, "AP50": 2.0})
    (short / "evaluation.json").write_text(json.dumps({"evaluation": {"coco_2014_val": {"bbox": {"AP": 1.0}}},
                                                    "iterations_completed": 10}))
    nofinal = make_run(tmp_path, "nofinal", "vgg16", coco={"AP": 1.0, "AP50": 2.0})
    (nofinal / "model_final.pth").unlink()
    ok = make_run(tmp_path, "ok", "vgg16", coco={"AP": 1.0, "AP50": 2.0})
    assert load_run(failed).status == "failed at iteration 0: FloatingPointError: parameters became inf/NaN"
    assert load_run(short).status == "incomplete: 10 of 90000 iterations"
    assert load_run(nofinal).status == "incomplete: 90000 of 90000 iterations, no model_final.pth"
    assert load_run(ok).status == "finished"


def test_the_panel_shrinks_large_images_skips_bad_ones_and_bounds_its_columns(tmp_path):
    """Four 12000x12000 images used to cost 6 GB (cells drawn at full size); 200 runs made a 46336-px-wide PNG."""
    from PIL import Image

    from detection.report.panel import CELL_SIZE, DET_COLOUR, HEADER, MAX_COLUMNS, draw_panel

    data = tmp_path / "data"
    data.mkdir()
    Image.new("RGB", (6000, 4000), (90, 90, 90)).save(data / "big.jpg", quality=50)
    (data / "broken.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    gt = {"images": [{"id": 1, "file_name": "big.jpg", "width": 6000, "height": 4000},
                     {"id": 2, "file_name": "broken.jpg", "width": 10, "height": 10}],
          "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [3000, 2000, 1500, 1000]}],
          "categories": [{"id": 1, "name": "bag"}]}
    (data / "gt.json").write_text(json.dumps(gt))
    preds = tmp_path / "preds.json"
    preds.write_text(json.dumps([{"image_id": 1, "category_id": 1, "bbox": [3000, 2000, 1500, 1000], "score": 0.9}]))
    out, ids = draw_panel([("a", preds)], data / "gt.json", data, tmp_path / "panel.png")
    assert ids == [1]  # the broken image is left out, not fatal
    with Image.open(out) as png:
        assert png.width == 2 * CELL_SIZE and png.height < CELL_SIZE + 40
        # the box is drawn where the object is, at cell scale: its left edge x 3000 -> 120, y 2000..3000 -> 80..120
        assert png.convert("RGB").getpixel((CELL_SIZE + 120, HEADER + 100)) == DET_COLOUR
    runs = []
    for i in range(MAX_COLUMNS + 3):
        run = make_run(tmp_path, f"r{i}", "vgg16", coco=COCO_VGG, dataset="tiny_val", train=["tiny_train"], seed=0,
                       width=1.0 + i / 100)
        metrics = json.loads(detection_run_files(run).summary.read_text())
        metrics["datasets"] = {"tiny_val": {"json_file": str(data / "gt.json"), "image_root": str(data)}}
        detection_run_files(run).summary.write_text(json.dumps(metrics))
        (run / "inference" / "tiny_val" / "coco_instances_results.json").write_text(preds.read_text())
        runs.append(run)
    paths = write_report(runs, tmp_path / "report")
    with Image.open(tmp_path / "report" / "qualitative.png") as png:
        assert png.width == (MAX_COLUMNS + 1) * CELL_SIZE
    assert f"the first {MAX_COLUMNS} of {MAX_COLUMNS + 3} configurations" in paths["markdown"].read_text()


def test_a_pretrained_groups_unit_is_its_checkpoint_and_a_shared_checkpoint_makes_the_runs_units(tmp_path):
    """Detection seeds from one checkpoint are one unit (no backbone call from them); the same file named through a
    symlink is still one unit; two arms of an ablation on the same checkpoint compare their detection runs."""
    from detection.report.groups import PRETRAINING_RUN, RUN, compare_groups, group_runs

    (tmp_path / "w").mkdir()
    ckpt = tmp_path / "w" / "r101.pth"
    ckpt.write_bytes(b"")
    (tmp_path / "w" / "link.pth").symlink_to(ckpt)
    runs = [make_run(tmp_path, f"a{s}", "resnet101", coco={"AP": 30.0 + s, "AP50": 50.0}, seed=s,
                     weights=str(tmp_path / "w" / ("link.pth" if s else "r101.pth"))) for s in (0, 1, 2)]
    runs += [make_run(tmp_path, f"b{s}", "resnet101", coco={"AP": 20.0 + s, "AP50": 40.0}, seed=s,
                      weights=str(ckpt), extra_cfg={"SOLVER": {"MAX_ITER": 90000, "BASE_LR": 0.5}}) for s in (0, 1, 2)]
    a, b = group_runs([load_run(r) for r in runs], ["a"] * 3 + ["b"] * 3)
    assert a.unit == PRETRAINING_RUN and len(a.values("AP")) == 1 and a.metrics["AP"].units == 1
    c = compare_groups(a, b, "AP")  # same checkpoint on both sides: the detection runs are the units
    assert c.unit_a == c.unit_b == RUN and c.units == (3, 3) and c.call == "a"


def test_runs_evaluated_on_different_files_are_not_seeds_of_one_group(tmp_path):
    """Four runs registered under one dataset name, SEED 0 each, but evaluated on four different json files: four
    experiments, not n=4 (the grouping reads the evaluated files evaluation.json records)."""
    from detection.report.groups import group_runs

    runs = []
    for i in range(4):
        run = make_run(tmp_path, f"r{i}", "resnet101", coco={"AP": 20.0 + i, "AP50": 40.0}, dataset="mine")
        m = json.loads(detection_run_files(run).summary.read_text())
        m["datasets"] = {"mine": {"json_file": f"/data/file{i}.json", "image_root": "/data/img"}}
        detection_run_files(run).summary.write_text(json.dumps(m))
        runs.append(load_run(run))
    assert [g.n for g in group_runs(runs)] == [1, 1, 1, 1]
    assert [len(g.runs) for g in group_runs([runs[0], load_run(tmp_path / "r0")])] == [2]  # the same file: one group


def test_a_cell_built_from_fewer_runs_than_the_row_says_how_many(tmp_path):
    """A run whose AP75 is missing: the row said 3 runs over a mean of 2."""
    runs = [make_run(tmp_path, f"r101_s{s}", "resnet101", coco={**COCO_R101, "AP": ap}, seed=s)
            for s, ap in ((0, 27.0), (1, 28.0))]
    runs.append(make_run(tmp_path, "r101_s2", "resnet101", coco={k: v for k, v in COCO_R101.items() if k != "AP75"}
                         | {"AP": 29.0}, seed=2))
    _, rows = _results(write_report(runs, tmp_path / "report"))
    assert rows["r101"]["n"] == "3" and rows["r101"]["AP"] == "28.0 [25.5, 30.5]"  # every run has AP
    assert rows["r101"]["AP75"].endswith(" (2 of 3 runs)")


def test_the_result_section_has_each_groups_ap_per_class_over_its_units(tmp_path):
    """#80: on a few-class set a reader wants to see which class fails: a per-class table under the results table,
    a column per class (COCO: AP over the group's units, mean [95% interval]); with more classes than fit across, a
    row per class; on VOC the per-class metric is AP50. Comparisons stay on the mean."""
    runs = [make_run(tmp_path, f"vgg_s{s}", "vgg16", coco=COCO_VGG, seed=s, per_cat={"bag": 40.0 + s, "shoe": 10.0})
            for s in (0, 1)]
    runs.append(make_run(tmp_path, "r101", "resnet101", coco=COCO_R101, per_cat={"bag": 50.0}))
    paths = write_report(runs, tmp_path / "report")
    table = json.loads(paths["json"].read_text())["results"]["coco"]["per_class"]
    assert table["columns"] == ["name", "AP bag", "AP shoe"]
    rows = {r[0]: r[1:] for r in table["rows"]}
    assert rows["r101"] == ["50.0", "—"] and rows["vgg"][0].startswith("40.5 [") and rows["vgg"][1] == "10.0 ± 0.0"
    assert "| AP bag | AP shoe |" in paths["markdown"].read_text()
    written = json.loads(paths["json"].read_text())  # what a rerun's --fresh may delete (writer.report_files)
    assert {"report.md", "report.html", "report.json", "report.csv", *written["plots"]} == set(written["files"])
    many = {f"class{i}": float(i) for i in range(9)}
    voc = [make_run(tmp_path / "voc", "vgg", "vgg16", voc={"AP50": 70.0, "mAP50_voc07": 69.0}, per_cat=many)]
    table = json.loads(write_report(voc, tmp_path / "voc_report")["json"].read_text())["results"]["voc"]["per_class"]
    assert table["columns"] == ["class (AP50)", "vgg"] and table["rows"][3] == ["class3", "3.0"]
