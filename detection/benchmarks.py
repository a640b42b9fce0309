"""Performance against the references, measured side by side in one run (tools/benchmark.py runs it).

Every comparison alternates the sides (ours, reference, ours, reference, ...) for --repeats rounds after --warmup
rounds and reports the median of the per-round ratios reference_time / our_time with a bootstrap 95% interval over
the rounds. A result is labelled "faster" only when the whole interval is above 1.0, "slower" when it is below,
"parity" otherwise. The JSON records threads, layout and the torch / oneDNN versions beside every figure.

    python tools/benchmark.py                          # every section, ~25 minutes on 2 CPU cores
    python tools/benchmark.py --only backbone --repeats 9 --markdown BENCHMARKS-run.md

Sections: backbone (ours vs torchvision, R-50 / R-101 / VGG-16, training and inference; channels-last variants),
detector (our R-101-C4 vs Detectron2's built-in R-101-C4, same settings, shorter side 600), main_job (one training
iteration of each main-job leg at 128 px, norm folding on vs off, fraction of matmul peak, per-op profile),
main_job_pretrain / main_job_detect (pretraining images/s and detection iterations/s: the pipeline before issue
#20 vs the current one, alternating in one run), main_job_detect_vs_commit (detection iterations/s: that earlier
commit's own code in a worker process vs this tree's),
cocoeval (faster-coco-eval vs pycocotools, 5,000 images), peak (backbone GFLOP/s vs a large matmul), loader
(train-loader images/s vs the C4 step's consumption), memory (peak RSS of an R-101-C4 training iteration).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from backbones.checkpoint_io import atomic_write_text

from .engine.main_job import leg_config_files
from .engine.stages import REPO

# ---- measurement ---------------------------------------------------------------------------------------------------

def alternate(fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 2) -> dict[str, list[float]]:
    """Seconds per call of each fn: `warmup` untimed rounds, then `repeats` rounds, the sides alternating."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(repeats):
        order = list(fns) if r % 2 == 0 else list(reversed(fns))  # neither side always runs first
        for k in order:
            t0 = time.perf_counter()
            fns[k]()
            times[k].append(time.perf_counter() - t0)
    return times


