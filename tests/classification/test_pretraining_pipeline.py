"""Classification pipeline: augmentation, 10-crop, datasets, end-to-end training, exact resume, hand-off to
detection, DDP on CPU, the analysis tools."""

import json
import os
import pickle
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import backbones
from classification.data.datasets import Cifar10, EmbeddedObjects, ImageFolderDataset
from classification.data.images import ImageReadError
from classification.data.transforms import (
    Lighting,
    RandomShorterSide,
    cifar_train_transform,
    imagenet_train_transform,
    ten_crop,
)
from classification.engine.run_files import read_classification_run
from classification.engine.trainer import ClsConfig, train
from classification.evaluate import multiscale_logits, ten_crop_logits
from conftest import REPO, run_tool

MEAN, STD = (123.675, 116.28, 103.53), (58.395, 57.12, 57.375)


def test_paper_augmentation_sizes_and_ranges():
    img = Image.fromarray(np.random.default_rng(0).integers(0, 255, (300, 500, 3), dtype=np.uint8))
    for _ in range(5):
        short = min(RandomShorterSide(256, 480)(img).size)
        assert 256 <= short <= 480
    x = imagenet_train_transform(MEAN, STD)(img)
    assert x.shape == (3, 224, 224) and x.dtype == torch.float32
    assert -3.0 < x.mean() < 3.0 and x.abs().max() < 10  # normalized, not 0-255
    c = cifar_train_transform(MEAN, STD)(Image.new("RGB", (32, 32), (123, 116, 103)))
    assert c.shape == (3, 32, 32)
    gray = torch.full((3, 8, 8), 0.5)
    torch.manual_seed(0)
    lit = Lighting(0.1)(gray)
    shift = (lit - gray)[:, 0, 0]
    assert shift.abs().max() > 0 and torch.allclose(lit - gray, shift.view(3, 1, 1).expand(3, 8, 8))


