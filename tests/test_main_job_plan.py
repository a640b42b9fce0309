"""The main job's parts without running it: the cached composite set (equal to the on-the-fly one), the batch
augmentation (equal to torchvision's), held-out items, the plan and its dry run, nested seed spreads, the notes
(a claim appears only with its numbers), the foreach gradient clipping (equal to Detectron2's)."""

import json
import re
import time

import numpy as np
import pytest
import torch
from torchvision.transforms.v2 import functional as F

from classification.data.composited import CompositedSet, augment_batch, load_composited, render_composited
from classification.data.datasets import EmbeddedObjects
from classification.engine.config import ClsConfig
from conftest import run_tool
from detection.engine.main_job import MainJobPlan, generated_notes, nested_spread, plan_stages, summary_lines


def test_cached_composites_equal_the_on_the_fly_ones_and_are_reused(tmp_path):
    for seed in (0, 3):
        images, labels, _ = render_composited("test", 32, seed, 12)
        ref = EmbeddedObjects("test", 32, None, 12, seed)
        for i in range(12):
            pil, label = ref[i]
            assert np.array_equal(np.asarray(pil), images[i]) and label == labels[i], (seed, i)
    first = load_composited("train", 24, 1, count=10, root=tmp_path)
    files = sorted(tmp_path.iterdir())
    stamp = [f.stat().st_mtime_ns for f in files]
    again = load_composited("train", 24, 1, count=6, root=tmp_path)  # fewer items: read from the cache
    assert [f.stat().st_mtime_ns for f in files] == stamp and np.array_equal(again[0], first[0][:6])
    more = load_composited("train", 24, 1, count=14, root=tmp_path)  # more items than cached: rendered again
    assert more[0].shape[0] == 14 and np.array_equal(more[0][:10], first[0])
    meta = next(f for f in tmp_path.iterdir() if f.suffix == ".json")
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "seed": 99}))  # a cache of another seed
    assert np.array_equal(load_composited("train", 24, 1, count=14, root=tmp_path)[0], more[0])
    assert json.loads(meta.read_text())["seed"] == 1


