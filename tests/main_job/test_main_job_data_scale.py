"""The main job at the data scale (detection/main_job/data_scale.py): the paper configs' detector at an input size
and a schedule from the user's data, or named by --detect-size / --detect-iterations / --detect-epochs; several
train sets concatenated (VOC 07+12); the legs' configs, the dry run and the report's first lines say so."""

import json
import random
import re

import pytest
import torch
import torchvision
from PIL import Image, ImageDraw

from conftest import run_tool
from detection.main_job.cli import main
from detection.main_job.data import check_data
from detection.main_job.options import build_parser, plan_from_args
from detection.main_job.plan import plan_stages

JOB = ["--preset", "quick", "--backbones", "resnet18", "--arms", "frozenbn_pretrained", "--seeds", "0",
       "--no-control"]


def make_voc(root, splits: dict, *, size=(640, 480), classes=("cell", "platelet")):
    """A VOC layout whose images are size[0] x size[1] JPEGs with 1-3 shapes each, one split file per entry of
    `splits` (split -> image ids); object k of an image is of classes[k % len(classes)]."""
    for d in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (root / d).mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    for split, ids in splits.items():
        for fid in ids:
            w, h = size
            im = Image.new("RGB", size, (200, 190, 180))
            objects = ""
            for k in range(1 + rng.randrange(3)):
                s = rng.randrange(40, min(120, h // 2))
                x, y = rng.randrange(1, w - s - 1), rng.randrange(1, h - s - 1)
                ImageDraw.Draw(im).ellipse([x, y, x + s, y + s], fill=(150, 30, 60 + 40 * k))
                objects += (f"<object><name>{classes[k % len(classes)]}</name><difficult>0</difficult><bndbox>"
                            f"<xmin>{x + 1}</xmin><ymin>{y + 1}</ymin><xmax>{x + s}</xmax><ymax>{y + s}</ymax>"
                            "</bndbox></object>")
            im.save(root / "JPEGImages" / f"{fid}.jpg", quality=90)
            (root / "Annotations" / f"{fid}.xml").write_text(
                f"<annotation><size><width>{w}</width><height>{h}</height><depth>3</depth></size>{objects}"
                "</annotation>")
        (root / "ImageSets" / "Main" / f"{split}.txt").write_text("".join(f"{i}\n" for i in ids))
    return root


@pytest.fixture(scope="module")
def voc(tmp_path_factory):
    """6 train and 4 test images of 640x480, 2 classes (in every image with 2+ objects; the first seeds give both)."""
    return make_voc(tmp_path_factory.mktemp("voc") / "VOC", {"trainval": [f"{i:04d}" for i in range(6)],
                                                             "test": [f"t{i:03d}" for i in range(4)]})


def _plan(*argv):
    plan = plan_from_args(build_parser().parse_args([*JOB, *argv]))
    return plan.__class__(**{**plan.__dict__, "detect_data": check_data(plan.pretrain_data, plan.detect_data)})


def _leg_config(plan, tmp_path) -> dict:
    """KEY -> VALUE of the first detection leg's overrides."""
    leg = next(s for s in plan_stages(plan, tmp_path) if s.kind == "detect")
    opts = plan.detect_config(leg.model, leg.variant, None, 0, tmp_path)[1]
    return dict(zip(opts[::2], opts[1::2]))


def test_the_data_scale_sizes_legs_from_the_train_images_median_and_schedules_epochs_of_them(voc, tmp_path):
    plan = _plan("--scale", "data", "--detect-voc", str(voc), "trainval", "test")
    cfg = _leg_config(plan, tmp_path)
    # 640x480 images run at 480 (not the embedded scale's 128); the longer side's cap keeps the configs' 1000/600
    assert (cfg["INPUT.MIN_SIZE_TRAIN"], cfg["INPUT.MIN_SIZE_TEST"], cfg["INPUT.MAX_SIZE_TEST"]) == ("(480,)", "480",
                                                                                                 "800")
    assert cfg["SOLVER.MAX_ITER"] == "36"  # 12 epochs of 6 images, 2 a batch
    assert (cfg["SOLVER.IMS_PER_BATCH"], cfg["SOLVER.BASE_LR"]) == ("2", "0.001")  # VOC config's 0.008 x 2/16
    assert cfg["SOLVER.STEPS"] == "(26,)"  # the config's 6250 of 8750, at the same fraction
    assert "configs/Embedded-Detection/smoke.yaml" not in " ".join(plan_stages(plan, tmp_path)[0].argv)
    assert plan.width == 0.25  # no --weights: the job's width (a net pretrained here)


def test_detect_size_iterations_and_epochs_name_what_the_data_would_otherwise_set(voc, tmp_path):
    voc_args = ["--scale", "data", "--detect-voc", str(voc), "trainval", "test"]
    cfg = _leg_config(_plan(*voc_args, "--detect-size", "320", "--detect-iterations", "10"), tmp_path)
    assert (cfg["INPUT.MIN_SIZE_TEST"], cfg["INPUT.MAX_SIZE_TEST"], cfg["SOLVER.MAX_ITER"]) == ("320", "533", "10")
    assert _leg_config(_plan(*voc_args, "--detect-epochs", "2"), tmp_path)["SOLVER.MAX_ITER"] == "6"


def test_a_two_iteration_schedule_keeps_its_lr_step_before_its_end():
    from detection.main_job.data_scale import data_scale
    from detection.main_job.leg_configs import PaperSettings

    coco = PaperSettings(600, 1000, 320000, (240000,), 16, 0.001, 1000)  # the COCO configs' step at 3/4
    scale = data_scale(coco, median_image=(480, 640), train_images=10, detect_size=None, detect_iterations=2,
                       epochs=12, processes=1)
    assert scale.steps(2) == (1,) and scale.steps(1) == () and scale.steps(400) == (300,)


def test_images_larger_than_the_paper_configs_run_at_their_600_and_full_width_weights_at_width_1(tmp_path):
    big = make_voc(tmp_path / "big", {"a": ["0", "1", "2"], "b": ["3", "4"]}, size=(1200, 900))
    torch.save(torchvision.models.resnet18().state_dict(), tmp_path / "r18.pth")
    plan = _plan("--scale", "data", "--detect-voc", str(big), "a", "b", "--weights", f"resnet18={tmp_path}/r18.pth")
    cfg = _leg_config(plan, tmp_path)
    assert (cfg["INPUT.MIN_SIZE_TEST"], cfg["INPUT.MAX_SIZE_TEST"]) == ("600", "1000")
    assert plan.width == 1.0 and cfg["MODEL.BACKBONES.WIDTH"] == "1.0"


@pytest.mark.bad_input
@pytest.mark.parametrize("argv, message", [
    (["--detect-size", "320"], r"--detect-size: sets the data scale's legs; this job runs at --scale embedded"),
    (["--scale", "data"], r"--scale data sizes the legs from your own detection data; give --detect-coco"),
    (["--scale", "data", "--detect-epochs", "2", "--detect-iterations", "5", "--detect-voc", "VOC", "a", "b"],
     r"--detect-epochs and --detect-iterations both set the data scale's schedule; give one"),
    (["--scale", "data", "--detect-size", "8", "--detect-voc", "VOC", "a", "b"], r"--detect-size 8: a shorter side"),
    (["--detect-voc-train", "VOC2012", "trainval"], r"--detect-voc-train: adds a train set to --detect-voc's"),
    (["--rerun-changed", "--fresh"], r"--rerun-changed with --fresh: .*--fresh reruns them all; give one"),
])
def test_data_scale_options_that_cannot_apply_are_refused_naming_them(argv, message, tmp_path, capsys):
    assert main([*JOB, *argv, "--dry-run", "--output-dir", str(tmp_path / "job")]) == 2
    assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "job").exists()


@pytest.mark.bad_input
def test_a_dry_run_without_the_data_asks_for_the_size_it_cannot_read(tmp_path, capsys):
    argv = [*JOB, "--scale", "data", "--detect-voc", str(tmp_path / "absent"), "a", "b", "--dry-run"]
    assert main(argv) == 2
    assert "give --detect-size PX (and --detect-iterations N) to plan without them" in capsys.readouterr().err


def test_voc_07_plus_12_trains_on_both_splits_and_scores_on_07_test(tmp_path):
    v07 = make_voc(tmp_path / "VOC2007", {"trainval": ["a0", "a1"], "test": ["t0", "t1"]})
    v12 = make_voc(tmp_path / "VOC2012", {"trainval": ["b0", "b1", "b2"]}, size=(500, 375))
    plan = _plan("--scale", "data", "--detect-voc", str(v07), "trainval", "test", "--detect-voc-train", str(v12),
                 "trainval")
    assert plan.detect_data.train_images == 5 and plan.detect_data.classes == ("cell", "platelet")
    argv = " ".join(plan_stages(plan, tmp_path)[-1].argv)
    assert (f"--dataset-voc main_job_train {v07} trainval --dataset-voc main_job_train_2 {v12} trainval "
            f"--dataset-voc main_job_test {v07} test --voc-classes cell,platelet") in argv
    assert 'DATASETS.TRAIN ("main_job_train","main_job_train_2",) DATASETS.TEST ("main_job_test",)' in argv
    assert "SOLVER.MAX_ITER 30" in argv  # 12 epochs of the 5 images of both splits, 2 a batch
    assert "VOC split " + f"{v07} [trainval] + {v12} [trainval] -> {v07} [test]" in plan.detect_data.describe()


@pytest.mark.bad_input
def test_a_test_split_naming_a_class_no_train_split_has_is_refused_naming_both(tmp_path, capsys):
    v07 = make_voc(tmp_path / "VOC2007", {"trainval": ["a0"]}, classes=("cell",))
    make_voc(v07, {"test": ["t0", "t1", "t2"]}, classes=("cell", "bus"))  # a bus in the test images only
    v12 = make_voc(tmp_path / "VOC2012", {"trainval": ["b0"]}, classes=("cell",))
    assert main([*JOB, "--detect-voc", str(v07), "trainval", "test", "--detect-voc-train", str(v12), "trainval",
                 "--dry-run", "--output-dir", str(tmp_path / "job")]) == 2
    err = capsys.readouterr().err
    assert "names classes the train split(s) VOC2007 [trainval] + VOC2012 [trainval] have no object of: ['bus']" in err
    assert main([*JOB, "--detect-voc", str(v07), "trainval", "test", "--detect-voc-train", str(tmp_path / "VOC2012x"),
                 "trainval", "--output-dir", str(tmp_path / "job")]) == 2  # named by the option that gave it
    assert f"--detect-voc-train {tmp_path / 'VOC2012x'}: no such directory" in capsys.readouterr().err


@pytest.mark.slow
def test_a_job_at_the_data_scale_runs_its_legs_at_the_datas_size_and_says_so_first(voc, tmp_path):
    """From a published-format weights file, on 640x480 VOC images: the leg's config.yaml holds 480 / 800, the
    report's first result line and the summary's first line name the size, iterations and the paper's values."""
    torch.manual_seed(0)
    torch.save(torchvision.models.resnet18().state_dict(), tmp_path / "r18.pth")
    proc = run_tool("tools/main_job.py", *JOB, "--weights", f"resnet18={tmp_path / 'r18.pth'}", "--scale", "data",
                    "--detect-iterations", "2", "--detect-voc", voc, "trainval", "test", "--output-dir",
                    tmp_path / "job", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (leg,) = (tmp_path / "job" / "detect").iterdir()
    config = (leg / "config.yaml").read_text()
    assert re.search(r"MIN_SIZE_TEST: 480\n", config) and re.search(r"MAX_SIZE_TEST: 800\n", config)
    said = ("data scale: the paper configs' detector at 480-px shorter side (longer at most 800; from the train "
            "images' median 640x480; the paper: 600 / 1000), 2 iterations of 2 images (--detect-iterations; the "
            "paper: 8,750 of 16)")
    first = (tmp_path / "job" / "report" / "report.md").read_text().split("## Result\n\n- ")[1]
    assert first.startswith(said[0].upper() + said[1:])
    assert said in (tmp_path / "job" / "summary.txt").read_text().splitlines()[0]
    per_class = json.loads((tmp_path / "job" / "report" / "report.json").read_text())
    assert "per_class" in json.dumps(per_class)  # VOC: a column per class
