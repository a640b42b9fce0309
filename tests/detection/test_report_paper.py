"""The report's paper column (detection/report/paper.py): only beside runs of the paper's own design, and every other
run is told, in one line, which condition keeps it out."""

import functools
import json

import pytest
import yaml

import detection.report.paper as paper_module
from detection.paper_design import PaperConfigsNotFound, design_keys, paper_design
from detection.report import load_run, paper_reference, write_report
from detection.report.paper import PAPER_REFERENCE, PAPER_SETUP, SHOWN_KEYS
from fabricated_runs import BACKBONE, SAME_SOLVER, paper_config, write_run


def judge(tmp_path, kind, column, *overlays, opts=(), config=None):
    config = config or paper_config(kind, column, *overlays, opts=opts)
    run = load_run(write_run(tmp_path, "run", config, kind))
    assert run.status == "finished" and run.kind == kind, run.status
    return paper_reference(kind, run)


def lookup(config: dict, key: str):
    for k in key.split("."):
        config = config[k]
    return config


@pytest.mark.parametrize("kind, column", sorted(PAPER_SETUP))
def test_the_paper_setup_of_each_column_is_what_its_config_sets(kind, column):
    """PAPER_SETUP cannot drift from the configs: each column's backbone, weights and splits, read back from its
    config, and its design is that config's value of every design key."""
    setup, config = PAPER_SETUP[(kind, column)], paper_config(kind, column)
    config_name = setup["config"].rsplit("/", 1)[-1]
    assert config["MODEL"]["BACKBONES"]["NAME"] == BACKBONE[column] and config["MODEL"]["BACKBONES"]["WIDTH"] == 1.0
    assert config["MODEL"]["WEIGHTS"].rsplit("/", 1)[-1] in setup["weights"], config_name
    assert tuple(config["DATASETS"]["TRAIN"]) == PAPER_REFERENCE[kind]["train"], config_name
    assert tuple(config["DATASETS"]["TEST"]) == PAPER_REFERENCE[kind]["test"], config_name
    design = paper_design(setup["config"], setup["weights_format"])
    assert sorted(design) == design_keys()
    for key, want in design.items():
        got = lookup(config, key)
        assert (tuple(got) if isinstance(got, list) else got) == (tuple(want) if isinstance(want, list) else want), \
            f"{config_name}: {key}"


def test_the_paper_design_holds_values_the_paper_and_its_sources_state():
    """A few literals, so the derivation is checked against something it does not compute itself."""
    r101, vgg = (paper_design(PAPER_SETUP[("coco", c)]["config"], PAPER_SETUP[("coco", c)]["weights_format"])
                 for c in ("ResNet-101", "VGG-16"))
    assert r101["MODEL.ROI_BOX_HEAD.POOLER_TYPE"] == "ROIPool" and r101["MODEL.RPN.POST_NMS_TOPK_TEST"] == 300
    assert r101["MODEL.BACKBONES.STRIDE_IN_1X1"] is True and r101["INPUT.FORMAT"] == "BGR"
    assert tuple(r101["SOLVER.STEPS"]) == (240000,) and r101["SOLVER.GAMMA"] == 0.1
    assert vgg["SOLVER.BASE_LR"] == 0.003 and vgg["INPUT.FORMAT"] == "RGB" and vgg["MODEL.BACKBONES.FC_DROPOUT"] == 0.0


@pytest.mark.parametrize("kind, column", sorted(PAPER_SETUP))
def test_a_run_of_the_papers_own_design_gets_its_column(tmp_path, kind, column):
    assert judge(tmp_path, kind, column) == (PAPER_REFERENCE[kind][column], None)