def ratio_stats(reference: list[float], ours: list[float], *, resamples: int = 4000, seed: int = 0) -> dict:
    """Median of per-round ratios reference / ours, a bootstrap 95% interval of that median, and the verdict."""
    ratios = np.asarray(reference) / np.asarray(ours)
    rng = np.random.default_rng(seed)
    boot = np.median(rng.choice(ratios, size=(resamples, len(ratios)), replace=True), axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    verdict = "faster" if lo > 1.0 else "slower" if hi < 1.0 else "parity (interval includes 1.0)"
    return {"ratio": float(np.median(ratios)), "ci95": [float(lo), float(hi)], "verdict": verdict,
            "rounds": len(ratios)}


def compare(ours: Callable, reference: Callable, repeats: int, warmup: int = 2, names=("ours", "reference")) -> dict:
    t = alternate({names[0]: ours, names[1]: reference}, repeats, warmup)
    return {f"s_{names[0]}": statistics.median(t[names[0]]), f"s_{names[1]}": statistics.median(t[names[1]]),
            **ratio_stats(t[names[1]], t[names[0]])}


def machine() -> dict:
    cfg = torch.__config__.show()
    onednn = re.search(r"(?:oneDNN|MKL-DNN|mkldnn)[^\n]*?v?(\d+\.\d+(?:\.\d+)?)", cfg)
    return {"cpus": os.cpu_count(), "threads": torch.get_num_threads(), "torch": torch.__version__,
            "onednn": onednn.group(1) if onednn else "unknown", "layout": "NCHW unless a row says channels_last",
            "date": time.strftime("%Y-%m-%d")}


# ---- backbones vs torchvision --------------------------------------------------------------------------------------

def _bench_backbone_one(name: str, opts: dict, repeats: int) -> dict:
    import torchvision

    import backbones

    x = torch.randn(8, 3, 224, 224)
    torch.manual_seed(0)
    ours, tv = backbones.create_model(name, **opts), getattr(torchvision.models, name)(weights=None)
    tv_path = REPO / "output" / "benchmark" / f"{name}_tv.pth"
    tv_path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(tv.state_dict(), tv_path)
    backbones.load_pretrained(ours, tv_path)

    def train_step(m, inp=x):
        m.zero_grad(set_to_none=True)
        m(inp).sum().backward()

    ours.train()
    tv.train()
    row = {"train": compare(lambda: train_step(ours), lambda: train_step(tv), repeats, names=("ours", "torchvision"))}
    x_cl = x.contiguous(memory_format=torch.channels_last)
    ours_cl = backbones.create_model(name, **opts)
    ours_cl.load_state_dict(ours.state_dict())
    ours_cl = ours_cl.to(memory_format=torch.channels_last).train()
    row["train_channels_last_vs_nchw"] = compare(lambda: train_step(ours_cl, x_cl), lambda: train_step(ours),
                                                 repeats, names=("channels_last", "nchw"))
    # our pretraining default (ClsConfig.channels_last) against torchvision's default layout
    row["train_channels_last_vs_torchvision"] = compare(lambda: train_step(ours_cl, x_cl), lambda: train_step(tv),
                                                        repeats, names=("ours_channels_last", "torchvision"))
    # the training rounds moved each model's BN running statistics by a different number of steps (ours also ran
    # as the NCHW side above): restore the saved state so that the inference rows compare equal models
    tv.load_state_dict(torch.load(tv_path, weights_only=True))
    backbones.load_pretrained(ours, tv_path)
    ours_cl.load_state_dict(ours.state_dict())
    for m in (ours, tv, ours_cl):
        m.eval()
    with torch.inference_mode():
        ref = tv(x)  # every variant must stay correct before it is timed
        # float tolerance relative to the output's scale: a randomly initialised net in eval mode (unit running
        # statistics) amplifies the summation-order differences of folding and layouts with its depth
        tol = 1e-3 * float(ref.abs().max())
        torch.testing.assert_close(ours(x), ref, atol=tol, rtol=1e-3)
        torch.testing.assert_close(ours_cl(x_cl), ref, atol=tol, rtol=1e-3)
        row["infer"] = compare(lambda: ours(x), lambda: tv(x), repeats, names=("ours", "torchvision"))
        row["infer_channels_last_vs_torchvision"] = compare(lambda: ours_cl(x_cl), lambda: tv(x), repeats,
                                                            names=("ours_channels_last", "torchvision"))
    return row


def bench_backbone(repeats: int) -> dict:
    out = {"conditions": "batch 8 at 224x224, fp32; ours: BN folded into the convs in eval mode"}
    for name, opts in (("resnet50", {"stride_in_1x1": False}), ("resnet101", {"stride_in_1x1": False}),
                       ("vgg16", {})):
        out[name] = _bench_backbone_one(name, opts, repeats)
        gc.collect()
    return out


# ---- detector vs Detectron2 -----------------------------------------------------------------------------------------

def _det_cfgs():
    from detectron2.config import get_cfg

    from detection import get_detection_cfg
    from detection.compat import detectron2_config_file

    ours = get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_101_C4.yaml",
                             ["MODEL.WEIGHTS", "", "MODEL.DEVICE", "cpu"])
    d2 = get_cfg()
    d2.merge_from_file(detectron2_config_file("COCO-Detection/faster_rcnn_R_101_C4_3x.yaml"))
    d2.MODEL.WEIGHTS, d2.MODEL.DEVICE = "", "cpu"
    # Detectron2's detector with ours's settings (they differ from its zoo config; the network is the same)
    d2.MODEL.ANCHOR_GENERATOR.SIZES = [list(ours.MODEL.ANCHOR_GENERATOR.SIZES[0])]
    d2.MODEL.ROI_BOX_HEAD.POOLER_TYPE = ours.MODEL.ROI_BOX_HEAD.POOLER_TYPE
    d2.MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE = ours.MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE
    for k in ("PRE_NMS_TOPK_TRAIN", "POST_NMS_TOPK_TRAIN", "PRE_NMS_TOPK_TEST", "POST_NMS_TOPK_TEST",
              "BOUNDARY_THRESH", "SMOOTH_L1_BETA"):
        setattr(d2.MODEL.RPN, k, getattr(ours.MODEL.RPN, k))
    d2.MODEL.PROPOSAL_GENERATOR.MIN_SIZE = ours.MODEL.PROPOSAL_GENERATOR.MIN_SIZE
    d2.MODEL.ROI_HEADS.NMS_THRESH_TEST = ours.MODEL.ROI_HEADS.NMS_THRESH_TEST
    d2.MODEL.ROI_BOX_HEAD.SMOOTH_L1_BETA = ours.MODEL.ROI_BOX_HEAD.SMOOTH_L1_BETA
    return ours, d2


