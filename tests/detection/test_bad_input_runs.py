"""Bad input to detection runs: run directories that would be overwritten or resumed with other settings, weights
that cannot be scored, launches that cannot start, run files the report cannot trust, and the Detectron2 0.6 fixes
backported by tools/patch_detectron2.py. Each gets one clear error (or the references' behaviour); nothing is lost."""

import json
import os
import re
import shutil

import pytest
import torch
from PIL import Image

from backbones import CheckpointReadError, create_model, load_pretrained
from classification.engine.cli import check_process_count
from classification.engine.config import ClsConfig
from classification.engine.errors import UsageError
from conftest import REPO, det_args, run_tool
from detection.datasets import DatasetFormatError, load_coco_checked
from detection.engine import train_net
from detection.report import load_run

pytestmark = pytest.mark.bad_input

HOSTILE = "MODEL:\n  WEIGHTS: !!python/object/apply:os.system ['touch {marker}']\n"


def _args(out, *extra):
    return train_net.build_parser().parse_args(
        ["--config-file", "configs/COCO-Detection/faster_rcnn_R_34_C4.yaml", *extra, "MODEL.WEIGHTS", "",
         "OUTPUT_DIR", str(out)])


def test_a_finished_run_is_not_overwritten(tmp_path):
    out = tmp_path / "done"
    out.mkdir()
    (out / "model_final.pth").write_bytes(b"weights")
    (out / "evaluation.json").write_text("{}")
    with pytest.raises(UsageError, match="already holds a run .*model_final.pth, evaluation.json.*--resume"):
        train_net.setup(_args(out))
    assert (out / "model_final.pth").read_bytes() == b"weights"
    assert not (out / "config.yaml").exists()  # refused before anything was written


def test_eval_only_without_weights_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="--eval-only needs trained weights"):
        train_net.setup(_args(tmp_path / "eval", "--eval-only"))
    assert not (tmp_path / "eval" / "evaluation.json").exists()


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
    (run / "evaluation.json").write_text("{not json")
    assert load_run(run).status.startswith(f"unusable evaluation.json ({run / 'evaluation.json'}: not JSON (line 1")
    (run / "evaluation.json").unlink()  # a run written before 2026-12-06: its summary was metrics.json
    (run / "metrics.json").write_text("{not json")  # an --eval-only run: no log beside it
    assert load_run(run).status.startswith(f"unusable metrics.json ({run / 'metrics.json'}: not JSON (line 1")
    (run / "training_log.json").write_text("")
    assert load_run(run).status.startswith(f"unusable metrics.json ({run / 'metrics.json'}: not JSON (line 1")


def test_only_detectron2s_log_of_a_killed_run_may_be_replaced_and_one_directory_never_holds_both_layouts(tmp_path):
    """metrics.json is a summary (a classification run's, a detection run's before 2026-12-06: held, also when cut
    off or unreadable) or Detectron2's JSONWriter log (of a run killed before its first checkpoint: a new run
    replaces it). A run of the old layout continued is moved into the new one, whole; both layouts at once: refused."""
    from classification.engine.run_files import RunFileError, adopt_detectron2_layout, run_results_held

    for text, held in (('{"final": {"top1": 1}', True), ("{\n  \"evaluation\": {}\n}", True), ("\x00\xff", True),
                       ("", False), ('{"iteration": 19, "total_loss": 2.0}\n{"iteration": 39', False),
                       # a finished run's log without its checkpoints: its evaluation rows are results (#69 item 7)
                       ('{"iteration": 19, "total_loss": 2.0}\n{"iteration": 20, "bbox/AP": 41.5}\n', True),
                       # training rows' own "a/b" keys are not results: a killed run's log is replaced as before
                       ('{"fast_rcnn/cls_accuracy": 0.9, "iteration": 19, "rpn/num_pos_anchors": 9.0}\n', False)):
        (tmp_path / "metrics.json").write_text(text)
        assert run_results_held(tmp_path) == (["metrics.json"] if held else []), text
    from classification.engine.run_files import log_has_evaluation

    (tmp_path / "metrics.json").write_text('{"iteration": 1, "total_loss": 2.0}\n' * 1000)
    assert not log_has_evaluation(tmp_path / "metrics.json")  # read line by line, within the limit
    assert log_has_evaluation(tmp_path / "metrics.json", limit=1000)  # past the limit: kept, not replaced
    old = tmp_path / "old"
    old.mkdir()
    (old / "metrics.json").write_text('{\n  "evaluation": {}\n}')
    (old / "training_log.json").write_text('{"iteration": 0}\n')
    adopt_detectron2_layout(old)
    assert sorted(p.name for p in old.iterdir()) == ["evaluation.json", "metrics.json"]
    assert (old / "evaluation.json").read_text() == '{\n  "evaluation": {}\n}'
    assert (old / "metrics.json").read_text() == '{"iteration": 0}\n'
    adopt_detectron2_layout(old)  # already in Detectron2's layout: nothing moves
    (old / "training_log.json").write_text('{"iteration": 0}\n')
    with pytest.raises(RunFileError, match=r"holds files of both run layouts \(metrics.json, evaluation.json, "
                                           r"training_log.json\); move one set away"):
        adopt_detectron2_layout(old)


