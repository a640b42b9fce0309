"""Datasets (VOC parser robustness, COCO errors, the embedded default) and evaluation (known AP for known
predictions, both COCO back ends agree, our VOC AP equals Detectron2's)."""

import json
import logging
import xml.etree.ElementTree as ET

import numpy as np
import pytest
import torch
from detectron2.data import DatasetCatalog, MetadataCatalog
from detectron2.structures import Boxes, BoxMode, Instances
from PIL import Image

import detection  # noqa: F401
from conftest import TINY_SPEC, make_fifo
from detection.datasets import (
    VOC_CLASSES,
    DatasetFormatError,
    VOCFormatError,
    load_coco_checked,
    load_voc_instances,
    parse_voc_xml,
    register_voc,
)
from detection.datasets.embedded import EmbeddedSpec, generate_embedded_dataset
from detection.evaluation import COCOEvaluator, VOCDetectionEvaluator, evaluate_coco

pytestmark = pytest.mark.d2main  # runs again against Detectron2 main (make test-d2main)


@pytest.fixture(scope="module")
def embedded(tiny_data):
    return tiny_data, ["tiny_train", "tiny_voc_train", "tiny_val", "tiny_voc_val"]


# ---- VOC parsing ------------------------------------------------------------------------------------------

def _write_voc(root, name, xml_text, size=(64, 48), split="trainval"):
    (root / "Annotations").mkdir(parents=True, exist_ok=True)
    (root / "JPEGImages").mkdir(exist_ok=True)
    (root / "ImageSets" / "Main").mkdir(parents=True, exist_ok=True)
    (root / "Annotations" / f"{name}.xml").write_text(xml_text)
    Image.new("RGB", size).save(root / "JPEGImages" / f"{name}.jpg")
    with open(root / "ImageSets" / "Main" / f"{split}.txt", "a") as f:
        f.write(name + "\n")


REAL_WORLD = """<annotation><filename>a.jpg</filename>
<object><name>dog</name><pose></pose><truncated/><difficult></difficult>
<bndbox><xmin>10.5</xmin><ymin>5.25</ymin><xmax>40.7</xmax><ymax>30</ymax></bndbox></object>
<object><name>cat</name><difficult>1</difficult>
<bndbox><xmin>1</xmin><ymin>1</ymin><xmax>90</xmax><ymax>47</ymax></bndbox></object>
</annotation>"""  # no <size>, float coordinates, empty/missing tags, a box wider than the image


def test_a_voc_named_folder_with_other_classes_gets_its_own_and_is_said_to(tmp_path, caplog):
    """Named VOC*, it was given PASCAL's 20 classes and stopped at the first other one; one naming a few of PASCAL's
    keeps the 20 (a test subset must match the model) and says that the others score 0."""
    root = tmp_path / "VOCmine"
    _write_voc(root, "a", REAL_WORLD.replace("dog", "walrus"))
    with caplog.at_level(logging.WARNING, logger="detection.datasets.voc"):
        register_voc("voc_named_other", str(root), "trainval")
    assert MetadataCatalog.get("voc_named_other").thing_classes == ["cat", "walrus"]
    assert "named like PASCAL VOC, but its trainval annotations name other classes: ['cat', 'walrus']" in caplog.text
    caplog.clear()
    subset = tmp_path / "VOC2007"
    _write_voc(subset, "b", REAL_WORLD)  # cat and dog
    with caplog.at_level(logging.WARNING, logger="detection.datasets.voc"):
        register_voc("voc_named_subset", str(subset), "trainval")
    assert MetadataCatalog.get("voc_named_subset").thing_classes == list(VOC_CLASSES)
    assert "names 2 of PASCAL VOC's 20 classes; the other 18 count as AP 0 in the mean" in caplog.text
    register_voc("voc_elsewhere", str(tmp_path / "VOC2007"), "trainval", class_names=["dog", "cat"])
    assert MetadataCatalog.get("voc_elsewhere").thing_classes == ["dog", "cat"]  # named: as given


