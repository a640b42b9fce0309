"""Bad input, tried as a new user (and an attacker) would: hostile configs, silent overwrites, numbers that would be
silently wrong, and the poor-but-not-dangerous cases. Each gets one clear error (naming the file / key) or the
references' behaviour; nothing valid changes."""

import json
import logging
import os
import shutil

import numpy as np
import pytest
import torch
from detectron2.data import DatasetCatalog, MetadataCatalog
from detectron2.structures import Boxes, Instances
from PIL import Image

from backbones import CheckpointReadError, create_model, load_pretrained
from classification.data.datasets import SKIPPED, ImageFolderDataset
from classification.data.images import ImageReadError, open_image
from classification.engine.cli import check_process_count
from classification.engine.config import ClsConfig
from classification.engine.errors import UsageError
from conftest import REPO, det_args, run_tool
from detection import get_detection_cfg
from detection.config import ConfigFileError
from detection.datasets import DatasetFormatError, load_coco_checked, register_voc
from detection.engine import train_net
from detection.evaluation import COCOEvaluator, VOCDetectionEvaluator, voc_eval_class
from detection.report import load_run

pytestmark = pytest.mark.bad_input

HOSTILE = "MODEL:\n  WEIGHTS: !!python/object/apply:os.system ['touch {marker}']\n"


# ---- 1. a config file runs code --------------------------------------------------------------------------------

@pytest.mark.slow
def test_hostile_yaml_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "pwned"
    bad = tmp_path / "bad.yaml"
    bad.write_text(HOSTILE.format(marker=marker))
    with pytest.raises(ConfigFileError, match=r"bad.yaml, line 2: refused: .*YAML tag"):
        get_detection_cfg(str(bad))
    child = tmp_path / "child.yaml"  # the same through a _BASE_
    child.write_text(f"_BASE_: {bad.name}\nSOLVER:\n  MAX_ITER: 5\n")
    with pytest.raises(ConfigFileError, match="bad.yaml"):
        get_detection_cfg(str(child))
    proc = run_tool("tools/train_det.py", "--config-file", child, "MODEL.DEVICE", "cpu")
    assert proc.returncode != 0 and "refused" in proc.stderr and "Traceback" not in proc.stderr
    assert not marker.exists()  # the command never ran
    run = tmp_path / "run"  # and in a run directory the report reads
    run.mkdir()
    (run / "config.yaml").write_text(HOSTILE.format(marker=marker))
    assert load_run(run).status.startswith("unreadable config.yaml") and not marker.exists()


def test_base_cycle_and_malformed_configs_name_the_file(tmp_path):
    (tmp_path / "a.yaml").write_text("_BASE_: b.yaml\n")
    (tmp_path / "b.yaml").write_text("_BASE_: a.yaml\n")
    with pytest.raises(ConfigFileError, match=r"_BASE_ cycle: .*a.yaml -> .*b.yaml -> .*a.yaml"):
        get_detection_cfg(str(tmp_path / "a.yaml"))
    (tmp_path / "c.yaml").write_text("MODEL: [unclosed\n")
    with pytest.raises(ConfigFileError, match="c.yaml: not valid YAML"):
        get_detection_cfg(str(tmp_path / "c.yaml"))
    (tmp_path / "d.yaml").write_text("- a list\n")
    with pytest.raises(ConfigFileError, match="d.yaml: a config must be a mapping"):
        get_detection_cfg(str(tmp_path / "d.yaml"))


def test_a_long_base_chain_is_refused_as_a_chain(tmp_path):
    """A long chain of files each the _BASE_ of the one before (1200 were reported as "nested too deeply to parse
    (more than 64 levels)", naming a file in the middle: fvcore's recursion), here 41: refused as a chain."""
    for i in range(40):
        (tmp_path / f"c{i}.yaml").write_text(f"_BASE_: c{i + 1}.yaml\n")
    (tmp_path / "c40.yaml").write_text("SOLVER:\n  MAX_ITER: 3\n")
    with pytest.raises(ConfigFileError, match=r"c0.yaml: a _BASE_ chain of more than 32 files \(.*c0.yaml -> .*c1.yaml"
                                              r" -> \.\.\. -> .*c31.yaml -> .*c32.yaml\); refused"):
        get_detection_cfg(str(tmp_path / "c0.yaml"), read_weights=False)
    assert get_detection_cfg(str(tmp_path / "c20.yaml"), read_weights=False).SOLVER.MAX_ITER == 3  # 20 are fine


def test_a_yaml_merge_key_is_plain_yaml_and_its_values_may_be_overridden(tmp_path):
    """`<<: *base` was refused as "a YAML tag that would construct Python objects"."""
    (tmp_path / "m.yaml").write_text("SOLVER: &s\n  MAX_ITER: 9\n  BASE_LR: 0.01\nTEST:\n  AUG:\n    ENABLED: False\n"
                                     "_SOLVER_COPY: &t\n  <<: *s\n  MAX_ITER: 5\n")
    from detection.safe_yaml import load_yaml

    assert load_yaml(tmp_path / "m.yaml")["_SOLVER_COPY"] == {"MAX_ITER": 5, "BASE_LR": 0.01}
    (tmp_path / "n.yaml").write_text("base: &b\n  MAX_ITER: 9\nSOLVER:\n  <<: *b\n  BASE_LR: 0.5\n  BASE_LR: 0.6\n")
    with pytest.raises(ConfigFileError, match=r"n.yaml, line 6: duplicate key 'BASE_LR' \(first on line 5"):
        load_yaml(tmp_path / "n.yaml")  # the node's own keys are still checked
    (tmp_path / "o.yaml").write_text("SOLVER:\n  <<: 5\n")
    with pytest.raises(ConfigFileError, match=r"o.yaml, line 2: a merge key \(<<\) expected a mapping"):
        load_yaml(tmp_path / "o.yaml")  # plain YAML, not "a tag that would construct Python objects"


# ---- 2. --dataset-voc swallowed the overrides -------------------------------------------------------------------

def test_dataset_voc_takes_exactly_three_values():
    args = train_net.build_parser().parse_args(
        ["--dataset-voc", "mine", "/data/voc", "trainval", "--voc-classes", "cat,dog", "OUTPUT_DIR", "out",
         "DATASETS.TRAIN", '("mine",)'])
    assert args.dataset_voc == [["mine", "/data/voc", "trainval"]] and args.voc_classes == "cat,dog"
    assert train_net.config_overrides(args.opts) == ["OUTPUT_DIR", "out", "DATASETS.TRAIN", '("mine",)']
    # the old form (classes as extra values) is an error that says what to do, not a silent default run
    old = train_net.build_parser().parse_args(["--dataset-voc", "mine", "/d", "trainval", "cat", "dog"])
    with pytest.raises(SystemExit, match="--voc-classes"):
        train_net.config_overrides(old.opts)


def test_flags_after_overrides_and_odd_overrides_say_what_to_do():
    with pytest.raises(SystemExit, match="--resume appears among the KEY VALUE config overrides"):
        train_net.config_overrides(["SOLVER.MAX_ITER", "10", "--resume"])
    with pytest.raises(SystemExit, match="odd number"):
        train_net.config_overrides(["SOLVER.MAX_ITER"])


# ---- 3./4. silent overwrite, evaluating random weights ---------------------------------------------------------

def _args(out, *extra):
    return train_net.build_parser().parse_args(
        ["--config-file", "configs/COCO-Detection/faster_rcnn_R_34_C4.yaml", *extra, "MODEL.WEIGHTS", "",
         "OUTPUT_DIR", str(out)])