def test_seeded_samples_draw_the_same_with_the_cpu_generator_alone(monkeypatch):
    """SeededSamples seeds the CPU generator only (torch.manual_seed costs ~1.2 ms a call for its CUDA / XPU / MTIA
    queues): every item -- random, numpy and torch draws -- is the one the all-device seeding gave."""
    import random

    import numpy as np

    from classification.data.sampling import SeededSamples, decode_key

    class Draws(torch.utils.data.Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return random.random(), float(np.random.rand()), torch.rand(3).tolist(), i

    keys = [7, 3, 12, 24, 16]  # key = position * 5 + index: positions 1, 0, 2, 4, 3
    items = {False: [SeededSamples(Draws(), seed=4)[k] for k in keys]}
    reference = []  # the same draws seeded with torch.manual_seed (every device), as Detectron2 would
    for k in keys:
        position, index = decode_key(k, 5)
        s = (4 * 1_000_003 + position) % (2**32)
        random.seed(s)
        np.random.seed(s)
        torch.manual_seed(s)
        reference.append(Draws()[index])
    assert items[False] == reference
    assert len({item[1] for item in items[False]}) == len(keys)  # seeded per position: the draws differ


def test_ten_crop_equals_the_mean_of_the_ten_individual_predictions():
    torch.manual_seed(0)
    model = backbones.create_model("cifar_resnet20", num_classes=10).eval()
    images = torch.randn(2, 3, 40, 40)
    got = ten_crop_logits(model, images, 32)
    for n in range(2):
        views = ten_crop(images[n], 32)
        assert views.shape == (10, 3, 32, 32)
        # views 5-9 are the crops of the mirrored image: its top-left crop is the mirrored top-right crop
        assert torch.equal(views[5], views[1].flip(-1)) and torch.equal(views[9], views[4].flip(-1))
        expected = torch.stack([model(v[None])[0] for v in views]).mean(0)
        torch.testing.assert_close(got[n], expected, atol=1e-5, rtol=1e-5)
    assert multiscale_logits(model, images[0], scales=(32, 48)).shape == (10,)


def test_imagefolder_corrupt_image_policy(tmp_path):
    for c in ("cat", "dog"):
        (tmp_path / "train" / c).mkdir(parents=True)
        Image.new("RGB", (20, 20)).save(tmp_path / "train" / c / "a.JPEG")
    Image.new("CMYK", (20, 20)).save(tmp_path / "train" / "dog" / "cmyk.jpg")
    Image.new("I;16", (20, 20)).save(tmp_path / "train" / "dog" / "deep.png")
    good = (tmp_path / "train" / "cat" / "a.JPEG").read_bytes()
    (tmp_path / "train" / "cat" / "broken.JPEG").write_bytes(good[: len(good) // 2])
    strict = ImageFolderDataset(tmp_path, "train")
    assert strict.classes == ["cat", "dog"] and len(strict) == 5
    with pytest.raises(ImageReadError, match="broken.JPEG"):
        [strict[i] for i in range(len(strict))]
    lenient = ImageFolderDataset(tmp_path, "train", on_error="skip")
    items = [lenient[i] for i in range(len(lenient))]
    assert sum(isinstance(x[0], str) for x in items) == 1
    assert all(x[0].mode == "RGB" for x in items if not isinstance(x[0], str))  # CMYK / 16-bit converted


def test_cifar10_pickles_are_read_safely(tmp_path):
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        with open(tmp_path / name, "wb") as f:
            pickle.dump({b"data": rng.integers(0, 255, (4, 3072), dtype=np.uint8), b"labels": [0, 1, 2, 3]}, f,
                        protocol=2)
    ds = Cifar10(tmp_path, "train")
    assert len(ds) == 20 and ds[0][0].size == (32, 32)
    with open(tmp_path / "test_batch", "wb") as f:
        pickle.dump({b"data": np.zeros((1, 3072), np.uint8), b"labels": [0], b"x": Image.new("RGB", (1, 1))}, f)
    with pytest.raises(backbones.UnsafeCheckpointError, match="PIL"):
        Cifar10(tmp_path, "test")


def _cfg(tmp_path, name="run", **kw):
    base = dict(model="cifar_resnet20", dataset="embedded", image_size=32, train_samples=256, val_samples=64,
                iterations=12, batch_size=16, lr=0.05, eval_period=6, checkpoint_period=6, workers=0,
                deterministic=True, output_dir=str(tmp_path / name))
    base.update(kw)
    return ClsConfig(**base)


def test_train_end_to_end_and_exact_resume(tmp_path):
    full = train(_cfg(tmp_path, "full"))
    assert (tmp_path / "full" / "model_final.pth").is_file()
    # the reported final accuracy is that of the saved weights on the val split, re-evaluated independently
    from classification.engine.trainer import build_datasets
    from classification.evaluate import evaluate

    _, val, _ = build_datasets(_cfg(tmp_path, "full"))
    model = backbones.create_model("cifar_resnet20", num_classes=10)
    model.load_state_dict(torch.load(tmp_path / "full" / "model_final.pth", weights_only=True)["model"])
    again = evaluate(model.eval(), val)
    assert again["count"] == 64 and again["top1"] == full["final"]["top1"]
    # --fast-inference scores the same weights through backbones.optimize_for_inference (compiled): float-level
    # differences may flip a near-tied image at most
    fast = evaluate(model.eval(), val, fast_inference=True)
    assert fast["count"] == 64 and abs(fast["top1"] - again["top1"]) <= 100 / 64
    assert "compile_seconds" in fast and "compile_seconds" not in again
    assert full["history"]["iteration"] == [6, 12]
    # resume from the iteration-6 checkpoint in a fresh directory == the uninterrupted run
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    shutil.copy(tmp_path / "full" / "model_0000006.pth", resumed_dir / "model_0000006.pth")
    (resumed_dir / "last_checkpoint").write_text("model_0000006.pth")
    train(_cfg(tmp_path, "resumed"))
    a = torch.load(tmp_path / "full" / "model_final.pth", weights_only=True)["model"]
    b = torch.load(resumed_dir / "model_final.pth", weights_only=True)["model"]
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-6, rtol=1e-5, msg=k)


def test_keep_checkpoints_deletes_only_older_intermediate_files(tmp_path):
    out = tmp_path / "keep"
    train(_cfg(tmp_path, "keep", iterations=8, eval_period=8, checkpoint_period=2, keep_checkpoints=1,
               train_samples=32, val_samples=8, deterministic=False))
    assert sorted(p.name for p in out.glob("model_*.pth")) == ["model_0000006.pth", "model_final.pth"]
    assert (out / "last_checkpoint").read_text().strip() == "model_final.pth"
    train(_cfg(tmp_path, "all", iterations=4, eval_period=4, checkpoint_period=2, train_samples=32, val_samples=8,
               deterministic=False))  # the default keeps every one
    assert sorted(p.name for p in (tmp_path / "all").glob("model_*.pth")) == ["model_0000002.pth",
                                                                                "model_final.pth"]
    with pytest.raises(ValueError, match="keep_checkpoints"):
        _cfg(tmp_path, keep_checkpoints=-1)


def test_prune_intermediate_checkpoints_is_one_rule_for_both_trainers_and_the_main_job(tmp_path):
    """train_cls --keep-checkpoints N (during a run) and the main job after a stage (keep=0) delete by one rule:
    the oldest model_<iteration>.pth first (train_cls's 7 digits and Detectron2's), never model_final.pth or
    anything else."""
    from classification.engine.run_directory import prune_intermediate_checkpoints
    from detection.main_job.graph import prune_checkpoints

    names = ["model_0000002.pth", "model_0000010.pth", "model_0000999.pth", "model_final.pth", "metrics.json",
             "model_notes.txt"]
    for n in names:
        (tmp_path / n).write_bytes(b"x" * 10)
    assert prune_intermediate_checkpoints(tmp_path, keep=2) == 10
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[1:])
    assert prune_intermediate_checkpoints(tmp_path, keep=5) == 0
    (tmp_path / "last_checkpoint").write_text("model_0000999.pth")
    assert prune_checkpoints(tmp_path) == 20  # a finished stage: every intermediate file goes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last_checkpoint", "metrics.json", "model_final.pth",
                                                          "model_notes.txt"]
    assert (tmp_path / "last_checkpoint").read_text() == "model_final.pth"
    with pytest.raises(ValueError, match="keep=-1"):
        prune_intermediate_checkpoints(tmp_path, keep=-1)


