"""The test set's own sampling: a run's COCO box AP on resampled draws of its test images.

A second draw of test images would move every AP. What matters to a comparison is how much it moves a
*difference* between runs scored on the same images, so the draws are shared (a paired bootstrap over the images):
`image_draws` makes REPLICATES draws with replacement, the same for every run scored on a set of that size, and
`resampled_ap` gives each run's AP, AP50 and AP75 on each draw. The matching is COCO's own (pycocotools'
`COCOeval.evaluate`, once per run: area "all", 100 detections an image); the accumulation is COCOeval.accumulate's
rule -- detections of a category sorted by score (stable), precision made monotone, read at 101 recall thresholds,
averaged over IoU 0.50:0.95 and the categories with ground truth in the draw -- with each detection and ground-truth
box weighted by its image's multiplicity in the draw, which is what duplicating the image does (an image drawn 0
times drops out; a draw of every image once gives COCOeval's AP; tested against COCOeval on drawn sets built for
real -- equal but where two images' detections tie in score, whose order COCOeval takes from the image ids).

The report (report.test_sampling) turns the replicates into each comparison's test-set standard error, shown beside
its interval over the units.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass

import numpy as np

__all__ = ["ImageMatches", "image_matches", "image_draws", "resampled_ap", "REPLICATES", "DRAW_SEED",
           "RESAMPLED_METRICS"]

REPLICATES = 200  # draws: the standard error of a standard error from 200 draws is ~5% of it
DRAW_SEED = 0  # one stream: every run scored on a set of n images gets the same draws
RESAMPLED_METRICS = ("AP", "AP50", "AP75")
_RECALL = np.linspace(0.0, 1.0, 101)  # COCOeval's recThrs
_CHUNK = 25  # draws at a time (memory: chunk x IoUs x detections of a category)


@dataclass(frozen=True)
class _Category:
    """One category's detections over all images, sorted by score as COCOeval.accumulate sorts them."""

    image: np.ndarray  # (D,) index of each detection's image (position in ImageMatches' image order)
    tp: np.ndarray  # (IoUs, D) matched to a ground-truth box that is not ignored
    fp: np.ndarray  # (IoUs, D) unmatched and not ignored
    gt: np.ndarray  # (images,) ground-truth boxes not ignored, per image


@dataclass(frozen=True)
class ImageMatches:
    """A run's detections matched to the ground truth, per category and image: what AP is accumulated from."""

    image_ids: tuple[int, ...]  # the ground truth's image ids, ascending: the order image_draws' columns follow
    categories: tuple[_Category, ...]


def image_matches(coco_gt, results: list[dict]) -> ImageMatches:
    """COCO's matching of `results` ({"image_id", "category_id", "bbox" xywh, "score"}) to the pycocotools `COCO`
    ground truth `coco_gt`, per image and category (pycocotools COCOeval.evaluate, box IoU, area "all", the last
    maxDets)."""
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        ev = COCOeval(coco_gt, coco_gt.loadRes(results) if results else _empty(coco_gt), "bbox")
        ev.evaluate()
    p = ev.params
    n_img, n_area, max_det = len(p.imgIds), len(p.areaRng), p.maxDets[-1]
    iou_count = len(p.iouThrs)
    categories = []
    for k in range(len(p.catIds)):
        block = ev.evalImgs[k * n_area * n_img:k * n_area * n_img + n_img]  # area "all" (index 0)
        images, scores, matched, ignored = [], [], [], []
        gt = np.zeros(n_img)
        for i, e in enumerate(block):
            if e is None:  # neither ground truth nor detections of this category in the image
                continue
            gt[i] = np.count_nonzero(np.asarray(e["gtIgnore"]) == 0)
            s = np.asarray(e["dtScores"][:max_det], dtype=float)
            images.append(np.full(len(s), i))
            scores.append(s)
            matched.append(np.asarray(e["dtMatches"])[:, :max_det].reshape(iou_count, len(s)))
            ignored.append(np.asarray(e["dtIgnore"])[:, :max_det].reshape(iou_count, len(s)))
        if scores:
            order = np.argsort(-np.concatenate(scores), kind="mergesort")  # COCOeval.accumulate's sort
            dtm = np.concatenate(matched, axis=1)[:, order] > 0
            dti = np.concatenate(ignored, axis=1)[:, order].astype(bool)
            image = np.concatenate(images)[order]
        else:
            dtm = dti = np.zeros((iou_count, 0), bool)
            image = np.zeros(0, int)
        categories.append(_Category(image, dtm & ~dti, ~dtm & ~dti, gt))
    return ImageMatches(tuple(int(i) for i in p.imgIds), tuple(categories))