def test_voc_parser_accepts_real_world_files(tmp_path):
    _write_voc(tmp_path, "a", REAL_WORLD)
    rec = parse_voc_xml(str(tmp_path / "Annotations" / "a.xml"), str(tmp_path / "JPEGImages" / "a.jpg"))
    assert (rec["width"], rec["height"]) == (64, 48)  # read from the image, the XML has no <size>
    assert rec["objects"][0]["bbox"] == [10.5, 5.25, 40.7, 30.0] and rec["objects"][0]["difficult"] == 0
    dicts = load_voc_instances(str(tmp_path), "trainval", ["cat", "dog"])
    anns = dicts[0]["annotations"]
    assert anns[0]["bbox"] == pytest.approx([9.5, 4.25, 40.7, 30.0]) and anns[0]["category_id"] == 1
    assert anns[1]["bbox"] == [0.0, 0.0, 64.0, 47.0] and anns[1]["difficult"] == 1  # clipped to the image


@pytest.mark.parametrize("text,match", [
    ("<annotation><object><name>dog</name>", "malformed XML"),
    ("<annotation><size><width>10</width><height>10</height></size><object><name>dog</name></object>"
     "</annotation>", "lacks <name> or <bndbox>"),
    ("<annotation><size><width>10</width><height>10</height></size><object><name>dog</name><bndbox><xmin>a"
     "</xmin><ymin>1</ymin><xmax>2</xmax><ymax>2</ymax></bndbox></object></annotation>", "non-numeric"),
])
def test_voc_malformed_files_name_the_file(tmp_path, text, match):
    _write_voc(tmp_path, "bad", text)
    with pytest.raises(VOCFormatError, match=rf"bad.xml: .*{match}|bad.xml: {match}"):
        load_voc_instances(str(tmp_path), "trainval", ["dog"])


ONE_DOG = ("<size><width>64</width><height>48</height></size>{o}<name>dog</name><bndbox><xmin>1</xmin><ymin>2</ymin>"
           "<xmax>30</xmax><ymax>40</ymax></bndbox>{c}")


@pytest.mark.parametrize("xml", [
    '<annotation xmlns="http://example.org/voc">' + ONE_DOG.format(o="<object>", c="</object>") + "</annotation>",
    '<annotation xmlns:v="http://example.org/voc">' + ONE_DOG.format(o="<v:object>", c="</v:object>")
    + "</annotation>",
    "<annotation>" + ONE_DOG.format(o="<Object>", c="</Object>") + "</annotation>",
    "<annotation>" + ONE_DOG.format(o="<objects><object>", c="</object></objects>") + "</annotation>",
    "<annotation>" + ONE_DOG.format(o="<object>", c="<object><name>member</name></object></object>")
    + "</annotation>",
], ids=["default_namespace", "prefixed", "capitalised", "wrapped", "grouped"])
def test_voc_objects_are_found_under_a_namespace_another_case_or_a_wrapper(tmp_path, xml):
    """Each of these lost its objects silently (an all-namespaced test set scored AP 0): tags are matched by their
    lower-case local name, objects at any depth."""
    _write_voc(tmp_path, "a", xml)
    objects = parse_voc_xml(str(tmp_path / "Annotations" / "a.xml"))["objects"]
    assert [(o["name"], o["bbox"]) for o in objects] == [("dog", [1.0, 2.0, 30.0, 40.0])]


@pytest.mark.parametrize("which", ["annotation", "split"])
def test_a_fifo_among_the_voc_files_is_refused_naming_it_not_read(tmp_path, which):
    """A FIFO in Annotations/ blocked training forever (rc 124 at 90 s): regular files only."""
    _write_voc(tmp_path, "a", REAL_WORLD)
    path = tmp_path / ("Annotations/a.xml" if which == "annotation" else "ImageSets/Main/trainval.txt")
    path.unlink()
    make_fifo(path)
    with pytest.raises(VOCFormatError, match=rf"{path.name}: a FIFO \(named pipe\), not a regular file; refused"):
        load_voc_instances(str(tmp_path), "trainval", ["cat", "dog"])


