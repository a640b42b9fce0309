"""Which kernel taps a pretraining run trained: each k x k convolution's taps compared between the run's initial
weights (rebuilt as the run built them: trainer.build with its recorded settings, the same seed) and its final
checkpoint. A tap the data never reached has zero gradient, so weight decay alone moves it: its final weights are
its initial ones shrunk by one common factor (cosine 1). `backbones.geometry` predicts those taps from the shapes;
this measures them on the run."""

from __future__ import annotations

import copy
import tempfile
from dataclasses import dataclass, fields, replace
from pathlib import Path

import torch
from torch import nn

from backbones import load_pretrained
from backbones.checkpoint_io import atomic_torch_save, read_checkpoint
from backbones.geometry import kernel_taps

from ..engine.config import ClsConfig
from ..engine.run_files import CONFIG_JSON, FINAL_CHECKPOINT, RunFileError, read_json

__all__ = ["StageTaps", "tap_training", "initial_and_final", "zero_unmoved_taps"]

# A tap moved by decay alone is its initial vector times one factor; float32 rounding over thousands of steps leaves
# its cosine (in float64) within ~1e-11 of 1, where a gradient step of any size turns it by far more.
UNMOVED_COSINE = 1 - 1e-9


@dataclass(frozen=True)
class StageTaps:
    """One stage of a run's net: its k x k convolutions' taps, how many never moved but by weight decay, and how
    many the geometry predicts see only padding at the run's image size."""

    stage: str
    convs: int
    taps: int
    unmoved: int
    predicted: int
    weights: int  # weights in those taps
    unmoved_weights: int
    shrink: float | None  # mean |final| / |initial| of the unmoved taps (weight decay's factor); None if none


def _config(run: Path) -> ClsConfig:
    recorded = read_json(run / CONFIG_JSON)
    if not isinstance(recorded, dict):
        raise RunFileError(f"{run / CONFIG_JSON}: not the settings object a pretraining run writes")
    names = {f.name for f in fields(ClsConfig)}
    values = {k: v for k, v in recorded.items() if k in names}
    values["milestones"] = tuple(values.get("milestones", ()))
    return ClsConfig(**values)


def initial_and_final(run: str | Path) -> tuple[nn.Module, nn.Module, ClsConfig]:
    """The run's net as it started (trainer.build: its data, then its model, under its seed) and as it ended."""
    from ..engine.trainer import build  # the trainer, not its CLI

    run = Path(run)
    if not (run / FINAL_CHECKPOINT).is_file():
        raise RunFileError(f"{run}: no {FINAL_CHECKPOINT} (an unfinished pretraining run)")
    cfg = _config(run)
    with tempfile.TemporaryDirectory() as tmp:
        first = build(replace(cfg, output_dir=tmp, workers=0)).model.float().cpu()
    final = copy.deepcopy(first)
    load_pretrained(final, run / FINAL_CHECKPOINT)
    return first, final, cfg


def _unmoved(w0: torch.Tensor, w1: torch.Tensor, i: int, j: int) -> bool:
    a, b = w0[:, :, i, j].flatten().double(), w1[:, :, i, j].flatten().double()
    cosine = torch.nn.functional.cosine_similarity(a, b, dim=0).item()
    return bool(cosine >= UNMOVED_COSINE and b.norm() <= a.norm())


def _kxk_taps(first: nn.Module, final: nn.Module):
    """(conv name, initial weight, final weight, row, column, unmoved) of every tap of every k x k convolution."""
    start = dict(first.named_modules())
    for name, conv in final.named_modules():
        if isinstance(conv, nn.Conv2d) and conv.kernel_size != (1, 1):
            w0, w1 = start[name].weight.detach(), conv.weight.detach()
            for i in range(w0.shape[2]):
                for j in range(w0.shape[3]):
                    yield name, w0, w1, i, j, _unmoved(w0, w1, i, j)


def zero_unmoved_taps(run: str | Path, out: str | Path, nets: tuple[nn.Module, nn.Module] | None = None) -> int:
    """Write the run's final checkpoint to `out` with every unmoved tap set to zero (what a layer computes from the
    taps it learned only), its metadata kept; returns the weights zeroed. nets: initial_and_final's pair, when the
    caller has it (it rebuilds the run's data)."""
    first, final = nets or initial_and_final(run)[:2]
    ckpt = read_checkpoint(Path(run) / FINAL_CHECKPOINT)
    zeroed = 0
    for name, _, _, i, j, unmoved in _kxk_taps(first, final):
        if unmoved:
            tensor = ckpt["model"][f"{name}.weight"]
            tensor[:, :, i, j] = 0
            zeroed += tensor[:, :, i, j].numel()
    atomic_torch_save(ckpt, out)
    return zeroed


def tap_training(run: str | Path, nets: tuple[nn.Module, nn.Module, ClsConfig] | None = None) -> list[StageTaps]:
    """Per stage of the run's net: its k x k convs' taps, unmoved (cosine with the initial tap >= UNMOVED_COSINE and
    no longer than it) and predicted untrained at the run's image size; nets: initial_and_final(run), if at hand."""
    first, final, cfg = nets or initial_and_final(run)
    predicted = {c.name: c for c in kernel_taps(first, cfg.image_size)}
    rows: dict[str, list] = {}
    seen: set[str] = set()
    for name, w0, w1, i, j, unmoved in _kxk_taps(first, final):
        geometry = predicted[name]
        row = rows.setdefault(geometry.stage, [0, 0, 0, 0, 0, 0, []])
        if name not in seen:
            seen.add(name)
            row[0] += 1
        a, b = w0[:, :, i, j], w1[:, :, i, j]
        row[1] += 1
        row[2] += unmoved
        row[3] += not geometry.used[i][j]
        row[4] += a.numel()
        row[5] += a.numel() if unmoved else 0
        if unmoved:
            row[6].append((b.norm() / a.norm()).item())
    return [StageTaps(s, c, t, u, p, w, uw, sum(r) / len(r) if r else None)
            for s, (c, t, u, p, w, uw, r) in rows.items()]
