"""tools/report.py on fabricated runs with known numbers."""

import json
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from conftest import run_tool
from detection.report import load_run, write_report


def make_run(root: Path, name: str, backbone: str, *, coco=None, voc=None, per_cat=None, log_rows=10,
             dataset=None):
    run = root / name
    run.mkdir(parents=True)
    dataset = dataset or ("voc_2007_test" if voc else "coco_2017_val")
    (run / "config.yaml").write_text(yaml.safe_dump({
        "MODEL": {"BACKBONES": {"NAME": backbone}, "BACKBONE": {"NAME": "build_backbones_trunk"},
                  "ROI_HEADS": {"NAME": "BackbonesRes5ROIHeads"}},
        "SOLVER": {"MAX_ITER": 90000}, "DATASETS": {"TEST": [dataset]}}))
    (run / "training_log.json").write_text("\n".join(json.dumps({"iteration": i * 20, "total_loss": 2.0 / (i + 1),
                                                                   "lr": 0.02}) for i in range(log_rows)) + "\n")
    if coco is None and voc is None:
        return run
    bbox = dict(coco or voc)
    bbox.update({("AP50-" if voc else "AP-") + k: v for k, v in (per_cat or {}).items()})
    (run / "metrics.json").write_text(json.dumps({"evaluation": {dataset: {"bbox": bbox}},
                                                  "iterations_completed": 90000}))
    inf = run / "inference" / dataset
    inf.mkdir(parents=True)
    if coco:
        rec = [i / 100 for i in range(101)]
        curve = {c: [max(0.0, 1 - r * 0.9) for r in rec] for c in (per_cat or {"a": 0})}
        (inf / "coco_eval_bbox.json").write_text(json.dumps({
            "recall_thresholds": rec, "precision": {"iou50": curve, "iou75": curve}}))
    return run


COCO_VGG = {"AP": 21.2, "AP50": 41.5, "AP75": 20.0, "APs": 5.0, "APm": 20.0, "APl": 30.0}
COCO_R101 = {"AP": 27.2, "AP50": 48.4, "AP75": 28.0, "APs": 8.0, "APm": 30.0, "APl": 40.0}


def test_report_has_exactly_the_numbers_and_deltas(tmp_path):
    vgg = make_run(tmp_path, "vgg", "vgg16", coco=COCO_VGG, per_cat={"person": 40.0, "dog": 10.0})
    r101 = make_run(tmp_path, "r101", "resnet101", coco=COCO_R101, per_cat={"person": 50.0})  # no "dog"
    paths = write_report([r101, vgg], tmp_path / "report")
    table = json.loads(paths["json"].read_text())["tables"]["coco"]
    assert table["baseline"] == "vgg"  # the VGG-16 run, wherever it is listed
    head, rows = table["columns"], {r[0]: dict(zip(table["columns"], r)) for r in table["rows"]}
    assert rows["r101"]["AP"] == "27.2" and rows["r101"]["AP50"] == "48.4" and rows["vgg"]["APl"] == "30.0"
    delta_col = next(h for h in head if h.startswith("ΔAP"))
    assert rows["r101"][delta_col] == "6.00" and rows["r101"]["relative"] == "+28.3%"  # the paper's +6.0 / 28%
    assert rows["vgg"][delta_col] == "baseline"
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
    assert set(images) == {"pr_iou50.png", "pr_iou75.png", "per_category_ap.png", "training_curves.png",
                           "ap_vs_flops.png"}
    for src in images:
        assert (tmp_path / "report" / src).stat().st_size > 2000
    assert len(root.findall(".//h:table", ns)) == 2  # the COCO table and the run status table


def test_partial_and_mixed_inputs(tmp_path):
    runs = [make_run(tmp_path, "coco_vgg", "vgg16", coco=COCO_VGG),
            make_run(tmp_path, "voc_r101", "resnet101", voc={"AP50": 76.4, "mAP50_voc07": 76.4, "mAP50_area": 78.0,
                                                              "AP": 50.0, "AP75": 55.0}, per_cat={"cat": 80.0}),
            make_run(tmp_path, "still_training", "plain34"),
            make_run(tmp_path, "crashed", "resnet50")]
    (runs[3] / "log.txt").write_text("...\nTraceback (most recent call last):\n  boom\n")
    (runs[2] / "training_log.json").write_text('{"iteration": 0, "total_loss": 1.0}\n{"iteration": 20, "tot')
    paths = write_report(runs, tmp_path / "report")
    tables = json.loads(paths["json"].read_text())["tables"]
    assert set(tables) == {"coco", "voc"}  # separate tables
    voc_rows = {r[0]: r for r in tables["voc"]["rows"]}
    assert "76.4" in voc_rows["voc_r101"] and "coco_vgg" not in voc_rows
    statuses = {r["name"]: r["status"] for r in json.loads(paths["json"].read_text())["runs"]}
    assert statuses == {"coco_vgg": "finished", "voc_r101": "finished",
                        "still_training": "no metrics (training or crashed)", "crashed": "crashed (see log.txt)"}
    assert "still_training" in {r[0] for r in tables["coco"]["rows"]}  # listed, with dashes


def test_report_cli(tmp_path):
    make_run(tmp_path, "vgg", "vgg16", coco=COCO_VGG)
    make_run(tmp_path, "r101", "resnet101", coco=COCO_R101)
    proc = run_tool("tools/report.py", tmp_path / "vgg", tmp_path / "r101", "--out", tmp_path / "out",
                    "--names", "VGG-16", "ResNet-101")
    assert proc.returncode == 0, proc.stderr
    assert "| ResNet-101 | resnet101 |" in proc.stdout and "report.html" in proc.stdout


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