def test_a_finished_run_is_not_overwritten(tmp_path):
    out = tmp_path / "done"
    out.mkdir()
    (out / "model_final.pth").write_bytes(b"weights")
    (out / "metrics.json").write_text("{}")
    with pytest.raises(UsageError, match="already holds a run .*model_final.pth, metrics.json.*--resume"):
        train_net.setup(_args(out))
    assert (out / "model_final.pth").read_bytes() == b"weights"
    assert not (out / "config.yaml").exists()  # refused before anything was written


def test_eval_only_without_weights_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="--eval-only needs trained weights"):
        train_net.setup(_args(tmp_path / "eval", "--eval-only"))
    assert not (tmp_path / "eval" / "metrics.json").exists()


# ---- 5.-7. evaluation that would be silently wrong -------------------------------------------------------------

GT = {"img1": (np.array([[1.0, 1.0, 20.0, 20.0]]), np.array([False])),
      "img2": (np.array([[30.0, 30.0, 60.0, 60.0]]), np.array([False]))}


def test_voc_refuses_nan_scores_and_unknown_images():
    good = [("img1", 0.9, (1, 1, 20, 20)), ("img2", 0.8, (30, 30, 60, 60))]
    assert voc_eval_class(GT, good, 0.5, True)[2] == pytest.approx(1.0)
    with pytest.raises(FloatingPointError, match="score nan on image 'img2'"):
        voc_eval_class(GT, [good[0], ("img2", float("nan"), (30, 30, 60, 60))], 0.5, True)
    with pytest.raises(KeyError, match="'img9', which is not in the ground truth"):
        voc_eval_class(GT, good + [("img9", 0.5, (1, 1, 5, 5))], 0.5, True)


def test_voc_class_without_ground_truth_counts_as_zero(tiny_data, caplog):
    records = DatasetCatalog.get("tiny_voc_val")
    names = MetadataCatalog.get("tiny_voc_val").thing_classes
    register_voc("tiny_voc_extra_class", str(tiny_data), "val", class_names=[*names, "unicorn"])
    ev = VOCDetectionEvaluator("tiny_voc_extra_class", distributed=False)
    ev.reset()
    for rec in records:  # perfect detections of every real object
        boxes = torch.tensor([a["bbox"] for a in rec["annotations"]], dtype=torch.float32)
        inst = Instances((rec["height"], rec["width"]), pred_boxes=Boxes(boxes),
                         scores=torch.full((len(boxes),), 0.9),
                         pred_classes=torch.tensor([a["category_id"] for a in rec["annotations"]]))
        ev.process([{"image_id": rec["image_id"]}], [{"instances": inst}])
    with caplog.at_level(logging.WARNING):
        res = ev.evaluate()["bbox"]
    assert res["AP50-unicorn"] == 0.0 and res["AP50"] == pytest.approx(100.0 * len(names) / (len(names) + 1))
    assert "'unicorn' has no non-difficult ground truth" in caplog.text


def test_coco_ap_of_a_voc_dataset_with_difficult_objects(tiny_data, tmp_path):
    """faster-coco-eval on a VOC-registered dataset (string image ids); a difficult object is not a target."""
    records = DatasetCatalog.get("tiny_voc_val")
    hard = records[0]["annotations"][0]
    hard["difficult"] = 1  # the dataset dicts are cached by nothing: patch what the evaluator will read
    DatasetCatalog.register("tiny_voc_val_hard", lambda: records)
    MetadataCatalog.get("tiny_voc_val_hard").set(thing_classes=MetadataCatalog.get("tiny_voc_val").thing_classes)
    ev = COCOEvaluator("tiny_voc_val_hard", str(tmp_path), distributed=False)
    gt = json.loads((tmp_path / "tiny_voc_val_hard_coco_format_difficult_ignore.json").read_text())
    assert all(isinstance(im["id"], int) for im in gt["images"]) and sum(a["iscrowd"] for a in gt["annotations"]) == 1
    ev.reset()
    for rec in records:  # perfect detections of the non-difficult objects only
        anns = [a for a in rec["annotations"] if not a.get("difficult")]
        inst = Instances((rec["height"], rec["width"]),
                         pred_boxes=Boxes(torch.tensor([a["bbox"] for a in anns]).reshape(-1, 4).float()),
                         scores=torch.full((len(anns),), 0.9),
                         pred_classes=torch.tensor([a["category_id"] for a in anns]))
        ev.process([{"image_id": rec["image_id"]}], [{"instances": inst}])
    assert ev.evaluate()["bbox"]["AP50"] == pytest.approx(100.0)


# ---- poor but not dangerous ------------------------------------------------------------------------------------

def test_slurm_without_slurm_is_an_error(tiny_data, tmp_path, no_slurm, capsys):
    with pytest.raises(SystemExit) as exit_:
        train_net.run(det_args(tiny_data, tmp_path / "s", 2, "--slurm")[1:])
    assert exit_.value.code == 2  # the entry point's exit; the library raised UsageError
    assert "error: --slurm: this machine has no Slurm" in capsys.readouterr().err


@pytest.mark.parametrize("tool", ["train_det", "train_cls"])
def test_slurm_whose_controller_cannot_be_reached_is_one_line_quoting_sbatch(tiny_data, tmp_path, no_slurm,
                                                                             monkeypatch, capsys, tool):
    """sbatch installed, no controller: submitit's traceback and exit 1. A fake sbatch that fails as Slurm's does
    (srun present, so that submitit picks Slurm)."""
    import os

    from classification.engine import train_net as cls_train_net

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, script in (("sbatch", "echo 'sbatch: error: Batch job submission failed: Unable to contact slurm "
                                    "controller (connect failure)' >&2; exit 1"), ("srun", "exit 1")):
        (bin_dir / name).write_text(f"#!/bin/sh\n{script}\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    argv = (det_args(tiny_data, tmp_path / "s", 2, "--slurm")[1:] if tool == "train_det" else
            ["--slurm", "--gpus-per-node", "0", "--output-dir", str(tmp_path / "c")])
    with pytest.raises(SystemExit) as exit_:
        (train_net if tool == "train_det" else cls_train_net).run(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "error: --slurm: the job was not submitted; sbatch said: sbatch: error: Batch job submission failed: " \
           "Unable to contact slurm controller (connect failure)\n" in err and "Traceback" not in err, err
    assert err.count("Unable to contact") == 1  # submitit's own print of sbatch's stderr is not repeated


def test_more_processes_than_cores_are_refused_before_any_starts(capsys, tmp_path, monkeypatch):
    """9 CPU processes on 2 cores each held the model and data (4.9 GB) and crawled: refused, one line, nothing
    started or written."""
    from classification.engine import train_net as cls_train_net

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cores = len(os.sched_getaffinity(0))
    check_process_count(cores)  # one a core is fine
    with pytest.raises(UsageError, match=f"--num-gpus {cores + 1}: no GPU here, .* gives this job {cores} core"):
        check_process_count(cores + 1)
    with pytest.raises(SystemExit) as exit_:
        cls_train_net.run(["--num-gpus", "64", "--output-dir", str(tmp_path / "run")])
    assert exit_.value.code == 2 and not (tmp_path / "run").exists()
    err = capsys.readouterr().err
    assert err.startswith("error: --num-gpus 64: no GPU here") and err.count("\n") == 1


def test_more_processes_than_gpus_are_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    check_process_count(1)
    with pytest.raises(UsageError, match=r"--num-gpus 2: this machine shows 1 GPU\(s\)"):
        check_process_count(2)


@pytest.mark.parametrize("bad,match", [
    ({"bbox": [1, 2, 3]}, r"bbox \[1, 2, 3\]; a box is 4 finite numbers"),
    ({"bbox": ["1", "2", "3", "4"]}, "a box is 4 finite numbers"),
])
def test_coco_malformed_boxes_and_no_categories(tmp_path, bad, match):
    Image.new("RGB", (40, 30)).save(tmp_path / "a.jpg")
    coco = {"images": [{"id": 1, "file_name": "a.jpg", "width": 40, "height": 30}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "iscrowd": 0, "area": 4, **bad}],
            "categories": [{"id": 1, "name": "x"}]}
    (tmp_path / "c.json").write_text(json.dumps(coco))
    with pytest.raises(DatasetFormatError, match=f"c.json: annotation 0 of image .*a.jpg.*{match}"):
        load_coco_checked(str(tmp_path / "c.json"), str(tmp_path), "bad_boxes")
    (tmp_path / "n.json").write_text(json.dumps({**coco, "annotations": [], "categories": []}))
    with pytest.raises(DatasetFormatError, match="n.json: no categories"):
        load_coco_checked(str(tmp_path / "n.json"), str(tmp_path), "no_categories")