def _calibrated(model):
    """Give FrozenBN pretrained-like statistics so a random deep net does not overflow (as a real checkpoint)."""
    with torch.no_grad():
        for name, buf in model.named_buffers():
            if "norm" in name and name.endswith("weight"):
                buf.fill_(0.2)
    return model


def _det_inputs(h=600, w=800):
    from detectron2.structures import Boxes, Instances

    g = torch.Generator().manual_seed(0)
    img = (torch.rand(3, h, w, generator=g) * 255)
    inst = Instances((h, w), gt_boxes=Boxes(torch.tensor([[50.0, 60.0, 300.0, 400.0], [400, 100, 700, 500]]) *
                                           torch.tensor([w / 800, h / 600, w / 800, h / 600])),
                     gt_classes=torch.tensor([1, 3]))
    return [{"image": img, "instances": inst, "height": h, "width": w}]


def _train_step(model, opt, batch):
    from detectron2.utils.events import EventStorage

    with EventStorage(0):
        loss = sum(model(batch).values())
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


def bench_detector(repeats: int) -> dict:
    from detectron2.modeling import build_model

    ours_cfg, d2_cfg = _det_cfgs()
    torch.manual_seed(0)
    models = {"ours": _calibrated(build_model(ours_cfg)), "detectron2": _calibrated(build_model(d2_cfg))}
    models["ours"].load_state_dict(models["detectron2"].state_dict())  # same names, same weights
    batch = _det_inputs()
    opts = {k: torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=1e-4) for k, m in models.items()}
    for m in models.values():
        m.train()
    assert ours_cfg.MODEL.BACKBONES.CHANNELS_LAST, "the 'ours' rows measure the default configuration"
    res = {"conditions": "R-101-C4, 1 image 600x800, 128 RoIs, FrozenBN, FREEZE_AT 2, fp32; ours: the config's "
                         "defaults (FrozenBN folded into the convs, MODEL.BACKBONES.CHANNELS_LAST True)",
           "train": compare(lambda: _train_step(models["ours"], opts["ours"], batch),
                            lambda: _train_step(models["detectron2"], opts["detectron2"], batch), repeats,
                            names=("ours", "detectron2"))}
    # ours in NCHW (MODEL.BACKBONES.CHANNELS_LAST False): what the layout alone contributes
    nchw_cfg = ours_cfg.clone()
    nchw_cfg.defrost()
    nchw_cfg.MODEL.BACKBONES.CHANNELS_LAST = False
    models["ours_nchw"] = build_model(nchw_cfg).train()
    models["ours_nchw"].load_state_dict(models["detectron2"].state_dict())
    opts["ours_nchw"] = torch.optim.SGD([p for p in models["ours_nchw"].parameters() if p.requires_grad], lr=1e-4)
    res["train_channels_last_vs_nchw"] = compare(
        lambda: _train_step(models["ours"], opts["ours"], batch),
        lambda: _train_step(models["ours_nchw"], opts["ours_nchw"], batch), repeats, names=("channels_last", "nchw"))
    infer = [{k: v for k, v in batch[0].items() if k != "instances"}]
    for m in models.values():
        m.eval()
    with torch.inference_mode():
        res["infer"] = compare(lambda: models["ours"](infer), lambda: models["detectron2"](infer), repeats,
                               names=("ours", "detectron2"))
        res["infer_nchw_vs_detectron2"] = compare(
            lambda: models["ours_nchw"](infer), lambda: models["detectron2"](infer), repeats,
            names=("ours_nchw", "detectron2"))
    return res


# ---- the main job's detection iteration ---------------------------------------------------------------------------

# the legs timed: (backbone, pretrained); their configs are the main job's (leg_config_files)
MAIN_JOB_LEGS = {"vgg16_bn_pretrained": ("vgg16_bn", True), "resnet101_pretrained": ("resnet101", True),
                 "resnet101_scratch": ("resnet101", False)}


def _main_job_model(name: str, pretrained: bool):
    from detectron2.modeling import build_model

    from detection import get_detection_cfg

    cfg = get_detection_cfg(leg_config_files(name, pretrained=pretrained),
                            ["MODEL.DEVICE", "cpu", "MODEL.BACKBONES.NAME", name])
    torch.manual_seed(0)
    model = build_model(cfg)
    return (_calibrated(model) if pretrained else model), cfg