def test_warmup_until_error_keeps_the_low_lr(tmp_path):
    res = train(_cfg(tmp_path, "warm", iterations=6, eval_period=3, warmup_until_error=0.0, lr=0.1,
                     warmup_factor=0.1))
    assert all(lr == pytest.approx(0.01) for lr in res["history"]["lr"])  # error never < 0: always warming up


def test_linear_warmup_ramps_from_the_factor_to_the_base_lr_then_the_step_schedule_takes_over():
    """Goyal et al.'s gradual warm-up as Detectron2's WarmupLinear computes it: lr x (f (1 - a) + a), a = it / W;
    at W the step schedule's lr, and the milestones still apply after it."""
    from classification.engine.trainer import LRSchedule

    cfg = ClsConfig(iterations=100, warmup_method="linear", warmup_iterations=5, warmup_factor=0.01)
    schedule = LRSchedule(cfg, base_lr=0.1)
    lrs = [schedule(it, running_error=0.9) for it in range(100)]
    assert lrs[0] == pytest.approx(0.001) and lrs[2] == pytest.approx(0.001 * 0.6 + 0.1 * 0.4)
    assert lrs[4] == pytest.approx(0.1 * (0.01 * 0.2 + 0.8)) and lrs[5] == lrs[49] == pytest.approx(0.1)
    assert lrs[50] == pytest.approx(0.01) and lrs[75] == pytest.approx(0.001)  # x0.1 at 50 and at 75