def test_decompression_bomb_is_named_and_skippable(tmp_path):
    (tmp_path / "train" / "a").mkdir(parents=True)
    Image.new("1", (20000, 20000)).save(tmp_path / "train" / "a" / "bomb.png")  # 400 Mpixel in a few KB
    with pytest.raises(ImageReadError, match="bomb.png: refused to decode"):
        open_image(tmp_path / "train" / "a" / "bomb.png")
    ds = ImageFolderDataset(tmp_path, "train", on_error="skip")
    assert ds[0] == (SKIPPED, str(tmp_path / "train" / "a" / "bomb.png"))


def test_num_classes_smaller_than_the_dataset_is_refused_at_start(tiny_data):
    from detection.engine.data import build_train_loader

    cfg = get_detection_cfg(["configs/COCO-Detection/faster_rcnn_R_34_C4.yaml",
                             "configs/Embedded-Detection/smoke.yaml"],
                            ["MODEL.DEVICE", "cpu", "DATASETS.TRAIN", '("tiny_train",)',
                             "MODEL.ROI_HEADS.NUM_CLASSES", "2"])
    with pytest.raises(ValueError, match=r"has 4 classes but MODEL.ROI_HEADS.NUM_CLASSES is 2: set "
                                         r"MODEL.ROI_HEADS.NUM_CLASSES 4"):
        build_train_loader(cfg)


def test_a_text_file_named_pth_is_a_clear_error(tmp_path):
    (tmp_path / "w.pth").write_text("these are not weights\n")
    with pytest.raises(CheckpointReadError, match="w.pth: cannot read checkpoint, not a torch file"):
        load_pretrained(create_model("resnet18"), tmp_path / "w.pth")


def test_our_own_plain_state_dict_loads_with_drop_classifier(tmp_path):
    torch.save(create_model("resnet18", num_classes=10).state_dict(), tmp_path / "sd.pth")
    report = load_pretrained(create_model("resnet18", num_classes=3), tmp_path / "sd.pth", drop_classifier=True)
    assert report.source_format == "backbones" and report.ok


def test_model_options_of_the_wrong_type_are_refused():
    with pytest.raises(ValueError, match="stride_in_1x1 must be True or False, got 'False'"):
        create_model("resnet50", stride_in_1x1="False")
    with pytest.raises(ValueError, match="num_classes must be an integer >= 0"):
        create_model("resnet18", num_classes=-5)
    with pytest.raises(ValueError, match="eval_period must be a positive integer, got 0"):
        ClsConfig(eval_period=0)


def test_report_cli_bad_inputs(tmp_path):
    missing = run_tool("tools/report.py", tmp_path / "nope", "--output-dir", tmp_path / "out")
    assert missing.returncode != 0 and "no such run directory" in missing.stderr
    run = tmp_path / "a" / "run"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text("{not json")
    assert load_run(run).status.startswith(f"unusable metrics.json ({run / 'metrics.json'}: not JSON (line 1")


@pytest.mark.parametrize("special", ["fifo", "device"])
@pytest.mark.parametrize("name", ["metrics.json", "training_log.json", "log.txt"])
def test_a_run_file_that_is_a_fifo_or_a_device_lists_the_run_as_unusable_without_reading_it(tmp_path, special,
                                                                                              name):
    """tools/report.py hung on a FIFO metrics.json and raised MemoryError on a symlink to /dev/zero: run files are
    regular files with a size bound, and the run is listed with the reason, as for any unusable run."""
    from conftest import make_fifo

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("MODEL:\n  WEIGHTS: ''\n")
    target = run / name
    if special == "fifo":
        make_fifo(target)
    else:
        target.symlink_to("/dev/null")  # a device as /dev/zero is, which a regression reads to EOF
    status = load_run(run).status
    kind = "a FIFO (named pipe)" if special == "fifo" else "a character device"
    assert f"{target}: {kind}, not a regular file; refused" in status, status


def test_a_report_of_directories_without_runs_is_an_error(tmp_path, capsys):
    """It wrote an empty report and exited 0; a parent of runs (output/) given instead of them, likewise."""
    from report import main as report_main  # tools/report.py

    empty = tmp_path / "empty"
    (tmp_path / "a" / "run").mkdir(parents=True)
    (tmp_path / "a" / "run" / "config.yaml").write_text("SEED: 0\n")
    empty.mkdir()
    with pytest.raises(SystemExit) as exit_:
        report_main([str(empty), str(tmp_path / "a"), "--output-dir", str(tmp_path / "out")])
    assert exit_.value.code == 2 and not (tmp_path / "out").exists()
    assert capsys.readouterr().err == (
        f"error: no runs found under {empty}, {tmp_path / 'a'}: a run directory holds config.yaml (an OUTPUT_DIR "
        f"of tools/train_det.py) or config.json (tools/train_cls.py); {tmp_path / 'a'} holds 1 run directory: "
        f"pass them (e.g. {tmp_path / 'a' / '*'})\n")
    assert load_run(empty).status == "not a run directory (no config.yaml, config.json or metrics.json)"


def test_runs_that_repeat_a_seed_are_flagged_and_count_once(tmp_path):
    """Two runs of one configuration with the same SEED repeat one experiment: they were averaged as independent
    seeds ("n=2, seeds: 0, 0"). Listed, warned about (group and seed named), counted once in n and the numbers."""
    from detection.report import group_runs, write_report
    from fabricated_runs import make_run

    runs = [make_run(tmp_path, name, "resnet101", coco={"AP": ap, "AP50": 40.0}, seed=seed)
            for name, ap, seed in (("rep_s0", 20.0, 0), ("rep_seed0", 22.0, 0), ("rep_s1", 30.0, 1))]
    (group,) = group_runs([load_run(r) for r in runs])
    assert group.name == "rep" and len(group.runs) == 3 and group.seeds == [0, 0, 1]
    assert group.n == 2 and group.repeated_seeds == {0: ["rep_s0", "rep_seed0"]}
    assert group.metrics["AP"].runs == 2 and group.metrics["AP"].mean == pytest.approx((21.0 + 30.0) / 2)
    paths = write_report(runs, tmp_path / "report")
    warning = ("Warning: group rep holds 2 runs with SEED 0 (rep_s0, rep_seed0): a repeated seed is not an "
               "independent run; they count as one run (their mean) in its n and statistics.")
    assert warning in paths["markdown"].read_text() and "seeds: 0, 0, 1 (repeated: 0; counted once)" in \
        paths["markdown"].read_text()
    report = json.loads(paths["json"].read_text())
    assert report["warnings"] == [warning] and report["groups"][0]["n"] == 2
    assert report["results"]["coco"]["rows"][0][3] == "2 (+1 repeated seed)"


def test_offline_weights_url_says_to_pass_a_local_file():
    with pytest.raises(FileNotFoundError, match=r"cannot download it .*pass a local file, or MODEL.WEIGHTS"):
        get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_34_C4.yaml",
                          ["MODEL.WEIGHTS", "http://127.0.0.1:9/nowhere/R-34.pth"])