def _iteration_gmacs(model, cfg) -> float:
    """Mult-adds of one training iteration (2 images): conv/fc forward of trunk, RPN head and per-RoI head, x3 for
    the backward pass (an estimate; NMS, RoIAlign and losses are not mult-adds)."""
    from fvcore.nn import FlopCountAnalysis

    def macs(module, *shape):
        a = FlopCountAnalysis(module, torch.zeros(*shape)).unsupported_ops_warnings(False)
        return a.uncalled_modules_warnings(False).tracer_warnings("none").total()

    s = cfg.INPUT.MIN_SIZE_TEST
    trunk = macs(model.backbone.eval(), 1, 3, s, s)
    feat = next(iter(model.backbone.output_shape().values()))
    rpn = 9 * feat.channels ** 2 * (s // feat.stride) ** 2  # the RPN's 3x3 conv (its 1x1 convs are negligible)
    res = cfg.MODEL.ROI_BOX_HEAD.POOLER_RESOLUTION
    if hasattr(model.roi_heads, "res5"):
        head = macs(model.roi_heads.res5.eval(), 1, feat.channels, res, res)
    else:
        head = model.backbones_model.fc6.weight.numel() + model.backbones_model.fc7.weight.numel()
    rois = cfg.MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE
    model.train()
    return 3 * cfg.SOLVER.IMS_PER_BATCH * (trunk + rpn + rois * head) / 1e9


def _main_job_leg(name: str, pretrained: bool, peak: float, repeats: int) -> dict:
    from backbones.blocks import set_norm_folding

    model, cfg = _main_job_model(name, pretrained)
    gmacs = _iteration_gmacs(model, cfg)
    batch = _det_inputs(128, 128) + _det_inputs(128, 128)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-4)

    def step(fold: bool):
        set_norm_folding(model, fold)
        _train_step(model, opt, batch)

    row = compare(lambda: step(True), lambda: step(False), repeats, names=("folded", "unfolded"))
    row["gmacs_per_iteration"] = gmacs
    for side in ("folded", "unfolded"):
        row[f"fraction_of_peak_{side}"] = 2 * gmacs / row[f"s_{side}"] / peak
    row["profile_top_ops"] = _profile(lambda: step(True))
    return row


def bench_main_job(repeats: int) -> dict:
    peak = bench_peak(3, backbones_too=False)["matmul_gflops"]
    out = {"conditions": "one training iteration of 2 images at 128 px, width 0.25 (configs/Embedded-Detection)",
           "matmul_peak_gflops": peak}
    for leg, (name, pretrained) in MAIN_JOB_LEGS.items():
        out[leg] = _main_job_leg(name, pretrained, peak, repeats)
    return out


# ---- the main job's pipelines: today's (before issue #20) vs the current defaults, in one run -----------------------

@contextlib.contextmanager
def _issue_time_seeding():
    """Loaders created (and their workers forked) inside seed every device per sample, as before issue #20."""
    from classification.data.sampling import SeededSamples

    SeededSamples.seed_all_devices = True
    try:
        yield
    finally:
        SeededSamples.seed_all_devices = False