def another_value(value):
    """A value of the same type that differs from `value` (the first element changed, for a list)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 2 if value else 0.5
    if isinstance(value, str):
        return value + "_other" if value else "other"
    if isinstance(value, list):
        return [another_value(value[0]), *value[1:]] if value else [1]
    raise TypeError(f"no other value for {value!r}")


@functools.cache
def _paper_config_text(kind, column):
    return yaml.safe_dump(paper_config(kind, column))


@pytest.mark.parametrize("kind, column", sorted(PAPER_SETUP))
@pytest.mark.parametrize("key", design_keys())
def test_every_design_key_changed_alone_closes_the_gate_and_is_named(tmp_path, kind, column, key):
    """The gate reads every design key (derived from the paper configs, detection.paper_design), not a hand list:
    a run of the column's config with only `key` changed gets no paper number, and its line names the key."""
    config = yaml.safe_load(_paper_config_text(kind, column))
    node, leaf = config, key.rsplit(".", 1)
    for k in leaf[0].split("."):
        node = node[k]
    node[leaf[1]] = another_value(node[leaf[1]])
    ref, why = judge(tmp_path, kind, column, config=config)
    assert ref is None and f"the paper's {column} column" in why and f" {key} " in why, why


# The conventions MODEL.WEIGHTS' metadata sets (stride placement, pixel statistics): a run records another value
# for them only without that step.
WITHOUT_WEIGHTS_CONVENTIONS = ("MODEL.BACKBONES.CONVENTIONS_FROM_WEIGHTS", "False")


# The settings a reviewer tried (issue #47), each as a user would set it: every one keeps the paper's number away
@pytest.mark.parametrize("kind, column, opts, named", [
    ("coco", "ResNet-101", ("MODEL.ROI_BOX_HEAD.POOLER_TYPE", "ROIAlignV2"),
     "MODEL.ROI_BOX_HEAD.POOLER_TYPE 'ROIAlignV2' (paper: 'ROIPool')"),
    ("coco", "ResNet-101", ("MODEL.ROI_BOX_HEAD.POOLER_RESOLUTION", "7"),
     "MODEL.ROI_BOX_HEAD.POOLER_RESOLUTION 7 (paper: 14)"),
    ("coco", "VGG-16", ("MODEL.RPN.POST_NMS_TOPK_TEST", "1000"), "MODEL.RPN.POST_NMS_TOPK_TEST 1000 (paper: 300)"),
    ("voc", "VGG-16", ("MODEL.ROI_HEADS.NMS_THRESH_TEST", "0.5"), "MODEL.ROI_HEADS.NMS_THRESH_TEST 0.5 (paper: 0.3)"),
    ("coco", "ResNet-101", ("MODEL.ANCHOR_GENERATOR.SIZES", "[[32], [64], [128], [256], [512]]"),
     "MODEL.ANCHOR_GENERATOR.SIZES ((32,), (64,), (128,), (256,), (512,)) (paper: ((64, 128, 256, 512),))"),
    ("coco", "ResNet-101", ("MODEL.ANCHOR_GENERATOR.OFFSET", "0.0"), "MODEL.ANCHOR_GENERATOR.OFFSET 0.0 (paper: 0.5)"),
    ("voc", "ResNet-101", ("MODEL.ANCHOR_GENERATOR.SIZES", "[[64, 128, 256, 512]]"),
     "MODEL.ANCHOR_GENERATOR.SIZES ((64, 128, 256, 512),) (paper: ((128, 256, 512),))"),
    ("coco", "ResNet-101", ("MODEL.BACKBONES.FREEZE_AT", "0"), "MODEL.BACKBONES.FREEZE_AT 0 (paper: 2)"),
    ("coco", "ResNet-101", ("MODEL.BACKBONES.STRIDE_IN_1X1", "False", *WITHOUT_WEIGHTS_CONVENTIONS),
     "MODEL.BACKBONES.STRIDE_IN_1X1 False (paper: True)"),
    ("coco", "ResNet-101", ("MODEL.PROPOSAL_GENERATOR.NAME", "RPN"),
     "MODEL.PROPOSAL_GENERATOR.NAME 'RPN' (paper: 'BackbonesRPN')"),
    ("coco", "VGG-16", ("MODEL.RPN.MATCH_INSIDE_ONLY", "False"), "MODEL.RPN.MATCH_INSIDE_ONLY False (paper: True)"),
    ("voc", "ResNet-101", ("INPUT.RANDOM_FLIP", "none"), "INPUT.RANDOM_FLIP 'none' (paper: 'horizontal')"),
    ("coco", "ResNet-101", ("MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE", "512"),
     "MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE 512 (paper: 128)"),
    ("coco", "ResNet-101", ("SOLVER.WARMUP_ITERS", "0"), "SOLVER.WARMUP_ITERS 0 (paper: 1000)"),
    ("coco", "VGG-16", ("SOLVER.WEIGHT_DECAY_BIAS", "0.0"), "SOLVER.WEIGHT_DECAY_BIAS 0.0 (paper: 0.0005)"),
    ("coco", "ResNet-101", ("SOLVER.BIAS_LR_FACTOR", "1.0"), "SOLVER.BIAS_LR_FACTOR 1.0 (paper: 2.0)"),
    ("coco", "ResNet-101", ("MODEL.PIXEL_MEAN", "[0.0, 0.0, 0.0]", *WITHOUT_WEIGHTS_CONVENTIONS),
     "MODEL.PIXEL_MEAN (0.0, 0.0, 0.0) (paper: (103.53, 116.28, 123.675))"),
])
def test_the_settings_a_reviewer_tried_close_the_gate(tmp_path, kind, column, opts, named):
    ref, why = judge(tmp_path, kind, column, opts=opts)
    assert ref is None and named in why, why