def _empty(coco_gt):
    """A results object with no detections (pycocotools' loadRes refuses an empty list)."""
    from pycocotools.coco import COCO

    dt = COCO()
    dt.dataset = {"images": list(coco_gt.dataset.get("images", [])), "annotations": [],
                  "categories": list(coco_gt.dataset.get("categories", []))}
    dt.createIndex()
    return dt


def image_draws(images: int, replicates: int = REPLICATES, seed: int = DRAW_SEED) -> np.ndarray:
    """(replicates, images) multiplicities: each row a draw of `images` images with replacement. The same for every
    run scored on a set of this size (the pairing)."""
    rng = np.random.default_rng([seed, images])
    return rng.multinomial(images, np.full(images, 1.0 / images), size=replicates).astype(float)


def resampled_ap(matches: ImageMatches, draws: np.ndarray) -> dict[str, np.ndarray]:
    """AP, AP50 and AP75 (percent) of the run on each draw (rows of `draws`, columns in matches.image_ids order):
    COCOeval.accumulate with every box weighted by its image's multiplicity. NaN on a draw with no ground truth."""
    if draws.ndim != 2 or draws.shape[1] != len(matches.image_ids):
        raise ValueError(f"draws of shape {draws.shape} for {len(matches.image_ids)} images")
    out = {m: np.empty(len(draws)) for m in RESAMPLED_METRICS}
    for start in range(0, len(draws), _CHUNK):
        w = draws[start:start + _CHUNK]
        prec = np.stack([_precision(c, w) for c in matches.categories], axis=-1)  # (B, IoUs, recall, categories)
        for metric, p in (("AP", prec), ("AP50", prec[:, :1]), ("AP75", prec[:, 5:6])):
            valid = p > -1
            with np.errstate(invalid="ignore"):
                out[metric][start:start + len(w)] = 100 * np.where(valid, p, 0).sum(axis=(1, 2, 3)) / \
                    valid.sum(axis=(1, 2, 3))
    return out


def _precision(c: _Category, w: np.ndarray) -> np.ndarray:
    """(B, IoUs, 101) interpolated precision of one category under the weights `w` (B, images); -1 on a draw with
    no ground truth of it (COCOeval's "absent")."""
    b, t, d = len(w), c.tp.shape[0], c.tp.shape[1]
    npig = w @ c.gt
    out = np.zeros((b, t, len(_RECALL)))
    out[npig == 0] = -1.0
    if d == 0:
        return out
    wd = w[:, c.image][:, None, :]  # (B, 1, D)
    tp = np.cumsum(wd * c.tp[None], axis=2)
    fp = np.cumsum(wd * c.fp[None], axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        rc = tp / npig[:, None, None]
    pr = tp / (tp + fp + np.spacing(1))
    envelope = np.maximum.accumulate(pr[:, :, ::-1], axis=2)[:, :, ::-1]  # COCO's "precision made monotone"
    for i in np.flatnonzero(npig > 0):
        for j in range(t):
            idx = np.searchsorted(rc[i, j], _RECALL, side="left")
            out[i, j] = np.where(idx < d, envelope[i, j, np.minimum(idx, d - 1)], 0.0)
    return out