def test_voc_unknown_class_and_missing_split(tmp_path):
    _write_voc(tmp_path, "a", REAL_WORLD)
    with pytest.raises(VOCFormatError, match="a.xml: unknown class 'cat'"):
        load_voc_instances(str(tmp_path), "trainval", ["dog"])
    with pytest.raises(FileNotFoundError, match="test.txt"):
        load_voc_instances(str(tmp_path), "test", ["dog"])


def test_register_voc_directory_discovers_classes(tmp_path):
    _write_voc(tmp_path, "a", REAL_WORLD)
    register_voc("cli_voc", str(tmp_path), "trainval")
    assert MetadataCatalog.get("cli_voc").thing_classes == ["cat", "dog"]
    assert len(DatasetCatalog.get("cli_voc")) == 1


def test_deepforest_real_voc_annotations_parse():
    """Real-world VOC XML (tree crowns, test data of the deepforest wheel, installed without its dependencies)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("deepforest")  # located, not imported (its dependencies are absent)
    if spec is None or spec.origin is None:
        pytest.skip("deepforest wheel not installed (tools/setup_env.py installs it)")
    xmls = sorted((Path(spec.origin).parent / "data").glob("*.xml"))
    assert xmls, "deepforest 2.1.0 ships VOC XML files"
    total = 0
    for path in xmls:
        image = next((path.with_suffix(s) for s in (".png", ".tif", ".jpg") if path.with_suffix(s).exists()), None)
        rec = parse_voc_xml(str(path), str(image) if image else None)
        total += len(rec["objects"])
        assert rec["width"] > 0 and all(o["bbox"][2] > o["bbox"][0] for o in rec["objects"])
        assert {o["name"] for o in rec["objects"]} <= {"Tree", "Alive", "Dead"}
    assert total > 50


def test_coco_json_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"images": [}')
    with pytest.raises(DatasetFormatError, match="bad.json: invalid JSON at line 1 column 13"):
        load_coco_checked(str(bad), str(tmp_path))
    with pytest.raises(FileNotFoundError, match="missing.json"):
        load_coco_checked(str(tmp_path / "missing.json"), str(tmp_path))


@pytest.mark.bad_input
def test_a_coco_key_given_twice_is_refused_naming_it(tmp_path):
    """json keeps the last of two "annotations" lists: the first list's objects were silently dropped."""
    twice = tmp_path / "twice.json"
    twice.write_text('{"images": [], "annotations": [{"id": 1}], "categories": [], "annotations": []}')
    with pytest.raises(DatasetFormatError, match="^[^\n]*twice.json: the key 'annotations' twice in one object"):
        load_coco_checked(str(twice), str(tmp_path))
    nested = tmp_path / "nested.json"
    nested.write_text('{"images": [{"id": 1, "width": 4, "id": 2}], "annotations": [], "categories": []}')
    with pytest.raises(DatasetFormatError, match="nested.json: the key 'id' twice in one object"):
        load_coco_checked(str(nested), str(tmp_path))


# ---- embedded default ---------------------------------------------------------------------------------------

def test_embedded_dataset_is_deterministic_and_consistent_across_layouts(tmp_path, embedded):
    root, _ = embedded
    again = tmp_path / "again"
    generate_embedded_dataset(again, TINY_SPEC)
    for f in ("annotations/instances_train.json", "Annotations/train_00003.xml", "JPEGImages/val_00002.jpg"):
        assert (root / f).read_bytes() == (again / f).read_bytes(), f
    coco, voc = DatasetCatalog.get("tiny_val"), DatasetCatalog.get("tiny_voc_val")
    assert len(coco) == len(voc) == TINY_SPEC.num_val
    for c, v in zip(coco, voc):
        a = [BoxMode.convert(x["bbox"], x["bbox_mode"], BoxMode.XYXY_ABS) for x in c["annotations"]]
        b = [x["bbox"] for x in v["annotations"]]
        np.testing.assert_allclose(a, b)
        assert [x["category_id"] for x in c["annotations"]] == [x["category_id"] for x in v["annotations"]]
        assert 1 <= len(a) <= TINY_SPEC.max_objects


