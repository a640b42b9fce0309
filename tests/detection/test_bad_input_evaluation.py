"""Evaluation that would be silently wrong: non-finite scores, unknown images, classes without ground truth, VOC's
difficult objects under COCO AP, class lists that disagree between training and evaluation.
Each is refused with one clear error or scored as the references score it."""

import json
import logging
import math

import numpy as np
import pytest
import torch
from detectron2.data import DatasetCatalog, MetadataCatalog
from detectron2.structures import Boxes, Instances
from PIL import Image

from classification.engine.config import ClsConfig
from detection import get_detection_cfg
from detection.datasets import register_voc
from detection.evaluation import COCOEvaluator, VOCDetectionEvaluator, voc_eval_class

pytestmark = pytest.mark.bad_input

HOSTILE = "MODEL:\n  WEIGHTS: !!python/object/apply:os.system ['touch {marker}']\n"


GT = {"img1": (np.array([[1.0, 1.0, 20.0, 20.0]]), np.array([False])),
      "img2": (np.array([[30.0, 30.0, 60.0, 60.0]]), np.array([False]))}


def test_voc_refuses_nan_scores_and_unknown_images():
    good = [("img1", 0.9, (1, 1, 20, 20)), ("img2", 0.8, (30, 30, 60, 60))]
    assert voc_eval_class(GT, good, 0.5, True)[2] == pytest.approx(1.0)
    with pytest.raises(FloatingPointError, match="score nan on image 'img2'"):
        voc_eval_class(GT, [good[0], ("img2", float("nan"), (30, 30, 60, 60))], 0.5, True)
    with pytest.raises(KeyError, match="'img9', which is not in the ground truth"):
        voc_eval_class(GT, good + [("img9", 0.5, (1, 1, 5, 5))], 0.5, True)


def test_a_voc_class_with_nothing_to_score_is_left_out_of_the_mean_and_named(tiny_data, caplog):
    """bad7 case 1: a class whose only objects are difficult (or absent) was scored 0 and counted in the mean (a
    number for nothing); it is left out, as COCOeval leaves out a category without ground truth, and named."""
    records = DatasetCatalog.get("tiny_voc_val")
    names = MetadataCatalog.get("tiny_voc_val").thing_classes
    register_voc("tiny_voc_extra_class", str(tiny_data), "val", class_names=[*names, "unicorn"])
    ev = VOCDetectionEvaluator("tiny_voc_extra_class", distributed=False)
    ev.reset()
    for rec in records:  # perfect detections of every real object
        boxes = torch.tensor([a["bbox"] for a in rec["annotations"]], dtype=torch.float32)
        inst = Instances((rec["height"], rec["width"]), pred_boxes=Boxes(boxes),
                         scores=torch.full((len(boxes),), 0.9),
                         pred_classes=torch.tensor([a["category_id"] for a in rec["annotations"]]))
        ev.process([{"image_id": rec["image_id"]}], [{"instances": inst}])
    with caplog.at_level(logging.WARNING):
        res = ev.evaluate()["bbox"]
    assert math.isnan(res["AP50-unicorn"]) and res["AP50"] == pytest.approx(100.0) and res["classes_unscored"] == 1
    assert res["mAP50_voc07"] == pytest.approx(100.0) and res["AP"] == pytest.approx(100.0)
    assert "1 class(es) have no non-difficult object in the test set, so nothing to score: unicorn" in caplog.text


def test_coco_ap_of_a_voc_dataset_with_difficult_objects(tiny_data, tmp_path):
    """faster-coco-eval on a VOC-registered dataset (string image ids); a difficult object is not a target."""
    records = DatasetCatalog.get("tiny_voc_val")
    hard = records[0]["annotations"][0]
    hard["difficult"] = 1  # the dataset dicts are cached by nothing: patch what the evaluator will read
    DatasetCatalog.register("tiny_voc_val_hard", lambda: records)
    MetadataCatalog.get("tiny_voc_val_hard").set(thing_classes=MetadataCatalog.get("tiny_voc_val").thing_classes)
    ev = COCOEvaluator("tiny_voc_val_hard", str(tmp_path), distributed=False)
    gt = json.loads((tmp_path / "tiny_voc_val_hard_coco_format_difficult_ignore.json").read_text())
    assert all(isinstance(im["id"], int) for im in gt["images"]) and sum(a["iscrowd"] for a in gt["annotations"]) == 1
    ev.reset()
    for rec in records:  # perfect detections of the non-difficult objects only
        anns = [a for a in rec["annotations"] if not a.get("difficult")]
        inst = Instances((rec["height"], rec["width"]),
                         pred_boxes=Boxes(torch.tensor([a["bbox"] for a in anns]).reshape(-1, 4).float()),
                         scores=torch.full((len(anns),), 0.9),
                         pred_classes=torch.tensor([a["category_id"] for a in anns]))
        ev.process([{"image_id": rec["image_id"]}], [{"instances": inst}])
    assert ev.evaluate()["bbox"]["AP50"] == pytest.approx(100.0)


