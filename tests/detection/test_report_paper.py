"""The report's paper column (detection/report/paper.py): only beside runs of the paper's own design, and every other
run is told, in one line, which condition keeps it out."""

import json

import pytest

from detection.report import load_run, paper_reference, write_report
from detection.report.paper import PAPER_REFERENCE, PAPER_SETUP
from fabricated_runs import BACKBONE, SAME_SOLVER, paper_config, write_run


def judge(tmp_path, kind, column, *overlays, opts=()):
    run = load_run(write_run(tmp_path, "run", paper_config(kind, column, *overlays, opts=opts), kind))
    assert run.status == "finished" and run.kind == kind, run.status
    return paper_reference(kind, run)


@pytest.mark.parametrize("kind, column", sorted(PAPER_SETUP))
def test_the_paper_setup_of_each_column_is_what_its_config_sets(kind, column):
    """PAPER_SETUP cannot drift from the configs: each column's keys, weights and splits, read back from its config."""
    setup, config = PAPER_SETUP[(kind, column)], paper_config(kind, column)
    config_name = setup["config"].rsplit("/", 1)[-1]
    assert config["MODEL"]["BACKBONES"]["NAME"] == BACKBONE[column] and config["MODEL"]["BACKBONES"]["WIDTH"] == 1.0
    assert config["MODEL"]["WEIGHTS"].rsplit("/", 1)[-1] in setup["weights"], config_name
    assert tuple(config["DATASETS"]["TRAIN"]) == PAPER_REFERENCE[kind]["train"], config_name
    assert tuple(config["DATASETS"]["TEST"]) == PAPER_REFERENCE[kind]["test"], config_name
    assert {"design", "input", "schedule", "solver"} <= set(setup)
    for part in ("design", "input", "schedule", "solver"):
        assert setup[part], part
        for key, want in setup[part].items():
            node = config
            for k in key.split("."):
                node = node[k]
            node = tuple(node) if isinstance(node, list) else node
            assert node in want if isinstance(want, frozenset) else node == want, f"{config_name}: {key} {node!r}"


@pytest.mark.parametrize("kind, column", sorted(PAPER_SETUP))
def test_a_run_of_the_papers_own_design_gets_its_column(tmp_path, kind, column):
    assert judge(tmp_path, kind, column) == (PAPER_REFERENCE[kind][column], None)


@pytest.mark.parametrize("kind, column, overlays, opts, reason", [
    ("coco", "ResNet-101", ["configs/COCO-Detection/faster_rcnn_R_101_FPN.yaml"], (),
     "not the paper's C4 detector: MODEL.BACKBONE.NAME 'build_backbones_fpn_backbone'"),
    ("voc", "ResNet-101", ["configs/PascalVOC-Detection/faster_rcnn_R_101_FPN.yaml"], (),
     "not the paper's C4 detector: MODEL.BACKBONE.NAME 'build_backbones_fpn_backbone'"),
    ("coco", "ResNet-101", [], ("MODEL.BACKBONES.PREACT", "True"), "MODEL.BACKBONES.PREACT True (paper: False)"),
    ("coco", "ResNet-101", [], ("MODEL.BACKBONES.NORM", "BN"), "not the paper's C4 detector: MODEL.BACKBONES.NORM"),
    ("coco", "VGG-16", [], ("MODEL.BACKBONES.FC_DROPOUT", "0.5"),
     "not the paper's VGG-16 head: MODEL.BACKBONES.FC_DROPOUT 0.5 (paper: 0.0)"),
    ("coco", "VGG-16", [], ("MODEL.BACKBONES.NAME", "vgg16_bn"), "vgg16_bn: VGG-16 with BatchNorm"),
    ("coco", "ResNet-101", [], ("MODEL.BACKBONES.NAME", "resnet50"), "backbone resnet50"),
    ("voc", "ResNet-101", [], ("MODEL.BACKBONES.WIDTH", "0.5"), "width 0.5, not the paper's full width"),
    ("coco", "ResNet-101", ["configs/Overlays/COCO2017-splits-NOT-paper.yaml"], (),
     "splits coco_2017_train -> coco_2017_val, not the paper's coco_2014_train -> coco_2014_val"),
    ("voc", "VGG-16", [], ("DATASETS.TRAIN", '("voc_2007_trainval",)'), "splits voc_2007_trainval -> voc_2007_test"),
    ("coco", "VGG-16", [SAME_SOLVER], (),
     "not the solver of the paper's VGG-16 column: SOLVER.BASE_LR 0.001 (paper: 0.003)"),
    ("coco", "ResNet-101", [], ("SOLVER.BASE_LR", "0.003"),
     "not the solver of the paper's ResNet-101 column: SOLVER.BASE_LR 0.003 (paper: 0.001)"),
    ("coco", "ResNet-101", [], ("SOLVER.MAX_ITER", "90000", "SOLVER.STEPS", "(60000,)"),
     "not the paper's schedule: SOLVER.STEPS (60000,) (paper: (240000,)), SOLVER.MAX_ITER 90000 (paper: 320000)"),
    ("voc", "VGG-16", [], ("SOLVER.IMS_PER_BATCH", "8"), "not the paper's schedule: SOLVER.IMS_PER_BATCH 8"),
    ("voc", "ResNet-101", [], ("INPUT.MIN_SIZE_TEST", "800"), "not the paper's input scale: INPUT.MIN_SIZE_TEST 800"),
    ("coco", "ResNet-101", [], ("MODEL.WEIGHTS", '""'), "from scratch (no MODEL.WEIGHTS), not ImageNet-pretrained"),
    ("voc", "VGG-16", [], ("MODEL.WEIGHTS", "/runs/cls/model_final.pth"),
     "MODEL.WEIGHTS /runs/cls/model_final.pth, not the ImageNet model of the paper's column (vgg16-397923af.pth)"),
])
def test_every_other_run_is_told_which_condition_keeps_it_out(tmp_path, kind, column, overlays, opts, reason):
    ref, why = judge(tmp_path, kind, column, *overlays, opts=opts)
    assert ref is None and reason in why, why
    assert "\n" not in why