def test_embedded_synthetic_fallback(tmp_path):
    manifest = generate_embedded_dataset(tmp_path / "syn", EmbeddedSpec(num_train=3, num_val=2, source="synthetic"))
    assert manifest["source"] == "synthetic-shapes" and manifest["classes"] == ["disc", "square", "triangle", "cross"]
    coco = json.loads((tmp_path / "syn" / "annotations" / "instances_val.json").read_text())
    assert len(coco["images"]) == 2 and coco["annotations"]


# ---- evaluation ---------------------------------------------------------------------------------------------

def _oracle_outputs(records, jitter=0.0, seed=0):
    rng = np.random.default_rng(seed)
    inputs, outputs = [], []
    for rec in records:
        boxes = np.array([BoxMode.convert(a["bbox"], a["bbox_mode"], BoxMode.XYXY_ABS) for a in rec["annotations"]])
        boxes = boxes + rng.normal(0, jitter, boxes.shape) if jitter else boxes
        inst = Instances((rec["height"], rec["width"]))
        inst.pred_boxes = Boxes(torch.tensor(boxes, dtype=torch.float32))
        inst.scores = torch.tensor(np.round(rng.uniform(0.5, 1.0, len(boxes)), 3), dtype=torch.float32)
        inst.pred_classes = torch.tensor([a["category_id"] for a in rec["annotations"]])
        inputs.append({"image_id": rec["image_id"], "height": rec["height"], "width": rec["width"]})
        outputs.append({"instances": inst})
    return inputs, outputs


def _run(evaluator, inputs, outputs):
    evaluator.reset()
    evaluator.process(inputs, outputs)
    return evaluator.evaluate()["bbox"]


@pytest.mark.parametrize("backend", ["faster_coco_eval", "pycocotools"])
def test_perfect_predictions_give_ap_100(embedded, tmp_path, backend):
    records = DatasetCatalog.get("tiny_val")
    res = _run(COCOEvaluator("tiny_val", str(tmp_path), backend=backend, distributed=False),
               *_oracle_outputs(records))
    assert res["AP"] == pytest.approx(100.0) and res["AP50"] == pytest.approx(100.0)
    saved = json.loads((tmp_path / "coco_eval_bbox.json").read_text())
    assert set(saved["stats"]) >= {"AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100"}
    assert len(saved["precision"]["iou50"]) == 4 and len(saved["recall_thresholds"]) == 101
    voc = _run(VOCDetectionEvaluator("tiny_voc_val", distributed=False),
               *_oracle_outputs(DatasetCatalog.get("tiny_voc_val")))
    assert voc["AP50"] == pytest.approx(100.0) and voc["mAP50_voc07"] == pytest.approx(100.0)


def test_coco_backends_give_identical_numbers(embedded):
    from pycocotools.coco import COCO

    coco = COCO(str(embedded[0] / "annotations" / "instances_val.json"))
    rng = np.random.default_rng(0)
    results = []
    for ann in coco.dataset["annotations"]:
        for _ in range(3):
            x, y, w, h = ann["bbox"]
            results.append({"image_id": ann["image_id"], "category_id": int(rng.integers(1, 5)),
                            "bbox": [x + rng.normal(0, 3), y + rng.normal(0, 3), w * rng.uniform(0.8, 1.2),
                                     h * rng.uniform(0.8, 1.2)], "score": float(rng.uniform())})
    fast = evaluate_coco(coco, results, backend="faster_coco_eval")
    ref = evaluate_coco(coco, results, backend="pycocotools")
    for k in ref.stats:
        assert fast.stats[k] == pytest.approx(ref.stats[k], abs=1e-9, nan_ok=True), k
    assert 0 < ref.stats["AP50"] < 100
    assert evaluate_coco(coco, []).stats["AP"] == 0.0  # a detector that finds nothing scores 0
    # ... and NaN where the back ends find a number undefined (no large objects: APl), not 0.00
    nothing = evaluate_coco(coco, []).stats
    miss = evaluate_coco(coco, [{"image_id": coco.dataset["images"][0]["id"], "category_id": 1, "bbox": [0, 0, 1, 1],
                                 "score": 0.5}]).stats
    assert {k for k, v in nothing.items() if v != v} == {k for k, v in miss.items() if v != v} == {"APl", "ARl"}


