"""The poor cases of bad input at the tools' command lines: each used to end in a traceback, an unclear message,
or a message that pointed the wrong way; each now gives one line that names the file, key or option, and loses
nothing. (The dangerous cases -- silently wrong numbers, overwritten runs -- are in
tests/detection/test_bad_input_*.py and tests/classification/test_bad_input_classification.py.)"""

import errno
import json
import os
import signal
import struct
import subprocess
import sys
import time

import pytest
import torch

from backbones import CheckpointReadError, IncompatibleWeightsError, complexity, create_model, load_pretrained
from backbones.checkpoint_io import atomic_torch_save, read_checkpoint
from backbones.pretrained import read_weights_file, save_pretrained
from backbones.registry import ModelOptionError
from backbones.weight_formats import MetadataError
from classification.engine.config import ClsConfig
from classification.engine.run_directory import claim_run_directory, last_checkpoint_file
from conftest import REPO, det_args, run_tool
from detection import get_detection_cfg
from detection.config import check_run_config
from detection.datasets import DatasetFormatError, load_coco_checked

pytestmark = pytest.mark.bad_input

CLS_ARGS = ["tools/train_cls.py", "--model", "cifar_resnet20", "--dataset", "embedded", "--image-size", "32",
            "--train-samples", "32", "--val-samples", "16", "--iterations", "2", "--batch-size", "16",
            "--eval-period", "2", "--checkpoint-period", "2", "--workers", "0"]


