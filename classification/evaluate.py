"""Top-1 / top-5 evaluation: single view, the standard 10-crop, and fully-convolutional multi-scale averaging."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from backbones.inference import optimize_for_inference

from .data.datasets import collate_skipping
from .data.transforms import ten_crop

__all__ = ["evaluate", "ten_crop_logits", "multiscale_logits", "topk_correct", "PAPER_SCALES"]

PAPER_SCALES = (224, 256, 384, 480, 640)  # shorter sides for the fully-convolutional test (Sec. 3.4)


def topk_correct(logits: torch.Tensor, labels: torch.Tensor, ks: Sequence[int] = (1, 5)) -> list[int]:
    k_max = min(max(ks), logits.shape[1])
    pred = logits.topk(k_max, dim=1).indices
    hit = pred == labels[:, None]
    return [int(hit[:, : min(k, k_max)].any(dim=1).sum()) for k in ks]


@torch.no_grad()
def ten_crop_logits(model: nn.Module, images: torch.Tensor, crop: int) -> torch.Tensor:
    """Average of the softmax-free scores of the 10 standard views of each image (N, C, H, W) -> (N, classes)."""
    views = torch.stack([ten_crop(img, crop) for img in images])  # (N, 10, C, crop, crop)
    n = views.shape[0]
    return model(views.flatten(0, 1)).view(n, 10, -1).mean(dim=1)


@torch.no_grad()
def multiscale_logits(model: nn.Module, image: torch.Tensor, scales: Sequence[int] = PAPER_SCALES) -> torch.Tensor:
    """Fully-convolutional testing: the whole image at each shorter side (and its flip), scores averaged.
    Works because the head pools globally; (C, H, W) -> (classes,)."""
    h, w = image.shape[-2:]
    scores = []
    for s in scales:
        size = (s, round(w * s / h)) if h <= w else (round(h * s / w), s)
        x = F.interpolate(image[None], size=size, mode="bilinear", align_corners=False, antialias=True)
        scores.append(model(torch.cat([x, x.flip(-1)])).mean(0))
    return torch.stack(scores).mean(0)


@torch.no_grad()
def evaluate(model: nn.Module, dataset: Dataset, *, batch_size: int = 64, ten_crop: bool = False, crop: int = 224,
             multi_scale: bool = False, workers: int = 0, fast_inference: bool = False) -> dict[str, float]:
    """Top-1 / top-5 accuracy (%) over `dataset` (sharded across processes under torch.distributed).

    ten_crop: the dataset gives resized images, scored by their 10 crops; multi_scale: the dataset gives whole
    images (any size, one per batch), scored fully convolutionally at the paper's scales. fast_inference: score
    with backbones.optimize_for_inference's copy of the model (the same logits within float tolerance; pays its
    compile once per call of evaluate, and again for a new batch shape, e.g. the last batch: `compile_seconds`).
    Each call compiles a new copy: Dynamo stops recompiling after its recompile limit (8 by default) and runs
    eagerly (the same numbers, no longer faster), so the option is for a final or occasional evaluation."""
    if ten_crop and multi_scale:
        raise ValueError("choose ten_crop or multi_scale, not both")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    scorer = optimize_for_inference(getattr(model, "module", model)) if fast_inference else model
    sampler = DistributedSampler(dataset, shuffle=False) if dist.is_initialized() else None
    per_batch = 1 if multi_scale else max(1, batch_size // 10) if ten_crop else batch_size
    loader = DataLoader(dataset, batch_size=per_batch, sampler=sampler, num_workers=workers,
                        collate_fn=collate_skipping)
    counts = torch.zeros(3, dtype=torch.long)
    for images, labels, _ in loader:
        if len(labels) == 0:
            continue
        images, labels = images.to(device), labels.to(device)
        if multi_scale:
            logits = torch.stack([multiscale_logits(scorer, img) for img in images])
        else:
            logits = ten_crop_logits(scorer, images, crop) if ten_crop else scorer(images)
        c1, c5 = topk_correct(logits, labels)
        counts += torch.tensor([c1, c5, len(labels)])
    if dist.is_initialized():
        counts = counts.to(device)
        dist.all_reduce(counts)
        counts = counts.cpu()
    model.train(was_training)
    n = max(int(counts[2]), 1)
    res = {"top1": 100.0 * int(counts[0]) / n, "top5": 100.0 * int(counts[1]) / n, "count": int(counts[2])}
    if fast_inference:  # what this process paid to compile (first shape, and each new batch shape)
        res["compile_seconds"] = round(scorer.compile_seconds, 2)
    return res
