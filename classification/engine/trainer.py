"""The classification pretraining loop (paper Sec. 3.4 / 4.2): SGD with momentum, step or plateau schedule,
warm-up (including the paper's ResNet-110 trick: low lr until the training error drops below a threshold),
DDP (NCCL on GPU, gloo on CPU), AMP on GPU, atomic checkpoints with exact resume, TensorBoard, tqdm.

`train(cfg)` reads as the run does: build (data, model, optimizer), resume, then steps with periodic evaluation
and checkpoints. Its checkpoints are `backbones.save_pretrained` files: every detection config of the same
architecture takes them as MODEL.WEIGHTS, no conversion step.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader

from backbones import create_model, load_pretrained, save_pretrained
from backbones.checkpoint_io import atomic_write_text
from backbones.strict_json import strict_json

from ..data.composited import CompositedSet
from ..data.datasets import (
    collate_skipping,
)
from ..data.sampling import ResumableSampler, SeededSamples, position_uniforms
from ..evaluate import evaluate
from .config import ClsConfig
from .datasets import DATASET_TABLE, build_datasets, embedded_padding
from .interrupt import StepBoundaryInterrupt
from .progress import ProgressFile, progress_bar
from .run_directory import last_checkpoint_file, prune_intermediate_checkpoints
from .run_files import (
    AUGMENTATION_STREAM,
    CONFIG_JSON,
    EVALUATION,
    FINAL_CHECKPOINT,
    LAST_CHECKPOINT,
    checkpoint_name,
    uses_cached_batches,
)

__all__ = ["ClsConfig", "train", "build_datasets", "recorded_settings", "LAST_CHECKPOINT"]

logger = logging.getLogger("classification")


def _is_main() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def recorded_settings(cfg: ClsConfig) -> dict:
    """What config.json records of a run: its settings, and how the cached path draws augmentation where it is used
    (a run on another path has no such key, so its resume is unaffected)."""
    settings = json.loads(json.dumps(asdict(cfg)))
    if uses_cached_batches(settings):
        settings["augmentation_stream"] = AUGMENTATION_STREAM
    return settings


def cached_batches(train_set: CompositedSet, sampler: ResumableSampler, batch_size: int, seed: int, padding: int):
    """Endless (images, labels, skipped) batches from the sampler's key stream; each sample's augmentation is drawn
    from (seed, its stream position) alone, so a run resumed at any iteration draws what the uninterrupted one drew
    and 1 process x 16, 2 x 8 or 2 machines x 8 draw the same crops and flips for the same global batch."""
    keys = iter(sampler)
    n = len(train_set)
    while True:
        batch = torch.tensor(list(itertools.islice(keys, batch_size)), dtype=torch.long)
        positions, indices = batch // n, batch % n
        images, labels = train_set.batch(indices, padding, position_uniforms(seed, positions.numpy(), 3))
        yield images, labels, []


class LRSchedule:
    """lr(iteration) for the step schedule with warm-up; the plateau schedule scales it down on demand."""

    def __init__(self, cfg: ClsConfig, base_lr: float):
        self.cfg, self.base_lr, self.plateau_scale, self.warm = cfg, base_lr, 1.0, True
        self.warmup_error = cfg.warmup_error()

    def __call__(self, it: int, running_error: float | None) -> float:
        c = self.cfg
        if self.warm:
            by_iter = it < c.warmup_iterations
            by_error = self.warmup_error is not None and (running_error is None or
                                                          running_error >= self.warmup_error)
            self.warm = by_iter or by_error
            if self.warm and c.warmup_method == "linear":  # by_iter (cfg.warmup_error() is None for it): the
                alpha = min(1.0, it / c.warmup_iterations)  # ramp ends before the first cut (ClsConfig checks)
                return self.base_lr * (c.warmup_factor * (1 - alpha) + alpha)
            if self.warm:
                return self.base_lr * c.warmup_factor
        if c.schedule == "plateau":
            return self.base_lr * self.plateau_scale
        steps = sum(it >= m * c.iterations for m in c.milestones)
        return self.base_lr * 0.1**steps

    def after_evaluation(self, test_errors: list[float], it: int) -> None:
        """Plateau schedule: divide by 10 when the last `plateau_patience` evaluations beat no earlier one."""
        k = self.cfg.plateau_patience
        if self.cfg.schedule == "plateau" and len(test_errors) > k and min(test_errors[-k:]) >= min(test_errors[:-k]):
            self.plateau_scale *= 0.1
            logger.info(f"plateau: lr x0.1 at iteration {it}")

    def state_dict(self):
        return {"plateau_scale": self.plateau_scale, "warm": self.warm}

    def load_state_dict(self, d):
        self.plateau_scale, self.warm = d["plateau_scale"], d["warm"]


@dataclass
class Run:
    """Everything a training run holds between steps."""

    cfg: ClsConfig
    out: Path
    model: nn.Module
    net: nn.Module  # the model, wrapped in DDP when there is more than one process
    optimizer: torch.optim.Optimizer
    schedule: LRSchedule
    train_set: object
    val_set: object
    mean_std: tuple
    device: torch.device
    world: int
    scaler: torch.amp.GradScaler | None = None  # AMP loss scaling (enabled on CUDA only); checkpointed
    iteration: int = 0
    history: dict = field(default_factory=lambda: {"iteration": [], "train_error": [], "test_error": [],
                                                   "test_top5_error": [], "lr": [], "skipped_images": 0,
                                                   "err_window": []})


def _seed_everything(seed: int, deterministic: bool) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)


def _check_input_size(model: nn.Module, cfg: ClsConfig, device: torch.device) -> None:
    """ValueError naming image_size when the net's feature maps vanish at it (VGG's unpadded pools need >= 32 px):
    one forward of a blank image now, instead of a RuntimeError deep in the first training step."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(torch.zeros(1, 3, cfg.image_size, cfg.image_size, device=device))
    except RuntimeError as err:
        if "too small" not in str(err):
            raise
        raise ValueError(f"image_size {cfg.image_size} is too small for {cfg.model}: a feature map shrinks to "
                         f"nothing ({str(err).splitlines()[0]}); its total stride is 32, so 32 px and above "
                         "work") from None
    finally:
        model.train(was_training)