def _one_line_error(proc, *needles):
    """Exit 2 with `error: ...` naming the problem, and no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and "error" in proc.stderr, proc.stderr[-2000:]
    for needle in needles:
        assert needle in proc.stderr, (needle, proc.stderr[-2000:])


# ---- weights files --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("where, value, named", [
    ("input_format", "XYZ", "meta.input_format 'XYZ'"),
    ("pixel_mean", "abc", "meta.pixel_mean 'abc'"),
    ("pixel_std", [0.0, 1.0, 1.0], "meta.pixel_std [0.0, 1.0, 1.0]"),
    ("width", "abc", "meta.arch.width 'abc'"),
])
def test_checkpoint_metadata_that_no_reader_can_use_is_refused_naming_the_key(tmp_path, where, value, named):
    """They loaded (or failed as a 'width: weights are for abc' convention mismatch) and would have set
    INPUT.FORMAT / PIXEL_MEAN to them under CONVENTIONS_FROM_WEIGHTS."""
    path = tmp_path / "w.pth"
    save_pretrained(create_model("resnet18", width=0.25), path)
    ckpt = torch.load(path, weights_only=True)
    if where == "width":
        ckpt["meta"]["arch"]["width"] = value
    else:
        ckpt["meta"][where] = value
    torch.save(ckpt, path)
    with pytest.raises(MetadataError, match=f"{path}: {named.replace('[', '.').replace(']', '.')}"):
        read_weights_file(path)
    with pytest.raises(ValueError, match="meta"):
        load_pretrained(create_model("resnet18", width=0.25), path)


def test_a_pickle_that_declares_a_huge_object_is_a_read_error(tmp_path):
    """14 bytes (PROTO 4, BINBYTES8 of 2**62 bytes): MemoryError before."""
    bad = tmp_path / "bomb.pkl"
    bad.write_bytes(b"\x80\x04\x8e" + struct.pack("<Q", 2 ** 62) + b".")
    with pytest.raises(CheckpointReadError, match="bomb.pkl: corrupt pickle: it declares an object too large"):
        read_checkpoint(bad)


def test_load_hints_are_in_the_spelling_of_the_tools_and_name_the_real_problem(tmp_path):
    path = tmp_path / "r18.pth"
    save_pretrained(create_model("resnet18", num_classes=10, width=0.25), path)
    with pytest.raises(IncompatibleWeightsError, match=r"drop_classifier=True; tools/convert_weights.py "
                                                       r"--drop-classifier"):
        load_pretrained(create_model("resnet18", num_classes=3, width=0.25), path)
    with pytest.raises(IncompatibleWeightsError) as err:  # another depth: not a stride-placement problem
        load_pretrained(create_model("resnet34", num_classes=10, width=0.25, stride_in_1x1=False), path)
    assert "another depth or family" in str(err.value) and "stride_in_1x1=" not in str(err.value).split("hint")[-1]
    with pytest.raises(IncompatibleWeightsError, match=r"--model-option width=0.25; Detectron2 plugin: "
                                                       r"MODEL.BACKBONES.WIDTH 0.25"):
        load_pretrained(create_model("resnet18", num_classes=10, width=0.5), path)


@pytest.mark.slow
def test_convert_weights_never_overwrites_and_names_a_directory_destination(tmp_path):
    src = tmp_path / "c20.pth"
    save_pretrained(create_model("cifar_resnet20"), src)
    for dst, needle in ((tmp_path, "is a directory; give the file to write"),
                        (src, "exists; refusing to overwrite it (--overwrite replaces it)"),
                        (tmp_path / "no" / "such" / "dir.pth", "does not exist")):
        before = src.read_bytes()
        proc = run_tool("tools/convert_weights.py", src, dst)
        assert proc.returncode == 1 and needle in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert src.read_bytes() == before
    out = tmp_path / "out.pth"
    assert run_tool("tools/convert_weights.py", src, out).returncode == 0
    again = run_tool("tools/convert_weights.py", src, out, "--overwrite")
    assert again.returncode == 0, again.stderr


def test_layer_response_reports_a_bad_checkpoint_in_one_line(tmp_path):
    bad = tmp_path / "bad.pth"
    bad.write_text("not a checkpoint")
    _one_line_error(run_tool("tools/layer_response.py", bad, "--dataset", "embedded", "--output", tmp_path / "x.png"),
                    "CheckpointReadError", "bad.pth")
    assert not (tmp_path / "x.png").exists()


def test_create_model_and_complexity_name_the_bad_argument():
    with pytest.raises(TypeError, match="model name must be a string .* got None"):
        create_model(None)
    with pytest.raises(ModelOptionError, match="resnet18 has no option 'bogus'; its options: residual, shortcut"):
        create_model("resnet18", bogus=1)
    with pytest.raises(TypeError):  # still a TypeError to Python callers, as an unexpected keyword is
        create_model("vgg16", stride_in_1x1=True)
    model = create_model("resnet18", width=0.25)
    for size in ((3, 0, 0), "abc", (1, 3, 224, 224), (3, 224)):
        with pytest.raises(ValueError, match="input_size is .channels, height, width."):
            complexity(model, size)
    with pytest.raises(ValueError, match=r"cannot run on one image of size \(1, 64, 64\).*3 channels"):
        complexity(model, (1, 64, 64))


# ---- train_cls ------------------------------------------------------------------------------------------------

def test_train_cls_options_that_cannot_work_are_named_before_training(tmp_path):
    with pytest.raises(ValueError, match="image_size must be >= 8 for the embedded dataset"):
        ClsConfig(dataset="embedded", image_size=1)
    _one_line_error(run_tool(*CLS_ARGS, "--model-option", "bogus=1", "--output-dir", tmp_path / "a"),
                    "cifar_resnet20 has no option 'bogus'")
    vgg = [a if a not in ("cifar_resnet20", "32") else {"32": "16"}.get(a, "vgg11") for a in CLS_ARGS]
    _one_line_error(run_tool(*vgg, "--model-option", "width=0.125", "--output-dir", tmp_path / "b"),
                    "image_size 16 is too small for vgg11", "32 px and above work")
    assert not (tmp_path / "b" / "config.json").exists()


@pytest.mark.slow
def test_a_diverging_run_does_not_point_at_a_checkpoint_that_does_not_exist(tmp_path):
    out = tmp_path / "run"
    proc = run_tool(*[a if a != "2" else "5" for a in CLS_ARGS], "--lr", "1e30", "--output-dir", out)
    _one_line_error(proc, "training diverged, a smaller --lr usually avoids it",
                    "no checkpoint was written before it")


@pytest.mark.slow
def test_an_empty_or_dangling_last_checkpoint_is_named_on_resume(tiny_data, tmp_path):
    """train_cls started over silently from iteration 0; train_det failed with fvcore's AssertionError."""
    for content, needle in (("", "is empty"), ("model_0000099.pth", "names model_0000099.pth, which is not in"),
                            ("../elsewhere.pth", "not a file in")):
        d = tmp_path / f"case{len(content)}"
        d.mkdir()
        (d / "last_checkpoint").write_text(content)
        with pytest.raises(ValueError, match=needle):
            last_checkpoint_file(d)
    cls = tmp_path / "cls"
    cls.mkdir()
    (cls / "last_checkpoint").write_text("\n")
    _one_line_error(run_tool(*CLS_ARGS, "--output-dir", cls, "--resume"), "last_checkpoint is empty")
    assert sorted(p.name for p in cls.iterdir() if not p.name.startswith(".")) == ["last_checkpoint"]
    det = tmp_path / "det"
    det.mkdir()
    (det / "last_checkpoint").write_text("model_0000001.pth")
    _one_line_error(run_tool(*det_args(tiny_data, det, 2, "--resume")), "names model_0000001.pth, which is not in")
    assert not (det / "config.yaml").exists()