@pytest.mark.slow
def test_cli_errors_are_one_line_without_traceback(tmp_path):
    proc = run_tool("tools/train_det.py", "--config-file", tmp_path / "missing.yaml")
    assert proc.returncode == 2 and "error: FileNotFoundError: config file not found" in proc.stderr
    assert "Traceback" not in proc.stderr
    debug = run_tool("tools/train_det.py", "--config-file", tmp_path / "missing.yaml", "--debug")
    assert "Traceback" in debug.stderr
    cls = run_tool("tools/train_cls.py", "--eval-period", "0", "--output-dir", tmp_path / "c")
    assert cls.returncode == 2 and "eval_period must be a positive integer" in cls.stderr


# ---- Detectron2 0.6 fixes backported by tools/patch_detectron2.py ----------------------------------------------

def test_torch_native_lr_scheduler_state_is_checkpointed():
    from detectron2.engine import hooks

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[2], gamma=0.1)
    opt.step()
    sched.step()
    state = hooks.LRScheduler(opt, sched).state_dict()
    assert state.get("last_epoch") == 1
    fresh = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[2], gamma=0.1)
    hooks.LRScheduler(opt, fresh).load_state_dict(state)
    assert fresh.last_epoch == 1


def test_map_dataset_retries_a_failed_sample_on_python_311():
    from detectron2.data.common import MapDataset

    ds = MapDataset([1, 2, 3], lambda x: None if x == 2 else x)
    assert ds[1] in (1, 3)  # the retry drew from the fallback set (a TypeError on Python 3.11 before the patch)



def _alias_bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("kind", ["sequence_bomb", "mapping_bomb", "duplicate_key", "deep", "huge"])
def test_yaml_bombs_duplicates_depth_and_size_are_refused_at_once(tmp_path, kind):
    """Round three: a 531-byte alias bomb under MODEL.PIXEL_MEAN exhausted memory; `SOLVER:` twice silently dropped
    BASE_LR; 5000-deep nesting was a RecursionError; a 10 MB YAML parsed for minutes."""
    path = tmp_path / "c.yaml"
    if kind == "sequence_bomb":
        text = _alias_bomb() + "MODEL:\n  PIXEL_MEAN: *a8\n"  # 9^9 strings once expanded
        match = "expands to more than 100000 values"
    elif kind == "mapping_bomb":
        text = "x0: &x0 {a: 1, b: 1, c: 1, d: 1, e: 1, f: 1, g: 1, h: 1, i: 1}\n" + "".join(
            f"x{i}: &x{i} {{{', '.join(f'{k}: *x{i - 1}' for k in 'abcdefghi')}}}\n" for i in range(1, 9))
        match = "expands to more than 100000 values"
    elif kind == "duplicate_key":
        text = "SOLVER:\n  BASE_LR: 0.5\nMODEL:\n  DEVICE: cpu\nSOLVER:\n  MAX_ITER: 3\n"
        match = r"line 5: duplicate key 'SOLVER' \(first on line 1"
    elif kind == "deep":
        text = "A: " + "[" * 5000 + "]" * 5000 + "\n"
        match = "nested (too deeply|more than 64 levels)"
    else:
        text = "A: [" + ", ".join(["1"] * 600_000) + "]\n"
        match = r"MiB; a config is at most 1 MiB"
    path.write_text(text)
    with pytest.raises(ConfigFileError, match=match):
        get_detection_cfg(str(path), read_weights=False)
    if kind == "sequence_bomb":  # the report reads a run's config.yaml through the same loader
        run = tmp_path / "run"
        run.mkdir()
        (run / "config.yaml").write_text("MODEL:\n  DEVICE: cpu\n" + _alias_bomb() + "BOMB: *a8\n")
        assert load_run(run).status.startswith("unreadable config.yaml (")