def _pretrain_loop_seconds(model: str, cached: bool, batch: int, iterations: int) -> float:
    """Seconds of train()'s loop (steps, one 64-image evaluation, one checkpoint) in a fresh directory."""
    import shutil
    import tempfile

    from classification.engine.trainer import ClsConfig, train

    opts = {"width": 0.25, **({"zero_init_residual": True} if model.startswith("resnet") else {})}
    out = tempfile.mkdtemp(prefix="bench_cls_")
    try:
        cfg = ClsConfig(model=model, model_options=opts, dataset="embedded", image_size=32, iterations=iterations,
                        batch_size=batch, lr=0.01, eval_period=iterations, checkpoint_period=iterations,
                        val_samples=64, workers=1, embedded_cache=cached, output_dir=out)
        with contextlib.nullcontext() if cached else _issue_time_seeding():
            return train(cfg)["seconds"]
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _vgg_head_steps(batch: int = 128, size: int = 32):
    """One VGG-16(BN) x0.25 training step at 32 px with our head (a 1x1 pool5 meets fc6 as its weight summed over
    the 49 positions) and with torchvision's path (pool5 adaptively pooled to 49 copies, fc6 over all of them)."""
    from backbones import create_model

    torch.manual_seed(0)
    model = create_model("vgg16_bn", num_classes=10, width=0.25).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    x = torch.randn(batch, 3, size, size).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (batch,))

    def copies_head(images):
        return model.forward_head(model.forward_features(images, ["conv5"])["conv5"], fold_1x1_pool5=False)

    def step(forward):
        loss = torch.nn.functional.cross_entropy(forward(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return (lambda: step(model)), (lambda: step(copies_head))


def bench_main_job_pretrain(repeats: int, images: int = 3840) -> dict:
    """Pretraining images/s of each net: today's pipeline (each image composited in a data-loader worker, batch 64)
    vs the current one (composites rendered once, tensor augmentation in the training process, batch 128), the same
    number of images per round, alternating. Also the new pipeline at batch 64 (the data path alone)."""
    out = {"conditions": f"{images} training images per round at 32 px, width 0.25, fp32, "
                         f"{torch.get_num_threads()} threads; ratio = today's seconds / current seconds"}
    from classification.data.composited import load_composited

    load_composited("train", 32, 0, count=images)  # rendered once, outside the timing (as the cache is)
    repeats = max(3, repeats // 2)
    for model in ("vgg16_bn", "resnet101"):
        t = {"today": [], "current": [], "current_b64": []}
        fns = {"today": lambda m=model: _pretrain_loop_seconds(m, False, 64, images // 64),
               "current": lambda m=model: _pretrain_loop_seconds(m, True, 128, images // 128),
               "current_b64": lambda m=model: _pretrain_loop_seconds(m, True, 64, images // 64)}
        for fn in fns.values():  # warm-up round
            fn()
        for r in range(repeats):
            for k in (list(fns) if r % 2 == 0 else list(reversed(fns))):
                t[k].append(fns[k]())
        row = ratio_stats(t["today"], t["current"])
        row["images_per_s_today"] = images / statistics.median(t["today"])
        row["images_per_s_current"] = images / statistics.median(t["current"])
        row["data_path_alone_at_batch_64"] = ratio_stats(t["today"], t["current_b64"])
        out[model] = row
    ours, copies = _vgg_head_steps()
    out["vgg16_bn_head_1x1_pool5"] = {"conditions": "one training step of 128 images at 32 px, model only; ratio = "
                                                    "the 49-copies head's seconds / ours",
                                      **compare(ours, copies, repeats, names=("summed_fc6", "copies"))}
    return out


def _detect_iteration_fn(name: str, pretrained: bool, current: bool, iterations: int):
    from detectron2.modeling import build_model
    from detectron2.solver import build_optimizer as d2_build_optimizer
    from detectron2.utils.events import EventStorage

    from backbones import FrozenBatchNorm2d
    from detection import get_detection_cfg
    from detection.engine.data import build_train_loader
    from detection.engine.optimizer import build_optimizer
    from detection.modeling.roi_align import FastBackwardROIAlign

    files = leg_config_files(name, pretrained=pretrained)
    opts = ["MODEL.DEVICE", "cpu", "MODEL.BACKBONES.NAME", name]
    if not current:
        opts += ["DATALOADER.NUM_WORKERS", "1"]  # today's smoke.yaml
    cfg = get_detection_cfg(files, opts)
    torch.manual_seed(0)
    model = build_model(cfg)
    model = _calibrated(model) if pretrained else model
    if not current:  # today's RPN head was NCHW (only the trunk and the C4 head were channels_last), FrozenBN
        model.proposal_generator.to(memory_format=torch.contiguous_format)  # computed its affine map every call,
        for m in model.modules():  # and RoIAlign trained on torchvision's forward and the grid_sample backward
            if isinstance(m, FrozenBatchNorm2d):
                m.cache_affine = False
            elif isinstance(m, FastBackwardROIAlign):
                m.matrix_path_max_elements = 0
    model.train()
    opt = (build_optimizer if current else d2_build_optimizer)(cfg, model)
    with contextlib.nullcontext() if current else _issue_time_seeding():  # today's worker forks in here
        batches = iter(build_train_loader(cfg))

    def run():  # what SimpleTrainer.run_step does: data, forward, backward, optimizer step
        with EventStorage(0):
            for _ in range(iterations):
                loss = sum(model(next(batches)).values())
                opt.zero_grad()
                loss.backward()
                opt.step()

    return run, cfg.DATALOADER.NUM_WORKERS


def bench_main_job_detect(repeats: int, iterations: int = 5) -> dict:
    """Detection training iterations/s of each main-job leg: today (Detectron2's optimizer: per-parameter clipping
    calls and single-tensor SGD; one loader worker; the RPN head in NCHW) vs the current defaults (foreach clipping,
    fused SGD; the loader as smoke.yaml sets it; the RPN head in channels_last), alternating short blocks of
    `iterations` iterations, 3 x `repeats` rounds: the VM's slow phases last seconds, and a short round puts both
    sides in the same phase. Today's side is rebuilt from the current code with its old choices switched back
    (NCHW RPN head, FrozenBN's affine map every call, torchvision's RoIAlign forward + grid_sample backward, every
    device seeded per sample in its loader worker)."""
    out = {"conditions": f"{3 * repeats} rounds of {iterations} training iterations per side, 2 images at 128 px, "
                         f"width 0.25, fp32, {torch.get_num_threads()} threads; ratio = today's seconds / current "
                         "seconds"}
    for leg, (name, pretrained) in MAIN_JOB_LEGS.items():
        today, w_today = _detect_iteration_fn(name, pretrained, False, iterations)
        current, w_current = _detect_iteration_fn(name, pretrained, True, iterations)
        row = compare(current, today, 3 * repeats, names=("current", "today"))
        row["ms_per_iteration_today"] = 1000 * row["s_today"] / iterations
        row["ms_per_iteration_current"] = 1000 * row["s_current"] / iterations
        row["loader_workers"] = f"today {w_today}, current {w_current}"
        out[leg] = row
    return out


# The commit issue #20 was filed at: the main job before its efficiency work (the "today" of its targets).
BASELINE_COMMIT = "36a7492"


def bench_main_job_detect_vs_commit(repeats: int, iterations: int = 5, commit: str = BASELINE_COMMIT,
                                    legs: tuple[str, ...] | None = None, work_dir: Path | None = None) -> dict:
    """Detection iterations/s of each main-job leg (or of `legs`): the real code of `commit` (extracted from this
    checkout's history into `work_dir`/trees, default output/benchmark) against this tree, each side a worker
    process that imports only its own tree's packages and trains on its own tree's embedded data (checked equal),
    3 x `repeats` alternating rounds of `iterations` iterations (main_job_detect rebuilds the earlier side from the
    current code instead; this checks that reconstruction)."""
    from .benchmark_workers import LegWorker, extract_commit, training_data_digest
    from .engine.code_version import code_version

    threads = torch.get_num_threads()
    work_dir = work_dir or REPO / "output" / "benchmark"
    try:
        baseline = extract_commit(commit, work_dir / "trees")
    except ValueError as e:  # no history here (an installed copy, a shallow clone): nothing to compare with
        return {"error": str(e)}
    out = {"conditions": f"{3 * repeats} rounds of {iterations} training iterations per side, each side its own "
                         f"process, {threads} threads, the embedded smoke scale as each tree configures it; "
                         "ratio = the baseline's seconds / current seconds",
           "baseline_commit": baseline.name, "current": code_version(REPO)}
    logs, digests = work_dir / "workers", {}  # digests by dataset root: each read once, whatever the legs
    for leg, (name, pretrained) in MAIN_JOB_LEGS.items():
        if legs is not None and leg not in legs:
            continue
        files = [os.path.relpath(f, REPO) for f in leg_config_files(name, pretrained=pretrained)]  # same in both
        workers = {}
        try:
            workers["baseline"] = LegWorker(baseline, name, files, pretrained, iterations, threads,
                                            logs / f"{leg}_baseline.log", own_datasets=True)
            workers["current"] = LegWorker(REPO, name, files, pretrained, iterations, threads,
                                           logs / f"{leg}_current.log")
            for w in workers.values():
                if w.info["dataset_root"] not in digests:
                    digests[w.info["dataset_root"]] = training_data_digest(w.info["dataset_root"])
            data = {k: digests[w.info["dataset_root"]] for k, w in workers.items()}
            if data["baseline"] != data["current"]:
                raise RuntimeError(f"{leg}: the two trees train on different embedded data ({data}); "
                                   "their iteration times are not comparable")
            t = alternate({k: w.run for k, w in workers.items()}, 3 * repeats)
        finally:
            for w in workers.values():
                w.close()
        row = {f"s_{k}": statistics.median(v) for k, v in t.items()}
        row.update(ratio_stats(t["baseline"], t["current"]))
        row.update({f"ms_per_iteration_{k}": 1000 * row[f"s_{k}"] / iterations for k in t})
        row["sides"] = {k: {x: w.info[x] for x in ("optimizer", "loader_workers", "threads")}
                        for k, w in workers.items()}
        out[leg] = row
    return out


def _profile(step: Callable, top: int = 12) -> list[dict]:
    """Self CPU time by operator over 3 iterations (after one warm-up), the top `top`."""
    from torch.profiler import ProfilerActivity, profile

    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            step()
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in events) or 1
    return [{"op": e.key, "self_ms_per_iter": round(e.self_cpu_time_total / 3000, 2),
             "share": round(e.self_cpu_time_total / total, 3)} for e in events[:top]]


# ---- evaluation, peak, loader, memory --------------------------------------------------------------------------------

def bench_cocoeval(repeats: int) -> dict:
    from pycocotools.coco import COCO

    from detection.evaluation import evaluate_coco

    rng = np.random.default_rng(0)
    images, anns, dets = [], [], []
    for i in range(1, 5001):
        images.append({"id": i, "width": 640, "height": 480, "file_name": f"{i}.jpg"})
        for _ in range(rng.integers(1, 8)):
            x, y, w, h = rng.uniform(0, 500), rng.uniform(0, 380), rng.uniform(10, 140), rng.uniform(10, 100)
            c = int(rng.integers(1, 11))
            anns.append({"id": len(anns) + 1, "image_id": i, "category_id": c, "bbox": [x, y, w, h],
                         "area": w * h, "iscrowd": 0})
            for _ in range(3):
                dets.append({"image_id": i, "category_id": c if rng.uniform() < 0.7 else int(rng.integers(1, 11)),
                             "bbox": [x + rng.normal(0, 8), y + rng.normal(0, 8), w * rng.uniform(0.7, 1.3),
                                      h * rng.uniform(0.7, 1.3)], "score": float(rng.uniform())})
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO()
        coco.dataset = {"images": images, "annotations": anns,
                        "categories": [{"id": c, "name": f"c{c}"} for c in range(1, 11)]}
        coco.createIndex()
    results = {}
    row = compare(lambda: results.__setitem__("fast", evaluate_coco(coco, dets, backend="faster_coco_eval")),
                  lambda: results.__setitem__("ref", evaluate_coco(coco, dets, backend="pycocotools")),
                  max(3, repeats // 2), warmup=0, names=("faster_coco_eval", "pycocotools"))
    row["identical_stats"] = all(abs(results["fast"].stats[k] - results["ref"].stats[k]) < 1e-9
                                 for k in results["ref"].stats)
    row["conditions"] = f"5,000 images, {len(anns)} boxes, {len(dets)} detections, 10 categories"
    return row


def _gflops(name: str, repeats: int) -> float:
    import backbones

    model = backbones.create_model(name).eval()
    macs = backbones.complexity(model).macs
    x = torch.randn(8, 3, 224, 224)
    with torch.inference_mode():
        tf = statistics.median(alternate({"f": lambda: model(x)}, repeats, warmup=1)["f"])
    return 2 * macs * 8 / tf / 1e9


def bench_peak(repeats: int, backbones_too: bool = True) -> dict:
    a, b = torch.randn(4096, 4096), torch.randn(4096, 4096)
    t = statistics.median(alternate({"mm": lambda: a @ b}, repeats, warmup=1)["mm"])
    res = {"matmul_gflops": 2 * 4096**3 / t / 1e9}
    if backbones_too:
        for name in ("resnet101", "resnet50"):
            res[f"{name}_inference_gflops"] = g = _gflops(name, repeats)
            res[f"{name}_fraction_of_peak"] = g / res["matmul_gflops"]
    return res


def bench_loader(repeats: int) -> dict:
    """Images/s the train loader delivers (mapper + augmentation, 2 workers) vs images/s the C4 step consumes."""
    from detectron2.modeling import build_model

    from detection import get_detection_cfg
    from detection.datasets import ensure_embedded_dataset
    from detection.engine.data import build_train_loader

    ensure_embedded_dataset()
    cfg = get_detection_cfg(["configs/COCO-Detection/faster_rcnn_R_101_C4.yaml",
                             "configs/Embedded-Detection/smoke.yaml"],
                            ["MODEL.DEVICE", "cpu", "DATALOADER.NUM_WORKERS", "2", "SOLVER.IMS_PER_BATCH", "2",
                             "INPUT.MIN_SIZE_TRAIN", "(600,)", "INPUT.MAX_SIZE_TRAIN", "1000"])
    loader = build_train_loader(cfg)
    it = iter(loader)
    next(it)
    n_batches = 20
    t0 = time.perf_counter()
    for _ in range(n_batches):
        next(it)
    loader_rate = n_batches * 2 / (time.perf_counter() - t0)
    del it
    paper_cfg, _ = _det_cfgs()  # the consumer: the paper's R-101-C4 step on 2 images at shorter side 600
    model = _calibrated(build_model(paper_cfg)).train()
    batch = _det_inputs() * 2
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    t = statistics.median(alternate({"step": lambda: _train_step(model, opt, batch)}, max(2, repeats // 3),
                                    warmup=1)["step"])
    return {"loader_img_s": loader_rate, "train_step_img_s": 2 / t, "ratio": loader_rate * t / 2}


def bench_memory(repeats: int) -> dict:
    code = ("from detection import benchmarks as b\n"
            "from detectron2.modeling import build_model\n"
            "cfg, _ = b._det_cfgs()\n"
            "m = b._calibrated(build_model(cfg)).train()\n"
            "import torch\n"
            "b._train_step(m, torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=1e-4),"
            " b._det_inputs())\n"
            "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
            "print(int(hwm) // 1024)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        return {"error": out.stderr[-500:]}
    return {"peak_rss_mib_r101_c4_train_iter_600px": int(out.stdout.strip().splitlines()[-1])}


SECTIONS = {"backbone": bench_backbone, "detector": bench_detector, "main_job": bench_main_job,
            "main_job_pretrain": bench_main_job_pretrain, "main_job_detect": bench_main_job_detect,
            "main_job_detect_vs_commit": bench_main_job_detect_vs_commit,
            "cocoeval": bench_cocoeval, "peak": bench_peak, "loader": bench_loader, "memory": bench_memory}


RATIO_KEYS = ("ratio", "ci95", "verdict", "rounds")


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, dict) and "ratio" in v:
        lo, hi = v["ci95"]
        return f"{v['ratio']:.2f}x [{lo:.2f}, {hi:.2f}] {v['verdict']} ({v['rounds']} rounds)"
    if isinstance(v, dict):
        return ", ".join(f"{k} {_fmt(x)}" for k, x in v.items())
    if isinstance(v, list) and v and all(isinstance(x, float) for x in v):
        return "[" + ", ".join(f"{x:.3g}" for x in v) + "]"
    if isinstance(v, list) and v and isinstance(v[0], dict):
        return "; ".join(f"{d['op']} {d['self_ms_per_iter']} ms ({100 * d['share']:.0f}%)" for d in v)
    return str(v)


def markdown(results: dict, argv: list[str]) -> str:
    lines = [f"Command: `python tools/benchmark.py {' '.join(argv)}`. Machine: {_fmt(results['machine'])}.", ""]
    for name in [n for n in SECTIONS if n in results]:
        lines.append(f"### {name}")
        for k, v in results[name].items():
            if isinstance(v, dict) and "ratio" not in v and any(isinstance(x, dict) for x in v.values()):
                lines += [f"- {k}:"] + [f"  - {kk}: {_fmt(x)}" for kk, x in v.items()]
            else:
                lines.append(f"- {k}: {_fmt(v)}")
                if isinstance(v, dict) and "ratio" in v:  # what was measured beside the ratio (times, profile)
                    lines += [f"  - {kk}: {_fmt(x)}" for kk, x in v.items() if kk not in RATIO_KEYS]
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="+", choices=list(SECTIONS), default=list(SECTIONS))
    ap.add_argument("--repeats", type=int, default=7, help="timed rounds per comparison (at least 7 for a CI)")
    ap.add_argument("--json", default="output/benchmark/benchmark.json")
    ap.add_argument("--markdown", default=None, help="also write the figures as Markdown to this file")
    ap.add_argument("--baseline-commit", default=BASELINE_COMMIT,
                    help="main_job_detect_vs_commit: the commit whose code is the other side (default: the main "
                         "job before issue #20's efficiency work)")
    ap.add_argument("--threads", type=int, default=None,
                    help="intra-op threads (default: every CPU); the main job runs each stage at 1, two at a time")
    args = ap.parse_args(argv)
    if args.repeats < 3:
        ap.error("--repeats must be at least 3 (7 or more for a meaningful interval)")
    if args.threads is not None and args.threads < 1:
        ap.error("--threads must be at least 1")
    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    results = {"machine": machine()}
    for name in args.only:
        t0 = time.time()
        print(f"[benchmark] {name} ...", flush=True)
        kwargs = {"commit": args.baseline_commit} if name == "main_job_detect_vs_commit" else {}
        results[name] = SECTIONS[name](args.repeats, **kwargs)
        results[name]["section_seconds"] = round(time.time() - t0, 1)
        for k, v in results[name].items():
            print(f"  {k}: {_fmt(v)}", flush=True)
        # written after every section: a later failure does not lose the sections already measured
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(Path(args.json), json.dumps(results, indent=2))
        if args.markdown:
            atomic_write_text(Path(args.markdown), markdown(results, sys.argv[1:] if argv is None else argv))
    print(f"[benchmark] wrote {args.json}")
    return 0
