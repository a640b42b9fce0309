"""The data's identity (detection/main_job/data_identity.py): annotation files by content and the images they name
by name, size and time -- a changed image is named, data moved with its times is the same data (the stages' records
follow it), a change in the detection data alone keeps the pretraining, an earlier record is migrated."""

import json
import os
import shutil

import pytest
from test_main_job_data_scale import make_voc

from classification.engine.run_files import JOB_DATA, STAGE_RECORD
from detection.main_job.data import COCO, VOC, DataError, DetectData, PretrainData, check_data
from detection.main_job.data_identity import (
    check_data_identity,
    data_identity,
    file_sha256,
    moved_paths,
    record_data_identity,
)
from detection.main_job.graph import relocate_stages
from detection.main_job.plan import Stage


@pytest.fixture
def voc(tmp_path):
    root = make_voc(tmp_path / "data" / "VOC", {"trainval": ["a0", "a1"], "test": ["t0"]}, size=(160, 120))
    return check_data(PretrainData(), DetectData(VOC, (str(root), "trainval"), (str(root), "test")))


@pytest.mark.bad_input
def test_an_image_changed_under_the_same_annotations_is_named_and_only_the_legs_rerun(voc, tmp_path):
    out = tmp_path / "job"
    out.mkdir()
    record_data_identity(out, data_identity(PretrainData(), voc))
    assert check_data_identity(out, data_identity(PretrainData(), voc)) == set()
    image = tmp_path / "data" / "VOC" / "JPEGImages" / "t0.jpg"
    image.write_bytes(image.read_bytes() + b"\0")  # the test image re-encoded: the split and its XML unchanged
    with pytest.raises(DataError, match=r"\[test\].*1 image\(s\) changed, e.g. JPEGImages/t0.jpg \(its size\).*"
                                        r"--rerun-changed .*the pretraining, made from data that did not change, "
                                        r"is kept"):
        check_data_identity(out, data_identity(PretrainData(), voc))
    assert check_data_identity(out, data_identity(PretrainData(), voc), rerun_changed=True) == {"detect"}


@pytest.mark.bad_input
def test_an_image_touched_at_the_same_size_is_named_by_its_time(voc, tmp_path):
    record_data_identity(tmp_path, data_identity(PretrainData(), voc))
    image = tmp_path / "data" / "VOC" / "JPEGImages" / "a1.jpg"
    os.utime(image, (1e9, 1e9))
    with pytest.raises(DataError, match=r"JPEGImages/a1.jpg \(its modification time\)"):
        check_data_identity(tmp_path, data_identity(PretrainData(), voc))


def test_data_moved_with_its_times_is_the_same_data_and_the_stage_records_follow_it(voc, tmp_path):
    out = tmp_path / "job"
    leg = out / "detect" / "leg"
    leg.mkdir(parents=True)
    old = voc.train[0]
    other = ["--dataset-voc", "y", "/VOC2012", "trainval"]  # another set's split of the same name: not rewritten
    (leg / STAGE_RECORD).write_text(json.dumps({"argv": ["--dataset-voc", "x", old, "trainval", *other],
                                                "threads": 1}))
    record_data_identity(out, data_identity(PretrainData(), voc))
    new = shutil.copytree(old, tmp_path / "elsewhere" / "VOC")  # copy2: contents and times
    shutil.rmtree(old)
    moved = DetectData(VOC, (str(new), "trainval"), (str(new), "test"), voc.classes)
    identity = data_identity(PretrainData(), moved)
    assert check_data_identity(out, identity) == set()
    assert moved_paths(out, identity) == [((old, "trainval"), (str(new), "trainval")),
                                          ((old, "test"), (str(new), "test"))]
    stage = Stage("leg", leg, [], "detect", "resnet18", "pretrained", 2)
    assert relocate_stages([stage], moved_paths(out, identity)) == 1
    assert json.loads((leg / STAGE_RECORD).read_text())["argv"] == ["--dataset-voc", "x", str(new), "trainval", *other]


def test_a_record_of_the_earlier_version_is_migrated_by_its_annotation_digests(tmp_path):
    ann = tmp_path / "instances.json"
    ann.write_text(json.dumps({"images": [{"id": 1, "file_name": "1.jpg"}]}))
    (tmp_path / "1.jpg").write_bytes(b"jpeg")
    data = DetectData(COCO, (str(ann), str(tmp_path)), (str(ann), str(tmp_path)), ("a",))
    (tmp_path / JOB_DATA).write_text(json.dumps({str(ann): file_sha256(ann)}))  # version 1: paths -> digests
    assert check_data_identity(tmp_path, data_identity(PretrainData(), data)) == set()
    (tmp_path / JOB_DATA).write_text(json.dumps({str(ann): "sha256:0"}))
    with pytest.raises(DataError, match=f"the annotations of {ann} .*changed"):
        check_data_identity(tmp_path, data_identity(PretrainData(), data))
    other = tmp_path / "other.json"  # the recorded train file now given as the test set: a change, by path
    other.write_text(ann.read_text() + " ")
    (tmp_path / JOB_DATA).write_text(json.dumps({str(ann): file_sha256(other), str(other): file_sha256(ann)}))
    swapped = DetectData(COCO, (str(ann), str(tmp_path)), (str(other), str(tmp_path)), ("a",))
    with pytest.raises(DataError, match="changed"):
        check_data_identity(tmp_path, data_identity(PretrainData(), swapped))


def test_a_changed_folder_reruns_its_pretraining_and_the_legs_from_it_not_the_legs_from_given_weights(tmp_path):
    from detection.main_job.cli import _stale

    pre = Stage("p", tmp_path / "pretrain" / "a", [], "pretrain", "resnet18", "", 2)
    legs = [Stage("l", tmp_path / "detect" / "a", [], "detect", "resnet18", "pretrained", 2, deps=[pre.out]),
            Stage("g", tmp_path / "detect" / "b", [], "detect", "resnet50", "pretrained", 2),  # from --weights
            Stage("s", tmp_path / "detect" / "c", [], "detect", "resnet18", "scratch", 2)]
    assert [s.title for s in _stale([pre, *legs], {"pretrain"})] == ["p", "l"]
    assert [s.title for s in _stale([pre, *legs], {"detect"})] == ["l", "g", "s"]