def test_a_second_run_into_a_busy_output_dir_stops_before_writing(tiny_data, tmp_path):
    """Two runs into one OUTPUT_DIR at once used to both exit 0 with their files mixed (B's config.yaml, A's
    model): the first holds OUTPUT_DIR/.run.lock; the second stops at once and writes nothing."""
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    first = subprocess.Popen([sys.executable, *map(str, det_args(tiny_data, out, 100000))], cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        # its first checkpoint: set-up (config.yaml written whole) is behind it; config.yaml alone can be seen
        # created but still empty under load
        while not (out / "last_checkpoint").is_file():
            assert time.time() < deadline and first.poll() is None
            time.sleep(0.2)
        before = (out / "config.yaml").read_text()
        assert "OUTPUT_DIR" in before
        second = run_tool(*det_args(tiny_data, out, 2, "--resume"))
        assert second.returncode != 0 and "is in use by pid" in second.stderr, second.stderr[-2000:]
        assert "another run is writing into it" in second.stderr and "Traceback" not in second.stderr
        assert (out / "config.yaml").read_text() == before  # nothing of the second run reached the directory
    finally:
        first.kill()
        first.wait()
    again = run_tool(*det_args(tiny_data, out, 2, "--resume"))  # the lock died with the killed run
    assert "is in use" not in again.stderr


def test_a_run_whose_weights_blow_up_at_the_end_is_recorded_as_failed(tiny_data, tmp_path):
    """MAX_ITER 1 and an absurd lr: the one update makes the weights non-finite; Detectron2 still evaluates them in
    after_train and writes metrics.json. The run exits non-zero, failure.json says why, the report and the main job
    do not count it as finished."""
    from detection.main_job.graph import stage_done
    from detection.main_job.plan import Stage

    out = tmp_path / "run"  # lr 1e300: finite (the config refuses inf), the float32 update overflows
    proc = run_tool(*det_args(tiny_data, out, 1, "SOLVER.BASE_LR", "1e300", "SOLVER.WARMUP_ITERS", "0",
                              "SOLVER.CLIP_GRADIENTS.ENABLED", "False"))
    assert proc.returncode != 0
    failure = json.loads((out / "failure.json").read_text())
    assert failure["iteration"] == 0 and "inf/NaN" in failure["error"]
    assert load_run(out).status.startswith("failed at iteration 0: FloatingPointError")
    assert not stage_done(Stage("t", out, [], "detect", "resnet18", "scratch", 1))


@pytest.fixture(scope="module")
def tiny_detector(tiny_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("detector") / "run"
    proc = run_tool(*det_args(tiny_data, out, 2))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.mark.parametrize("case", ["backbone_only", "other_width", "nan", "int8", "resume_and_weights",
                                  "other_class_ids"])
def test_eval_only_refuses_weights_it_cannot_score(tiny_data, tiny_detector, tmp_path, case):
    """Round three: --eval-only scored backbone-only weights (random RPN / box head), another width's detector, an
    all-NaN detector (AP 0.0, exit 0); --eval-only --resume MODEL.WEIGHTS X evaluated the run's own checkpoint and
    recorded X. Each now stops with one line, and nothing is written."""
    final = tiny_detector / "model_final.pth"
    extra, opts, match = [], [], ""
    if case == "backbone_only":
        model = create_model("resnet18", width=0.25, num_classes=10)
        torch.save({"model": model.state_dict()}, tmp_path / "cls.pth")
        opts, match = ["MODEL.WEIGHTS", str(tmp_path / "cls.pth")], "backbone weights, not a detector"
    elif case == "other_width":
        opts, match = ["MODEL.WEIGHTS", str(final), "MODEL.BACKBONES.WIDTH", "0.5"], "shape differs"
    elif case in ("nan", "int8"):
        ckpt = torch.load(final, weights_only=True)
        key = next(k for k in ckpt["model"] if k.endswith("conv1.weight"))
        ckpt["model"][key] = (torch.full_like(ckpt["model"][key], float("nan")) if case == "nan"
                              else ckpt["model"][key].to(torch.int8))
        torch.save(ckpt, tmp_path / "bad.pth")
        opts = ["MODEL.WEIGHTS", str(tmp_path / "bad.pth")]
        match = "inf/NaN values" if case == "nan" else "integer tensors for float parameters"
    elif case == "other_class_ids":  # a checkpoint of data that numbers the classes otherwise: AP 0.00, rc 0
        ckpt = torch.load(final, weights_only=True)
        ckpt["trainer"]["thing_classes"] = ckpt["trainer"]["thing_classes"][::-1]
        torch.save(ckpt, tmp_path / "other_ids.pth")
        opts, match = ["MODEL.WEIGHTS", str(tmp_path / "other_ids.pth")], "the same classes in another order"
    else:
        extra, opts, match = ["--resume"], ["MODEL.WEIGHTS", str(final)], "pass one of them"
    out = tmp_path / "eval"
    proc = run_tool(*det_args(tiny_data, out, 2, "--eval-only", *extra, *opts))
    assert proc.returncode != 0 and match in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not (out / "metrics.json").exists()


def test_the_checkpoint_records_its_class_ids_and_a_resume_on_data_numbered_otherwise_is_refused(tiny_data,
                                                                                                 tiny_detector,
                                                                                                 tmp_path):
    """--resume with a dataset that numbers the classes differently trained on with swapped classes."""
    from detection.checkpoint import dataset_classes

    final = torch.load(tiny_detector / "model_final.pth", weights_only=True)
    assert final["trainer"]["thing_classes"] == dataset_classes("tiny_train")
    run = tmp_path / "run"
    shutil.copytree(tiny_detector, run)
    final["trainer"]["thing_classes"] = final["trainer"]["thing_classes"][::-1]
    torch.save(final, run / "model_final.pth")
    (run / "last_checkpoint").write_text("model_final.pth")
    proc = run_tool(*det_args(tiny_data, run, 3, "--resume"))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, (run / "log.txt").read_text()[-3000:]
    assert f"{run / 'model_final.pth'} was trained on classes" in proc.stderr
    assert "Resuming it would score or train class i as another" in proc.stderr


@pytest.mark.parametrize("bad", ["nan", "int8"])
def test_load_pretrained_refuses_nan_and_integer_weights(tmp_path, bad):
    """load_pretrained reported ok for all-NaN weights, and float weights stored as int8 (safetensors) loaded."""
    from safetensors.torch import save_file

    src = create_model("resnet18", width=0.25, num_classes=10)
    sd = {k: v.clone() for k, v in src.state_dict().items()}
    key = "stem.conv1.weight"
    sd[key] = torch.full_like(sd[key], float("nan")) if bad == "nan" else sd[key].to(torch.int8)
    save_file(sd, str(tmp_path / "w.safetensors"))
    target = create_model("resnet18", width=0.25, num_classes=10)
    before = target.state_dict()[key].clone()
    with pytest.raises(Exception, match="inf/NaN" if bad == "nan" else "torch.int8 values for a torch.float32"):
        load_pretrained(target, tmp_path / "w.safetensors")
    assert torch.equal(target.state_dict()[key], before)  # nothing was loaded
    report = load_pretrained(target, tmp_path / "w.safetensors", strict=False)
    assert not report.ok and report.bad_values and key not in report.loaded
    assert torch.equal(target.state_dict()[key], before)  # not even when not strict


@pytest.mark.parametrize("option,value", [("momentum", float("nan")), ("lr", float("inf")),
                                          ("weight_decay", float("nan"))])
def test_non_finite_solver_options_are_refused(option, value):
    with pytest.raises(ValueError, match=option):
        ClsConfig(**{option: value})


def test_duplicates_that_would_inflate_n_or_change_ap_are_refused(tmp_path):
    """The same run twice (or via a symlink) in a report was n=2; a VOC split listing an id twice dropped AP50
    52.4 -> 30.5; duplicate COCO image ids gave one image another's boxes; two categories with one name
    overwrote each other's AP."""
    from detection.report import write_report

    run = tmp_path / "run"
    run.mkdir()
    (tmp_path / "link").symlink_to(run)
    with pytest.raises(ValueError, match="is given twice"):
        write_report([run, tmp_path / "link"], tmp_path / "report")
    voc = tmp_path / "voc"
    (voc / "ImageSets" / "Main").mkdir(parents=True)
    (voc / "ImageSets" / "Main" / "test.txt").write_text("\ufeffa\nb\na\n")
    from detection.datasets.voc import VOCFormatError, _read_split

    with pytest.raises(VOCFormatError, match=r"test.txt, line 3: image id 'a' is listed twice \(first on line 1\)"):
        _read_split(str(voc), "test")
    (voc / "ImageSets" / "Main" / "test.txt").write_text("\ufeffa\nb\n")
    assert _read_split(str(voc), "test") == ["a", "b"]  # the BOM is not part of the first id
    Image.new("RGB", (40, 30)).save(tmp_path / "a.jpg")
    base = {"images": [{"id": 1, "file_name": "a.jpg", "width": 40, "height": 30}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "iscrowd": 0, "area": 4, "bbox": [1, 1, 5, 5]}],
            "categories": [{"id": 1, "name": "x"}]}
    for key, extra, match in (
            ("images", {"id": 1, "file_name": "a.jpg", "width": 40, "height": 30}, r"images\[1\] has id 1"),
            ("annotations", {**base["annotations"][0]}, r"annotations\[1\] has id 1"),
            ("categories", {"id": 2, "name": "x"}, r"categories\[1\] has name 'x'")):
        data = {**base, key: base[key] + [extra]}
        (tmp_path / "c.json").write_text(json.dumps(data))
        with pytest.raises(DatasetFormatError, match=match):
            load_coco_checked(str(tmp_path / "c.json"), str(tmp_path), f"dup_{key}")


def test_a_resume_with_other_settings_is_refused_and_rewrites_nothing(tiny_detector, tiny_data, tmp_path):
    """`--resume MODEL.BACKBONES.NAME resnet999` failed (exit 2) after rewriting the finished run's config.yaml;
    the report then showed resnet999. `train_cls --resume --model other` did the same to config.json."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(tiny_detector, run)
    before = (run / "config.yaml").read_text()
    proc = run_tool(*det_args(tiny_data, run, 4, "--resume"), "MODEL.BACKBONES.NAME", "resnet34")  # last: wins
    assert proc.returncode != 0 and "--resume with settings other than the run's" in proc.stderr, proc.stderr[-2000:]
    assert "MODEL.BACKBONES.NAME: 'resnet18' -> 'resnet34'" in proc.stderr and "Traceback" not in proc.stderr
    assert (run / "config.yaml").read_text() == before
    argv = ["tools/train_cls.py", "--model", "cifar_resnet20", "--dataset", "embedded", "--image-size", "32",
            "--train-samples", "32", "--val-samples", "16", "--iterations", "2", "--batch-size", "16",
            "--eval-period", "2", "--checkpoint-period", "2", "--workers", "0", "--output-dir", str(tmp_path / "cls")]
    assert run_tool(*argv).returncode == 0
    recorded = (tmp_path / "cls" / "config.json").read_text()
    other = run_tool(*[a if a != "cifar_resnet20" else "cifar_resnet32" for a in argv], "--resume")
    assert other.returncode != 0 and "model: 'cifar_resnet20' -> 'cifar_resnet32'" in other.stderr, other.stderr[-2000:]
    assert (tmp_path / "cls" / "config.json").read_text() == recorded
    longer = run_tool(*[a if a != "2" else "4" for a in argv], "--resume")  # extending the schedule is allowed
    assert longer.returncode == 0, longer.stderr[-2000:]


def test_symlinks_in_the_run_directory_are_refused(tiny_data, tmp_path):
    """config.yaml / log.txt as symlinks made a run overwrite files outside its directory."""
    out = tmp_path / "run"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (out / "log.txt").symlink_to(victim)
    proc = run_tool(*det_args(tiny_data, out, 2))
    assert proc.returncode != 0 and "holds symbolic links (log.txt -> " in proc.stderr, proc.stderr[-2000:]
    assert victim.read_text() == "precious"


def test_a_new_run_into_a_killed_runs_directory_starts_a_fresh_training_log(tiny_data, tmp_path):
    """A run killed before its first checkpoint left training_log.json; the next run appended to it (iterations
    [19, 39, 59, 19, 39, 40]) and the report's curves were wrong. Resumed runs log some iterations twice: the
    report keeps the last record of each."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "training_log.json").write_text("".join(json.dumps({"iteration": i, "total_loss": 9.0}) + "\n"
                                                   for i in (19, 39, 59)))
    proc = run_tool(*det_args(tiny_data, out, 4, "SOLVER.CHECKPOINT_PERIOD", "4"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    its = [json.loads(line)["iteration"] for line in (out / "training_log.json").read_text().splitlines()]
    assert its == sorted(its) and 59 not in its
    (out / "training_log.json").write_text("".join(json.dumps({"iteration": i, "total_loss": float(i)}) + "\n"
                                                   for i in (1, 3, 5, 3, 5, 7)))
    rows = load_run(out).train_log
    assert [r["iteration"] for r in rows] == [1, 3, 5, 7]


@pytest.mark.parametrize("backend", ["pycocotools", "faster_coco_eval"])
def test_coco_evaluation_refuses_non_finite_detections_in_every_backend(backend):
    """pycocotools scored NaN scores silently (AP 43.56) where faster-coco-eval and the VOC evaluator refused."""
    from pycocotools.coco import COCO

    from detection.evaluation.coco import evaluate_coco

    gt = COCO()
    gt.dataset = {"images": [{"id": 1, "width": 50, "height": 50}], "categories": [{"id": 1, "name": "x"}],
                  "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [5, 5, 20, 20], "area": 400,
                                   "iscrowd": 0}]}
    gt.createIndex()
    good = {"image_id": 1, "category_id": 1, "bbox": [5, 5, 20, 20], "score": 0.9}
    assert evaluate_coco(gt, [good], backend=backend).stats["AP50"] == pytest.approx(100.0)
    for bad in ({**good, "score": float("nan")}, {**good, "bbox": [5, 5, float("inf"), 20]}):
        with pytest.raises(ValueError, match="non-finite score or box"):
            evaluate_coco(gt, [good, bad], backend=backend)