# ---- train_det ------------------------------------------------------------------------------------------------

def test_dataset_names_cannot_be_paths(tiny_data, tmp_path):
    """Evaluation writes OUTPUT_DIR/<dataset>_coco_format_*.json: '../x' wrote outside the run."""
    proc = run_tool(*det_args(tiny_data, tmp_path / "run", 2, "--dataset-coco", "../escape",
                              str(tiny_data / "annotations/instances_val.json"), str(tiny_data)))
    _one_line_error(proc, "--dataset-coco '../escape': a dataset name, not a path")
    cfg = get_detection_cfg("configs/Embedded-Detection/smoke.yaml", ["DATASETS.TEST", "('a/b',)"])
    with pytest.raises(ValueError, match="DATASETS.TEST 'a/b': a dataset name, not a path"):
        check_run_config(cfg)


@pytest.mark.parametrize("where, value", [("images", "1"), ("annotations", "x"), ("category", "1")])
def test_coco_ids_must_be_integers(tiny_data, tmp_path, where, value):
    """pycocotools' C++ evaluation failed on string ids after the whole inference."""
    data = json.loads((tiny_data / "annotations/instances_val.json").read_text())
    if where == "images":
        data["images"][0]["id"] = value
    elif where == "annotations":
        data["annotations"][0]["id"] = value
    else:
        data["annotations"][0]["category_id"] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(DatasetFormatError, match=r"bad.json: (images|annotations)\[0\] has \w+ '\w'; COCO ids are "
                                                 "integers"):
        load_coco_checked(str(bad), str(tiny_data))


@pytest.mark.slow
def test_box_clipping_and_our_other_messages_reach_log_txt(tiny_data, tmp_path):
    """Our loggers (detection.*, classification.*) had no handler under train_det: the box clip/drop warnings
    reached only stderr and the INFO lines (conventions from the weights) nowhere."""
    data = json.loads((tiny_data / "annotations/instances_train.json").read_text())
    data["annotations"][0]["bbox"][2] = 10_000  # far past the image's right edge
    json_file = tmp_path / "train.json"
    json_file.write_text(json.dumps(data))
    out = tmp_path / "run"
    weights = tmp_path / "r18.pth"  # pretrained in BGR: INPUT.FORMAT follows the weights
    save_pretrained(create_model("resnet18", num_classes=10, width=0.25), weights, input_format="BGR")
    proc = run_tool(*det_args(tiny_data, out, 1, "--dataset-coco", "clipped_train", str(json_file), str(tiny_data)),
                    "MODEL.WEIGHTS", weights, "DATASETS.TRAIN", '("clipped_train",)')
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = (out / "log.txt").read_text()
    assert "train.json: 1 boxes clipped to their image" in log
    assert f"INPUT.FORMAT: RGB -> BGR (from the metadata of MODEL.WEIGHTS {weights}" in log
    assert "detection.engine INFO: config files: ['configs/COCO-Detection/faster_rcnn_R_34_C4.yaml'" in log