@pytest.mark.parametrize("backend", ["pycocotools", "faster_coco_eval"])
def test_coco_evaluation_refuses_non_finite_detections_in_every_backend(backend):
    """pycocotools scored NaN scores silently (AP 43.56) where faster-coco-eval and the VOC evaluator refused."""
    from pycocotools.coco import COCO

    from detection.evaluation.coco import evaluate_coco

    gt = COCO()
    gt.dataset = {"images": [{"id": 1, "width": 50, "height": 50}], "categories": [{"id": 1, "name": "x"}],
                  "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [5, 5, 20, 20], "area": 400,
                                   "iscrowd": 0}]}
    gt.createIndex()
    good = {"image_id": 1, "category_id": 1, "bbox": [5, 5, 20, 20], "score": 0.9}
    assert evaluate_coco(gt, [good], backend=backend).stats["AP50"] == pytest.approx(100.0)
    for bad in ({**good, "score": float("nan")}, {**good, "bbox": [5, 5, float("inf"), 20]}):
        with pytest.raises(ValueError, match="non-finite score or box"):
            evaluate_coco(gt, [good, bad], backend=backend)


def test_coco_ap_on_voc_data_says_how_difficult_objects_count_and_offers_detectron2s_convention(tiny_data,
                                                                                                 tmp_path):
    """COCO-style AP on VOC data marks difficult objects as crowd (ignored); Detectron2's converter keeps them as
    ground truth (up to 20 points lower). Both are available; the one used is recorded beside the numbers."""
    from detectron2.structures import BoxMode

    from detection.evaluation.coco import VOC_DIFFICULT, write_coco_ground_truth

    name = "bad_input_voc_difficult"
    box = {"bbox": [1, 1, 9, 9], "bbox_mode": BoxMode.XYXY_ABS, "category_id": 0}
    DatasetCatalog.register(name, lambda: [{"file_name": str(tiny_data / "x.jpg"), "image_id": "a", "height": 20,
                                            "width": 20, "annotations": [box, {**box, "difficult": 1}]}])
    MetadataCatalog.get(name).thing_classes = ["x"]
    n_difficult = 1
    for policy in VOC_DIFFICULT:
        path = tmp_path / f"{policy}.json"
        write_coco_ground_truth(name, str(path), difficult=policy)
        crowd = sum(a["iscrowd"] for a in json.loads(path.read_text())["annotations"])
        assert crowd == (n_difficult if policy == "ignore" else 0)
    with pytest.raises(ValueError, match="VOC_DIFFICULT_IN_COCO_AP must be one of"):
        write_coco_ground_truth(name, str(tmp_path / "x.json"), difficult="drop")
    evaluator = COCOEvaluator(name, str(tmp_path), voc_difficult="ground_truth")
    assert evaluator.conventions["difficult_objects"] == VOC_DIFFICULT["ground_truth"]


def test_train_and_evaluation_class_lists_must_agree(tmp_path):
    """An imagefolder val missing a class scored 50% on a task learnt to 100%; a stray train/.ipynb_checkpoints
    became class 0 (top-1 0%); a COCO val with renumbered category ids dropped AP50 53.8 -> 33.7."""
    from classification.engine.trainer import build_datasets
    from detection.engine.data import check_test_datasets

    for split, classes in (("train", ("a", "b", ".ipynb_checkpoints")), ("val", ("a",))):
        for c in classes:
            (tmp_path / split / c).mkdir(parents=True)
            if not c.startswith("."):
                Image.new("RGB", (8, 8)).save(tmp_path / split / c / "0.png")
    cfg = ClsConfig(dataset="imagefolder", data_root=str(tmp_path), output_dir=str(tmp_path / "out"))
    with pytest.raises(ValueError, match=r"val's classes differ from train's \(missing in val: \['b'\]"):
        build_datasets(cfg)
    (tmp_path / "val" / "b").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "val" / "b" / "0.png")
    train, val, _ = build_datasets(cfg)
    assert train.classes == val.classes == ["a", "b"]  # the hidden directory is not a class
    (tmp_path / "train" / "c").mkdir()
    (tmp_path / "val" / "c").mkdir()
    with pytest.raises(ValueError, match=r"train/c: no images with extensions .*; every class directory needs some"):
        build_datasets(cfg)

    def coco(path, ids):
        Image.new("RGB", (20, 20)).save(tmp_path / "i.jpg")
        path.write_text(json.dumps({"images": [{"id": 1, "file_name": "i.jpg", "width": 20, "height": 20}],
                                    "annotations": [{"id": 1, "image_id": 1, "category_id": ids[0], "iscrowd": 0,
                                                     "area": 4, "bbox": [1, 1, 5, 5]}],
                                    "categories": [{"id": i, "name": n} for i, n in zip(ids, ("cat", "dog"))]}))

    from detection.datasets import register_coco

    coco(tmp_path / "tr.json", (1, 2))
    coco(tmp_path / "va.json", (2, 1))  # the same names, renumbered and so re-ordered
    register_coco("cls_check_train", str(tmp_path / "tr.json"), str(tmp_path))
    register_coco("cls_check_val", str(tmp_path / "va.json"), str(tmp_path))
    DatasetCatalog.get("cls_check_train")
    cfg = get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_34_C4.yaml", [
        "DATASETS.TRAIN", '("cls_check_train",)', "DATASETS.TEST", '("cls_check_val",)'], read_weights=False)
    with pytest.raises(ValueError, match="numbers its categories|has classes"):
        check_test_datasets(cfg)
    cfg = get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_34_C4.yaml", [
        "DATASETS.TRAIN", '("cls_check_train",)', "DATASETS.TEST", '("no_such_val",)'], read_weights=False)
    with pytest.raises(KeyError, match="'no_such_val' is not a registered dataset"):
        check_test_datasets(cfg)
