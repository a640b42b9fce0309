"""Section `main_job_pretrain`: pretraining images/s of each main-job net on the embedded set through the two
pipelines a user can choose -- the composites rendered once and augmented as whole batches (`embedded_cache`, the
default) and each image composited in a data-loader worker (`--no-embedded-cache`) -- the same number of images
per round, alternating; and the VGG head's step with its 1x1 pool5 met by fc6's summed weight vs torchvision's
49 pooled copies."""

from __future__ import annotations

import shutil
import statistics
import tempfile

import torch

from detection.main_job.leg import build_pretrain_step
from detection.main_job.plan import MainJobPlan

from .stats import compare, ratio_stats

__all__ = ["bench_main_job_pretrain"]


def _train_loop_seconds(model: str, cached: bool, batch: int, iterations: int) -> float:
    """Seconds of the classification trainer's loop (steps, one 64-image evaluation, one checkpoint) at the main
    job's width and image size, in a fresh directory."""
    from classification.engine.trainer import ClsConfig, train

    plan = MainJobPlan()
    opts = plan.pretrain_options(model)
    out = tempfile.mkdtemp(prefix="bench_cls_")
    try:
        cfg = ClsConfig(model=model, model_options=opts, dataset="embedded", image_size=plan.pretrain_image_size,
                        iterations=iterations, batch_size=batch, lr=0.01, eval_period=iterations,
                        checkpoint_period=iterations, val_samples=64, workers=1, embedded_cache=cached,
                        output_dir=out)
        return train(cfg)["seconds"]
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _vgg_head_steps(batch: int = 128):
    """One VGG-16(BN) training step of the main job's pretraining (leg.build_pretrain_step) with our head (a 1x1
    pool5 meets fc6 as its weight summed over the 49 positions) and with torchvision's path (pool5 adaptively pooled
    to 49 copies, fc6 over all of them: `forward_head(fold_1x1_pool5=False)`, the reference of the tests)."""
    plan = MainJobPlan()
    leg = build_pretrain_step("vgg16_bn", options=plan.pretrain_options("vgg16_bn"),
                              image_size=plan.pretrain_image_size, batch=batch)
    model = leg.model

    def copies_step():
        logits = model.forward_head(model.forward_features(leg.images, ["conv5"])["conv5"], fold_1x1_pool5=False)
        loss = torch.nn.functional.cross_entropy(logits, leg.labels)
        leg.optimizer.zero_grad()
        loss.backward()
        leg.optimizer.step()

    return leg.step, copies_step


def bench_main_job_pretrain(repeats: int, images: int = 3840) -> dict:
    """Images/s of each net: `--no-embedded-cache` at batch 64 vs the embedded cache at the main job's batch, the
    same number of images per round, alternating; also the cache at batch 64 (the data path alone)."""
    from classification.data.composited import load_composited

    plan = MainJobPlan()
    size, big = plan.pretrain_image_size, plan.pretrain_batch
    out = {"conditions": f"{images} training images per round at {size} px, width {plan.width}, fp32, "
                         f"{torch.get_num_threads()} threads; ratio = --no-embedded-cache seconds (batch 64) / "
                         f"embedded cache seconds (batch {big})"}
    load_composited("train", size, 0, count=images)  # rendered once, outside the timing (as the cache is)
    repeats = max(3, repeats // 2)
    for model in plan.backbones:
        t = {"no_cache": [], "cache": [], "cache_b64": []}
        fns = {"no_cache": lambda m=model: _train_loop_seconds(m, False, 64, images // 64),
               "cache": lambda m=model: _train_loop_seconds(m, True, big, images // big),
               "cache_b64": lambda m=model: _train_loop_seconds(m, True, 64, images // 64)}
        for fn in fns.values():  # warm-up round
            fn()
        for r in range(repeats):  # each call times itself (the trainer's loop, not its set-up)
            for k in (list(fns) if r % 2 == 0 else list(reversed(fns))):
                t[k].append(fns[k]())
        row = ratio_stats(t["no_cache"], t["cache"])
        row["images_per_s_no_cache"] = images / statistics.median(t["no_cache"])
        row["images_per_s_cache"] = images / statistics.median(t["cache"])
        row["data_path_alone_at_batch_64"] = ratio_stats(t["no_cache"], t["cache_b64"])
        out[model] = row
    ours, copies = _vgg_head_steps(big)
    out["vgg16_bn_head_1x1_pool5"] = {"conditions": f"one training step of {big} images at {size} px, model only; "
                                                    "ratio = the 49-copies head's seconds / ours",
                                      **compare(ours, copies, repeats, names=("summed_fc6", "copies"))}
    return out
