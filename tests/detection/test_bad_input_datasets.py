"""Bad dataset files, named before training: malformed COCO / VOC fields, decompression bombs, polygons, recorded
image sizes the image does not have, EXIF rotation, a box dropped from the chance level's ground truth. Each gets one
line naming the file (and the annotation); a valid box is never dropped."""

import json
import logging

import numpy as np
import pytest
from detectron2.data import DatasetCatalog
from PIL import Image

from classification.data.datasets import SKIPPED, ImageFolderDataset
from classification.data.images import ImageReadError, open_image
from detection import get_detection_cfg
from detection.datasets import DatasetFormatError, load_coco_checked, register_voc

pytestmark = pytest.mark.bad_input

HOSTILE = "MODEL:\n  WEIGHTS: !!python/object/apply:os.system ['touch {marker}']\n"


@pytest.mark.parametrize("bad,match", [
    ({"bbox": [1, 2, 3]}, r"bbox \[1, 2, 3\]; a box is 4 finite numbers"),
    ({"bbox": ["1", "2", "3", "4"]}, "a box is 4 finite numbers"),
])
def test_coco_malformed_boxes_and_no_categories(tmp_path, bad, match):
    Image.new("RGB", (40, 30)).save(tmp_path / "a.jpg")
    coco = {"images": [{"id": 1, "file_name": "a.jpg", "width": 40, "height": 30}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "iscrowd": 0, "area": 4, **bad}],
            "categories": [{"id": 1, "name": "x"}]}
    (tmp_path / "c.json").write_text(json.dumps(coco))
    with pytest.raises(DatasetFormatError, match=f"c.json: annotation 0 of image .*a.jpg.*{match}"):
        load_coco_checked(str(tmp_path / "c.json"), str(tmp_path), "bad_boxes")
    (tmp_path / "n.json").write_text(json.dumps({**coco, "annotations": [], "categories": []}))
    with pytest.raises(DatasetFormatError, match="n.json: no categories"):
        load_coco_checked(str(tmp_path / "n.json"), str(tmp_path), "no_categories")


def test_decompression_bomb_is_named_and_skippable(tmp_path):
    (tmp_path / "train" / "a").mkdir(parents=True)
    Image.new("1", (20000, 20000)).save(tmp_path / "train" / "a" / "bomb.png")  # 400 Mpixel in a few KB
    with pytest.raises(ImageReadError, match="bomb.png: refused to decode"):
        open_image(tmp_path / "train" / "a" / "bomb.png")
    ds = ImageFolderDataset(tmp_path, "train", on_error="skip")
    assert ds[0] == (SKIPPED, str(tmp_path / "train" / "a" / "bomb.png"))


def test_num_classes_smaller_than_the_dataset_is_refused_at_start(tiny_data):
    from detection.engine.data import build_train_loader

    cfg = get_detection_cfg(["configs/COCO-Detection/faster_rcnn_R_34_C4.yaml",
                             "configs/Embedded-Detection/smoke.yaml"],
                            ["MODEL.DEVICE", "cpu", "DATASETS.TRAIN", '("tiny_train",)',
                             "MODEL.ROI_HEADS.NUM_CLASSES", "2"])
    with pytest.raises(ValueError, match=r"has 4 classes but MODEL.ROI_HEADS.NUM_CLASSES is 2: set "
                                         r"MODEL.ROI_HEADS.NUM_CLASSES 4"):
        build_train_loader(cfg)


def _coco_file(tmp_path, spoil):
    Image.new("RGB", (40, 30)).save(tmp_path / "a.jpg")
    data = {"images": [{"id": 1, "file_name": "a.jpg", "width": 40, "height": 30}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [2, 3, 12, 10], "area": 120,
                             "iscrowd": 0, "segmentation": [[2, 3, 14, 3, 14, 13]]}],
            "categories": [{"id": 1, "name": "cat"}]}
    spoil(data)
    (tmp_path / "c.json").write_text(data["text"] if "text" in data else json.dumps(data))
    return str(tmp_path / "c.json")