@pytest.mark.slow
def test_a_recorded_size_the_image_does_not_have_is_one_line_mid_training(tiny_data, tmp_path):
    """It cannot be checked up front (that opens every image): found by the loader, it printed Detectron2's
    "Exception during training" traceback on the terminal before the error line. log.txt keeps the traceback."""
    data = json.loads((tiny_data / "annotations/instances_train.json").read_text())
    for im in data["images"]:
        im["width"] = 120
    bad = tmp_path / "train.json"
    bad.write_text(json.dumps(data))
    out = tmp_path / "run"
    proc = run_tool(*det_args(tiny_data, out, 1, "--dataset-coco", "wrong_size_train", str(bad), str(tiny_data)),
                    "DATASETS.TRAIN", '("wrong_size_train",)')
    _one_line_error(proc, "the image is 96x96 (width x height) but", f"{bad} records 120x96 for it")
    assert "Traceback" not in proc.stdout and "Exception during training" not in proc.stdout, proc.stdout[-2000:]
    assert "Exception during training" in (out / "log.txt").read_text()


@pytest.mark.slow
def test_two_processes_generating_the_embedded_dataset_at_once_both_get_it(tmp_path):
    """--num-gpus 2 on a fresh machine: both ranks generated into one .partial directory (FileNotFoundError)."""
    code = ("import sys, detection; from detection.datasets.embedded import EmbeddedSpec, ensure_embedded_dataset;"
            "m = ensure_embedded_dataset(sys.argv[1], EmbeddedSpec(num_train=40, num_val=20, image_size=96, "
            "min_object=24, max_object=48, seed=5)); print(m['counts']['train']['objects'])")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "embedded")], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [r[1][-2000:] for r in results]
    assert results[0][0] == results[1][0] and int(results[0][0]) > 0
    assert not (tmp_path / "embedded.partial").exists()


# ---- writing files --------------------------------------------------------------------------------------------