def build(cfg: ClsConfig) -> Run:
    """Data, model, optimizer and schedule of a fresh run (iteration 0)."""
    world = dist.get_world_size() if dist.is_initialized() else 1
    rank = dist.get_rank() if dist.is_initialized() else 0
    device = torch.device(f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu")
    _seed_everything(cfg.seed + rank, cfg.deterministic)
    train_set, val_set, mean_std = build_datasets(cfg)
    model = create_model(cfg.model, num_classes=len(train_set.classes), **cfg.model_options).to(device)
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    _check_input_size(model, cfg, device)
    base_lr = cfg.base_lr(world)
    trainable = [p for p in model.parameters() if p.requires_grad]
    if cfg.decay_norm_and_bias:  # the paper (Caffe): weight decay on every parameter
        groups = [{"params": trainable, "weight_decay": cfg.weight_decay}]
    else:  # the modern variant: no decay on BN and biases
        groups = [{"params": [p for p in trainable if p.ndim > 1], "weight_decay": cfg.weight_decay},
                  {"params": [p for p in trainable if p.ndim <= 1], "weight_decay": 0.0}]
    optimizer = torch.optim.SGD(groups, lr=base_lr, momentum=cfg.momentum)
    net = model
    if world > 1:
        net = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    scaler = torch.amp.GradScaler("cuda", enabled=cfg.amp and device.type == "cuda")
    return Run(cfg, Path(cfg.output_dir), model, net, optimizer, LRSchedule(cfg, base_lr), train_set, val_set,
               mean_std, device, world, scaler)


def resume(run: Run) -> None:
    """Continue from OUTPUT_DIR/last_checkpoint if it names a complete file: weights, optimizer, schedule, history."""
    path = last_checkpoint_file(run.out)  # ValueError if it names nothing usable
    if path is None:
        return
    load_pretrained(run.model, path)
    state = torch.load(path, map_location="cpu", weights_only=True)
    run.optimizer.load_state_dict(state["optimizer"])
    run.schedule.load_state_dict(state["schedule"])
    run.history = state["history"]
    run.iteration = int(state["iteration"])
    if run.scaler is not None and run.scaler.is_enabled() and state.get("scaler"):
        run.scaler.load_state_dict(state["scaler"])
    logger.info(f"resumed from {path} at iteration {run.iteration}")


def step(run: Run, images: torch.Tensor, labels: torch.Tensor, scaler, criterion) -> tuple[float, float, float]:
    """One SGD step; returns (loss, batch error, lr)."""
    window = run.history["err_window"]
    lr = run.schedule(run.iteration, float(np.mean(window)) if window else None)
    for g in run.optimizer.param_groups:
        g["lr"] = lr
    images, labels = images.to(run.device, non_blocking=True), labels.to(run.device, non_blocking=True)
    if run.cfg.channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    with torch.autocast(run.device.type, enabled=scaler.is_enabled()):
        logits = run.net(images)
        loss = criterion(logits, labels)
    if not torch.isfinite(loss):
        good = last_checkpoint_file(run.out)  # the trainer wrote it: a complete file, or none yet
        last = f"the last good checkpoint is {good} (--resume continues from it)" if good else \
            "no checkpoint was written before it"
        raise FloatingPointError(f"loss became {loss.item()} at iteration {run.iteration} (lr {lr:g}): training "
                                 f"diverged, a smaller --lr usually avoids it; {last}")
    run.optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(run.optimizer)
    scaler.update()
    err = (logits.argmax(1) != labels).float().mean().item()
    run.history["err_window"] = (window + [err])[-50:]  # the running error (and warm-up criterion) resume with it
    run.iteration += 1
    return loss.item(), err, lr


def run_evaluation(run: Run, lr: float) -> dict:
    c = run.cfg
    full_views = DATASET_TABLE[c.dataset].full_resolution_views  # ten-crop / multi-scale: ImageNet-style images
    ten_crop = c.test_mode == "ten-crop" and full_views
    multi_scale = c.test_mode == "multi-scale" and full_views
    in_memory = isinstance(run.val_set, CompositedSet)  # no loader processes for an array already in memory
    res = evaluate(run.model, run.val_set, batch_size=c.batch_size, ten_crop=ten_crop, multi_scale=multi_scale,
                   workers=0 if in_memory else c.workers, fast_inference=c.fast_inference)
    h = run.history
    h["iteration"].append(run.iteration)
    h["train_error"].append(100.0 * float(np.mean(h["err_window"])))  # running, last 50 batches
    h["test_error"].append(100 - res["top1"])
    h["test_top5_error"].append(100 - res["top5"])
    if "compile_seconds" in res:  # --fast-inference: the evaluation's compile, beside its result in evaluation.json
        h.setdefault("eval_compile_seconds", []).append(res["compile_seconds"])
    h["lr"].append(lr)
    run.schedule.after_evaluation(h["test_error"], run.iteration)
    run.net.train()
    return res


def save_checkpoint(run: Run) -> None:
    """model_<iteration>.pth (model_final.pth at the end) and last_checkpoint, each written atomically."""
    final = run.iteration >= run.cfg.iterations
    path = run.out / (FINAL_CHECKPOINT if final else checkpoint_name(run.iteration))
    mean, std = run.mean_std
    save_pretrained(run.model, path, input_format="RGB", pixel_mean=mean, pixel_std=std,
                    extra={"optimizer": run.optimizer.state_dict(), "schedule": run.schedule.state_dict(),
                           "iteration": run.iteration, "history": run.history,
                           "scaler": run.scaler.state_dict() if run.scaler is not None and run.scaler.is_enabled()
                           else None,
                           "config": json.loads(json.dumps(asdict(run.cfg))),
                           "classes": list(run.train_set.classes)})  # what the classifier's outputs mean
    atomic_write_text(run.out / LAST_CHECKPOINT, path.name)  # points only at complete files
    if run.cfg.keep_checkpoints:  # only now: last_checkpoint already names the new file
        prune_intermediate_checkpoints(run.out, run.cfg.keep_checkpoints)


def train(cfg: ClsConfig) -> dict:
    """Train; returns {"history", "final": {"top1", "top5"}, "checkpoint", ...}. Resumes from `output_dir` if it
    holds a last_checkpoint (call with a fresh output_dir for a new run)."""
    run = build(cfg)
    if _is_main():
        run.out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(run.out / CONFIG_JSON, strict_json(recorded_settings(cfg)))
    resume(run)
    rank = dist.get_rank() if dist.is_initialized() else 0
    sampler = ResumableSampler(len(run.train_set), seed=cfg.seed, rank=rank, world_size=run.world)
    sampler.set_start(run.iteration * cfg.batch_size * run.world)  # exactly where the checkpointed run was
    if len(run.train_set) < cfg.batch_size * run.world:
        raise ValueError(f"{len(run.train_set)} training images are fewer than one batch of {cfg.batch_size} per "
                         f"process x {run.world} processes")
    if isinstance(run.train_set, CompositedSet):  # rendered once: batches straight from memory, no workers
        loader = cached_batches(run.train_set, sampler, cfg.batch_size, cfg.seed, embedded_padding(cfg.image_size))
    else:
        loader = DataLoader(SeededSamples(run.train_set, cfg.seed), batch_size=cfg.batch_size, sampler=sampler,
                            num_workers=cfg.workers, collate_fn=collate_skipping)
    writer = bar = None
    if _is_main():
        from torch.utils.tensorboard import SummaryWriter
        writer = SummaryWriter(str(run.out))
        bar = progress_bar(cfg.iterations, run.iteration, f"train {cfg.model}")
    t0 = time.time()
    progress = ProgressFile(run.out, cfg.iterations, run.iteration) if _is_main() else None
    run.net.train()
    with StepBoundaryInterrupt(enabled=run.world == 1) as stop:
        _train_loop(run, loader, stop, bar, writer, progress)
    if bar is not None:
        bar.close()
        writer.close()
    return _finish(run, time.time() - t0)


def _train_loop(run: Run, loader, stop: StepBoundaryInterrupt, bar, writer, progress) -> None:
    """Steps until cfg.iterations, evaluating and checkpointing on their periods; on a deferred Ctrl-C (`stop`),
    checkpoints the iteration just finished and raises KeyboardInterrupt. bar / writer / progress: the main
    process's tqdm bar, TensorBoard writer and progress.json (None elsewhere)."""
    cfg = run.cfg
    scaler = run.scaler
    criterion = nn.CrossEntropyLoss()
    for images, labels, skipped in loader:
        if run.iteration >= cfg.iterations:
            break
        run.history["skipped_images"] += len(skipped)
        for path in skipped:
            logger.warning(f"skipped unreadable image {path}")
        if len(labels) == 0:
            continue
        loss, err, lr = step(run, images, labels, scaler, criterion)
        it = run.iteration
        if progress is not None:
            progress.update(it, force=it == cfg.iterations)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3f}", err=f"{np.mean(run.history['err_window']):.3f}", lr=f"{lr:.3g}",
                            refresh=False)
            for tag, value in (("train/loss", loss), ("train/error", err), ("train/lr", lr)):
                writer.add_scalar(tag, value, it)
        if it % cfg.eval_period == 0 or it == cfg.iterations:
            res = run_evaluation(run, lr)
            if writer is not None:
                writer.add_scalar("test/top1_error", 100 - res["top1"], it)
                writer.add_scalar("test/top5_error", 100 - res["top5"], it)
        if _is_main() and (it % cfg.checkpoint_period == 0 or it == cfg.iterations or stop.requested):
            save_checkpoint(run)  # periodic, final, or the iteration a deferred Ctrl-C stops after
        if stop.requested and it < cfg.iterations:
            logger.warning(f"interrupted after iteration {it}: checkpoint written, --resume continues from it")
            raise KeyboardInterrupt


def _finish(run: Run, seconds: float) -> dict:
    h = run.history
    final = {"top1": 100 - h["test_error"][-1], "top5": 100 - h["test_top5_error"][-1]} if h["test_error"] else {}
    result = {"history": h, "final": final, "checkpoint": str(run.out / FINAL_CHECKPOINT),
              "seconds": round(seconds, 1), "classes": list(run.train_set.classes), "world_size": run.world,
              "images_seen": run.iteration * run.cfg.batch_size * run.world, "val_images": len(run.val_set)}
    subsets = {k: d.selection for k, d in (("train", run.train_set), ("val", run.val_set)) if hasattr(d, "selection")}
    if subsets:  # which items --train-samples / --val-samples chose (stratified, or the embedded set's first)
        result["subsets"] = subsets
    if _is_main():
        atomic_write_text(run.out / EVALUATION, strict_json(result))  # the run's summary; a NaN loss as null
        if h["skipped_images"]:
            logger.warning(f"{h['skipped_images']} unreadable images were skipped (on_error='skip')")
    if math.isnan(final.get("top1", 0.0)):
        raise FloatingPointError("evaluation produced NaN")
    return result