@pytest.mark.parametrize("spoil,match", [
    (lambda d: d["annotations"][0].update(ignore=1), r"annotation id 1 \(annotations\[0\]\) has ignore 1; 'ignore' is "
                                                      "not supported"),
    (lambda d: d["images"][0].update(width="40"), r"images\[0\] \(id 1\) has width '40'; width and height are "
                                                  "positive integers"),
    (lambda d: d["categories"][0].update(name=5), r"categories\[0\] \(id 1\) has name 5; a category name is a "
                                                  "non-empty string"),
    (lambda d: d["annotations"][0].update(area="big"), r"annotation id 1 \(annotations\[0\]\) has area 'big'"),
    (lambda d: d["annotations"][0].update(area=2e10), r"annotation 0 of image a.jpg \(id 1; annotation id 1\) has "
                                                       r"area 20000000000.0, more than its 40x30 image or its box "
                                                       r"holds "
                                                       r"\(1200 pixels\)"),  # trained on, never scored: AP 100
    (lambda d: d["annotations"][0].update(image_id=9), r"annotation 1 refers to image_id 9, which is not listed"),
    (lambda d: d.pop("images"), r"no 'images' list"),
    (lambda d: d.update(images=[]), r"'images' is empty"),
    (lambda d: d.update(annotations=None), r"'annotations' is null, not a list \(leave the key out: no ground "
                                           r"truth\)"),  # was a ground truth with no objects
    (lambda d: d.update(text="[" * 100_000 + "]" * 100_000), r"JSON nested too deeply"),
])
def test_coco_fields_that_escaped_the_one_line_errors(tmp_path, spoil, match):
    """Each was a traceback (RecursionError, TypeError in evaluation, Detectron2's assertion on 'ignore') or a
    silent loss (an annotation of an unlisted image); now one line naming the file, the entry and the field."""
    with pytest.raises(DatasetFormatError, match="c.json: " + match):
        load_coco_checked(_coco_file(tmp_path, spoil), str(tmp_path), "poor_coco")


def test_an_invalid_polygon_keeps_its_box_and_num_classes_above_the_data_is_refused(tmp_path, tiny_data):
    from detection.engine.data import check_num_classes

    path = _coco_file(tmp_path, lambda d: d["annotations"][0].update(segmentation=[[2, 3, 14, 13]]))
    assert len(load_coco_checked(path, str(tmp_path), "poor_polygon")[0]["annotations"]) == 1  # was dropped
    DatasetCatalog.get("tiny_train")
    cfg = get_detection_cfg(["configs/COCO-Detection/faster_rcnn_R_34_C4.yaml",
                             "configs/Embedded-Detection/smoke.yaml"],
                            ["MODEL.DEVICE", "cpu", "DATASETS.TRAIN", '("tiny_train",)',
                             "MODEL.ROI_HEADS.NUM_CLASSES", "5"], read_weights=False)
    with pytest.raises(ValueError, match=r"has 4 classes but MODEL.ROI_HEADS.NUM_CLASSES is 5: set "
                                         r"MODEL.ROI_HEADS.NUM_CLASSES 4"):
        check_num_classes(DatasetCatalog.get("tiny_train"), cfg)


@pytest.mark.parametrize("case,match", [
    ("size_inf", r"a.xml: <size> has a non-numeric or infinite width/height"),
    ("utf16", r"trainval.txt: not UTF-8 text"),
    ("empty_split", r"trainval.txt: no image ids \(an empty split file\)"),
    ("missing_jpeg", r"1 of 1 images not found, e.g. \[.*a.jpg"),
])
def test_voc_files_named_before_training(tmp_path, case, match):
    from detection.datasets import VOCFormatError, load_voc_instances

    for d in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (tmp_path / d).mkdir(parents=True)
    width = "inf" if case == "size_inf" else "40"
    (tmp_path / "Annotations" / "a.xml").write_text(
        f"<annotation><size><width>{width}</width><height>30</height></size><object><name>cat</name><bndbox>"
        "<xmin>1</xmin><ymin>1</ymin><xmax>9</xmax><ymax>9</ymax></bndbox></object></annotation>")
    if case != "missing_jpeg":
        Image.new("RGB", (40, 30)).save(tmp_path / "JPEGImages" / "a.jpg")
    split = tmp_path / "ImageSets" / "Main" / "trainval.txt"
    split.write_bytes("a\n".encode("utf-16") if case == "utf16" else b"\n" if case == "empty_split" else b"a\n")
    with pytest.raises((VOCFormatError, FileNotFoundError), match=match):
        load_voc_instances(str(tmp_path), "trainval", ["cat"])


@pytest.mark.parametrize("case, match", [
    ("exif", r"a.jpg: the image is 30x40 \(width x height\) but .*c.json records 40x30 for it; width and height are "
             r"swapped: the file's EXIF orientation tag \(6\) rotates it by 90 degrees when it is read"),
    ("swapped", r"a.jpg: the image is 30x40 .* but .*c.json records 40x30 for it; width and height are swapped: an "
                "EXIF orientation tag rotating the image when it is read is the usual cause"),
    ("other", r"a.jpg: the image is 40x30 .* but .*c.json records 50x30 for it; correct the width and height "
              "recorded in .*c.json"),
    ("voc", r"a.jpg: the image is 40x30 .* but .*Annotations/a.xml records 50x30 for it"),
])
def test_a_recorded_size_the_image_does_not_have_names_both_sizes_and_the_annotation_file(tmp_path, case, match):
    """Detectron2's SizeMismatchError mid-training named neither the file that recorded the size nor the usual
    cause of swapped sizes (an EXIF rotation); it cannot be checked up front without opening every image."""
    from detection.datasets import register_coco
    from detection.engine.data import DetectionMapper

    name = f"size_mismatch_{case}"
    if case == "voc":
        for d in ("Annotations", "JPEGImages", "ImageSets/Main"):
            (tmp_path / d).mkdir(parents=True)
        Image.new("RGB", (40, 30)).save(tmp_path / "JPEGImages" / "a.jpg")
        (tmp_path / "Annotations" / "a.xml").write_text(
            "<annotation><size><width>50</width><height>30</height></size><object><name>cat</name><bndbox>"
            "<xmin>1</xmin><ymin>1</ymin><xmax>9</xmax><ymax>9</ymax></bndbox></object></annotation>")
        (tmp_path / "ImageSets" / "Main" / "trainval.txt").write_text("a\n")
        register_voc(name, str(tmp_path), "trainval", class_names=["cat"])
    else:
        path = _coco_file(tmp_path, lambda d: d["images"][0].update(width=50) if case == "other" else None)
        if case == "exif":  # stored 40x30, shown (and read) rotated: 30x40
            exif = Image.Exif()
            exif[0x0112] = 6
            Image.new("RGB", (40, 30)).save(tmp_path / "a.jpg", exif=exif)
        elif case == "swapped":
            Image.new("RGB", (30, 40)).save(tmp_path / "a.jpg")
        register_coco(name, path, str(tmp_path))
    cfg = get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_34_C4.yaml",
                            ["MODEL.DEVICE", "cpu", "DATASETS.TRAIN", f'("{name}",)'], read_weights=False)
    with pytest.raises(ImageReadError, match=match):
        DetectionMapper(cfg, True)(DatasetCatalog.get(name)[0])