def test_a_linear_warmup_ends_on_its_iterations_even_where_the_paper_warms_up_on_the_error():
    """ResNet-110 on CIFAR-10 warms up on the training error by default (the paper); a linear warm-up chosen for it
    ends at its iterations (the lr climbed past the base lr while the error criterion kept it warm)."""
    from classification.engine.trainer import LRSchedule

    paper = ClsConfig(dataset="cifar10", model="cifar_resnet110", iterations=100)
    assert paper.warmup_error() == 0.8
    cfg = replace(paper, warmup_method="linear", warmup_iterations=10)
    assert cfg.warmup_error() is None
    assert LRSchedule(cfg, base_lr=0.1)(30, running_error=0.9) == pytest.approx(0.1)


@pytest.mark.parametrize("options, match", [
    ({"warmup_method": "linear", "warmup_iterations": 10, "warmup_until_error": 0.8},
     "does not combine with warmup_until_error"),
    ({"warmup_method": "linear", "warmup_iterations": 60, "iterations": 100},
     r"a linear warm-up of 60 iterations runs past the first lr cut at iteration 50"),
])
def test_a_linear_warmup_that_cannot_mean_what_it_says_is_refused(options, match):
    with pytest.raises(ValueError, match=match):
        ClsConfig(**options)


def test_classification_checkpoint_feeds_the_detector(tmp_path):
    """Hand-off: pretrain a tiny ResNet-18, start a Detectron2 C4 detector from it, the weights match."""
    from detectron2.modeling import build_model

    from detection import BackbonesCheckpointer, get_detection_cfg

    train(_cfg(tmp_path, "r18", model="resnet18", model_options={"norm": "BN"}, iterations=4, eval_period=4,
               checkpoint_period=4))
    ckpt = tmp_path / "r18" / "model_final.pth"
    cfg = get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_34_C4.yaml",
                            ["MODEL.DEVICE", "cpu", "MODEL.WEIGHTS", str(ckpt), "MODEL.BACKBONES.NAME", "resnet18"])
    assert cfg.INPUT.FORMAT == "RGB" and cfg.MODEL.PIXEL_MEAN == pytest.approx(list(MEAN))
    det = build_model(cfg)
    BackbonesCheckpointer(det).load(cfg.MODEL.WEIGHTS)
    src = backbones.create_model("resnet18", num_classes=10)
    backbones.load_pretrained(src, ckpt)
    assert torch.equal(det.backbone.res3[1].conv2.weight, src.res3[1].conv2.weight)
    assert torch.equal(det.roi_heads.res5[0].shortcut.weight, src.res5[0].shortcut.weight)
    assert torch.equal(det.backbone.stem.conv1.norm.running_mean, src.stem.conv1.norm.running_mean)


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two CPU processes need two cores (--num-gpus 2)")
def test_ddp_gloo_two_processes(tmp_path):
    out = tmp_path / "ddp"
    proc = run_tool("tools/train_cls.py", "--model", "cifar_resnet20", "--dataset", "embedded", "--train-samples",
                    "128", "--val-samples", "32", "--iterations", "4", "--batch-size", "8", "--eval-period", "4",
                    "--checkpoint-period", "4", "--workers", "0", "--num-gpus", "2", "--output-dir", out,
                    timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the summary is evaluation.json, as a detection run's (metrics.json names Detectron2's line log alone)
    assert (out / "model_final.pth").is_file() and (out / "evaluation.json").is_file()
    assert not (out / "metrics.json").exists()
    record = read_classification_run(out)
    (out / "evaluation.json").rename(out / "metrics.json")  # a run written before 2026-12-07 reads the same
    assert record.status == "finished" and read_classification_run(out) == record
    (out / "metrics.json").rename(out / "evaluation.json")
    again = run_tool("tools/train_cls.py", "--model", "cifar_resnet20", "--output-dir", out, "--iterations", "4",
                     timeout=120)
    assert again.returncode != 0 and "Pass --resume to continue that run" in again.stderr


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two CPU processes need two cores (--num-gpus 2)")
def test_one_global_batch_trains_the_same_net_in_any_process_layout(tmp_path):
    """1 process x 16, 2 processes x 8 and 2 machines x 1 process x 8 (two launches joined by --dist-url) on the
    default cached path, with GN (no statistic depends on the per-process batch): the same weights to float
    tolerance. Each rank drew other crops and flips when a batch's draws were seeded by its first stream position
    (the whole net by 1.2e-3 of its norm after these 3 iterations; with the same draws by 6e-7, the order of the
    gradient's summation)."""
    import socket
    import subprocess
    import sys

    from backbones.convert import load_model

    common = ["tools/train_cls.py", "--model", "cifar_resnet20", "--model-option", "norm=GN", "--dataset", "embedded",
              "--train-samples", "64", "--val-samples", "16", "--iterations", "3", "--eval-period", "3",
              "--checkpoint-period", "3", "--workers", "0", "--deterministic", "--lr", "0.05"]
    one = run_tool(*common, "--batch-size", "16", "--output-dir", tmp_path / "one", timeout=300)
    assert one.returncode == 0, one.stderr[-3000:]
    two = run_tool(*common, "--batch-size", "8", "--num-gpus", "2", "--output-dir", tmp_path / "two", timeout=300)
    assert two.returncode == 0, two.stderr[-3000:]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    machines = [subprocess.Popen([sys.executable, *map(str, common), "--batch-size", "8", "--num-machines", "2",
                                  "--machine-rank", str(rank), "--dist-url", f"tcp://127.0.0.1:{port}",
                                  "--output-dir", tmp_path / "machines"], cwd=REPO, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    for proc in machines:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    def flat(layout):
        state = load_model(tmp_path / layout / "model_final.pth")[2].state_dict()
        return torch.cat([v.flatten() for v in state.values() if v.is_floating_point()])

    ref = flat("one")
    for layout in ("two", "machines"):
        # the whole net's relative difference: the gradient's summation order differs between layouts, which a
        # near-zero tensor (a GN bias after 3 steps) magnifies on its own
        rel = float((flat(layout) - ref).norm() / ref.norm())
        assert rel < 1e-5, (layout, rel)
    record = json.loads((tmp_path / "one" / "config.json").read_text())
    assert record["augmentation_stream"] == "per sample: (seed, stream position)"


def test_a_cached_batch_draws_each_samples_augmentation_from_its_own_stream_position():
    from classification.data.sampling import position_uniforms

    every = position_uniforms(7, np.arange(16), 3)
    assert every.shape == (16, 3) and 0 <= every.min() and every.max() < 1
    assert np.array_equal(position_uniforms(7, np.array([9, 2]), 3), every[[9, 2]])  # any batch, any order
    assert not np.array_equal(position_uniforms(8, np.arange(16), 3), every)  # another seed, other draws
    assert np.array_equal(position_uniforms(7, np.arange(16), 4)[:, :3], every)  # draw j whatever the count
    big = position_uniforms(0, np.arange(100_000), 1)
    assert abs(big.mean() - 0.5) < 0.01 and abs((big < 0.1).mean() - 0.1) < 0.01


@pytest.mark.slow
def test_layer_response_and_degradation_tools(tmp_path):
    from classification.analysis.layer_response import layer_response_std

    model = backbones.create_model("cifar_resnet20", num_classes=10)
    ds = EmbeddedObjects("test", 32, transform=lambda im: torch.from_numpy(np.asarray(im, np.float32) / 255)
                         .permute(2, 0, 1), length=16)
    res = layer_response_std(model, ds, batch_size=8)
    assert len(res) == 18 and all(s > 0 for _, s in res)  # 9 basic blocks x 2 3x3 layers
    assert res[0][0] == "res2.0.conv1"
    proc = run_tool("tools/degradation.py", "--models", "cifar_plain8", "cifar_resnet8", "--dataset", "embedded",
                    "--iterations", "4", "--batch-size", "8", "--eval-period", "2", "--val-samples", "16",
                    "--workers", "0", "--layer-responses", "--output-dir", tmp_path / "deg", timeout=300)
    assert proc.returncode == 2 and "unknown model 'cifar_plain8'" in proc.stderr  # only the paper's depths
    assert "Traceback" not in proc.stderr and not (tmp_path / "deg").exists()  # named before anything is built
    proc = run_tool("tools/degradation.py", "--models", "cifar_plain20", "cifar_resnet20", "--dataset", "embedded",
                    "--iterations", "4", "--batch-size", "8", "--eval-period", "2", "--train-samples", "64",
                    "--val-samples", "16",
                    "--workers", "0", "--layer-responses", "--output-dir", tmp_path / "deg", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert Path(tmp_path / "deg" / "degradation.png").stat().st_size > 1000
    assert Path(tmp_path / "deg" / "layer_responses.png").is_file()
    assert "| cifar_plain20 |" in proc.stdout and "mean std of 3x3 responses" in proc.stdout
    assert "| final training error % | final val error % |" in proc.stdout  # scored on the embedded val split
    from backbones.convert import load_model

    assert load_model(tmp_path / "deg" / "cifar_plain20" / "model_final.pth")[1] == {"preact": False}  # the
    #   default: the paper's 2015 units
    # Fig. 7 from saved checkpoints (tools/layer_response.py reads any checkpoint, infers the architecture)
    ckpts = [tmp_path / "deg" / m / "model_final.pth" for m in ("cifar_plain20", "cifar_resnet20")]
    plot = tmp_path / "responses.png"
    proc = run_tool("tools/layer_response.py", *ckpts, "--dataset", "embedded", "--max-images", "16", "--output",
                    plot, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert plot.stat().st_size > 1000 and proc.stdout.count("mean std") == 2


def test_multi_scale_testing_is_reachable_from_the_config(tmp_path, monkeypatch):
    """--test-mode multi-scale: whole images, fully convolutional at the paper's shorter sides, scores averaged --
    and the trainer's evaluation really runs it (the config's test mode reaches evaluate())."""
    import classification.engine.trainer as trainer_module
    from classification.engine.trainer import build_datasets
    from classification.evaluate import evaluate

    for cls in ("a", "b"):
        (tmp_path / "val" / cls).mkdir(parents=True)
        (tmp_path / "train" / cls).mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (40 + 8 * i, 32), (200 * (cls == "a"), 60, 90)).save(tmp_path / "val" / cls / f"{i}.png")
            Image.new("RGB", (40, 32)).save(tmp_path / "train" / cls / f"{i}.png")
    cfg = ClsConfig(dataset="imagefolder", data_root=str(tmp_path), test_mode="multi-scale",
                    output_dir=str(tmp_path / "out"))
    _, val, _ = build_datasets(cfg)
    assert val[0][0].shape[-2:] == (32, 40)  # the whole image, not a crop
    model = backbones.create_model("cifar_resnet20", num_classes=2).eval()
    res = evaluate(model, val, multi_scale=True)
    assert res["count"] == 4
    calls = []

    def recording(*args, **kwargs):  # the mapping is under test here; evaluate() itself is checked above
        calls.append(kwargs)
        return {"top1": 50.0, "top5": 100.0, "count": 4}

    monkeypatch.setattr(trainer_module, "evaluate", recording)
    out = train(ClsConfig(dataset="imagefolder", data_root=str(tmp_path), test_mode="multi-scale", image_size=32,
                          model="cifar_resnet20", iterations=2, batch_size=2, eval_period=2, checkpoint_period=2,
                          workers=0, output_dir=str(tmp_path / "run")))
    assert calls and all(c["multi_scale"] and not c["ten_crop"] for c in calls)
    assert out["final"]["top1"] == 50.0
    with pytest.raises(ValueError, match="test_mode must be one of"):
        ClsConfig(test_mode="five-crop")


def test_fashion_mnist_is_found_where_the_embedded_default_finds_it(tmp_path, monkeypatch):
    """One location for Fashion-MNIST: the --dataset fashion-mnist loader's default is FASHION_MNIST_DIR, as for the
    embedded default's object source (it used to read Debian's path whatever FASHION_MNIST_DIR said)."""
    import gzip
    import struct

    from classification.data import objects
    from classification.data.datasets import FashionMNIST

    images = np.arange(3 * 28 * 28, dtype=np.uint8).reshape(3, 28, 28)
    with gzip.open(tmp_path / "t10k-images-idx3-ubyte.gz", "wb") as f:
        f.write(bytes([0, 0, 8, 3]) + struct.pack(">3I", 3, 28, 28) + images.tobytes())
    with gzip.open(tmp_path / "t10k-labels-idx1-ubyte.gz", "wb") as f:
        f.write(bytes([0, 0, 8, 1]) + struct.pack(">I", 3) + bytes([4, 0, 9]))
    monkeypatch.setattr(objects, "FASHION_MNIST_DIR", tmp_path)
    ds = FashionMNIST(split="test")
    assert len(ds) == 3 and [ds[i][1] for i in range(3)] == [4, 0, 9]
    assert np.array_equal(np.asarray(ds[1][0])[2:30, 2:30, 0], images[1])  # padded to 32, 3 channels
    assert objects.load_object_source("test").name == "fashion-mnist"
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(ValueError, match="t10k-labels-idx1-ubyte.gz: cannot read IDX file"):
        FashionMNIST(split="test")


@pytest.mark.slow
def test_ctrl_c_checkpoints_at_a_step_boundary_and_resume_finishes(tmp_path):
    """SIGINT mid-run (as the main job stops its stages): the step in flight completes, a checkpoint of that
    iteration is written (not only the last periodic one), and --resume continues from it to the end."""
    import json
    import signal
    import subprocess
    import sys
    import time

    from conftest import REPO

    out = tmp_path / "run"
    cmd = [sys.executable, "tools/train_cls.py", "--model", "cifar_resnet20", "--dataset", "embedded",
           "--train-samples", "256", "--val-samples", "16", "--iterations", "100000", "--batch-size", "8",
           "--eval-period", "100000", "--checkpoint-period", "100000", "--workers", "0", "--output-dir", str(out)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    while not ((out / "progress.json").is_file() and json.loads((out / "progress.json").read_text())["iteration"] > 3):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()[1][-2000:]
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0 and "interrupted after iteration" in err, err[-2000:]
    name = (out / "last_checkpoint").read_text().strip()
    at = int(name.removeprefix("model_").removesuffix(".pth"))
    assert at > 3 and (out / name).is_file()  # no periodic checkpoint was due: this one is the interrupt's
    state = torch.load(out / name, map_location="cpu", weights_only=True)
    assert state["iteration"] == at
    resumed = subprocess.run([*cmd[:cmd.index("100000")], str(at + 2), *cmd[cmd.index("100000") + 1:], "--resume"],
                             cwd=REPO, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((out / "evaluation.json").read_text())["images_seen"] == (at + 2) * 8


def test_train_cls_resume_of_a_run_recorded_with_the_earlier_batch_draws_says_why(tmp_path, capsys):
    """The user changed nothing: the refusal says what did, not "a resumed run keeps its settings"."""
    from classification.engine import train_net

    out = tmp_path / "old"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"dataset": "embedded", "embedded_cache": True, "seed": 0}))
    (out / "last_checkpoint").write_text("model_0000004.pth")
    with pytest.raises(SystemExit) as exit_:
        train_net.run(["--dataset", "embedded", "--resume", "--output-dir", str(out)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --resume: {out} was trained before the cached batches drew each sample's crops")
    assert err.count("\n") == 1


def test_a_resume_of_a_run_recorded_with_the_earlier_batch_draws_is_refused_naming_it():
    from dataclasses import asdict

    from classification.engine.errors import UsageError
    from classification.engine.run_directory import refuse_changed_settings
    from classification.engine.trainer import recorded_settings

    cfg = ClsConfig(dataset="embedded")
    before = json.loads(json.dumps(asdict(cfg)))  # what config.json held until 2026-12-05
    with pytest.raises(UsageError, match=r"augmentation_stream: '\(unset\)' -> 'per sample: \(seed, stream "
                                         r"position\)'"):
        refuse_changed_settings(before, recorded_settings(cfg), allowed=(), source="config.json")
    other = ClsConfig(dataset="cifar10")  # no cached batches: nothing recorded, an old run resumes
    refuse_changed_settings(json.loads(json.dumps(asdict(other))), recorded_settings(other), allowed=(),
                            source="config.json")