def test_coco_ap_on_voc_data_says_how_difficult_objects_count_and_offers_detectron2s_convention(tiny_data,
                                                                                                 tmp_path):
    """COCO-style AP on VOC data marks difficult objects as crowd (ignored); Detectron2's converter keeps them as
    ground truth (up to 20 points lower). Both are available; the one used is recorded beside the numbers."""
    from detectron2.structures import BoxMode

    from detection.evaluation.coco import VOC_DIFFICULT, write_coco_ground_truth

    name = "bad_input_voc_difficult"
    box = {"bbox": [1, 1, 9, 9], "bbox_mode": BoxMode.XYXY_ABS, "category_id": 0}
    DatasetCatalog.register(name, lambda: [{"file_name": str(tiny_data / "x.jpg"), "image_id": "a", "height": 20,
                                            "width": 20, "annotations": [box, {**box, "difficult": 1}]}])
    MetadataCatalog.get(name).thing_classes = ["x"]
    n_difficult = 1
    for policy in VOC_DIFFICULT:
        path = tmp_path / f"{policy}.json"
        write_coco_ground_truth(name, str(path), difficult=policy)
        crowd = sum(a["iscrowd"] for a in json.loads(path.read_text())["annotations"])
        assert crowd == (n_difficult if policy == "ignore" else 0)
    with pytest.raises(ValueError, match="VOC_DIFFICULT_IN_COCO_AP must be one of"):
        write_coco_ground_truth(name, str(tmp_path / "x.json"), difficult="drop")
    evaluator = COCOEvaluator(name, str(tmp_path), voc_difficult="ground_truth")
    assert evaluator.conventions["difficult_objects"] == VOC_DIFFICULT["ground_truth"]


def test_train_and_evaluation_class_lists_must_agree(tmp_path):
    """An imagefolder val missing a class scored 50% on a task learnt to 100%; a stray train/.ipynb_checkpoints
    became class 0 (top-1 0%); a COCO val with renumbered category ids dropped AP50 53.8 -> 33.7."""
    from classification.engine.trainer import build_datasets
    from detection.engine.data import check_test_datasets

    for split, classes in (("train", ("a", "b", ".ipynb_checkpoints")), ("val", ("a",))):
        for c in classes:
            (tmp_path / split / c).mkdir(parents=True)
            if not c.startswith("."):
                Image.new("RGB", (8, 8)).save(tmp_path / split / c / "0.png")
    cfg = ClsConfig(dataset="imagefolder", data_root=str(tmp_path), output_dir=str(tmp_path / "out"))
    with pytest.raises(ValueError, match=r"val's classes differ from train's \(missing in val: \['b'\]"):
        build_datasets(cfg)
    (tmp_path / "val" / "b").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "val" / "b" / "0.png")
    train, val, _ = build_datasets(cfg)
    assert train.classes == val.classes == ["a", "b"]  # the hidden directory is not a class
    (tmp_path / "train" / "c").mkdir()
    (tmp_path / "val" / "c").mkdir()
    with pytest.raises(ValueError, match=r"class directories without images: \['c'\]"):
        build_datasets(cfg)

    def coco(path, ids):
        Image.new("RGB", (20, 20)).save(tmp_path / "i.jpg")
        path.write_text(json.dumps({"images": [{"id": 1, "file_name": "i.jpg", "width": 20, "height": 20}],
                                    "annotations": [{"id": 1, "image_id": 1, "category_id": ids[0], "iscrowd": 0,
                                                     "area": 4, "bbox": [1, 1, 5, 5]}],
                                    "categories": [{"id": i, "name": n} for i, n in zip(ids, ("cat", "dog"))]}))

    from detection.datasets import register_coco

    coco(tmp_path / "tr.json", (1, 2))
    coco(tmp_path / "va.json", (2, 1))  # the same names, renumbered and so re-ordered
    register_coco("cls_check_train", str(tmp_path / "tr.json"), str(tmp_path))
    register_coco("cls_check_val", str(tmp_path / "va.json"), str(tmp_path))
    DatasetCatalog.get("cls_check_train")
    cfg = get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_34_C4.yaml", [
        "DATASETS.TRAIN", '("cls_check_train",)', "DATASETS.TEST", '("cls_check_val",)'], read_weights=False)
    with pytest.raises(ValueError, match="numbers its categories|has classes"):
        check_test_datasets(cfg)
    cfg = get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_34_C4.yaml", [
        "DATASETS.TRAIN", '("cls_check_train",)', "DATASETS.TEST", '("no_such_val",)'], read_weights=False)
    with pytest.raises(KeyError, match="'no_such_val' is not a registered dataset"):
        check_test_datasets(cfg)


