"""The data scale (`--scale data`): the paper configs' detector as it is -- anchors, RoI heads, normalisation,
FrozenBN, the arm's overlay -- at an input size and a schedule that fit the user's data and hardware, the way
Detectron2's custom-dataset tutorial fine-tunes a model-zoo config on a few hundred images.

- Input size: the shorter side of the train images' median, at most the configs' 600 (so images are never
  enlarged past the paper's size, and a 640x480 set runs at 480, not shrunk to 128), unless --detect-size names
  it; the longer side's cap keeps the configs' ratio (1000 / 600).
- Schedule: epochs of the train set (DEFAULT_EPOCHS) unless --detect-iterations names the iterations; 2 images a
  process (the configs' 2 a GPU), the configs' lr scaled linearly to that batch (Goyal et al.), their steps at the
  same fractions of the schedule, their warm-up at most a tenth of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .leg_configs import PAPER_IMAGES_PER_GPU, PaperSettings

__all__ = ["DEFAULT_EPOCHS", "DataScale", "data_scale", "data_scale_overrides", "input_overrides", "data_scale_text"]

# Detectron2's 1x schedule -- 90k iterations of 16 images over COCO train2017's 118k -- is ~12 epochs; the model
# zoo fine-tunes at it, and the tutorial's 300 iterations of 2 over 61 balloon images are ~10.
DEFAULT_EPOCHS = 12.0


@dataclass(frozen=True)
class DataScale:
    """A data-scale leg's input size and 1x schedule, with where each came from and the configs' own values."""

    min_size: int
    max_size: int
    size_from: str  # "the train images' median 640x480", or "--detect-size"
    iterations: int  # of the 1x arm (an arm's schedule multiplies it)
    iterations_from: str  # "12 epochs of 364 train images", or "--detect-iterations"
    batch: int
    lr: float
    warmup: int
    paper: PaperSettings

    def steps(self, iterations: int) -> tuple[int, ...]:
        """The configs' lr steps at the same fractions of a schedule of `iterations`, each before its end (fvcore
        refuses a step at the last iteration; a 1-iteration schedule has none)."""
        return tuple(sorted({min(iterations - 1, max(1, round(t * iterations / self.paper.max_iter)))
                             for t in self.paper.steps} - {0}))


def data_scale(paper: PaperSettings, *, median_image: tuple[int, int] | None, train_images: int,
               detect_size: int | None, detect_iterations: int | None, epochs: float, processes: int) -> DataScale:
    """The data scale of one leg's configs on the data; ValueError (a PlanError upstream) naming the option when
    the data is not there to size it (a dry run without the files)."""
    if detect_size is not None:
        size, size_from = detect_size, "--detect-size"
    elif median_image is None:
        raise ValueError("--scale data sizes the legs from the train images; give --detect-size PX (and "
                         "--detect-iterations N) to plan without them")
    else:
        size = min(median_image[0], paper.min_size)
        size_from = f"the train images' median {median_image[1]}x{median_image[0]}"
    batch = PAPER_IMAGES_PER_GPU * processes
    if detect_iterations is not None:
        n, n_from = detect_iterations, "--detect-iterations"
    elif not train_images:
        raise ValueError("--scale data sets the schedule in epochs of the train images; give --detect-iterations N "
                         "to plan without them")
    else:
        n = max(1, math.ceil(epochs * train_images / batch))
        n_from = f"{epochs:g} epochs of {train_images:,} train images"
    return DataScale(size, round(size * paper.max_size / paper.min_size), size_from, n, n_from, batch,
                     paper.lr * batch / paper.batch, min(paper.warmup, max(1, n // 10)), paper)


def data_scale_overrides(scale: DataScale, iterations: int) -> list[str]:
    """A leg's input and solver overrides at the data scale, for a schedule of `iterations` (its arm's multiple of
    the 1x one; the warm-up is the 1x one in every arm, so it is not part of an arm's factor)."""
    return [*input_overrides(scale), "SOLVER.IMS_PER_BATCH", str(scale.batch), "SOLVER.BASE_LR", f"{scale.lr:.6g}",
            "SOLVER.MAX_ITER", str(iterations), "SOLVER.STEPS", str(scale.steps(iterations)),
            "SOLVER.WARMUP_ITERS", str(scale.warmup), "SOLVER.CHECKPOINT_PERIOD", str(max(1, iterations // 4)),
            "SOLVER.REFERENCE_WORLD_SIZE", "0"]


def input_overrides(scale: DataScale) -> list[str]:
    """The input size of a data-scale leg, training and test alike (the paper configs': one size)."""
    return ["INPUT.MIN_SIZE_TRAIN", f"({scale.min_size},)", "INPUT.MAX_SIZE_TRAIN", str(scale.max_size),
            "INPUT.MIN_SIZE_TEST", str(scale.min_size), "INPUT.MAX_SIZE_TEST", str(scale.max_size)]


def data_scale_text(scales: dict[str, DataScale], width: float) -> str:
    """What a data-scale job ran and how it differs from the paper's setting (its backbones' configs), for the
    report's and the summary's first lines; an lr per backbone where their configs' lrs differ."""
    scale = next(iter(scales.values()))
    p = scale.paper
    lrs = {f"{s.lr:.4g}" for s in scales.values()}
    lr = (f"lr {scale.lr:.4g} (the paper's {p.lr:g} x {scale.batch}/{p.batch})" if len(lrs) == 1 else
          "lr " + " / ".join(f"{s.lr:.4g} ({m})" for m, s in scales.items())
          + f" (the paper configs' x {scale.batch}/{p.batch})")
    return (f"data scale: the paper configs' detector at {scale.min_size}-px shorter side (longer at most "
            f"{scale.max_size}; from {scale.size_from}; the paper: {p.min_size} / {p.max_size}), "
            f"{scale.iterations:,} iterations of {scale.batch} images ({scale.iterations_from}; the paper: "
            f"{p.max_iter:,} of {p.batch}), {lr}, steps at the same fractions, warm-up {scale.warmup} iterations "
            f"(the paper: {p.warmup})" + (f", nets at width {width:g} (the paper: 1)" if width != 1 else ""))