@pytest.mark.parametrize("kind, column, overlays, opts, reason", [
    ("coco", "ResNet-101", ["configs/COCO-Detection/faster_rcnn_R_101_FPN.yaml"], (),
     "not the design of the paper's ResNet-101 column (configs/COCO-Detection/faster_rcnn_R_101_C4.yaml): "
     "MODEL.ANCHOR_GENERATOR.SIZES"),
    ("voc", "ResNet-101", ["configs/PascalVOC-Detection/faster_rcnn_R_101_FPN.yaml"], (),
     "MODEL.BACKBONE.NAME 'build_backbones_fpn_backbone' (paper: 'build_backbones_trunk')"),
    ("coco", "ResNet-101", [], ("MODEL.BACKBONES.PREACT", "True"), "MODEL.BACKBONES.PREACT True (paper: False)"),
    ("coco", "ResNet-101", [], ("MODEL.BACKBONES.NORM", "BN"), "MODEL.BACKBONES.NORM 'BN' (paper: 'FrozenBN')"),
    ("coco", "VGG-16", [], ("MODEL.BACKBONES.FC_DROPOUT", "0.5"), "MODEL.BACKBONES.FC_DROPOUT 0.5 (paper: 0.0)"),
    ("coco", "VGG-16", [], ("MODEL.BACKBONES.NAME", "vgg16_bn"), "vgg16_bn: VGG-16 with BatchNorm"),
    ("coco", "ResNet-101", [], ("MODEL.BACKBONES.NAME", "resnet50"), "backbone resnet50"),
    ("voc", "ResNet-101", [], ("MODEL.BACKBONES.WIDTH", "0.5"), "width 0.5, not the paper's full width"),
    ("coco", "ResNet-101", ["configs/Overlays/COCO2017-splits-NOT-paper.yaml"], (),
     "splits coco_2017_train -> coco_2017_val, not the paper's coco_2014_train -> coco_2014_val"),
    ("voc", "VGG-16", [], ("DATASETS.TRAIN", '("voc_2007_trainval",)'), "splits voc_2007_trainval -> voc_2007_test"),
    ("coco", "VGG-16", [SAME_SOLVER], (),
     "not the design of the paper's VGG-16 column (configs/COCO-Detection/faster_rcnn_vgg16.yaml): "
     "SOLVER.BASE_LR 0.001 (paper: 0.003)"),
    ("coco", "ResNet-101", [], ("SOLVER.BASE_LR", "0.003"), "SOLVER.BASE_LR 0.003 (paper: 0.001)"),
    ("coco", "ResNet-101", [], ("SOLVER.MAX_ITER", "90000", "SOLVER.STEPS", "(60000,)"),
     "SOLVER.MAX_ITER 90000 (paper: 320000), SOLVER.STEPS (60000,) (paper: (240000,))"),
    ("voc", "VGG-16", [], ("SOLVER.IMS_PER_BATCH", "8"), "SOLVER.IMS_PER_BATCH 8 (paper: 16)"),
    ("voc", "ResNet-101", [], ("INPUT.MIN_SIZE_TEST", "800"), "INPUT.MIN_SIZE_TEST 800 (paper: 600)"),
    ("coco", "ResNet-101", [], ("MODEL.WEIGHTS", '""'), "from scratch (no MODEL.WEIGHTS), not ImageNet-pretrained"),
    ("voc", "VGG-16", [], ("MODEL.WEIGHTS", "/runs/cls/model_final.pth"),
     "MODEL.WEIGHTS /runs/cls/model_final.pth, not the ImageNet model of the paper's column (vgg16-397923af.pth)"),
])
def test_every_other_run_is_told_which_condition_keeps_it_out(tmp_path, kind, column, overlays, opts, reason):
    ref, why = judge(tmp_path, kind, column, *overlays, opts=opts)
    assert ref is None and reason in why, why
    assert "\n" not in why