@pytest.mark.parametrize("opts,match", [
    (["MODEL.PIXEL_MEAN", "[1.0, 2.0]"], "MODEL.PIXEL_MEAN .*three finite numbers"),
    (["MODEL.PIXEL_STD", "[0.0, 1.0, 1.0]"], "MODEL.PIXEL_STD .*must be > 0"),
    (["MODEL.ROI_HEADS.NUM_CLASSES", "-1"], "MODEL.ROI_HEADS.NUM_CLASSES -1: an integer >= 1"),
    (["SOLVER.IMS_PER_BATCH", "0"], "SOLVER.IMS_PER_BATCH 0"),
    (["SOLVER.CHECKPOINT_PERIOD", "0"], "SOLVER.CHECKPOINT_PERIOD 0"),
    (["SOLVER.MAX_ITER", "-1"], "SOLVER.MAX_ITER -1"),
    (["MODEL.BACKBONES.WIDTH", "1e9"], "WIDTH 1000000000.0: a channel multiplier"),
    (["OUTPUT_DIR", ""], 'OUTPUT_DIR "": a run needs a directory'),
    (["EVAL.COCO_BACKEND", "cocoapi"], "EVAL.COCO_BACKEND 'cocoapi'"),
    (["MODEL.BACKBONES.OUT_FEATURES", '["res5"]'], "IN_FEATURES .* with MODEL.BACKBONES.OUT_FEATURES"),
    (["INPUT.MIN_SIZE_TEST", "-5"], r"INPUT.MIN_SIZE_TEST -5: an integer >= 0 \(0: no resizing\)"),
    (["SOLVER.STEPS", "(30, 20)"], r"SOLVER.STEPS \(30, 20\): increasing iteration numbers"),
    (["SEED", str(2 ** 40)], r"SEED 1099511627776: an integer below 2\*\*32"),
    (["SOLVER.BASE_LR", "-0.01"], r"SOLVER.BASE_LR -0.01: a finite number > 0"),
    (["SOLVER.BASE_LR", "1e400"], r"SOLVER.BASE_LR inf: a finite number > 0"),
    (["SOLVER.MOMENTUM", "1.5"], r"SOLVER.MOMENTUM 1.5: a number in \[0, 1\)"),
    (["SOLVER.WEIGHT_DECAY", "-1e-4"], r"SOLVER.WEIGHT_DECAY -0.0001: a finite number >= 0"),
    (["SOLVER.GAMMA", "0.0"], r"SOLVER.GAMMA 0.0: a finite number > 0"),
    (["SOLVER.WARMUP_FACTOR", "2.0"], r"SOLVER.WARMUP_FACTOR 2.0: a number in \[0, 1\]"),
    (["DATALOADER.SAMPLER_TRAIN", "RepeatFactorTrainingSampler"],
     r"DATALOADER.SAMPLER_TRAIN 'RepeatFactorTrainingSampler': only TrainingSampler"),
])
def test_unusable_config_values_are_refused_naming_the_key(opts, match):
    """Round three's poor ones: each failed later with a bare KeyError / assertion or "diverged at iteration 0"."""
    from detection.config import check_run_config

    cfg = get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_34_C4.yaml", opts, read_weights=False)
    with pytest.raises(ValueError, match=match):
        check_run_config(cfg)


def test_an_unimplemented_train_sampler_is_no_obstacle_to_evaluation():
    """--eval-only of a run whose config.yaml recorded another sampler: no training, nothing to refuse."""
    from detection.config import check_run_config

    cfg = get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_34_C4.yaml",
                            ["DATALOADER.SAMPLER_TRAIN", "RepeatFactorTrainingSampler"], read_weights=False)
    check_run_config(cfg, training=False)
    with pytest.raises(ValueError, match="DATALOADER.SAMPLER_TRAIN"):
        check_run_config(cfg)


def test_a_home_relative_output_dir_is_expanded_not_made_in_the_working_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    cfg = get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_34_C4.yaml", ["OUTPUT_DIR", "~/runs/r34"],
                            read_weights=False)
    assert cfg.OUTPUT_DIR == str(tmp_path / "runs" / "r34")


def test_a_nan_learning_rate_in_a_config_file_is_refused_naming_the_key(tmp_path):
    """YAML's .nan passes Detectron2's type check: it trained and stopped with "training diverged at iteration 1"."""
    from detection.config import check_run_config

    (tmp_path / "nan.yaml").write_text("SOLVER:\n  BASE_LR: .nan\n  MOMENTUM: .nan\n")
    cfg = get_detection_cfg(["configs/COCO-Detection/faster_rcnn_R_34_C4.yaml", str(tmp_path / "nan.yaml")],
                            read_weights=False)
    with pytest.raises(ValueError, match=r"SOLVER.BASE_LR nan: a finite number > 0; SOLVER.MOMENTUM nan"):
        check_run_config(cfg)


# ---- fields that escaped the one-line errors, found late, or dropped a valid box ---------------

def _coco_file(tmp_path, spoil):
    Image.new("RGB", (40, 30)).save(tmp_path / "a.jpg")
    data = {"images": [{"id": 1, "file_name": "a.jpg", "width": 40, "height": 30}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [2, 3, 12, 10], "area": 120,
                             "iscrowd": 0, "segmentation": [[2, 3, 14, 3, 14, 13]]}],
            "categories": [{"id": 1, "name": "cat"}]}
    spoil(data)
    (tmp_path / "c.json").write_text(data["text"] if "text" in data else json.dumps(data))
    return str(tmp_path / "c.json")


@pytest.mark.parametrize("spoil,match", [
    (lambda d: d["annotations"][0].update(ignore=1), r"annotation id 1 \(annotations\[0\]\) has ignore 1; 'ignore' is "
                                                      "not supported"),
    (lambda d: d["images"][0].update(width="40"), r"images\[0\] \(id 1\) has width '40'; width and height are "
                                                  "positive integers"),
    (lambda d: d["categories"][0].update(name=5), r"categories\[0\] \(id 1\) has name 5; a category name is a "
                                                  "non-empty string"),
    (lambda d: d["annotations"][0].update(area="big"), r"annotation id 1 \(annotations\[0\]\) has area 'big'"),
    (lambda d: d["annotations"][0].update(area=2e10), r"annotation 0 of image a.jpg \(id 1; annotation id 1\) has "
                                                       r"area 20000000000.0, more than its 40x30 image or its box "
                                                       r"holds "
                                                       r"\(1200 pixels\)"),  # trained on, never scored: AP 100
    (lambda d: d["annotations"][0].update(image_id=9), r"annotation 1 refers to image_id 9, which is not listed"),
    (lambda d: d.pop("images"), r"no 'images' list"),
    (lambda d: d.update(images=[]), r"'images' is empty"),
    (lambda d: d.update(annotations=None), r"'annotations' is null, not a list \(leave the key out: no ground "
                                           r"truth\)"),  # was a ground truth with no objects
    (lambda d: d.update(text="[" * 100_000 + "]" * 100_000), r"JSON nested too deeply"),
])
def test_coco_fields_that_escaped_the_one_line_errors(tmp_path, spoil, match):
    """Each was a traceback (RecursionError, TypeError in evaluation, Detectron2's assertion on 'ignore') or a
    silent loss (an annotation of an unlisted image); now one line naming the file, the entry and the field."""
    with pytest.raises(DatasetFormatError, match="c.json: " + match):
        load_coco_checked(_coco_file(tmp_path, spoil), str(tmp_path), "poor_coco")