@pytest.mark.parametrize("special", ["fifo", "device"])
@pytest.mark.parametrize("name", ["evaluation.json", "metrics.json", "training_log.json", "log.txt"])
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
    assert load_run(empty).status == ("not a run directory (no config.yaml, config.json, last_checkpoint, "
                                      "model_final.pth, metrics.json, evaluation.json)")


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
    after_train and writes evaluation.json. The run exits non-zero, failure.json says why, the report and the main job
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
    assert not (out / "evaluation.json").exists()


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
    """A run killed before its first checkpoint left its JSONWriter log; the next run appended to it (iterations
    [19, 39, 59, 19, 39, 40]) and the report's curves were wrong. The killed run here is of the layout before
    2026-12-06 (training_log.json): moved to metrics.json first, then started afresh -- the path a killed run of
    Detectron2's layout takes from there. Resumed runs log some iterations twice: the report keeps the last of each."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "training_log.json").write_text("".join(json.dumps({"iteration": i, "total_loss": 9.0}) + "\n"
                                                   for i in (19, 39, 59)))
    proc = run_tool(*det_args(tiny_data, out, 4, "SOLVER.CHECKPOINT_PERIOD", "4"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    its = [json.loads(line)["iteration"] for line in (out / "metrics.json").read_text().splitlines()]
    assert its == sorted(its) and 59 not in its and not (out / "training_log.json").exists()
    (out / "metrics.json").write_text("".join(json.dumps({"iteration": i, "total_loss": float(i)}) + "\n"
                                              for i in (1, 3, 5, 3, 5, 7)))
    rows = load_run(out).train_log
    assert [r["iteration"] for r in rows] == [1, 3, 5, 7]


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


@pytest.mark.bad_input
def test_load_pretrained_refuses_a_negative_running_variance_naming_the_file_and_the_key(tmp_path):
    """A negative BN running_var in MODEL.WEIGHTS: frozen BN divides by its square root -- train_det exited 0 with
    NaN outputs and AP 0.00, no warning. Now an unusable value, named with its file, as inf/NaN are."""
    src = create_model("resnet18", width=0.25, num_classes=10)
    sd = {k: v.clone() for k, v in src.state_dict().items()}
    key = "stem.bn1.running_var" if "stem.bn1.running_var" in sd else next(k for k in sd if k.endswith("running_var"))
    sd[key][0] = -1.0
    torch.save(sd, tmp_path / "w.pth")
    with pytest.raises(Exception, match=rf"w\.pth(.|\n)*{key}: 1 of \d+ values are negative \(a variance\)"):
        load_pretrained(create_model("resnet18", width=0.25, num_classes=10), tmp_path / "w.pth")


@pytest.mark.bad_input
@pytest.mark.slow
def test_a_run_directory_holding_a_fifo_is_refused_in_one_line_not_hung(tiny_data, tiny_detector, tmp_path):
    """train_det --resume with metrics.json a FIFO (or an old-layout training_log.json, moved to that name) hung
    opening it; non-regular files are refused up front, as symbolic links are."""
    run = tmp_path / "run"
    shutil.copytree(tiny_detector, run)
    (run / "metrics.json").unlink()
    os.mkfifo(run / "metrics.json")
    proc = run_tool(*det_args(tiny_data, run, 3, "--resume"), timeout=120)
    assert proc.returncode != 0 and f"{run / 'metrics.json'}: not a regular file" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


@pytest.mark.bad_input
def test_a_long_training_log_is_read_a_line_at_a_time_keeping_only_what_the_report_uses(tmp_path):
    """The report, the main job and compare_jobs read metrics.json whole and split it, every row whole: a 30 MB log
    cost 764 MiB. Now a line at a time, each row's iteration / time / total_loss / lr kept: the peak allocation
    stays within 2.5x the file (tracemalloc counts allocations, not time: the same on every machine)."""
    import tracemalloc

    from detection.report.runs import _read_train_log

    row = {f"loss_{k}": 0.123456789 for k in range(20)} | {"lr": 0.01, "time": 0.5, "total_loss": 1.5}
    log = tmp_path / "metrics.json"
    log.write_text("".join(json.dumps({**row, "iteration": i}) + "\n" for i in range(5000)) + '{"iteration": 49')
    tracemalloc.start()
    rows = _read_train_log(log)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(rows) == 5000 and rows[7] == {"iteration": 7, "time": 0.5, "total_loss": 1.5, "lr": 0.01}
    assert peak < 2.5 * log.stat().st_size, f"{peak / log.stat().st_size:.1f}x the file"


@pytest.mark.bad_input
def test_two_keys_of_a_weights_file_that_map_to_one_parameter_are_refused_naming_both(tmp_path):
    """`backbone.res2.*` beside `res2.*` (Detectron2's names): the loader kept the last silently (res2 all zeros),
    through --weights, timm and hub alike -- all load through load_pretrained."""
    src = create_model("resnet18", width=0.25, num_classes=10)
    sd = {("backbone." + k if k.startswith(("stem.", "res")) else k): v for k, v in src.state_dict().items()
          if not k.startswith("fc.")}
    sd["res2.0.conv1.weight"] = torch.zeros_like(sd["backbone.res2.0.conv1.weight"])
    torch.save({"model": sd}, tmp_path / "twice.pth")
    with pytest.raises(Exception, match=r"twice\.pth: keys 'backbone\.res2\.0\.conv1\.weight' and "
                                        r"'res2\.0\.conv1\.weight' both map to 'res2\.0\.conv1\.weight'"):
        load_pretrained(create_model("resnet18", width=0.25, num_classes=10), tmp_path / "twice.pth",
                        drop_classifier=True)


@pytest.mark.bad_input
def test_an_evaluation_with_impossible_numbers_or_a_textual_iteration_count_is_not_a_finished_run(tmp_path):
    """evaluation.json with AP 150 and AP50 -3 was reported as a finished run; iterations_completed "2" (a string)
    read as "incomplete: 2 of 2 iterations". Each is an unusable run, named."""
    from detection.report import load_run
    from fabricated_runs import COCO_R101, make_run

    high = make_run(tmp_path, "high", "resnet101", coco={**COCO_R101, "AP": 150.0})
    low = make_run(tmp_path, "low", "resnet101", coco={**COCO_R101, "AP50": -3.0})
    text = make_run(tmp_path, "text", "resnet101", coco=COCO_R101)
    summary = json.loads((text / "evaluation.json").read_text())
    (text / "evaluation.json").write_text(json.dumps({**summary, "iterations_completed": "90000"}))
    assert load_run(high).status.startswith("unusable run files (ValueError: evaluation.json: AP is 150, outside "
                                            "[0, 100]")
    assert "AP50 is -3, outside [0, 100]" in load_run(low).status
    assert load_run(text).status == "unusable evaluation.json (iterations_completed is '90000', not an integer)"
    assert load_run(make_run(tmp_path, "good", "resnet101", coco=COCO_R101)).status == "finished"


@pytest.mark.bad_input
def test_a_directory_mixing_both_run_layouts_is_named_as_such_by_the_report(tmp_path):
    """A Detectron2 JSONWriter metrics.json beside an old-layout training_log.json was read as the old layout's
    summary: "not JSON (Extra data)". Now the one message adopt_detectron2_layout gives."""
    from detection.report import load_run
    from fabricated_runs import COCO_R101, make_run

    run = make_run(tmp_path, "mixed", "resnet101", coco=COCO_R101)
    (run / "evaluation.json").unlink()
    (run / "training_log.json").write_text('{"iteration": 0}\n')
    assert load_run(run).status == (f"unusable run files ({run} holds files of both run layouts (metrics.json, "
                                    "training_log.json); move one set away)")


@pytest.mark.bad_input
def test_a_finished_run_of_detectron2s_own_tools_is_read_from_its_logs_evaluation_rows(tmp_path):
    """A run in Detectron2's layout without evaluation.json (its own tools write none) was listed as "no metrics
    (training or crashed)"; its metrics.json holds the evaluation as bbox/AP rows: read them."""
    from detection.report import load_run
    from fabricated_runs import COCO_R101, make_run

    run = make_run(tmp_path, "d2", "resnet101", coco=COCO_R101, per_cat={"person": 31.0})
    (run / "evaluation.json").unlink()
    got = load_run(run)
    assert got.status == "finished" and got.metrics == COCO_R101 and got.per_category == {"person": 31.0}
    log = (run / "metrics.json").read_text().replace('"iteration": 90000, "bbox/', '"iteration": 60000, "bbox/')
    (run / "metrics.json").write_text(log)  # an evaluation before the last iteration: killed in the final one
    assert load_run(run).status.startswith("incomplete: 60000 of 90000 iterations")
    (run / "model_final.pth").unlink()  # no final checkpoint: not a finished run, whatever its log says
    assert load_run(run).status != "finished"


@pytest.mark.bad_input
def test_a_weights_path_that_is_a_directory_a_fifo_or_empty_says_what_it_is(tmp_path):
    """Each was "no such checkpoint file" (an empty one: ".: no such checkpoint file", hub's weights="")."""
    from backbones.checkpoint_io import read_checkpoint

    os.mkfifo(tmp_path / "fifo.pth")
    for path, message in ((tmp_path, "a directory, not a checkpoint file"),
                          (tmp_path / "fifo.pth", "not a regular file (a FIFO, socket or device)"),
                          ("", "no weights file given (an empty path)"),
                          (tmp_path / "absent.pth", "no such checkpoint file")):
        with pytest.raises(CheckpointReadError, match=re.escape(message)):
            read_checkpoint(path)