def test_batch_augmentation_is_torchvisions_crop_and_flip():
    images = torch.randint(0, 256, (16, 32, 32, 3), dtype=torch.uint8)
    out = augment_batch(images, 4, torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(5)  # the same draws, in augment_batch's order
    oy, ox = torch.randint(0, 9, (16,), generator=g), torch.randint(0, 9, (16,), generator=g)
    flip = torch.rand(16, generator=g) < 0.5
    assert 0 < int(flip.sum()) < 16 and len(set(oy.tolist())) > 1
    for i in range(16):
        ref = F.crop(F.pad(images[i].permute(2, 0, 1), [4]), int(oy[i]), int(ox[i]), 32, 32)
        ref = F.horizontal_flip(ref) if flip[i] else ref
        assert torch.equal(ref.permute(1, 2, 0), out[i]), i


def _small_fashion_mnist(root, n_train: int, n_test: int) -> None:
    """Fashion-MNIST's four IDX files (gzip, the real format) with n_train / n_test random items."""
    import gzip
    import struct

    rng = np.random.default_rng(0)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        with gzip.open(root / f"{prefix}-images-idx3-ubyte.gz", "wb") as f:
            f.write(bytes([0, 0, 8, 3]) + struct.pack(">3I", n, 28, 28) + rng.integers(0, 256, n * 784, np.uint8)
                    .tobytes())
        with gzip.open(root / f"{prefix}-labels-idx1-ubyte.gz", "wb") as f:
            f.write(bytes([0, 0, 8, 1]) + struct.pack(">I", n) + bytes(i % 10 for i in range(n)))


def test_holdout_is_the_last_training_items(tmp_path, monkeypatch):
    from classification.data import objects
    from classification.engine.trainer import build_datasets

    # a 200-item Fashion-MNIST: the held-out items are the last of the split, whose cache is rendered whole
    _small_fashion_mnist(tmp_path, 200, 50)
    monkeypatch.setattr(objects, "FASHION_MNIST_DIR", tmp_path)
    monkeypatch.setenv("DETECTRON2_DATASETS", str(tmp_path))
    cfg = ClsConfig(dataset="embedded", holdout=40, train_samples=100, output_dir=str(tmp_path / "o"))
    train, val, _ = build_datasets(cfg)
    assert isinstance(train, CompositedSet) and len(train) == 100 and len(val) == 40
    ref = EmbeddedObjects("train", 32)
    n = len(ref)
    assert n == 200 and ref.source == "fashion-mnist"
    assert np.array_equal(val.images[0].numpy(), np.asarray(ref[n - 40][0]))  # unaugmented, from the train split
    assert int(val.labels[-1]) == ref[n - 1][1]
    with pytest.raises(ValueError, match="embedded dataset only"):
        ClsConfig(dataset="cifar10", holdout=10)
    with pytest.raises(ValueError, match="leaves no training items"):
        build_datasets(ClsConfig(dataset="embedded", holdout=n, output_dir=str(tmp_path / "p")))


def test_plan_nests_detection_seeds_under_pretraining_seeds(tmp_path):
    plan = MainJobPlan(pretrain_seeds=(0, 1), detect_seeds=(0, 1, 2), pretrain_epochs=1.0)
    stages = plan_stages(plan, tmp_path)
    pre = [s for s in stages if s.kind == "pretrain"]
    det = [s for s in stages if s.kind == "detect" and s.init == "pretrained"]
    scratch = [s for s in stages if s.init == "scratch"]
    assert len(pre) == 4 and len(det) == 2 * 2 * 3 and len(scratch) == 2
    for s in det:
        assert s.deps == [tmp_path / "pretrain" / f"{s.model}_p{s.pretrain_seed}"]
        i = s.argv.index("MODEL.WEIGHTS")
        assert s.argv[i + 1] == str(s.deps[0] / "model_final.pth") and s.argv[s.argv.index("SEED") + 1] == \
            str(s.detect_seed)
    assert {s.group for s in det} == {"vgg16_bn_pretrained", "resnet101_pretrained"}
    assert all(s.iterations == plan.pretrain_iterations() for s in pre)
    assert plan.pretrain_iterations() == -(-plan.pretrain_items() // plan.pretrain_batch)
    sel = plan_stages(MainJobPlan(selection=True), tmp_path)
    assert "--holdout" in sel[0].argv and '("embedded_train_holdout",)' in sel[-1].argv


def test_dry_run_prints_the_plan_with_measured_estimates(tmp_path):
    out = tmp_path / "job"
    proc = run_tool("tools/main_job.py", "--dry-run", "--quick", "--output-dir", out, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "pretrain/vgg16_bn_p0" in proc.stdout and "detect/resnet101_p0_d0" in proc.stdout
    assert "after pretrain/resnet101_p0" in proc.stdout and "Nothing was run" in proc.stdout
    minutes = float(proc.stdout.split("[main job] estimated ")[1].split(" min")[0])
    assert minutes > 0 and not out.exists()
    assert "FutureWarning" not in proc.stderr  # fvcore's torch.jit.script warning is silenced at the entry point
    assert "an ESTIMATE from mult-adds, not a measurement" in proc.stdout and "40 TFLOP/s sustained" in proc.stdout
    assert re.search(r"resnet101 +pretraining 153.6M images x 7.6 GMACs = 48 GPU-hours; detection 5.12M images x "
                     r"\d+ GMACs = \d+ GPU-hours", proc.stdout), proc.stdout[-2000:]
    dup = run_tool("tools/main_job.py", "--dry-run", "--seeds", "0", "0", timeout=120)
    assert dup.returncode != 0 and "lists a seed twice" in dup.stderr


def test_paper_scale_cost_is_the_arithmetic_it_states():
    """Mult-adds from the paper (Table 1: ResNet-101 7.6e9 FLOPs, i.e. mult-adds) x 2 x 3 x images / throughput."""
    import detection.engine.paper_cost as paper
    from backbones import complexity, create_model
    from detection.engine.main_job import ARCH_CONFIGS
    from detection.engine.paper_cost import paper_cost

    r101 = paper_cost("resnet101", str(ARCH_CONFIGS["resnet"]), tflops=40)
    assert r101.pretrain_gmacs == pytest.approx(7.6, rel=0.01)
    assert r101.pretrain_gpu_hours == pytest.approx(7.57e9 * 6 * 600_000 * 256 / 40e12 / 3600, rel=0.01)
    assert paper_cost("resnet101", str(ARCH_CONFIGS["resnet"]), tflops=80).detect_gpu_hours == \
        pytest.approx(r101.detect_gpu_hours / 2)
    # C4 detection image: stem..res4 on the image + res5 on 128 RoIs of 14x14 (res5 at 224 px sees 14x14)
    with torch.device("meta"):  # counted on shapes, as paper_cost does
        net = create_model("resnet101")
    by_full = complexity(net, (3, *paper.DETECTION_IMAGE)).by_module
    res5_roi = complexity(net, (3, 224, 224)).by_module["res5"]
    trunk = sum(v for k, v in by_full.items() if k not in ("res5", "fc"))
    assert r101.detect_gmacs == pytest.approx((trunk + 128 * res5_roi) / 1e9)
    assert r101.detect_images == 320_000 * 16
    vgg = paper_cost("vgg16", str(ARCH_CONFIGS["vgg"]))
    assert vgg.pretrain_gmacs == pytest.approx(15.5, rel=0.01)  # VGG-16: 15.3-15.5 GMACs (Table 1's 15.3e9)


def test_nested_spread_separates_pretraining_and_detection_seeds():
    s = nested_spread({(0, 0): 80.0, (0, 1): 82.0, (1, 0): 70.0, (1, 1): 72.0})
    assert s["mean"] == 76.0 and s["n"] == 4 and s["pretraining_seeds"] == 2
    assert s["sd_between_pretraining_seeds"] == pytest.approx(np.std([81, 71], ddof=1))
    assert s["sd_within_pretraining_seed"] == pytest.approx(np.sqrt(2.0))
    assert s["sd"] == pytest.approx(np.std([80, 82, 70, 72], ddof=1))


def _results(delta_verdict: str, with_pretraining: bool = True) -> dict:
    stat = {"mean": 50.0, "sd": 1.0, "n": 4}
    return {"pretraining": {"vgg16_bn": {"mean": 20.0, "sd": 1.0, "n": 2},
                            "resnet101": {"mean": 25.0, "sd": 1.0, "n": 2}} if with_pretraining else {},
            "groups": {"vgg16_bn_pretrained": {"stats": {"AP50": stat}}},
            "gains": [{"backbone": "vgg16_bn", "metric": "AP50", "delta": 40.0, "verdict": "beyond seed spread (±2)"},
                      {"backbone": "resnet101", "metric": "AP50", "delta": 1.0, "verdict": "within seed spread (±3)"}],
            "deltas": [{"a": "resnet101_pretrained", "b": "vgg16_bn_pretrained", "metric": "AP50", "delta": -6.0,
                        "verdict": delta_verdict}]}


def test_notes_make_a_claim_only_when_its_numbers_support_it():
    plan = MainJobPlan()
    beyond = " ".join(generated_notes(_results("beyond seed spread (±2.00)"), plan))
    assert "Pretraining raises vgg16_bn's AP50 by 40.0" in beyond
    assert "no effect of pretraining is established" in beyond  # resnet101's gain is within the spread
    assert "vgg16_bn ahead of resnet101 by 6.0 AP50, beyond seed spread" in beyond
    assert "no cause is claimed" in beyond and "pretraining top-1 error resnet101 25.0%" in beyond
    within = " ".join(generated_notes(_results("within seed spread (±9.00)"), plan))
    assert "order of the two backbones is not established" in within
    bare = " ".join(generated_notes(_results("within seed spread (±9.00)", with_pretraining=False), plan))
    assert "Measured beside it" not in bare  # no pretraining numbers: nothing said about them
    manifest = {"source": "s", "classes": ["a"], "counts": {"val": {"images": 3}}}
    lines = summary_lines(_results("beyond seed spread (±2.00)"), plan, {"AP50": 0.3, "AP": 0.1}, manifest)
    assert any("ΔAP50 -6.00 -- beyond" in ln for ln in lines) and any("chance level" in ln for ln in lines)


def test_foreach_clipping_equals_detectron2s_per_parameter_clipping():
    from detectron2.config import get_cfg
    from detectron2.solver.build import _create_gradient_clipper

    from detection.engine.optimizer import clip_each_parameter_norm_

    cfg = get_cfg().SOLVER.CLIP_GRADIENTS
    cfg.CLIP_VALUE, cfg.CLIP_TYPE = 10.0, "norm"
    clip = _create_gradient_clipper(cfg)
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.zeros(s)) for s in ((8, 3, 3, 3), (8,), (16, 8), (5,), (7,))]
    for p, scale in zip(params, (0.01, 100.0, 3.0, 50.0, 0.0)):
        p.grad = torch.randn(p.shape) * scale
    grads = [p.grad.clone() for p in params]
    for p in params:
        clip(p)
    clip_each_parameter_norm_(grads, 10.0)
    for p, g in zip(params, grads):
        assert torch.equal(p.grad, g)
    assert float(params[1].grad.norm()) == pytest.approx(10.0, rel=1e-5)  # clipped to the bound


def test_the_detection_optimizer_follows_detectron2s_over_steps_with_fused_sgd():
    """Same parameter groups, clipping and SGD arithmetic as Detectron2's build_optimizer; the fused kernel rounds
    its multiply-adds differently (a few float32 ulps), nothing more."""
    from detectron2.config import get_cfg
    from detectron2.solver import build_optimizer as d2_build_optimizer

    from detection.engine.optimizer import build_optimizer

    cfg = get_cfg()
    cfg.SOLVER.CLIP_GRADIENTS.ENABLED, cfg.SOLVER.CLIP_GRADIENTS.CLIP_TYPE = True, "norm"
    cfg.SOLVER.CLIP_GRADIENTS.CLIP_VALUE, cfg.SOLVER.WEIGHT_DECAY_BIAS = 10.0, 0.0

    def net():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.Flatten(),
                                   torch.nn.Linear(8 * 6 * 6, 5))

    ref, ours = net(), net()
    opt_ref, opt = d2_build_optimizer(cfg, ref), build_optimizer(cfg, ours)
    assert opt.defaults["fused"] and len(opt.param_groups) == len(opt_ref.param_groups)
    x = torch.randn(4, 3, 8, 8)
    for step in range(6):  # odd steps: gradients far over the bound, so clipping acts
        for model, o in ((ref, opt_ref), (ours, opt)):
            o.zero_grad()
            model(x * (1 + 20 * (step % 2))).square().sum().backward()
            o.step()
    for p_ref, p in zip(ref.parameters(), ours.parameters()):
        torch.testing.assert_close(p, p_ref, rtol=1e-6, atol=1e-7)
    start = net()
    assert not torch.equal(ref[0].weight, start[0].weight) and not torch.equal(ref[3].weight, start[3].weight)