def test_an_image_flipped_by_its_exif_tag_where_its_size_cannot_show_it_is_said_once(tmp_path, caplog,
                                                                                       monkeypatch):
    """A half turn or mirror (tags 2-4, any shape) or a quarter turn of a square image: its size cannot show whether
    its boxes are for the upright or the stored pixels; it trained silently."""
    import detection.engine.data as data

    monkeypatch.setattr(data, "_noted_exif", False)
    monkeypatch.setattr(data, "_exif_checked", set())

    def tagged(name, size, tag):
        exif = Image.Exif()
        exif[0x0112] = tag
        Image.new("RGB", size).save(tmp_path / name, exif=exif)
        return str(tmp_path / name)

    with caplog.at_level(logging.WARNING, logger="detection.engine.data"):
        Image.new("RGB", (32, 32)).save(tmp_path / "plain.jpg")
        data.note_exif_orientation(str(tmp_path / "plain.jpg"), np.zeros((32, 32, 3)))
        data.note_exif_orientation(tagged("wide_quarter.jpg", (40, 30), 6), np.zeros((40, 30, 3)))  # fails the size
        assert not caplog.records                                                                   # check instead
        data.note_exif_orientation(tagged("wide_half.jpg", (40, 30), 3), np.zeros((30, 40, 3)))
        data.note_exif_orientation(tagged("square.jpg", (32, 32), 6), np.zeros((32, 32, 3)))
    assert len(caplog.records) == 1  # once
    assert "wide_half.jpg: its EXIF orientation tag (3) flips or rotates the image when it is read" in caplog.text
    monkeypatch.setattr(data, "_noted_exif", False)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="detection.engine.data"):
        data.note_exif_orientation(str(tmp_path / "square.jpg"), np.zeros((32, 32, 3)))
    assert "square.jpg: its EXIF orientation tag (6)" in caplog.text


def test_the_chance_level_is_scored_against_the_ground_truth_training_and_evaluation_see(tmp_path, monkeypatch):
    """chance_ap read the raw json with pycocotools: a box the loader drops (negative width) was ground truth to
    the chance level but not to the detectors' evaluation."""
    import detection.evaluation.coco
    from detection.datasets import register_coco
    from detection.evaluation.chance import chance_ap

    path = _coco_file(tmp_path, lambda d: d["annotations"].append(
        {"id": 2, "image_id": 1, "category_id": 1, "bbox": [20, 5, -6, 8], "area": 48, "iscrowd": 0}))
    register_coco("chance_dropped_box", path, str(tmp_path))
    scored, evaluate = [], detection.evaluation.coco.evaluate_coco

    def spy(gt, results, **kwargs):
        scored.extend(a["id"] for a in gt.dataset["annotations"])
        return evaluate(gt, results, **kwargs)

    monkeypatch.setattr(detection.evaluation.coco, "evaluate_coco", spy)
    assert 0.0 <= chance_ap("chance_dropped_box", boxes_per_image=5)["AP50"] <= 100.0
    assert scored == [1]  # the dropped box is not ground truth here either


def test_class_names_that_differ_only_in_their_unicode_form_are_refused_visibly():
    """bad7: 'café' composed and decomposed are two classes that print alike; the refusal shows them apart."""
    from detection.datasets.validation import check_class_names

    composed, decomposed = "caf\u00e9", "cafe\u0301"
    with pytest.raises(DatasetFormatError, match=r"classes 0 and 1 differ only in their Unicode form \('caf\\xe9' "
                                                  r"vs 'cafe\\u0301'\)"):
        check_class_names([composed, decomposed], "voc")
    assert check_class_names([composed, "tea"], "voc") == [composed, "tea"]