def test_a_local_copy_of_the_imagenet_model_counts(tmp_path):
    assert judge(tmp_path, "coco", "ResNet-101", opts=("MODEL.WEIGHTS", "/data/models/R-101.pkl"))[1] is None


def test_own_pretraining_is_named(tmp_path):
    """A detector initialised from a tools/train_cls.py run says so (its pretraining is read from beside it)."""
    cls = tmp_path / "cls"
    cls.mkdir()
    (cls / "config.json").write_text(json.dumps({"model": "resnet101", "dataset": "embedded", "iterations": 300,
                                                 "batch_size": 64, "model_options": {}}))
    (cls / "metrics.json").write_text(json.dumps({"final": {"top1": 60.0, "top5": 90.0}, "history": {}}))
    (cls / "model_final.pth").write_bytes(b"")
    ref, why = judge(tmp_path, "coco", "ResNet-101", opts=("MODEL.WEIGHTS", str(cls / "model_final.pth")))
    assert ref is None
    assert "pretrained by tools/train_cls.py (resnet101 on embedded, 300 iterations), not the ImageNet model" in why


def test_the_report_shows_the_column_only_beside_the_papers_design(tmp_path):
    """An FPN ResNet-101 and a VGG-16 with the controlled (same-solver) overlay stand beside a C4 ResNet-101 and
    the paper's VGG-16: only the last two get numbers; the other two get their line."""
    runs = [write_run(tmp_path, "r101_c4", paper_config("coco", "ResNet-101"), "coco"),
            write_run(tmp_path, "vgg16", paper_config("coco", "VGG-16"), "coco"),
            write_run(tmp_path, "r101_fpn", paper_config("coco", "ResNet-101",
                                                         "configs/COCO-Detection/faster_rcnn_R_101_FPN.yaml"), "coco"),
            write_run(tmp_path, "vgg16_same_solver", paper_config("coco", "VGG-16", SAME_SOLVER), "coco")]
    paths = write_report(runs, tmp_path / "report")
    table = json.loads(paths["json"].read_text())["tables"]["coco"]
    rows = {r[0]: dict(zip(table["columns"], r)) for r in table["rows"]}
    assert rows["r101_c4"]["paper AP50 / AP"] == "48.4 / 27.2" and rows["vgg16"]["paper AP50 / AP"] == "41.5 / 21.2"
    assert rows["r101_fpn"]["paper AP50 / AP"] == "—" and rows["vgg16_same_solver"]["paper AP50 / AP"] == "—"
    md = paths["markdown"].read_text()
    assert "r101_fpn: no paper number (not the paper's C4 detector: MODEL.BACKBONE.NAME" in md
    assert ("vgg16_same_solver: no paper number (not the solver of the paper's VGG-16 column: SOLVER.BASE_LR 0.001 "
            "(paper: 0.003))") in md
    assert "r101_c4: no paper number" not in md and "vgg16: no paper number" not in md


def test_no_column_at_all_when_no_run_is_of_the_papers_design(tmp_path):
    runs = [write_run(tmp_path, "r101_fpn", paper_config("coco", "ResNet-101",
                                                         "configs/COCO-Detection/faster_rcnn_R_101_FPN.yaml"), "coco"),
            write_run(tmp_path, "vgg16_same_solver", paper_config("coco", "VGG-16", SAME_SOLVER), "coco")]
    paths = write_report(runs, tmp_path / "report")
    assert "paper AP50 / AP" not in json.loads(paths["json"].read_text())["tables"]["coco"]["columns"]
    md = paths["markdown"].read_text()
    assert "No paper column" in md and "r101_fpn: no paper number (" in md and "vgg16_same_solver: no paper" in md