def test_voc_ap_of_tied_scores_does_not_depend_on_the_split_file_order():
    """Equal scores were ranked in the order the images were listed (83.33 vs 66.67 for the same detections)."""
    from detection.evaluation import voc_eval_class

    gt = {"a": (np.array([[1.0, 1.0, 20.0, 20.0]]), np.array([False])),
          "b": (np.array([[1.0, 1.0, 20.0, 20.0], [30.0, 30.0, 50.0, 50.0]]), np.array([False, False]))}
    dets = [("a", 0.9, (1, 1, 20, 20)), ("a", 0.9, (60, 60, 70, 70)), ("b", 0.9, (1, 1, 20, 20)),
            ("b", 0.9, (30, 30, 50, 50))]
    forward = voc_eval_class(gt, dets, 0.5, False)[2]
    backward = voc_eval_class({"b": gt["b"], "a": gt["a"]}, dets[2:] + dets[:2], 0.5, False)[2]
    assert forward == backward


def test_voc_ap_equals_detectron2s_evaluator(embedded):
    """On clean VOC files, our evaluator's numbers are Detectron2's PascalVOCDetectionEvaluator's."""
    from detectron2.evaluation import PascalVOCDetectionEvaluator

    root = embedded[0]
    register_voc("tiny_voc07", str(root), "val", year=2007, class_names=MetadataCatalog.get("tiny_voc_val")
                 .thing_classes)
    (root / "ImageSets" / "Main" / "val.txt").read_text()
    records = DatasetCatalog.get("tiny_voc07")
    inputs, outputs = _oracle_outputs(records, jitter=4.0)
    for o in outputs:  # Detectron2 writes boxes with 1 decimal: use boxes it represents exactly
        o["instances"].pred_boxes.tensor = torch.round(o["instances"].pred_boxes.tensor * 10) / 10
    d2 = _run(PascalVOCDetectionEvaluator("tiny_voc07"), inputs, outputs)
    ours = _run(VOCDetectionEvaluator("tiny_voc07", distributed=False), inputs, outputs)
    for k in ("AP", "AP50", "AP75"):
        assert ours[k] == pytest.approx(d2[k], abs=1e-6), k
    assert ours["AP50"] == pytest.approx(ours["mAP50_voc07"])
    assert 0 < ours["AP50"] < 100


def test_xml_written_by_the_generator_is_standard_voc(embedded):
    tree = ET.parse(embedded[0] / "Annotations" / "val_00000.xml")
    assert tree.find("size/width").text == "96"
    assert tree.find("object/bndbox/xmin") is not None and tree.find("object/difficult").text == "0"


def test_voc2012_test_split_writes_the_submission_files(tmp_path):
    """A VOC split without annotations (VOC 2012 test): detections in the official format, one file per class."""
    from detection.datasets.voc import register_voc_test_images
    from detection.evaluation import VOCSubmissionWriter, build_evaluator

    root = tmp_path / "VOC2012"
    (root / "JPEGImages").mkdir(parents=True)
    (root / "ImageSets" / "Main").mkdir(parents=True)
    for name in ("2008_000001", "2008_000002"):
        Image.new("RGB", (50, 40)).save(root / "JPEGImages" / f"{name}.jpg")
    (root / "ImageSets" / "Main" / "test.txt").write_text("2008_000001\n2008_000002\n")
    register_voc_test_images("tiny_voc_2012_test", str(root), "test", 2012, class_names=["cat", "dog"])
    records = DatasetCatalog.get("tiny_voc_2012_test")
    assert [(r["image_id"], r["width"], r["height"]) for r in records] == [("2008_000001", 50, 40),
                                                                          ("2008_000002", 50, 40)]
    ev = build_evaluator(detection.get_detection_cfg(None, ["MODEL.DEVICE", "cpu"]), "tiny_voc_2012_test",
                         str(tmp_path / "out"), distributed=False)
    assert isinstance(ev, VOCSubmissionWriter)
    ev.reset()
    inst = Instances((40, 50), pred_boxes=Boxes(torch.tensor([[0.0, 1.0, 20.0, 30.0]])),
                     scores=torch.tensor([0.75]), pred_classes=torch.tensor([1]))
    ev.process([{"image_id": "2008_000002"}], [{"instances": inst}])
    res = ev.evaluate()
    main = tmp_path / "out" / "results" / "VOC2012" / "Main"
    assert (main / "comp4_det_test_dog.txt").read_text() == "2008_000002 0.750000 1.0 2.0 20.0 30.0\n"
    assert (main / "comp4_det_test_cat.txt").read_text() == ""  # every class has its file
    assert res["submission"] == {"detections": 1.0, "files": 2.0}


