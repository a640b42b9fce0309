"""The main job on a researcher's data (detection/main_job/data.py): a COCO json + images, a VOC layout, an
ImageNet-style folder, published weights, the paper configs at paper scale; the embedded set exported to those
formats gives the embedded path's numbers; bad data stops the job in one line before anything is created."""

import json
import logging
import re
import shutil

import pytest
import torch
import torchvision

from conftest import run_tool
from detection.datasets.export import export_embedded
from detection.main_job.cli import main
from detection.main_job.data import COCO, VOC, DetectData, PretrainData
from detection.main_job.data_identity import check_data_identity
from detection.main_job.plan import MainJobPlan, plan_stages

TINY = ["--preset", "quick", "--width", "1", "--arms", "frozenbn_pretrained", "--detect-iterations", "2"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The embedded set as a user's files: COCO json + images, a VOC layout, and the first 256 training and 64
    val composites as an ImageNet-style folder, at the size the main job pretrains at."""
    return export_embedded(tmp_path_factory.mktemp("export") / "embedded", train_items=256, val_items=64,
                           image_size=MainJobPlan().pretrain_image_size)


@pytest.fixture(scope="module")
def torchvision_files(tmp_path_factory):
    """ResNet-18 / -34 / -50 state dicts as torchvision saves them (random weights: none can be downloaded here)."""
    root = tmp_path_factory.mktemp("weights")
    files = {}
    for seed, name in enumerate(("resnet18", "resnet34", "resnet50")):
        torch.manual_seed(seed)
        files[name] = root / f"{name}_torchvision.pth"
        torch.save(getattr(torchvision.models, name)().state_dict(), files[name])
    return files


def _coco(tmp_path, exported, *, categories=None, test_images=None, name="instances_test.json"):
    """A copy of the exported COCO files: the test json with other categories, or only its first images."""
    train, root, test, _ = exported.coco_args("val_100")  # the quick preset's test scenes
    data = json.loads(open(test).read())
    if categories is not None:
        data["categories"] = categories
    if test_images is not None:
        keep = {im["id"] for im in data["images"][:test_images]}
        data["images"] = [im for im in data["images"] if im["id"] in keep]
        data["annotations"] = [a for a in data["annotations"] if a["image_id"] in keep]
    changed = tmp_path / name
    changed.write_text(json.dumps(data))
    return [train, root, str(changed), root]


def _coco_changed(tmp_path, exported, name: str, change) -> list[str]:
    """--detect-coco's four arguments with the quick preset's test json changed by `change` (in place) or, given
    a string, replaced by that text."""
    train, root, test, _ = exported.coco_args("val_100")
    data = json.loads(open(test).read())
    text = change if isinstance(change, str) else (change(data), json.dumps(data))[1]
    (tmp_path / name).write_text(text)
    return [train, root, str(tmp_path / name), root]


def _voc(tmp_path, exported, *, test_images):
    """A copy of the exported VOC layout whose test split lists only its first images."""
    voc = tmp_path / "voc"
    shutil.copytree(exported.detection, voc)
    main = voc / "ImageSets" / "Main"
    (main / "val_small.txt").write_text("".join((main / "val.txt").read_text().splitlines(True)[:test_images]))
    return [str(voc), "train", "val_small"]


# ---- plans: what each leg is told ---------------------------------------------------------------------------------

def test_coco_and_voc_data_become_each_legs_registration_and_its_class_count(tmp_path):
    from PIL import Image

    for i, c in enumerate(("a", "b", "a")):  # an ImageNet-style folder of 3 training images: 3 per epoch
        (tmp_path / "folder" / "train" / c).mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8)).save(tmp_path / "folder" / "train" / c / f"{i}.png")
    coco = DetectData(COCO, ("/d/train.json", "/d/img"), ("/d/val.json", "/d/img"), ("a", "b", "c"))
    plan = MainJobPlan(backbones=("resnet18",), arms=("frozenbn_pretrained",), detect_data=coco, pretrain_batch=1,
                       pretrain_data=PretrainData(str(tmp_path / "folder")), pretrain_seeds=(0,), detect_seeds=(0,),
                       pretrain_epochs=2)
    stages = plan_stages(plan, tmp_path)
    pretrain, leg = stages
    assert " ".join(pretrain.argv).count(f"--dataset imagefolder-small --data-root {tmp_path / 'folder'} "
                                         "--image-size 48") == 1  # embedded scale: the embedded recipe
    assert pretrain.iterations == 6  # 2 epochs of the folder's 3 images, batch 1
    argv = " ".join(leg.argv)
    assert ("--dataset-coco main_job_train /d/train.json /d/img --dataset-coco main_job_test /d/val.json /d/img"
            in argv)
    assert 'DATASETS.TRAIN ("main_job_train",) DATASETS.TEST ("main_job_test",) MODEL.ROI_HEADS.NUM_CLASSES 3' in argv
    voc = DetectData(VOC, ("/voc", "trainval"), ("/voc", "test"), ("cat", "dog"))
    (leg,) = plan_stages(MainJobPlan(backbones=("resnet18",), arms=("frozenbn_pretrained",), detect_data=voc,
                                     weights=(("resnet18", "/w.pth"),), detect_seeds=(0,)), tmp_path)
    assert "--dataset-voc main_job_train /voc trainval --dataset-voc main_job_test /voc test --voc-classes cat,dog" \
        in " ".join(leg.argv)
    default = " ".join(a for s in plan_stages(MainJobPlan(), tmp_path) for a in s.argv)
    assert "--dataset-coco" not in default and "NUM_CLASSES" not in default and "imagefolder" not in default


def test_the_papers_coco_splits_keep_detectron2s_names_so_the_report_can_stand_them_beside_the_paper(tmp_path):
    """Files that are COCO 2014 train / val (published names and image counts) are registered under
    coco_2014_train / coco_2014_val (report/paper.py's Table 8 gate reads those); any other file under the job's
    own names."""
    from detection.main_job.data import check_data

    cats = [{"id": 1, "name": "person"}]
    (tmp_path / "0.jpg").write_bytes(b"")  # the up-front check reads the files as a leg does: they exist
    for name, n in (("instances_train2014.json", 82783), ("instances_val2014.json", 40504)):
        (tmp_path / name).write_text(json.dumps({
            "images": [{"id": i, "file_name": "0.jpg", "width": 9, "height": 9} for i in range(1, n + 1)],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 1, 4, 4], "iscrowd": 0}],
            "categories": cats}))
    paper = DetectData(COCO, (str(tmp_path / "instances_train2014.json"), str(tmp_path)),
                       (str(tmp_path / "instances_val2014.json"), str(tmp_path)))
    checked = check_data(PretrainData(), paper)
    assert checked.names == ("coco_2014_train", "coco_2014_val") and checked.classes == ("person",)
    assert "--dataset-coco coco_2014_train" in " ".join(checked.register_flags())
    assert 'DATASETS.TEST ("coco_2014_val",)' in " ".join(checked.overrides(False))
    other = DetectData(COCO, paper.test, paper.test)  # val as both: not the paper's splits
    assert check_data(PretrainData(), other).names == ("main_job_train", "main_job_test")


def test_paper_scale_legs_run_the_paper_config_and_scale_linearly_with_their_gpus(tmp_path):
    """Detectron2 rescales a leg from the config's reference world size (16 images = 8 GPUs x 2) to the GPUs it
    gets; the stage expects the iterations Detectron2's own auto_scale_workers gives."""
    from detectron2.engine import DefaultTrainer

    from detection.config import get_detection_cfg

    voc = DetectData(VOC, ("/voc", "trainval"), ("/voc", "test"), tuple("abcdefghijklmnopqrst"))
    for gpus in (1, 8):
        plan = MainJobPlan(backbones=("resnet101",), arms=("frozenbn_pretrained",), detect_data=voc, scale="paper",
                           width=1.0, weights=(("resnet101", "/w.pth"),), detect_seeds=(0,), gpus=gpus)
        (leg,) = plan_stages(plan, tmp_path)
        files, opts = plan.detect_config("resnet101", "frozenbn_pretrained", None, 0, tmp_path)
        assert files[0].endswith("PascalVOC-Detection/faster_rcnn_R_101_C4.yaml") and len(files) == 2  # no smoke
        cfg = DefaultTrainer.auto_scale_workers(get_detection_cfg(files, opts, read_weights=False), gpus)
        assert (cfg.SOLVER.IMS_PER_BATCH, cfg.SOLVER.MAX_ITER, leg.iterations) == (2 * gpus, 70000 // gpus,
                                                                                  70000 // gpus)
        assert cfg.SOLVER.BASE_LR == pytest.approx(0.008 * gpus / 8) and cfg.MODEL.ROI_HEADS.NUM_CLASSES == 20
        assert (f"--num-gpus {gpus}" in " ".join(leg.argv)) == (gpus > 0)


def test_the_paper_preset_dry_run_prints_its_stages_and_gpu_hours_with_no_dataset_present(tmp_path, monkeypatch,
                                                                                         capsys):
    monkeypatch.setenv("DETECTRON2_DATASETS", str(tmp_path / "datasets"))
    assert main(["--preset", "paper", "--dry-run", "--gpus-per-stage", "8", "--output-dir",
                 str(tmp_path / "job")]) == 0
    out = capsys.readouterr().out
    assert out.count("ABSENT") == 5 and f"{tmp_path}/datasets/coco/annotations/instances_train2014.json" in out
    legs = re.findall(r"detect +detect/(\w+)_frozenbn_pretrained_p0_d\d +(\d+) it +(\d+) GPU-h", out)
    assert len(legs) == 10 and {(m, it) for m, it, _ in legs} == {("vgg16", "320000"), ("resnet101", "320000")}
    assert re.search(r"about [\d,]+ GPU-hours in all at 40 sustained TFLOP/s", out)
    assert not (tmp_path / "job").exists()


def test_a_preset_folder_nothing_pretrains_on_is_neither_read_nor_recorded(tmp_path, monkeypatch):
    """The paper preset with published weights for both backbones needs no ImageNet folder (the preset's own);
    one given with --pretrain-data is refused (test_data_that_cannot_run...)."""
    from detection.main_job.options import build_parser, plan_from_args

    monkeypatch.setenv("DETECTRON2_DATASETS", str(tmp_path))
    files = [tmp_path / "vgg16.pth", tmp_path / "resnet101.pth"]
    for f in files:
        f.write_bytes(b"")
    plan = plan_from_args(build_parser().parse_args(["--preset", "paper", *[a for f in files for a in (
        "--weights", f"{f.stem}={f}")]]))
    assert plan.pretrain_data.folder is None and plan.detect_data.train[0].startswith(str(tmp_path / "coco"))
    assert plan_from_args(build_parser().parse_args(["--preset", "paper"])).pretrain_data.folder == \
        str(tmp_path / "imagenet")


def test_local_gpu_stages_each_get_gpus_of_their_own():
    from detection.main_job.graph import GpuSlots

    class Proc:
        def __init__(self):
            self.code = None

        def poll(self):
            return self.code

    slots, procs, seen = GpuSlots(2), [], []
    for _ in range(2):
        env, slot = slots.env({})
        procs.append(Proc())
        slots.hold(slot, procs[-1])
        seen.append(env["CUDA_VISIBLE_DEVICES"])
    procs[0].code = 0  # the first stage ended: its slot is free again
    assert seen == ["0,1", "2,3"] and slots.env({})[0]["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert GpuSlots(0).env({"A": "1"}) == ({"A": "1"}, None)


def test_fresh_removes_the_data_record_with_the_stages(tmp_path):
    from classification.engine.run_files import JOB_DATA
    from detection.main_job.cli import _fresh

    (tmp_path / JOB_DATA).write_text('{"a.json": "sha256:0"}')
    _fresh(tmp_path, [], lambda m: None)
    assert not (tmp_path / JOB_DATA).exists()


def test_a_changed_annotation_file_is_named_and_refused(tmp_path):
    from detection.main_job.data import DataError
    from detection.main_job.data_identity import data_identity, record_data_identity

    ann = tmp_path / "instances_val.json"
    ann.write_text("{}")
    data = DetectData(COCO, (str(ann), str(tmp_path)), (str(ann), str(tmp_path)), ("a",))
    record_data_identity(tmp_path, data_identity(PretrainData(), data))
    check_data_identity(tmp_path, data_identity(PretrainData(), data))  # the same files: fine
    ann.write_text('{"images": []}')
    with pytest.raises(DataError, match=f"the annotations of {ann} .*changed, since .*main_job_data.json was recorded"
                                        ".*--rerun-changed.*--fresh"):
        check_data_identity(tmp_path, data_identity(PretrainData(), data))


# ---- bad data: one line, before anything is created ---------------------------------------------------------------

def _bad_cases(tmp_path, exported):
    train, root, test, _ = exported.coco_args()
    voc = tmp_path / "voc"
    shutil.copytree(exported.detection, voc)
    (voc / "ImageSets" / "Main" / "missing.txt").write_text("train_00000\nno_such_image\n")
    (voc / "ImageSets" / "Main" / "other.txt").write_text("odd\n")
    (voc / "Annotations" / "odd.xml").write_text(
        "<annotation><size><width>9</width><height>9</height></size><object><name>zebra</name><bndbox><xmin>1"
        "</xmin><ymin>1</ymin><xmax>5</xmax><ymax>5</ymax></bndbox></object></annotation>")
    (voc / "ImageSets" / "Main" / "fewer.txt").write_text("odd_bag\n")
    (voc / "Annotations" / "odd_bag.xml").write_text((voc / "Annotations" / "odd.xml").read_text().replace("zebra",
                                                                                                        "bag"))
    (voc / "ImageSets" / "Main" / "comma.txt").write_text("odd_comma\n")  # a class the legs' --voc-classes splits
    (voc / "Annotations" / "odd_comma.xml").write_text((voc / "Annotations" / "odd.xml").read_text().replace(
        "zebra", "t-shirt, top"))
    (voc / "ImageSets" / "Main" / "png.txt").write_text("png_image\n")  # VOC's layout reads JPEGImages/<id>.jpg
    (voc / "Annotations" / "png_image.xml").write_text((voc / "Annotations" / "odd_bag.xml").read_text())
    (voc / "JPEGImages" / "png_image.png").write_bytes(b"")
    (tmp_path / "empty" / "train").mkdir(parents=True)
    given = tmp_path / "given.pth"
    given.write_bytes(b"")
    string_id = [{"id": "1", "name": "tshirt_top"}]
    other = [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"}, {"id": 3, "name": "sneaker"}, {"id": 4, "name": "bag"}]
    return [
        (["--detect-coco", str(tmp_path / "absent.json"), root, test, root], r"--detect-coco: .*absent.json"),
        (["--detect-coco", train, str(tmp_path / "no_images"), test, root], r"train image root .*no_images"),
        (["--detect-coco", *_coco(tmp_path, exported, categories=other)],
         r"the categories of .*instances_train.json and .*instances_test.json differ \(only in train: \[\(1, "
         r"'tshirt_top'\)"),
        (["--detect-voc", str(voc), "train", "missing"], r"test split 'missing'.*no_such_image.xml"),
        (["--detect-voc", str(voc), "train", "other"], r"test split 'other' names classes .*\['zebra'\]"),
        (["--detect-voc", str(voc), "comma", "comma"], r"\[comma\]: class name 't-shirt, top' has a comma"),
        (["--detect-voc", str(voc), "png", "png"],
         r"\[png\]: .*1 of 1 images not found.*png_image.jpg.*JPEGImages/ holds \['png_image.png'\]: VOC's layout"),
        (["--detect-voc", str(voc), "train", "fewer"],
         r"test split 'fewer' has no object of \['sneaker', 'trouser', 'tshirt_top'\].*nothing to score them on"),
        (["--detect-coco", *_coco(tmp_path, exported, categories=string_id, name="string_id.json")],
         r"string_id.json: categories\[0\] needs an integer 'id'"),
        (["--pretrain-data", str(tmp_path / "empty"), "--weights", f"resnet18={given}"],
         r"--pretrain-data .*empty: every backbone comes from --weights; nothing would pretrain on it"),
        (["--preset", "paper", "--with-degradation", "--dry-run"], r"--with-degradation: .*--preset degradation"),
        (["--pretrain-data", str(tmp_path / "empty")], r"--pretrain-data .*empty.*no class sub-directories"),
        (["--pretrain-data", str(tmp_path / "absent")], r"--pretrain-data .*absent"),
        (["--scale", "paper"], r"--scale paper: the paper configs train on COCO or VOC"),
        (["--scale", "paper", "--detect-iterations", "9", "--detect-voc", str(voc), "train", "val"],
         r"--detect-iterations: at --scale paper the paper configs' schedules .* run"),
        (["--selection", "--detect-voc", str(voc), "train", "val"], r"--selection holds out"),
        (["--gpus-per-stage", "1"], r"--gpus-per-stage 1 x --jobs 2: this machine has 0 GPU"),
        # bad7: what a leg's loader refused only after the job had made stages, refused before anything is made
        (["--detect-coco", *_coco_changed(tmp_path, exported, "dup.json", lambda d: d["images"].append(
            dict(d["images"][0])))], r"dup.json: images\[100\] has id \d+, as images\[0\] does"),
        (["--detect-coco", *_coco_changed(tmp_path, exported, "unlisted.json", lambda d: d["annotations"].append(
            {**d["annotations"][0], "id": 10**6, "image_id": 987654}))],
         r"unlisted.json: annotation 1000000 refers to image_id 987654, which is not listed under 'images'"),
        (["--detect-coco", *_coco_changed(tmp_path, exported, "missing.json", lambda d: d["images"][0].update(
            file_name="nope.jpg"))], r"missing.json: 1 of 100 images not found under .*nope.jpg"),
        (["--detect-coco", *_coco_changed(tmp_path, exported, "crowd.json", lambda d: [
            a.update(iscrowd=1) for a in d["annotations"]])],
         r"crowd.json: no object that is not a crowd region, so nothing to score \(100 images\)"),
        (["--detect-coco", *_coco_changed(tmp_path, exported, "test_dev.json", lambda d: d.pop("annotations"))],
         r"test_dev.json: no 'annotations' list, so nothing to score"),
        (["--detect-coco", *_coco_changed(tmp_path, exported, "big.json", '{"images": [{"id": ' + "9" * 5000 + "}]}")],
         r"big.json: not a COCO instances file: Exceeds the limit \(4300 digits\)"),
        (["--nodes-per-stage", "2"], r"--nodes-per-stage 2: a stage spans machines only as a Slurm job"),
    ]


@pytest.mark.bad_input
def test_data_that_cannot_run_stops_the_job_in_one_line_naming_the_file_and_creates_nothing(tmp_path, exported,
                                                                                           capsys):
    if torch.cuda.is_available():
        pytest.skip("the GPU case needs a machine without GPUs")
    job = tmp_path / "job"
    for extra, message in _bad_cases(tmp_path, exported):
        assert main(["--preset", "quick", "--backbones", "resnet18", "--arms", "frozenbn_pretrained",
                     "--output-dir", str(job), *extra]) == 2, extra
        err = capsys.readouterr().err
        assert re.search(message, err) and err.count("\n") == 1, (extra, err)
        assert not job.exists()


# ---- whole jobs on the files ----------------------------------------------------------------------------------------

def _results(out):
    return json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_the_exported_embedded_set_through_the_real_data_path_gives_the_embedded_numbers_to_the_last_digit(
        tmp_path, exported):
    """The same job on the embedded default and on its export (--pretrain-data: the ImageNet-style folder,
    --detect-coco: the json + images) with the same seeds: the same pretrained weights, top-1 and every AP. A test
    set changed afterwards is refused (the json is the data's identity); with --rerun-changed the job reruns its
    legs on it, keeping the pretraining, and its AP changes: the path reads what it is given."""
    base = [*TINY[:2], "--backbones", "resnet18", "--arms", "frozenbn_pretrained", "--pretrain-seeds", "0",
            "--seeds", "0", "--pretrain-epochs", "2", "--pretrain-val-images", "64", "--detect-iterations", "2"]
    embedded = run_tool("tools/main_job.py", *base, "--pretrain-images", "256", "--output-dir", tmp_path / "embedded",
                        timeout=600)
    coco_args = _coco(tmp_path, exported)
    real = [*base, "--pretrain-data", exported.imagefolder, "--detect-coco", *coco_args, "--output-dir",
            tmp_path / "real"]
    proc = run_tool("tools/main_job.py", *real, timeout=600)
    assert embedded.returncode == 0 and proc.returncode == 0, embedded.stderr[-2000:] + proc.stderr[-2000:]
    a, b = _results(tmp_path / "embedded"), _results(tmp_path / "real")
    assert a["pretraining"] == b["pretraining"] and a["groups"][0]["values"] == b["groups"][0]["values"]
    weights = [torch.load(d / "pretrain" / "resnet18_p0" / "model_final.pth", weights_only=True)["model"]
               for d in (tmp_path / "embedded", tmp_path / "real")]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert "COCO json instances_train.json -> instances_test.json" in (tmp_path / "real" / "summary.txt").read_text()
    _coco(tmp_path, exported, test_images=50)  # the same file name, half the test images
    again = run_tool("tools/main_job.py", *real, timeout=300)
    assert again.returncode == 2 and re.search(r"the annotations of .*instances_test.json .*changed.*"
                                               r"--rerun-changed.*the pretraining.*is kept.*--fresh", again.stderr)
    checkpoint = tmp_path / "real" / "pretrain" / "resnet18_p0" / "model_final.pth"
    made = checkpoint.stat().st_mtime_ns
    rerun = run_tool("tools/main_job.py", *real, "--rerun-changed", timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert "--rerun-changed: removed 2 stage directories" in rerun.stdout  # the leg and the control's
    assert checkpoint.stat().st_mtime_ns == made  # the pretraining's data did not change: not rerun
    assert _results(tmp_path / "real")["groups"][0]["values"]["AP"] != b["groups"][0]["values"]["AP"]


@pytest.mark.slow
@pytest.mark.parametrize("data", ["coco", "voc"])
def test_a_three_backbone_job_on_published_weights_ranks_them_in_one_family(tmp_path, exported, torchvision_files,
                                                                             data):
    """MoCo's protocol on the user's data: three torchvision files, two fine-tuning runs each, a leaderboard row
    per backbone, each backbone against the first in one Holm family, each comparison's call recorded."""
    given = [a for m, f in torchvision_files.items() for a in ("--weights", f"{m}={f}")]
    where = ["--detect-coco", *_coco(tmp_path, exported, test_images=30)] if data == "coco" else \
        ["--detect-voc", *_voc(tmp_path, exported, test_images=30)]
    proc = run_tool("tools/main_job.py", *TINY, "--backbones", *torchvision_files, *given, "--seeds", "0", "1",
                    "--weights-top1", "resnet18=69.8", "--weights-top1", "resnet34=73.3", "--weights-top1",
                    "resnet50=76.1", *where, "--output-dir", tmp_path / "job", timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = _results(tmp_path / "job")
    assert sorted(r["backbone"] for r in res["leaderboard"]) == sorted(torchvision_files)
    assert {r["weights"] for r in res["leaderboard"]} == {f.name for f in torchvision_files.values()}
    arm = "_frozenbn_pretrained"
    assert [(d["a"], d["b"]) for d in res["deltas"]] == [("resnet34" + arm, "resnet18" + arm),
                                                        ("resnet50" + arm, "resnet18" + arm)]
    assert res["family"] == "the job's 2 comparisons"
    for d in res["deltas"]:
        assert d["units"] == [2, 2] and d["unit_a"] == "fine-tuning run" and d["interval"] is not None
        assert d["adjustment"]["size"] == 2 and "call" in d
    assert {g["unit"] for g in res["groups"]} == {"fine-tuning run"}
    report = (tmp_path / "job" / "report" / "report.md").read_text()
    assert "## Leaderboard" in report and "pretraining variance not included" in report
    title = "VOC split" if data == "voc" else "COCO json instances_train.json -> instances_test.json"
    assert title in (tmp_path / "job" / "summary.txt").read_text()


@pytest.mark.bad_input
def test_a_test_set_that_holds_training_images_is_scored_with_a_warning_that_counts_them(exported, caplog):
    """bad7: a test set equal to the train set was scored without a word."""
    from detection.main_job.data import check_data

    train, root, _, _ = exported.coco_args("val_100")
    with caplog.at_level(logging.WARNING, logger="detection.main_job.data"):
        check_data(PretrainData(), DetectData(COCO, (train, root), (train, root)))
    assert re.search(r"--detect-coco: (\d+) of the \1 test images are also training images .*not a held-out score",
                     caplog.text)