def test_fresh_deletes_only_what_the_job_made(tmp_path):
    from detection.engine.main_job import STAGE_FILE, _fresh

    stage = tmp_path / "detect" / "vgg16_bn_p0_d0"
    stage.mkdir(parents=True)
    (stage / STAGE_FILE).write_text("{}")
    other = tmp_path / "detect" / "my_own_run"
    other.mkdir()
    (other / "model_final.pth").write_text("x")
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "report").mkdir()
    _fresh(tmp_path, lambda m: None)
    assert not stage.exists() and not (tmp_path / "report").exists()
    assert (other / "model_final.pth").is_file() and (tmp_path / "notes.txt").is_file()


def test_a_stop_request_the_signal_handler_could_not_raise_still_stops_the_stages(tmp_path):
    """Python swallows a KeyboardInterrupt raised in a fork hook (a SIGTERM landing while Popen starts a stage):
    the handler also sets STOP_REQUESTED, and run_graph polls it -- the running stage is stopped, none started."""
    import threading

    from detection.engine.main_job import Estimator, JobStage, run_graph
    from detection.engine.stages import STOP_REQUESTED

    script = tmp_path / "slow.py"
    script.write_text("import time; time.sleep(60)\n")
    a = JobStage("stage a", tmp_path / "a", [str(script)], "detect", "m", "scratch", 1)
    b = JobStage("stage b", tmp_path / "b", [str(script)], "detect", "m", "scratch", 1, deps=[tmp_path / "a"])
    timer = threading.Timer(1.5, STOP_REQUESTED.set)  # the flag alone, as when the exception was swallowed
    timer.start()
    t0 = time.time()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_graph([a, b], 1, 1, Estimator({}, 1), lambda m: None)
    finally:
        timer.cancel()
        STOP_REQUESTED.clear()
    assert time.time() - t0 < 10  # the stage got SIGINT and ended; nobody waited for its 60 s
    assert (tmp_path / "a" / "stage.log").exists() and not (tmp_path / "b").exists()