def test_difficult_objects_are_not_training_targets():
    from detection.engine.data import drop_difficult

    dicts = [{"file_name": "a.jpg", "annotations": [{"category_id": 0, "difficult": 1},
                                                    {"category_id": 1, "difficult": 0}]},
             {"file_name": "b.jpg", "annotations": [{"category_id": 0}]}]
    kept = drop_difficult(dicts)
    assert [len(d["annotations"]) for d in kept] == [1, 1] and kept[0]["annotations"][0]["category_id"] == 1
    assert len(dicts[0]["annotations"]) == 2  # the evaluation's ground truth is untouched


# ---- a detector that returns exactly the ground truth scores AP 100, or the file is refused ------------

def _tiny_coco(root, variant: str):
    """Two 40x30 images, three objects of two classes; `variant` spoils one thing, as the issue's cases did."""
    for name in ("a.jpg", "b.jpg"):
        if not (root / name).exists():
            Image.new("RGB", (40, 30)).save(root / name)
    images = [{"id": 1, "file_name": "a.jpg", "width": 40, "height": 30},
              {"id": 2, "file_name": "b.jpg", "width": 40, "height": 30}]
    anns = [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [2, 3, 12, 10], "area": 120, "iscrowd": 0},
            {"id": 2, "image_id": 1, "category_id": 2, "bbox": [20, 10, 15, 15], "area": 225, "iscrowd": 0},
            {"id": 3, "image_id": 2, "category_id": 1, "bbox": [5, 5, 25, 20], "area": 500, "iscrowd": 0}]
    cats = [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"}]
    kind, _, value = variant.partition("=")
    if kind == "ann_id":  # case 1 (0) and case 2 (-5, 2**63, 2**64 + 1)
        anns[0]["id"] = int(value)
    elif kind == "iscrowd":  # case 3 (and the poor null)
        anns[0]["iscrowd"] = json.loads(value)
    elif kind == "box":  # case 4: negative width, fully outside, partly outside
        anns.append({"id": 4, "image_id": 2, "category_id": 2, "bbox": json.loads(value), "area": 100, "iscrowd": 0})
    elif kind == "zero_ids":  # image and category id 0 are read correctly by both back ends: accepted
        images[0]["id"], cats[0]["id"] = 0, 0
        for a in anns:
            a["image_id"] = 0 if a["image_id"] == 1 else a["image_id"]
            a["category_id"] = 0 if a["category_id"] == 1 else a["category_id"]
    path = root / "c.json"
    path.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    return path


COCO_VARIANTS = {
    "ann_id=0": r"c.json: annotations\[0\] has id 0; COCO ids are integers in \[1, 2\*\*53\] \(the COCO API reads",
    "ann_id=-5": r"c.json: annotations\[0\] has id -5; COCO ids are integers in \[1, 2\*\*53\]",
    f"ann_id={2 ** 63}": rf"c.json: annotations\[0\] has id {2 ** 63}; COCO ids",
    f"ann_id={2 ** 64 + 1}": rf"c.json: annotations\[0\] has id {2 ** 64 + 1}; COCO ids",
    'iscrowd="0"': r"c.json: annotation id 1 \(annotations\[0\]\) has iscrowd '0'; iscrowd is 0 or 1",
    "iscrowd=null": r"c.json: annotation id 1 \(annotations\[0\]\) has iscrowd None; iscrowd is 0 or 1",
    "iscrowd=2": r"has iscrowd 2; iscrowd is 0 or 1",
    "box=[30, 5, -10, 10]": None, "box=[50, 40, 10, 10]": None, "box=[30, 20, 20, 20]": None, "zero_ids": None,
}


@pytest.mark.bad_input
@pytest.mark.parametrize("backend", ["faster_coco_eval", "pycocotools"])
def test_perfect_detections_score_100_or_the_file_is_refused_coco(tmp_path, backend):
    """Issue 38, BAD 1-4 (COCO): an annotation id 0 / -5 / 2**63 / 2**64+1 (78.2-87.6 in faster-coco-eval), iscrowd
    "0" (a crowd region to training, 87.6 in evaluation), boxes the loader drops or clips that evaluation still
    scored raw (87.6 / 87.6 / 65.8). Training's ground truth fed back as detections now scores 100 in both back
    ends, because evaluation scores against the ground truth the loader validated; or training and evaluation
    both refuse the file in one line naming it, the entry and the field."""
    for n, (variant, refusal) in enumerate(COCO_VARIANTS.items()):
        root = tmp_path / str(n)
        root.mkdir()
        path = _tiny_coco(root, variant)
        name = f"issue38_{backend}_{n}"
        from detection.datasets import register_coco

        register_coco(name, str(path), str(root))
        if refusal:
            with pytest.raises(DatasetFormatError, match=refusal):
                DatasetCatalog.get(name)  # training
            with pytest.raises(DatasetFormatError, match=refusal):
                COCOEvaluator(name, str(root), backend=backend, distributed=False)  # evaluation
            continue
        records = DatasetCatalog.get(name)
        ev = COCOEvaluator(name, str(root), backend=backend, distributed=False)
        res = _run(ev, *_oracle_outputs(records))
        assert res["AP"] == pytest.approx(100.0) and res["AP50"] == pytest.approx(100.0), variant
        if variant.startswith("box"):  # what the loader changed is stated beside the numbers
            assert "in training and evaluation alike" in ev.conventions["ground_truth_boxes"]
            assert len(ev._coco_api.dataset["annotations"]) == sum(len(r["annotations"]) for r in records)


@pytest.mark.parametrize("backend", ["faster_coco_eval", "pycocotools"])
def test_a_coco_dataset_evaluated_before_it_was_loaded_maps_the_classes_to_its_category_ids(tmp_path, backend):
    """The model's contiguous classes become the file's category ids by the loader's rule even when nothing has
    loaded the dataset in this process yet (its metadata has no mapping until then): they were scored as category
    ids, class 0 as id 0 (AP 0.0 measured on val2017-sized data)."""
    from detection.datasets import register_coco
    from detection.datasets.coco import load_coco_checked

    path = _tiny_coco(tmp_path, "")
    register_coco(f"not_loaded_{backend}", str(path), str(tmp_path))
    records = load_coco_checked(str(path), str(tmp_path))  # the same records, the registration left unloaded
    ev = COCOEvaluator(f"not_loaded_{backend}", None, backend=backend, distributed=False)
    assert not hasattr(MetadataCatalog.get(f"not_loaded_{backend}"), "thing_dataset_id_to_contiguous_id")
    res = _run(ev, *_oracle_outputs(records))
    assert res["AP"] == pytest.approx(100.0) and res["AP50"] == pytest.approx(100.0)


VOC_BOXES = "".join(f"<object><name>{c}</name><bndbox><xmin>{b[0]}</xmin><ymin>{b[1]}</ymin><xmax>{b[2]}</xmax>"
                    f"<ymax>{b[3]}</ymax></bndbox></object>" for c, b in (
                        ("cat", (3, 4, 14, 13)), ("dog", (21, 11, 35, 25)),
                        ("dog", (30, 5, 20, 15)),  # case 4: negative width -> dropped
                        ("cat", (50, 40, 60, 45)),  # fully outside -> dropped
                        ("cat", (30, 20, 50, 40))))  # partly outside -> clipped


@pytest.mark.bad_input
@pytest.mark.parametrize("backend", ["faster_coco_eval", "pycocotools"])
def test_perfect_detections_score_100_or_the_file_is_refused_voc(tmp_path, backend):
    """Issue 38, BAD 4-5 (VOC): dropped and clipped boxes score 100 in the VOC evaluator and in COCO AP (both back
    ends); `--voc-classes cat,cat,dog` (AP50 66.7, a misleading warning) is refused; so are <difficult> values
    other than 0/1 (0.9 and -1 were read as 0 and 1)."""
    from detection.engine import train_net

    _write_voc(tmp_path, "a", f"<annotation><size><width>40</width><height>30</height></size>{VOC_BOXES}"
               "</annotation>", size=(40, 30), split="val")
    name = f"issue38_voc_{backend}"
    register_voc(name, str(tmp_path), "val", year=2007, class_names=["cat", "dog"])
    records = DatasetCatalog.get(name)
    assert len(records[0]["annotations"]) == 3  # two dropped, one clipped
    voc = _run(VOCDetectionEvaluator(name, distributed=False), *_oracle_outputs(records))
    assert voc["AP50"] == pytest.approx(100.0) and voc["mAP50_area"] == pytest.approx(100.0)
    coco = _run(COCOEvaluator(name, str(tmp_path / "out"), backend=backend, distributed=False),
                *_oracle_outputs(records))
    assert coco["AP"] == pytest.approx(100.0)
    with pytest.raises(DatasetFormatError, match=r"\[val\]: class 'cat' is listed twice \(positions 0 and 1\)"):
        register_voc(name + "_dup", str(tmp_path), "val", class_names=["cat", "cat", "dog"])
    args = train_net.build_parser().parse_args(["--dataset-voc", name + "_cli", str(tmp_path), "val",
                                                "--voc-classes", "cat,cat,dog"])
    with pytest.raises(ValueError, match=r"--voc-classes 'cat,cat,dog': class 'cat' is listed twice"):
        train_net.register_cli_datasets(args)
    for value in ("0.9", "-1", "inf"):
        _write_voc(tmp_path / value, "a", "<annotation><size><width>40</width><height>30</height></size><object>"
                   f"<name>cat</name><difficult>{value}</difficult><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>9</xmax>"
                   "<ymax>9</ymax></bndbox></object></annotation>", size=(40, 30))
        with pytest.raises(VOCFormatError, match=rf"a.xml: <object> #0 has <difficult> '{value}'; it must be 0 or 1"):
            load_voc_instances(str(tmp_path / value), "trainval", ["cat"])


def test_one_dataset_name_given_twice_on_the_command_line_is_refused(tmp_path):
    """The second registration replaced the first: a run trained on one file and recorded both."""
    from detection.engine import train_net

    args = train_net.build_parser().parse_args(["--dataset-coco", "mine", "a.json", str(tmp_path),
                                                "--dataset-voc", "mine", str(tmp_path), "val"])
    with pytest.raises(ValueError, match=r"^--dataset-voc 'mine': the name is given twice \(--dataset-coco and "
                                         r"--dataset-voc\)"):
        train_net.register_cli_datasets(args)


def test_a_coco_annotation_file_that_is_a_device_is_refused_naming_it(tmp_path):
    """A symlink to /dev/zero read until memory ran out (MemoryError traceback)."""
    from detection.datasets.coco import DatasetFormatError, read_coco_json

    link = tmp_path / "instances.json"
    link.symlink_to("/dev/null")  # a device as /dev/zero is; a regression fails, not fills memory
    with pytest.raises(DatasetFormatError, match=r"instances.json: a character device, not a regular file"):
        read_coco_json(str(link))
