"""The classification pretraining loop (paper Sec. 3.4 / 4.2): SGD with momentum, step or plateau schedule,
warm-up (including the paper's ResNet-110 trick: low lr until the training error drops below a threshold),
DDP (NCCL on GPU, gloo on CPU), AMP on GPU, atomic checkpoints with resume, TensorBoard, tqdm.

Its checkpoints are `backbones.save_pretrained` files: every detection config of the same architecture takes
them as MODEL.WEIGHTS, no conversion step.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader

from backbones import create_model, load_pretrained, save_pretrained
from backbones.weight_formats import TORCHVISION_MEAN, TORCHVISION_STD

from ..data.datasets import (
    Cifar10,
    EmbeddedObjects,
    FashionMNIST,
    ImageFolderDataset,
    collate_skipping,
)
from ..data.sampling import ResumableSampler, SeededSamples
from ..data.transforms import cifar_train_transform, imagenet_train_transform, test_transform
from ..evaluate import evaluate

__all__ = ["ClsConfig", "train", "build_datasets", "LAST_CHECKPOINT"]

logger = logging.getLogger("classification")
LAST_CHECKPOINT = "last_checkpoint"


@dataclass
class ClsConfig:
    model: str = "cifar_resnet20"
    model_options: dict = field(default_factory=dict)
    dataset: str = "embedded"  # embedded | fashion-mnist | cifar10 | imagefolder
    data_root: str | None = None
    image_size: int = 32  # embedded objects' image size
    train_samples: int | None = None  # use only the first N training images (quick runs)
    val_samples: int | None = None
    iterations: int = 1000
    batch_size: int = 128  # per process
    lr: float | None = None  # default: 0.1 * global batch / 256 (the paper's 0.1 at 256, scaled linearly)
    momentum: float = 0.9
    weight_decay: float = 1e-4
    schedule: str = "step"  # "step" (x0.1 at `milestones` fractions of the run) or "plateau" (x0.1 on a plateau)
    milestones: tuple[float, ...] = (0.5, 0.75)  # CIFAR: 32k and 48k of 64k iterations
    plateau_patience: int = 3  # evaluations without improvement before dividing the lr by 10
    warmup_iterations: int = 0
    warmup_factor: float = 0.1  # lr multiplier during warm-up (0.1: the paper's 0.01 for ResNet-110)
    warmup_until_error: float | None = None  # keep warming up until the running training error is below this
    amp: bool = True  # only where CUDA is available
    workers: int = 2
    eval_period: int = 500
    checkpoint_period: int = 500
    ten_crop: bool = False  # ImageNet-style evaluation; embedded/CIFAR evaluate the whole 32x32 image
    on_error: str = "raise"  # unreadable images: "raise" or "skip" (counted and logged)
    seed: int = 0
    output_dir: str = "output/classification/run"
    deterministic: bool = False  # bitwise-repeatable CPU runs (resume tests)


def _is_main() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def build_datasets(cfg: ClsConfig):
    mean, std = TORCHVISION_MEAN, TORCHVISION_STD
    if cfg.dataset == "imagefolder":
        if not cfg.data_root:
            raise ValueError("dataset 'imagefolder' needs data_root (ImageNet layout: <root>/train/<class>/*.JPEG)")
        train = ImageFolderDataset(cfg.data_root, "train", imagenet_train_transform(mean, std), cfg.on_error)
        val = ImageFolderDataset(cfg.data_root, "val", test_transform(mean, std, crop=None if cfg.ten_crop else 224),
                                 cfg.on_error)
    else:
        small_train, small_test = cifar_train_transform(mean, std), test_transform(mean, std, resize=None, crop=None)
        if cfg.dataset == "cifar10":
            train, val = Cifar10(cfg.data_root, "train", small_train), Cifar10(cfg.data_root, "test", small_test)
        elif cfg.dataset == "fashion-mnist":
            kw = {"root": cfg.data_root} if cfg.data_root else {}
            train, val = FashionMNIST(split="train", transform=small_train, **kw), FashionMNIST(
                split="test", transform=small_test, **kw)
        elif cfg.dataset == "embedded":
            tr = cifar_train_transform(mean, std, size=cfg.image_size, padding=max(1, cfg.image_size // 8))
            train = EmbeddedObjects("train", cfg.image_size, tr, cfg.train_samples, cfg.seed)
            val = EmbeddedObjects("test", cfg.image_size, small_test, cfg.val_samples, cfg.seed)
        else:
            raise ValueError(f"unknown dataset {cfg.dataset!r}: embedded, fashion-mnist, cifar10 or imagefolder")
    if cfg.train_samples and len(train) > cfg.train_samples:
        train = torch.utils.data.Subset(train, range(cfg.train_samples))
        train.classes = train.dataset.classes
    if cfg.val_samples and len(val) > cfg.val_samples:
        val = torch.utils.data.Subset(val, range(cfg.val_samples))
        val.classes = val.dataset.classes
    return train, val, (mean, std)


class LRSchedule:
    """lr(iteration) for the step schedule with warm-up; the plateau schedule scales it down on demand."""

    def __init__(self, cfg: ClsConfig, base_lr: float):
        self.cfg, self.base_lr, self.plateau_scale, self.warm = cfg, base_lr, 1.0, True

    def __call__(self, it: int, running_error: float | None) -> float:
        c = self.cfg
        if self.warm:
            by_iter = it < c.warmup_iterations
            by_error = c.warmup_until_error is not None and (running_error is None or
                                                             running_error >= c.warmup_until_error)
            self.warm = by_iter or by_error
            if self.warm:
                return self.base_lr * c.warmup_factor
        if c.schedule == "plateau":
            return self.base_lr * self.plateau_scale
        steps = sum(it >= m * c.iterations for m in c.milestones)
        return self.base_lr * 0.1**steps

    def state_dict(self):
        return {"plateau_scale": self.plateau_scale, "warm": self.warm}

    def load_state_dict(self, d):
        self.plateau_scale, self.warm = d["plateau_scale"], d["warm"]


def _seed_everything(seed: int, deterministic: bool) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)


def _save(path: Path, model: nn.Module, optimizer, schedule: LRSchedule, it: int, history: dict, cfg: ClsConfig,
          mean, std) -> None:
    save_pretrained(model, path, input_format="RGB", pixel_mean=mean, pixel_std=std,
                    extra={"optimizer": optimizer.state_dict(), "schedule": schedule.state_dict(), "iteration": it,
                           "history": history, "config": json.loads(json.dumps(asdict(cfg)))})
    tmp = path.parent / (LAST_CHECKPOINT + ".tmp")
    tmp.write_text(path.name)
    os.replace(tmp, path.parent / LAST_CHECKPOINT)  # points only at complete files


def train(cfg: ClsConfig) -> dict:
    """Train; returns {"history", "final": {"top1", "top5"}, "checkpoint"}. Resumes from `output_dir` if it holds a
    last_checkpoint (call with a fresh output_dir for a new run)."""
    out = Path(cfg.output_dir)
    world = dist.get_world_size() if dist.is_initialized() else 1
    rank = dist.get_rank() if dist.is_initialized() else 0
    device = torch.device(f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu")
    _seed_everything(cfg.seed + rank, cfg.deterministic)
    train_set, val_set, (mean, std) = build_datasets(cfg)
    model = create_model(cfg.model, num_classes=len(train_set.classes), **cfg.model_options).to(device)
    base_lr = cfg.lr if cfg.lr is not None else 0.1 * cfg.batch_size * world / 256
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (no_decay if p.ndim <= 1 else decay).append(p)  # no weight decay on BN / biases
    optimizer = torch.optim.SGD([{"params": decay, "weight_decay": cfg.weight_decay},
                                 {"params": no_decay, "weight_decay": 0.0}], lr=base_lr, momentum=cfg.momentum)
    schedule = LRSchedule(cfg, base_lr)
    history: dict = {"iteration": [], "train_error": [], "test_error": [], "test_top5_error": [], "lr": [],
                     "skipped_images": 0}
    start = 0
    if _is_main():
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(asdict(cfg), indent=2))
    last = out / LAST_CHECKPOINT
    if last.is_file() and (out / last.read_text().strip()).is_file():
        ckpt_path = out / last.read_text().strip()
        load_pretrained(model, ckpt_path)
        state = torch.load(ckpt_path, map_location="cpu", weights_only=True)
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        history = state["history"]
        start = int(state["iteration"])
        logger.info(f"resumed from {ckpt_path} at iteration {start}")
    net = model
    if world > 1:
        net = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    sampler = ResumableSampler(len(train_set), seed=cfg.seed, rank=rank, world_size=world)
    loader = DataLoader(SeededSamples(train_set, cfg.seed), batch_size=cfg.batch_size, sampler=sampler,
                        num_workers=cfg.workers, collate_fn=collate_skipping, drop_last=True)
    batches_per_epoch = (len(train_set) // world) // cfg.batch_size
    if batches_per_epoch == 0:
        raise ValueError(f"{len(train_set)} training images are fewer than one batch of {cfg.batch_size} per process")
    use_amp = cfg.amp and device.type == "cuda"
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
    criterion = nn.CrossEntropyLoss()
    writer = None
    if _is_main():
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(out))
    bar = None
    if _is_main():
        from tqdm import tqdm

        bar = tqdm(total=cfg.iterations, initial=start, desc=f"train {cfg.model}", unit="it", file=sys.stderr,
                   mininterval=1.0 if sys.stderr.isatty() else 15.0)
    it = start
    err_window: list[float] = list(history.get("err_window", []))
    t0 = time.time()
    net.train()
    while it < cfg.iterations:
        epoch, batch_in_epoch = divmod(it, batches_per_epoch)
        sampler.set_epoch(epoch, start=batch_in_epoch * cfg.batch_size)  # resume mid-epoch exactly
        for images, labels, skipped in loader:
            if skipped:
                history["skipped_images"] += len(skipped)
                for path in skipped:
                    logger.warning(f"skipped unreadable image {path}")
            if len(labels) == 0:
                continue
            running = float(np.mean(err_window)) if err_window else None
            lr = schedule(it, running)
            for g in optimizer.param_groups:
                g["lr"] = lr
            images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            with torch.autocast(device.type, enabled=use_amp):
                logits = net(images)
                loss = criterion(logits, labels)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"loss became {loss.item()} at iteration {it} (lr {lr:g}); the last good "
                                         f"checkpoint is {out / LAST_CHECKPOINT}")
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            err = (logits.argmax(1) != labels).float().mean().item()
            err_window = (err_window + [err])[-50:]
            it += 1
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss.item():.3f}", err=f"{np.mean(err_window):.3f}", lr=f"{lr:.3g}",
                                refresh=False)
            if writer is not None:
                writer.add_scalar("train/loss", loss.item(), it)
                writer.add_scalar("train/error", err, it)
                writer.add_scalar("train/lr", lr, it)
            if it % cfg.eval_period == 0 or it == cfg.iterations:
                res = evaluate(model, val_set, batch_size=cfg.batch_size, ten_crop=cfg.ten_crop and
                               cfg.dataset == "imagefolder", workers=cfg.workers)
                history["iteration"].append(it)
                history["train_error"].append(100.0 * float(np.mean(err_window)))  # running, last 50 batches
                history["test_error"].append(100 - res["top1"])
                history["test_top5_error"].append(100 - res["top5"])
                history["lr"].append(lr)
                if cfg.schedule == "plateau" and len(history["test_error"]) > cfg.plateau_patience:
                    recent = history["test_error"][-cfg.plateau_patience:]
                    if min(recent) >= min(history["test_error"][:-cfg.plateau_patience]):
                        schedule.plateau_scale *= 0.1
                        logger.info(f"plateau: lr x0.1 at iteration {it}")
                if writer is not None:
                    writer.add_scalar("test/top1_error", 100 - res["top1"], it)
                    writer.add_scalar("test/top5_error", 100 - res["top5"], it)
                net.train()
            history["err_window"] = err_window  # the warm-up criterion resumes where it was
            if _is_main() and (it % cfg.checkpoint_period == 0 or it == cfg.iterations):
                _save(out / (f"model_{it:07d}.pth" if it < cfg.iterations else "model_final.pth"), model,
                      optimizer, schedule, it, history, cfg, mean, std)
            if it >= cfg.iterations:
                break
    if bar is not None:
        bar.close()
    if writer is not None:
        writer.close()
    final = {"top1": 100 - history["test_error"][-1], "top5": 100 - history["test_top5_error"][-1]} \
        if history["test_error"] else {}
    result = {"history": history, "final": final, "checkpoint": str(out / "model_final.pth"),
              "seconds": round(time.time() - t0, 1), "classes": list(train_set.classes)}
    if _is_main():
        (out / "metrics.json").write_text(json.dumps(result, indent=2))
        if history["skipped_images"]:
            logger.warning(f"{history['skipped_images']} unreadable images were skipped (on_error='skip')")
    if math.isnan(final.get("top1", 0.0)):
        raise FloatingPointError("evaluation produced NaN")
    return result
