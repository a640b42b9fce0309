"""The test set's part of a comparison: how far Δ moves when the test images are drawn again, beyond what the units'
spread already holds.

A comparison's units -- pretraining runs or runs -- are all scored on one fixed test set; a second draw of test
images would move every AP. Each run's AP on the same REPLICATES draws of its test images (evaluation.resampled: a
paired bootstrap over the images, COCO's matching and accumulation) splits that movement in two: each unit's own
luck on these images (it differs between units, so it is in their spread, and in the interval, already) and the part
every unit of a side shares (the same for all of them: no number of units shows it). `shared_test_set_se` measures
the second -- for a side, the mean covariance over the draws between two of its different units; between two sides,
the mean covariance of a unit of one with a unit of the other -- the SE of the contrast's shared part. The
comparison adds it to the units' variance (comparison.with_test_set): the interval is then about the population the
images are drawn from, not these images. A side with one unit cannot split the two: its whole variance over the
draws counts (the wider interval).

Only runs scored with COCO AP whose detections file (inference/<dataset>/coco_instances_results.json) and ground
truth json are present have replicates; a comparison with any run lacking them has no test-set part (None).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping, Sequence

import numpy as np

from classification.engine.run_files import RunFileError, read_json

from ..datasets.validation import DatasetFormatError
from ..evaluation.resampled import REPLICATES, RESAMPLED_METRICS, image_draws, image_matches, resampled_ap
from .runs import RunResult

__all__ = ["run_replicates", "image_count", "shared_test_set_se", "test_set_note"]

Replicates = Mapping[str, Sequence[np.ndarray]]  # unit -> the replicate vectors of its runs


def run_replicates(run: RunResult, metric: str) -> np.ndarray | None:
    """The run's `metric` (AP, AP50, AP75) on each draw of its test images; None when it was not scored with COCO
    AP or its detections or ground truth file is absent."""
    draws = _draws(run)
    return None if draws is None or metric not in RESAMPLED_METRICS else draws[1][metric]


def image_count(run: RunResult) -> int | None:
    """The number of test images the run's draws resample (None without draws)."""
    draws = _draws(run)
    return None if draws is None else draws[0]


def _draws(run: RunResult) -> tuple[int, dict[str, np.ndarray]] | None:
    """(images, metric -> values on the draws); None without the files, or when the ground truth found under the
    recorded path is not what the run was scored on (its AP on the undrawn set differs from the recorded AP: e.g.
    a relative path read from another directory)."""
    json_file = (run.dataset_files or {}).get("json_file")
    if run.kind != "coco" or not json_file or "AP" not in run.metrics:
        return None
    try:
        pred, gt = run.predictions_file.stat(), os.stat(json_file)
    except OSError:
        return None
    try:
        images, whole, draws = _replicates(str(run.predictions_file), pred.st_mtime_ns, pred.st_size, json_file,
                                           gt.st_mtime_ns, gt.st_size)
    except (RunFileError, DatasetFormatError, OSError, ValueError, KeyError, TypeError, AssertionError):
        # unreadable or malformed files, or detections of images the ground truth lacks (pycocotools' loadRes
        # asserts): no test-set part; the run's own numbers are read elsewhere
        return None
    return (images, draws) if abs(whole - run.metrics["AP"]) < AP_TOLERANCE else None


AP_TOLERANCE = 1e-6  # the undrawn set's AP against the recorded one (the same arithmetic up to rounding)


@functools.lru_cache(maxsize=256)
def _replicates(predictions: str, _mtime: int, _size: int, json_file: str, gt_mtime: int,
                gt_size: int) -> tuple[int, float, dict[str, np.ndarray]]:
    """(images, AP on the set itself, metric -> its value on each draw), cached per file version (path, mtime,
    size): a report compares one run many times."""
    matches = image_matches(_ground_truth(json_file, gt_mtime, gt_size), read_json(predictions))
    whole = resampled_ap(matches, np.ones((1, len(matches.image_ids))))["AP"][0]
    return len(matches.image_ids), float(whole), resampled_ap(matches, image_draws(len(matches.image_ids)))


@functools.lru_cache(maxsize=8)
def _ground_truth(json_file: str, _mtime: int, _size: int):
    """The ground truth as the run's evaluator scored it (datasets.coco.coco_ground_truth: boxes clipped and
    dropped as training saw them)."""
    from ..datasets.coco import coco_ground_truth
    from ..evaluation.coco import _coco_api

    return _coco_api(coco_ground_truth(json_file, log=False).dataset)


def shared_test_set_se(terms: Sequence[tuple[float, Replicates]]) -> float | None:
    """The SE over the draws of the part of the contrast sum(weight * mean of unit means) that every unit of a side
    shares (the module docstring), each term a group's (weight, unit -> its runs' replicate vectors); None when a
    group has none, the draws differ in number, or fewer than half the draws are finite for every unit (a part
    estimated from a few draws would pass for one from all of them)."""
    groups = []
    for weight, units in terms:
        means = [np.mean(np.stack(list(runs)), axis=0) for runs in units.values() if len(runs)]
        if not means:
            return None
        groups.append((weight, means))
    if len({m.shape for _, means in groups for m in means}) != 1:
        return None
    stacked = np.stack([m for _, means in groups for m in means])  # units x draws
    finite = np.all(np.isfinite(stacked), axis=0)
    if finite.sum() < max(2, stacked.shape[1] // 2):
        return None
    cov = np.cov(stacked[:, finite])
    bounds = np.cumsum([0] + [len(means) for _, means in groups])
    variance = 0.0
    for g, (wg, _) in enumerate(groups):
        for h, (wh, _) in enumerate(groups):
            block = cov[bounds[g]:bounds[g + 1], bounds[h]:bounds[h + 1]]
            if g == h and len(block) > 1:  # between two different units of one side: what they share
                shared = (block.sum() - np.trace(block)) / (len(block) * (len(block) - 1))
            else:  # a side with one unit (its own luck counted too), or two sides
                shared = block.mean()
            variance += wg * wh * float(shared)
    return math.sqrt(max(variance, 0.0))


def test_set_note(images: int) -> str:
    """What the test set's part of each interval is, for a report's notes."""
    return (f"Each interval holds the test set's part: how far Δ moves when the {images} test images are drawn again "
            f"({REPLICATES} draws with replacement, the same for every run), the part every unit of a side shares "
            "(each unit's own luck on these images already varies between units); its SE is shown beside the "
            "interval. The call is about the images' population, not these images.")