def test_many_differing_keys_are_named_up_to_a_bound(tmp_path):
    """The FPN configs differ in many design keys: the line names the first SHOWN_KEYS and counts the rest."""
    ref, why = judge(tmp_path, "coco", "ResNet-101", "configs/COCO-Detection/faster_rcnn_R_101_FPN.yaml")
    assert ref is None and why.count("(paper: ") == SHOWN_KEYS and "more" in why, why


def test_without_the_paper_configs_the_gate_stays_closed_and_says_why(tmp_path, monkeypatch):
    """An installed package without configs/ cannot compare a run with the paper's design: no number, one line."""
    config = paper_config("coco", "ResNet-101")

    def no_configs(*args):
        raise PaperConfigsNotFound("the paper's design is read from configs/ of a checkout: none above /site")

    monkeypatch.setattr(paper_module, "paper_design", no_configs)
    ref, why = judge(tmp_path, "coco", "ResNet-101", config=config)
    assert ref is None and "cannot be compared" in why and "configs/ of a checkout" in why and "\n" not in why


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
    table = json.loads(paths["json"].read_text())["results"]["coco"]
    rows = {r[0]: dict(zip(table["columns"], r)) for r in table["rows"]}
    assert rows["r101_c4"]["paper AP50 / AP"] == "48.4 / 27.2" and rows["vgg16"]["paper AP50 / AP"] == "41.5 / 21.2"
    assert rows["r101_fpn"]["paper AP50 / AP"] == "—" and rows["vgg16_same_solver"]["paper AP50 / AP"] == "—"
    md = paths["markdown"].read_text()
    assert "r101_fpn: no paper number (not the design of the paper's ResNet-101 column" in md
    assert ("vgg16_same_solver: no paper number (not the design of the paper's VGG-16 column "
            "(configs/COCO-Detection/faster_rcnn_vgg16.yaml): SOLVER.BASE_LR 0.001 (paper: 0.003))") in md
    assert "r101_c4: no paper number" not in md and "vgg16: no paper number" not in md


def test_no_column_at_all_when_no_run_is_of_the_papers_design(tmp_path):
    runs = [write_run(tmp_path, "r101_fpn", paper_config("coco", "ResNet-101",
                                                         "configs/COCO-Detection/faster_rcnn_R_101_FPN.yaml"), "coco"),
            write_run(tmp_path, "vgg16_same_solver", paper_config("coco", "VGG-16", SAME_SOLVER), "coco")]
    paths = write_report(runs, tmp_path / "report")
    assert "paper AP50 / AP" not in json.loads(paths["json"].read_text())["results"]["coco"]["columns"]
    md = paths["markdown"].read_text()
    assert "No paper column" in md and "r101_fpn: no paper number (" in md and "vgg16_same_solver: no paper" in md