def test_an_invalid_polygon_keeps_its_box_and_num_classes_above_the_data_is_refused(tmp_path, tiny_data):
    from detection.engine.data import check_num_classes

    path = _coco_file(tmp_path, lambda d: d["annotations"][0].update(segmentation=[[2, 3, 14, 13]]))
    assert len(load_coco_checked(path, str(tmp_path), "poor_polygon")[0]["annotations"]) == 1  # was dropped
    DatasetCatalog.get("tiny_train")
    cfg = get_detection_cfg(["configs/COCO-Detection/faster_rcnn_R_34_C4.yaml",
                             "configs/Embedded-Detection/smoke.yaml"],
                            ["MODEL.DEVICE", "cpu", "DATASETS.TRAIN", '("tiny_train",)',
                             "MODEL.ROI_HEADS.NUM_CLASSES", "5"], read_weights=False)
    with pytest.raises(ValueError, match=r"has 4 classes but MODEL.ROI_HEADS.NUM_CLASSES is 5: set "
                                         r"MODEL.ROI_HEADS.NUM_CLASSES 4"):
        check_num_classes(DatasetCatalog.get("tiny_train"), cfg)


@pytest.mark.parametrize("case,match", [
    ("size_inf", r"a.xml: <size> has a non-numeric or infinite width/height"),
    ("utf16", r"trainval.txt: not UTF-8 text"),
    ("empty_split", r"trainval.txt: no image ids \(an empty split file\)"),
    ("missing_jpeg", r"1 of 1 images not found, e.g. \[.*a.jpg"),
])
def test_voc_files_named_before_training(tmp_path, case, match):
    from detection.datasets import VOCFormatError, load_voc_instances

    for d in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (tmp_path / d).mkdir(parents=True)
    width = "inf" if case == "size_inf" else "40"
    (tmp_path / "Annotations" / "a.xml").write_text(
        f"<annotation><size><width>{width}</width><height>30</height></size><object><name>cat</name><bndbox>"
        "<xmin>1</xmin><ymin>1</ymin><xmax>9</xmax><ymax>9</ymax></bndbox></object></annotation>")
    if case != "missing_jpeg":
        Image.new("RGB", (40, 30)).save(tmp_path / "JPEGImages" / "a.jpg")
    split = tmp_path / "ImageSets" / "Main" / "trainval.txt"
    split.write_bytes("a\n".encode("utf-16") if case == "utf16" else b"\n" if case == "empty_split" else b"a\n")
    with pytest.raises((VOCFormatError, FileNotFoundError), match=match):
        load_voc_instances(str(tmp_path), "trainval", ["cat"])


@pytest.mark.parametrize("case, match", [
    ("exif", r"a.jpg: the image is 30x40 \(width x height\) but .*c.json records 40x30 for it; width and height are "
             r"swapped: the file's EXIF orientation tag \(6\) rotates it by 90 degrees when it is read"),
    ("swapped", r"a.jpg: the image is 30x40 .* but .*c.json records 40x30 for it; width and height are swapped: an "
                "EXIF orientation tag rotating the image when it is read is the usual cause"),
    ("other", r"a.jpg: the image is 40x30 .* but .*c.json records 50x30 for it; correct the width and height "
              "recorded in .*c.json"),
    ("voc", r"a.jpg: the image is 40x30 .* but .*Annotations/a.xml records 50x30 for it"),
])
def test_a_recorded_size_the_image_does_not_have_names_both_sizes_and_the_annotation_file(tmp_path, case, match):
    """Detectron2's SizeMismatchError mid-training named neither the file that recorded the size nor the usual
    cause of swapped sizes (an EXIF rotation); it cannot be checked up front without opening every image."""
    from detection.datasets import register_coco
    from detection.engine.data import DetectionMapper

    name = f"size_mismatch_{case}"
    if case == "voc":
        for d in ("Annotations", "JPEGImages", "ImageSets/Main"):
            (tmp_path / d).mkdir(parents=True)
        Image.new("RGB", (40, 30)).save(tmp_path / "JPEGImages" / "a.jpg")
        (tmp_path / "Annotations" / "a.xml").write_text(
            "<annotation><size><width>50</width><height>30</height></size><object><name>cat</name><bndbox>"
            "<xmin>1</xmin><ymin>1</ymin><xmax>9</xmax><ymax>9</ymax></bndbox></object></annotation>")
        (tmp_path / "ImageSets" / "Main" / "trainval.txt").write_text("a\n")
        register_voc(name, str(tmp_path), "trainval", class_names=["cat"])
    else:
        path = _coco_file(tmp_path, lambda d: d["images"][0].update(width=50) if case == "other" else None)
        if case == "exif":  # stored 40x30, shown (and read) rotated: 30x40
            exif = Image.Exif()
            exif[0x0112] = 6
            Image.new("RGB", (40, 30)).save(tmp_path / "a.jpg", exif=exif)
        elif case == "swapped":
            Image.new("RGB", (30, 40)).save(tmp_path / "a.jpg")
        register_coco(name, path, str(tmp_path))
    cfg = get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_34_C4.yaml",
                            ["MODEL.DEVICE", "cpu", "DATASETS.TRAIN", f'("{name}",)'], read_weights=False)
    with pytest.raises(ImageReadError, match=match):
        DetectionMapper(cfg, True)(DatasetCatalog.get(name)[0])


def test_an_image_flipped_by_its_exif_tag_where_its_size_cannot_show_it_is_said_once(tmp_path, caplog,
                                                                                       monkeypatch):
    """A half turn or mirror (tags 2-4, any shape) or a quarter turn of a square image: its size cannot show whether
    its boxes are for the upright or the stored pixels; it trained silently."""
    import detection.engine.data as data

    monkeypatch.setattr(data, "_noted_exif", False)
    monkeypatch.setattr(data, "_exif_checked", set())

    def tagged(name, size, tag):
        exif = Image.Exif()
        exif[0x0112] = tag
        Image.new("RGB", size).save(tmp_path / name, exif=exif)
        return str(tmp_path / name)

    with caplog.at_level(logging.WARNING, logger="detection.engine.data"):
        Image.new("RGB", (32, 32)).save(tmp_path / "plain.jpg")
        data.note_exif_orientation(str(tmp_path / "plain.jpg"), np.zeros((32, 32, 3)))
        data.note_exif_orientation(tagged("wide_quarter.jpg", (40, 30), 6), np.zeros((40, 30, 3)))  # fails the size
        assert not caplog.records                                                                   # check instead
        data.note_exif_orientation(tagged("wide_half.jpg", (40, 30), 3), np.zeros((30, 40, 3)))
        data.note_exif_orientation(tagged("square.jpg", (32, 32), 6), np.zeros((32, 32, 3)))
    assert len(caplog.records) == 1  # once
    assert "wide_half.jpg: its EXIF orientation tag (3) flips or rotates the image when it is read" in caplog.text
    monkeypatch.setattr(data, "_noted_exif", False)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="detection.engine.data"):
        data.note_exif_orientation(str(tmp_path / "square.jpg"), np.zeros((32, 32, 3)))
    assert "square.jpg: its EXIF orientation tag (6)" in caplog.text


def test_the_chance_level_is_scored_against_the_ground_truth_training_and_evaluation_see(tmp_path, monkeypatch):
    """chance_ap read the raw json with pycocotools: a box the loader drops (negative width) was ground truth to
    the chance level but not to the detectors' evaluation."""
    import detection.evaluation
    from detection.datasets import register_coco
    from detection.main_job.results import chance_ap

    path = _coco_file(tmp_path, lambda d: d["annotations"].append(
        {"id": 2, "image_id": 1, "category_id": 1, "bbox": [20, 5, -6, 8], "area": 48, "iscrowd": 0}))
    register_coco("chance_dropped_box", path, str(tmp_path))
    scored, evaluate = [], detection.evaluation.evaluate_coco

    def spy(gt, results, **kwargs):
        scored.extend(a["id"] for a in gt.dataset["annotations"])
        return evaluate(gt, results, **kwargs)

    monkeypatch.setattr(detection.evaluation, "evaluate_coco", spy)
    assert 0.0 <= chance_ap("chance_dropped_box", boxes_per_image=5)["AP50"] <= 100.0
    assert scored == [1]  # the dropped box is not ground truth here either