def test_a_failed_stage_stops_the_graph_and_names_its_log(tmp_path):
    from detection.engine.main_job import Estimator, JobStage, run_graph

    script = tmp_path / "fail.py"
    script.write_text("import sys; print('boom: the reason'); sys.exit(3)\n")
    a = JobStage("stage a", tmp_path / "a", [str(script)], "detect", "m", "scratch", 1)
    b = JobStage("stage b", tmp_path / "b", [str(script)], "detect", "m", "scratch", 1, deps=[tmp_path / "a"])
    lines = []
    with pytest.raises(RuntimeError, match="stage a \\(exit 3\\)") as err:
        run_graph([a, b], 2, 1, Estimator({}, 2), lines.append)
    assert "boom: the reason" in str(err.value) and str(tmp_path / "a" / "stage.log") in str(err.value)
    assert not (tmp_path / "b").exists() and any("started: stage a" in ln for ln in lines)


def test_each_stage_records_the_code_that_ran_it_and_a_resume_at_other_code_adds_one(tmp_path, monkeypatch):
    """The record names the git commit (and uncommitted changes) of every run of the stage; the code version is
    provenance, not a setting: a resume at another commit is allowed, a change of command is still refused."""
    import detection.engine.stages as stages
    from detection.engine.code_version import code_version
    from detection.engine.main_job import STAGE_FILE, Estimator, JobStage, StageConflict, run_graph

    here = code_version(stages.REPO)
    if here["commit"] is None:
        pytest.skip("not a git checkout (an installed copy): the commit is recorded as unknown")
    assert len(here["commit"]) == 40 and isinstance(here["dirty"], bool)
    script = tmp_path / "fail.py"
    script.write_text("import sys; sys.exit(3)\n")
    a = JobStage("stage a", tmp_path / "a", [str(script)], "detect", "m", "scratch", 1)
    with pytest.raises(RuntimeError):
        run_graph([a], 1, 1, Estimator({}, 1), lambda m: None)
    assert json.loads((a.out / STAGE_FILE).read_text()) == {"argv": [str(script)], "threads": 1, "code": [here]}
    other = {"commit": "f" * 40, "dirty": False}
    monkeypatch.setattr(stages, "code_version", lambda repo: other)  # the next run: a checkout at another commit
    with pytest.raises(RuntimeError):
        run_graph([a], 1, 1, Estimator({}, 1), lambda m: None)  # not refused: the same command resumes
    assert json.loads((a.out / STAGE_FILE).read_text())["code"] == [here, other]
    changed = JobStage("stage a", tmp_path / "a", [str(script), "--more"], "detect", "m", "scratch", 1)
    with pytest.raises(StageConflict, match="other settings"):
        run_graph([changed], 1, 1, Estimator({}, 1), lambda m: None)
    from detection.engine.code_version import describe_versions  # outside a checkout: unknown, never guessed

    assert code_version(tmp_path) == {"commit": None, "dirty": None}
    assert describe_versions([code_version(tmp_path)]) == "unknown (not a git checkout)"
