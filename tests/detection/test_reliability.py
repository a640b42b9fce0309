"""Fault injection: kill -9 and resume, interrupted checkpoint writes, NaN, and bad inputs of every kind."""

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import REPO, det_args
from detection.datasets import DatasetFormatError, load_coco_checked
from detection.engine.data import DetectionMapper, ImageReadError, read_image

pytestmark = pytest.mark.d2main  # runs again against Detectron2 main (make test-d2main)


@pytest.fixture(scope="module")
def data(tiny_data):
    return tiny_data


def _run_and_kill_after(cmd, marker: Path, timeout=300):
    """Start `cmd`, SIGKILL it as soon as `marker` exists; returns the killed process's return code."""
    proc = subprocess.Popen([sys.executable, *map(str, cmd)], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout
    while not marker.exists():
        if proc.poll() is not None:
            raise AssertionError(f"process ended (rc {proc.returncode}) before {marker} appeared")
        assert time.time() < deadline
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    return proc.wait()


def _weights(path):
    return torch.load(path, map_location="cpu", weights_only=True)["model"]


def _assert_same(a, b):
    assert set(a) == set(b)
    for k in a:
        if a[k].is_floating_point():
            torch.testing.assert_close(a[k], b[k], atol=1e-5, rtol=1e-4, msg=k)
        else:
            assert torch.equal(a[k], b[k]), k


@pytest.mark.slow
def test_detection_kill9_then_resume_equals_uninterrupted(data, tmp_path):
    common = ["SEED", "3", "SOLVER.MAX_ITER", "8", "MODEL.BACKBONES.NORM", "BN"]
    full = subprocess.run([sys.executable, *det_args(data, tmp_path / "full", 8), *common], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert full.returncode == 0, full.stderr[-3000:]
    rc = _run_and_kill_after([*det_args(data, tmp_path / "killed", 8), *common],
                             tmp_path / "killed" / "model_0000003.pth")
    assert rc == -signal.SIGKILL
    assert (tmp_path / "killed" / "last_checkpoint").read_text() in ("model_0000001.pth", "model_0000003.pth",
                                                                      "model_0000005.pth")
    resumed = subprocess.run([sys.executable, *det_args(data, tmp_path / "killed", 8, "--resume"), *common],
                             cwd=REPO, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    _assert_same(_weights(tmp_path / "full" / "model_final.pth"), _weights(tmp_path / "killed" / "model_final.pth"))


@pytest.mark.slow
def test_classification_kill9_then_resume_equals_uninterrupted(tmp_path):
    args = ["tools/train_cls.py", "--model", "cifar_resnet20", "--dataset", "embedded", "--train-samples", "96",
            "--val-samples", "16", "--iterations", "12", "--batch-size", "8", "--eval-period", "6",
            "--checkpoint-period", "4", "--workers", "0", "--deterministic"]
    full = subprocess.run([sys.executable, *args, "--output-dir", str(tmp_path / "full")], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert full.returncode == 0, full.stderr[-3000:]
    out = tmp_path / "killed"
    assert _run_and_kill_after([*args, "--output-dir", out], out / "model_0000004.pth") == -signal.SIGKILL
    resumed = subprocess.run([sys.executable, *args, "--output-dir", str(out), "--resume"], cwd=REPO,
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    _assert_same(_weights(tmp_path / "full" / "model_final.pth"), _weights(out / "model_final.pth"))


def test_interrupted_checkpoint_write_leaves_the_last_checkpoint_intact(tmp_path, monkeypatch):
    from detectron2.modeling import build_model

    from detection import BackbonesCheckpointer, get_detection_cfg

    model = build_model(get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_34_C4.yaml",
                                          ["MODEL.DEVICE", "cpu", "MODEL.WEIGHTS", ""]))
    ckpt = BackbonesCheckpointer(model, save_dir=str(tmp_path))
    ckpt.save("model_0000001")
    good = (tmp_path / "model_0000001.pth").read_bytes()
    real_save = torch.save

    def dying_save(obj, f, *a, **k):  # writes half a checkpoint, then the process "dies"
        real_save(obj, f, *a, **k)
        f.truncate(len(good) // 2)
        raise KeyboardInterrupt("killed mid-write")

    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save("model_0000003")
    monkeypatch.setattr(torch, "save", real_save)
    assert (tmp_path / "last_checkpoint").read_text() == "model_0000001.pth"
    assert not (tmp_path / "model_0000003.pth").exists() and not list(tmp_path.glob("*.tmp"))
    assert (tmp_path / "model_0000001.pth").read_bytes() == good
    BackbonesCheckpointer(model, save_dir=str(tmp_path)).resume_or_load("", resume=True)  # loads cleanly


@pytest.mark.slow
def test_nan_stops_training_and_keeps_the_last_good_checkpoint(data, tmp_path):
    out = tmp_path / "nan"
    # 3 harmless iterations (constant warm-up at lr 1e-3) and a checkpoint after the second, then lr 1e6
    proc = subprocess.run([sys.executable, *det_args(data, out, 40), "SOLVER.BASE_LR", "1e6",
                           "SOLVER.CLIP_GRADIENTS.ENABLED", "False", "SOLVER.WARMUP_ITERS", "3",
                           "SOLVER.WARMUP_METHOD", "constant", "SOLVER.WARMUP_FACTOR", "1e-9"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    assert "FloatingPointError" in proc.stderr
    assert "training diverged at iteration" in proc.stderr or "parameters became inf/NaN at iteration" in proc.stderr
    assert "loss_" in proc.stderr and "last good checkpoint is" in proc.stderr
    last = out / "last_checkpoint"
    assert last.read_text().startswith("model_000")  # a checkpoint from before the divergence, and it is finite
    w = _weights(out / last.read_text())
    assert all(torch.isfinite(v).all() for v in w.values() if v.is_floating_point())


# ---- bad inputs --------------------------------------------------------------------------------------------

def _coco(tmp_path, images, annotations, categories=({"id": 1, "name": "a"},)):
    for im in images:
        if not (tmp_path / im["file_name"]).exists():
            Image.new("RGB", (im["width"], im["height"])).save(tmp_path / im["file_name"])
    path = tmp_path / "ann.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": list(categories)}))
    return path


def test_bad_boxes_are_clipped_or_dropped_and_logged(tmp_path, caplog):
    images = [{"id": 1, "file_name": "a.jpg", "width": 40, "height": 30}]
    anns = [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [30, 20, 20, 20], "area": 400, "iscrowd": 0},
            {"id": 2, "image_id": 1, "category_id": 1, "bbox": [5, 5, 0, 10], "area": 0, "iscrowd": 0},
            {"id": 3, "image_id": 1, "category_id": 1, "bbox": [5, 5, -3, 10], "area": 0, "iscrowd": 0},
            {"id": 4, "image_id": 1, "category_id": 1, "bbox": [50, 40, 5, 5], "area": 25, "iscrowd": 0}]
    path = _coco(tmp_path, images, anns)
    with caplog.at_level(logging.WARNING):
        dicts = load_coco_checked(str(path), str(tmp_path))
    boxes = [a["bbox"] for a in dicts[0]["annotations"]]
    assert boxes == [[30, 20, 40, 30]]  # clipped; zero, negative and outside boxes dropped
    assert "1 boxes clipped" in caplog.text and "3 empty or negative boxes dropped" in caplog.text
    assert "a.jpg" in caplog.text


def test_unknown_category_and_missing_image_name_the_problem(tmp_path):
    images = [{"id": 1, "file_name": "a.jpg", "width": 40, "height": 30}]
    anns = [{"id": 7, "image_id": 1, "category_id": 99, "bbox": [1, 1, 5, 5], "area": 25, "iscrowd": 0}]
    path = _coco(tmp_path, images, anns)
    with pytest.raises(DatasetFormatError, match=r"ann.json: annotation 7 \(image 1\) has category_id 99"):
        load_coco_checked(str(path), str(tmp_path), "rel_unknown_category")
    images.append({"id": 2, "file_name": "gone.jpg", "width": 40, "height": 30})
    path.write_text(json.dumps({"images": images, "annotations": [], "categories": [{"id": 1, "name": "a"}]}))
    with pytest.raises(FileNotFoundError, match="1 of 2 images not found.*gone.jpg"):
        load_coco_checked(str(path), str(tmp_path))


@pytest.mark.parametrize("mode", ["L", "CMYK", "RGBA", "P", "I;16"])
def test_image_modes_are_read_as_8bit_rgb(tmp_path, mode):
    path = tmp_path / ("img.jpg" if mode == "CMYK" else "img.png")
    if mode == "I;16":
        Image.fromarray(np.full((6, 8), 40000, np.uint16)).save(path)
    else:
        Image.new(mode, (8, 6)).save(path)
    img = read_image(str(path), "BGR")
    assert img.shape == (6, 8, 3) and img.dtype == np.uint8
    if mode == "I;16":
        assert 150 < img[0, 0, 0] < 160  # 40000/65535 of the range, not clipped to 255


@pytest.mark.parametrize("values, expected", [(0.5, 128), (200.0, 200)])
def test_a_float_tiff_is_read_by_its_range_not_clipped_to_black(tmp_path, values, expected):
    """A mode-F TIFF in [0, 1] was read as black by detection and classification (train_cls at chance, rc 0)."""
    path = tmp_path / "f.tif"
    Image.fromarray(np.full((6, 8), values, np.float32)).save(path)
    img = read_image(str(path), "BGR")
    assert img.shape == (6, 8, 3) and img.dtype == np.uint8 and int(img[0, 0, 0]) == expected


def test_a_float_image_outside_any_pixel_range_and_a_fifo_are_refused_naming_the_file(tmp_path):
    from conftest import make_fifo

    path = tmp_path / "neg.tif"
    Image.fromarray(np.full((6, 8), -3.0, np.float32)).save(path)
    with pytest.raises(ImageReadError, match=r"neg.tif: a float image with values in \[-3, -3\]"):
        read_image(str(path), "BGR")
    make_fifo(tmp_path / "pipe.jpg")  # refused before open(), which would wait for a writer
    with pytest.raises(ImageReadError, match=r"pipe.jpg: a FIFO \(named pipe\), not a regular file"):
        read_image(str(tmp_path / "pipe.jpg"), "BGR")


def test_a_16_bit_image_holding_12_bit_data_is_noted_once(tmp_path, caplog, monkeypatch):
    from classification.data import images

    monkeypatch.setattr(images, "_noted_12_bit", False)
    for name in ("a.png", "b.png"):
        Image.fromarray(np.full((6, 8), 4000, np.uint16)).save(tmp_path / name)
        read_image(str(tmp_path / name), "BGR")
    notes = [r.getMessage() for r in caplog.records if "12-bit data" in r.getMessage()]
    assert len(notes) == 1 and "a.png: a 16-bit image whose values stay below 4096" in notes[0]


def test_truncated_and_missing_images_name_the_file(tmp_path):
    Image.new("RGB", (64, 64), (200, 10, 10)).save(tmp_path / "ok.jpg", quality=95)
    blob = (tmp_path / "ok.jpg").read_bytes()
    (tmp_path / "cut.jpg").write_bytes(blob[: len(blob) // 2])
    with pytest.raises(ImageReadError, match="cut.jpg: cannot read image"):
        read_image(str(tmp_path / "cut.jpg"), "BGR")
    from detection import get_detection_cfg

    mapper = DetectionMapper(get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_34_C4.yaml",
                                               ["MODEL.WEIGHTS", "", "MODEL.DEVICE", "cpu"]), is_train=False)
    with pytest.raises(ImageReadError, match="nowhere.jpg: image file not found"):
        mapper({"file_name": str(tmp_path / "nowhere.jpg"), "height": 64, "width": 64})


def test_images_left_without_objects_are_dropped_after_the_difficult_ones(data, tmp_path, caplog):
    """Our training path (engine/data.train_dataset_dicts), not Detectron2's filter_empty: difficult VOC objects are
    dropped first, then images left with no object -- an image whose objects are all difficult goes too."""
    from detectron2.data import DatasetCatalog, MetadataCatalog

    from detection import get_detection_cfg
    from detection.engine.data import train_dataset_dicts

    box = {"bbox": [1, 1, 4, 4], "bbox_mode": 0, "category_id": 0}
    DatasetCatalog.register("rel_difficult_only", lambda: [
        {"file_name": "x.jpg", "image_id": 1, "height": 8, "width": 8, "annotations": []},
        {"file_name": "y.jpg", "image_id": 2, "height": 8, "width": 8, "annotations": [dict(box)]},
        {"file_name": "z.jpg", "image_id": 3, "height": 8, "width": 8, "annotations": [{**box, "difficult": 1}]},
        {"file_name": "w.jpg", "image_id": 4, "height": 8, "width": 8,
         "annotations": [{**box, "difficult": 1}, dict(box)]}])
    MetadataCatalog.get("rel_difficult_only").thing_classes = ["a"]

    def dicts(*opts):
        cfg = get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_34_C4.yaml",
                                ["MODEL.WEIGHTS", "", "MODEL.DEVICE", "cpu", "MODEL.ROI_HEADS.NUM_CLASSES", "1",
                                 "DATASETS.TRAIN", '("rel_difficult_only",)', *opts], read_weights=False)
        return {d["image_id"]: len(d["annotations"]) for d in train_dataset_dicts(cfg)}

    with caplog.at_level(logging.INFO, logger="detection.engine.data"):
        assert dicts() == {2: 1, 4: 1}  # 1: no objects; 3: only a difficult one, dropped after the drop
    assert "2 difficult objects are not training targets" in caplog.text
    assert dicts("DATALOADER.VOC_TRAIN_DIFFICULT", "True") == {2: 1, 3: 1, 4: 2}
    assert dicts("DATALOADER.FILTER_EMPTY_ANNOTATIONS", "False") == {1: 0, 2: 1, 3: 0, 4: 1}
    DatasetCatalog.register("rel_empty_dataset", lambda: [])
    with pytest.raises(ValueError, match=r"DATASETS.TRAIN \('rel_empty_dataset',\): Dataset 'rel_empty_dataset' is "
                                         "empty!"):
        dicts("DATASETS.TRAIN", '("rel_empty_dataset",)')


def test_detector_checkpoint_with_other_num_classes_loads_the_rest_with_a_warning(tmp_path, caplog):
    from detectron2.modeling import build_model

    from detection import BackbonesCheckpointer, get_detection_cfg

    cfg80 = get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_34_C4.yaml",
                              ["MODEL.WEIGHTS", "", "MODEL.DEVICE", "cpu"])
    m80 = build_model(cfg80)
    BackbonesCheckpointer(m80, save_dir=str(tmp_path)).save("coco")
    m20 = build_model(get_detection_cfg("configs/PascalVOC-Detection/faster_rcnn_R_34_C4.yaml",
                                        ["MODEL.WEIGHTS", "", "MODEL.DEVICE", "cpu"]))
    with caplog.at_level(logging.WARNING):
        BackbonesCheckpointer(m20).load(str(tmp_path / "coco.pth"))
    assert "roi_heads.box_predictor.cls_score.weight" in caplog.text  # skipped: incompatible shapes
    assert torch.equal(m20.backbone.res4[0].conv1.weight, m80.backbone.res4[0].conv1.weight)


def test_a_preemption_signal_during_a_checkpoint_write_is_handled_after_it(tmp_path):
    """submitit's handler checkpoints and exits; run inside torch.save it broke the zip ("unexpected pos") and the
    job failed instead of requeueing. atomic_write defers it: the file is complete, then the handler runs."""
    from backbones.checkpoint_io import atomic_write, read_checkpoint

    calls = []

    def handler(signum, frame):
        calls.append(signum)
        raise SystemExit(144)  # what submitit's local requeue does

    previous = signal.signal(signal.SIGUSR2, handler)
    path = tmp_path / "model.pth"

    def write(f):
        torch.save({"w": torch.ones(1000)}, f)
        os.kill(os.getpid(), signal.SIGUSR2)  # arrives mid-write
        f.write(b"")  # more work after the signal: a Python-level handler would have run by now
        assert not calls

    try:
        with pytest.raises(SystemExit):
            atomic_write(path, write)
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert calls == [signal.SIGUSR2]
    assert torch.equal(read_checkpoint(path)["w"], torch.ones(1000))  # complete, renamed into place
    assert signal.getsignal(signal.SIGUSR2) is previous


def test_a_preemption_signal_during_setup_is_handled_after_detectron2s_default_setup(tiny_data, tmp_path,
                                                                                    monkeypatch):
    """submitit's requeue handler raises SystemExit; landing inside Detectron2 main's default_setup
    (OmegaConf.create) it became omegaconf's ConfigKeyError and the job failed instead of requeueing (CI, a
    1-minute allocation whose signal came during setup). The signal now waits for the end of default_setup."""
    from detection.engine import train_net

    ran_inside, calls = [], []

    def default_setup(cfg, args):
        os.kill(os.getpid(), signal.SIGUSR2)  # arrives mid-setup
        ran_inside.append(bool(calls))

    previous = signal.signal(signal.SIGUSR2, lambda n, f: calls.append(n))
    monkeypatch.setattr(train_net, "default_setup", default_setup)
    try:
        args = train_net.build_parser().parse_args(det_args(tiny_data, tmp_path / "run", 2)[1:])
        train_net.register_cli_datasets(args)
        train_net.setup(args)
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert ran_inside == [False] and calls == [signal.SIGUSR2]  # not during default_setup, right after it