def test_a_full_disk_is_named_as_such_and_keeps_the_previous_file(tmp_path, monkeypatch):
    """torch's zip writer turned ENOSPC into "unexpected pos 704 vs 598"."""
    import backbones.checkpoint_io as cio

    path = tmp_path / "model.pth"
    atomic_torch_save({"x": torch.zeros(4)}, path)
    real_fdopen = os.fdopen

    class Full:
        def __init__(self, f):
            self._f, self.written = f, 0

        def write(self, data):
            if self.written + len(data) > 500:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.written += len(data)
            return self._f.write(data)

        def __getattr__(self, name):
            return getattr(self._f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._f.close()

    monkeypatch.setattr(cio.os, "fdopen", lambda fd, mode: Full(real_fdopen(fd, mode)))
    with pytest.raises(OSError, match=r"model.pth: cannot write it \(No space left on device\); the previous "
                                      "version, if any, is unchanged") as err:
        atomic_torch_save({"x": torch.zeros(100_000)}, path)
    assert err.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert torch.equal(torch.load(path, weights_only=True)["x"], torch.zeros(4))
    assert [p.name for p in tmp_path.iterdir()] == ["model.pth"]  # no temporary file left


def test_a_killed_writers_temporary_files_go_when_the_next_run_takes_the_directory(tmp_path):
    """SIGTERM (no handler) mid-save left .model_final.pth.XXXX.tmp in the run forever."""
    out = tmp_path / "run"
    out.mkdir()
    stale = out / ".model_0000019.pth.k2j4x9ab.tmp"
    stale.write_bytes(b"half a checkpoint")
    (out / "model_0000009.pth").write_bytes(b"complete")
    claim_run_directory(out, resume=True, writer=True, recorded=None, now={}, may_change=(), source="config")
    assert not stale.exists() and (out / "model_0000009.pth").read_bytes() == b"complete"


@pytest.mark.slow
def test_ctrl_c_in_the_main_job_is_one_line(tmp_path):
    # SIGINT as at a terminal: a shell without job control starts background commands (`.ci/run &`) with SIGINT
    # ignored, and everything they start inherits that; Python then installs no KeyboardInterrupt handler
    proc = subprocess.Popen([sys.executable, "tools/main_job.py", "--preset", "quick", "--output-dir",
                             str(tmp_path / "job")], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    first = proc.stdout.readline()  # "[main job] N stages ...; measuring ..." : it is running
    assert "[main job]" in first, first
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # still running: SIGTERM stops it and the stages it started
            proc.terminate()
            proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("[main job] interrupted"), err[-2000:]
    # `kill PID` once stages run: they are stopped too, not left running in their own sessions
    proc = subprocess.Popen([sys.executable, "tools/main_job.py", "--preset", "quick", "--output-dir",
                             str(tmp_path / "job")], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # SIGINT as given
    while "started:" not in (line := proc.stdout.readline()):
        assert line, proc.stderr.read()[-2000:]
    t0 = time.time()  # the stop alone: start-up and the step-time measurement take longer on a loaded machine
    proc.terminate()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "[main job] interrupted" in err, err[-2000:]
    assert time.time() - t0 < 50  # the stages stopped on the job's SIGINT, not after its 60-s wait and SIGKILL
    left = subprocess.run(["pgrep", "-f", str(tmp_path / "job")], capture_output=True, text=True).stdout.split()
    assert not left, f"stage processes still running: {left}"


# ---- the report -----------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_report_lists_unusable_runs_and_writes_valid_json(tmp_path):
    """Inf AP crashed the seed stdev, one unreadable run stopped the whole report, a "$" in a class name stopped
    it in matplotlib's TeX parser, report.json held NaN (not JSON), a classification run was "training or
    crashed"."""
    sys.path.insert(0, str(REPO / "tests"))
    from fabricated_runs import COCO_R101, COCO_VGG, classification_run, make_run

    good = [make_run(tmp_path, "vgg_s0", "vgg16", coco={**COCO_VGG, "APs": float("nan")}, seed=0,
                     per_cat={"a$b": 3.0, "$\\frac{$": 1.0}),
            make_run(tmp_path, "vgg_s1", "vgg16", coco={**COCO_VGG, "APs": float("nan"), "AP": 22.2}, seed=1,
                     per_cat={"a$b": 3.5, "$\\frac{$": 1.5}),
            make_run(tmp_path, "r$101", "resnet101", coco=COCO_R101, per_cat={"a$b": 4.0, "$\\frac{$": 2.0})]
    inf = make_run(tmp_path, "vgg_s2", "vgg16", coco={**COCO_VGG, "AP": float("inf")}, seed=2)
    text = make_run(tmp_path, "text", "resnet101", coco={**COCO_R101, "AP50": "abc"})
    broken = make_run(tmp_path, "broken", "resnet101", coco=COCO_R101)
    (broken / "config.yaml").write_text("MODEL: [1, 2\n")
    cls = classification_run(tmp_path).parent
    out = tmp_path / "report"
    proc = run_tool("tools/report.py", *good, inf, text, broken, cls, "--output-dir", out)
    assert proc.returncode == 0, proc.stderr[-3000:]

    def no_constants(name):
        raise AssertionError(f"report.json holds {name}, which is not JSON")

    report = json.loads((out / "report.json").read_text(), parse_constant=no_constants)
    status = {r["name"]: r["status"] for r in report["runs"]}
    assert status["vgg_s2"].startswith("unusable run files (ValueError: evaluation.json: AP is inf")
    assert status["text"].startswith("unusable run files (ValueError: evaluation.json: AP50 is 'abc', not a number")
    assert status["broken"].startswith("unreadable config.yaml")
    assert status[cls.name].startswith("a classification run (tools/train_cls.py), not a detection run")
    vgg = next(g for g in report["groups"] if g["name"] == "vgg")
    assert vgg["n"] == 2 and vgg["metrics"]["AP"]["mean"] == pytest.approx(21.7)  # the inf run is not in it
    assert "APs" not in vgg["metrics"] or vgg["metrics"]["APs"]["mean"] is None  # NaN: undefined, not a number
    assert (out / "per_category_ap.png").stat().st_size > 2000
    assert json.loads(json.dumps(report)) == report


def test_atomic_writes_get_the_mode_of_an_ordinary_new_file(tmp_path):
    """mkstemp's 0600 made checkpoints and reports unreadable to the group sharing a run directory."""
    from backbones.checkpoint_io import atomic_write_text

    atomic_write_text(tmp_path / "a.txt", "x")
    (tmp_path / "b.txt").write_text("x")
    assert (tmp_path / "a.txt").stat().st_mode == (tmp_path / "b.txt").stat().st_mode
