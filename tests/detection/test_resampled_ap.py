"""detection.evaluation.resampled: a run's COCO AP on redrawn test images equals pycocotools' COCOeval on the
redrawn set built for real (each image copied as often as it is drawn), and the draws are shared by every run scored
on a set of one size."""

import contextlib
import io

import numpy as np
import pytest

from detection.evaluation.resampled import REPLICATES, image_draws, image_matches, resampled_ap

IMAGES = 8


def _data(seed=0):
    """Ground truth over 8 images and 3 categories (one crowd region, one category absent from two images, one
    image with no box at all) and detections with distinct scores: hits at several IoUs, misses, duplicates."""
    rng = np.random.default_rng(seed)
    images = [{"id": i + 1, "width": 100, "height": 100, "file_name": f"{i}.jpg"} for i in range(IMAGES)]
    anns, results = [], []
    for img in range(1, IMAGES):  # image 8: nothing in it
        for cat in (1, 2, 3):
            if cat == 3 and img in (2, 5):
                continue
            x, y = rng.uniform(0, 50, 2)
            w, h = rng.uniform(20, 45, 2)
            anns.append({"id": len(anns) + 1, "image_id": img, "category_id": cat, "bbox": [x, y, w, h],
                         "area": w * h, "iscrowd": int(img == 3 and cat == 1)})
            for _ in range(int(rng.integers(0, 3))):  # shifted copies: some match at 0.5 only, some not at all
                dx, dy = rng.normal(0, 8, 2)
                results.append({"image_id": img, "category_id": cat, "bbox": [x + dx, y + dy, w, h]})
    results += [{"image_id": 8, "category_id": 2, "bbox": [5, 5, 30, 30]}]  # a false positive where nothing is
    scores = rng.permutation(len(results)) / len(results) + 0.01  # distinct: no ties to order
    for r, s in zip(results, scores):
        r["score"] = float(s)
    return {"images": images, "annotations": anns,
            "categories": [{"id": c, "name": f"c{c}"} for c in (1, 2, 3)]}, results


def _coco(dataset):
    from pycocotools.coco import COCO

    api = COCO()
    api.dataset = dataset
    with contextlib.redirect_stdout(io.StringIO()):
        api.createIndex()
    return api


def _cocoeval(dataset, results) -> dict[str, float]:
    """pycocotools' AP / AP50 / AP75 in percent: the oracle."""
    from pycocotools.cocoeval import COCOeval

    gt = _coco(dataset)
    with contextlib.redirect_stdout(io.StringIO()):
        ev = COCOeval(gt, gt.loadRes(results), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return {"AP": 100 * ev.stats[0], "AP50": 100 * ev.stats[1], "AP75": 100 * ev.stats[2]}


def _materialised(dataset, results, counts):
    """The redrawn set built for real: image i copied counts[i] times under new ids, its boxes and detections too."""
    images, anns, res = [], [], []
    for i, n in enumerate(counts):
        old = dataset["images"][i]["id"]
        for _ in range(int(n)):
            new = len(images) + 1
            images.append({**dataset["images"][i], "id": new})
            for a in dataset["annotations"]:
                if a["image_id"] == old:  # ground-truth ids unique (pycocotools matches by them)
                    anns.append({**a, "id": len(anns) + 1, "image_id": new})
            res += [{**r, "image_id": new} for r in results if r["image_id"] == old]
    return {**dataset, "images": images, "annotations": anns}, res


def test_every_image_drawn_once_gives_cocoevals_ap():
    dataset, results = _data()
    got = resampled_ap(image_matches(_coco(dataset), results), np.ones((1, IMAGES)))
    for metric, value in _cocoeval(dataset, results).items():
        assert got[metric][0] == pytest.approx(value, abs=1e-9)


@pytest.mark.parametrize("counts", [[2, 1, 1, 0, 1, 3, 0, 0], [0, 0, 1, 1, 2, 0, 2, 2], [1, 0, 0, 0, 0, 0, 0, 7]])
def test_a_draw_scores_as_the_set_with_each_image_copied_as_often_as_drawn(counts):
    """Weights are duplication: an image drawn twice counts as two images, one drawn 0 times is gone (here also a
    category left without ground truth, which COCO leaves out of the mean, and a set of one image repeated)."""
    dataset, results = _data(seed=1)
    got = resampled_ap(image_matches(_coco(dataset), results), np.array([counts], float))
    for metric, value in _cocoeval(*_materialised(dataset, results, counts)).items():
        assert got[metric][0] == pytest.approx(value, abs=1e-9)


def test_draws_are_the_same_for_every_run_on_a_set_of_one_size_and_resample_all_of_it():
    a, b = image_draws(50), image_draws(50)
    assert np.array_equal(a, b) and a.shape == (REPLICATES, 50) and set(a.sum(axis=1)) == {50}
    assert not np.array_equal(image_draws(50, seed=1), a) and image_draws(51).shape == (REPLICATES, 51)


def test_a_run_without_detections_has_ap_zero_on_every_draw_with_ground_truth():
    dataset, _ = _data()
    got = resampled_ap(image_matches(_coco(dataset), []), image_draws(IMAGES, replicates=5))
    assert np.all(got["AP"] == 0)
