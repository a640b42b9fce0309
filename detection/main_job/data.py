"""The main job's data: what it pretrains on and what its detection legs train and are scored on, as inputs of the
job. The embedded default (generated here), or a researcher's own:

- pretraining: the embedded composites, an ImageNet-style folder (`<root>/train/<class>/*`, `<root>/val/<class>/*`:
  tools/train_cls.py's `imagefolder`), or nothing at all when every backbone comes from --weights;
- detection: the embedded scenes, a COCO json + image root for train and for test (COCO, or any COCO-format set),
  or a VOC-layout directory with a train and a test split (tools/train_det.py's --dataset-coco / --dataset-voc).

The class list comes from the data (COCO: the categories, identical in train and test; VOC: the names its train
split's annotations use, which the test split's must be among) and sets the legs' ROI_HEADS.NUM_CLASSES: nothing
downstream assumes the embedded set's 4 classes. A job on real data records its data's identity (the annotation
files and the images they name) in OUTPUT/main_job_data.json (data_identity.py); a rerun on changed files is
refused, as a stage trained from changed weights is."""

from __future__ import annotations

import logging
import os
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..datasets.embedded import SMALL_VAL_SCENES, EmbeddedSpec

__all__ = ["PretrainData", "DetectData", "EMBEDDED", "COCO", "VOC", "TRAIN_NAME", "TEST_NAME", "DataError",
           "EMBEDDED_VAL_SCENES", "EMBEDDED_TEST_SETS", "embedded_sets",
           "check_data", "data_paths", "folder_train_images"]

EMBEDDED, COCO, VOC = "embedded", "coco", "voc"
# The names the job registers its detection data under in every leg (train_det's --dataset-coco / --dataset-voc);
# the report groups runs by their evaluated files, and stands a run beside the paper only under the paper's names.
TRAIN_NAME, TEST_NAME = "main_job_train", "main_job_test"
# The paper's COCO splits (Table 8: 2014 train, 80k images -> 2014 val, 40k), known by their published file names
# and image counts: data that is them is registered under Detectron2's names for them, so the report stands it
# beside the paper's column (report/paper.py) and a Detectron2 user reads the usual names.
PAPER_COCO_SPLITS = {"coco_2014_train": ("instances_train2014.json", 82783),
                     "coco_2014_val": ("instances_val2014.json", 40504)}


# The embedded legs' test sets (detection.datasets.embedded): the 1000 val scenes, where one test set's sampling is
# small beside the seeds' spread (each comparison shows it: report.test_sampling), or their first 100 (the val
# split before 2026-12-06, scene for scene) at smoke scale, where 900 more scenes add ~17 s a leg (CONVERGENCE.md).
EMBEDDED_VAL_SCENES = EmbeddedSpec().num_val
EMBEDDED_TEST_SETS = {EMBEDDED_VAL_SCENES: "embedded_val", SMALL_VAL_SCENES: "embedded_val_100"}


def embedded_sets(selection: bool, test_scenes: int = EMBEDDED_VAL_SCENES) -> tuple[str, str]:
    """The registered (train, test) names of the embedded legs: train -> the val scenes, or with `selection` the
    first training scenes -> the held-out last ones (schedules are chosen there, never on val)."""
    if selection:
        return "embedded_train_fit", "embedded_train_holdout"
    return "embedded_train", EMBEDDED_TEST_SETS[test_scenes]


logger = logging.getLogger(__name__)


class DataError(ValueError):
    """Data the job cannot run on: the message names the file and the option (a PlanError subclass's sibling:
    cli.py turns both into one line)."""


@dataclass(frozen=True)
class PretrainData:
    """What pretraining stages read: None = the embedded composites; a folder = ImageNet layout (train/ and val/)."""

    folder: str | None = None

    @property
    def embedded(self) -> bool:
        return self.folder is None

    def describe(self) -> str:
        return "the embedded composites" if self.embedded else f"the image folder {self.folder}"


@dataclass(frozen=True)
class DetectData:
    """What detection legs train on (train, and extra_train: more sets concatenated, as Detectron2's DATASETS.TRAIN
    tuple -- VOC 07+12) and are scored on (test): (json, image root) for COCO, (directory, split) for VOC, () for
    the embedded scenes. check_data fills `classes`, `names` and what the data scale sizes the legs by
    (train_images; median_image: the train images' median shorter and longer side) from the files."""

    format: str = EMBEDDED
    train: tuple[str, ...] = ()
    test: tuple[str, ...] = ()
    classes: tuple[str, ...] = ()
    names: tuple[str, str] = (TRAIN_NAME, TEST_NAME)  # what the legs register train and test under (check_data)
    extra_train: tuple[tuple[str, str], ...] = ()
    train_images: int = 0
    median_image: tuple[int, int] | None = None
    # each side's images (train sets, then test) by their name under its image root / directory, as the legs read
    # them: what the data's identity stats (data_identity.py), read once by check_data
    images: tuple[tuple[str, ...], ...] = field(default=(), compare=False, repr=False)

    @property
    def embedded(self) -> bool:
        return self.format == EMBEDDED

    def train_sets(self) -> list[tuple[str, ...]]:
        """Every train set, the first one first."""
        return [self.train, *self.extra_train]

    def sides(self) -> list[tuple[str, tuple[str, ...], str]]:
        """(role, side, the option that gave it) of every side: the train sets, then the test set."""
        option = "--detect-coco" if self.format == COCO else "--detect-voc"
        return [("train", side, option if i == 0 else f"{option}-train") for i, side in enumerate(self.train_sets())
                ] + [("test", self.test, option)]

    def train_names(self) -> list[str]:
        """The names the train sets register under: the first's as check_data chose it, then TRAIN_NAME_2, ..."""
        return [self.names[0], *(f"{TRAIN_NAME}_{i}" for i in range(2, len(self.extra_train) + 2))]

    def annotation_files(self) -> list[Path]:
        """The files whose content defines the data: the jsons (COCO), the split files (VOC), train sets first."""
        sides = [side for _, side, _ in self.sides()]
        if self.format == COCO:
            return [Path(side[0]) for side in sides]
        if self.format == VOC:
            return [Path(d) / "ImageSets" / "Main" / f"{s}.txt" for d, s in sides]
        return []

    def describe(self) -> str:
        if self.embedded:
            return "the embedded scenes"
        what = {COCO: "COCO json", VOC: "VOC split"}[self.format]
        return (f"{what} {' + '.join(map(self._side, self.train_sets()))} -> {self._side(self.test)} "
                f"({len(self.classes)} classes)")

    def _side(self, side: tuple[str, ...]) -> str:
        return Path(side[0]).name if self.format == COCO else f"{side[0]} [{side[1]}]"

    def register_flags(self) -> list[str]:
        """tools/train_det.py's flags that register the data under its names ([] for embedded)."""
        if self.embedded:
            return []
        flag = "--dataset-coco" if self.format == COCO else "--dataset-voc"
        flags = [a for name, side in zip(self.train_names(), self.train_sets()) for a in (flag, name, *side)]
        flags += [flag, self.names[1], *self.test]
        return flags + (["--voc-classes", ",".join(self.classes)] if self.format == VOC else [])

    def overrides(self, selection: bool, test_scenes: int = EMBEDDED_VAL_SCENES) -> list[str]:
        """The config overrides that point a leg at the data and size its classifier from the data's classes
        (the embedded scenes: the test set of `test_scenes` val scenes, or the model-selection split)."""
        if self.embedded:
            train, test = embedded_sets(selection, test_scenes)
            return ["DATASETS.TRAIN", f'("{train}",)', "DATASETS.TEST", f'("{test}",)']
        train = "".join(f'"{name}",' for name in self.train_names())
        return ["DATASETS.TRAIN", f"({train})", "DATASETS.TEST", f'("{self.names[1]}",)',
                *(["MODEL.ROI_HEADS.NUM_CLASSES", str(len(self.classes))] if self.classes else [])]  # a dry run
        #                                                          without the files does not know them

    def register(self) -> None:
        """Register the test set under its name in this process (the main job's chance level reads it)."""
        from ..datasets import register_coco, register_voc

        if self.format == COCO:
            register_coco(self.names[1], *self.test)
        elif self.format == VOC:
            register_voc(self.names[1], *self.test, class_names=list(self.classes))


def data_paths(pretrain: PretrainData, detect: DetectData, pretraining: bool) -> list[str]:
    """Every file and folder a job's data is read from (none for the embedded default); the pretraining folder
    only when something pretrains on it."""
    sides = [*detect.train_sets(), detect.test] if detect.train else []
    paths = [p for side in sides for p in (side if detect.format == COCO else side[:1])]
    return paths + ([pretrain.folder] if pretrain.folder and pretraining else [])


def check_data(pretrain: PretrainData, detect: DetectData, *, present: bool = True) -> DetectData:
    """The detection data with its classes read from the files; DataError naming the file and the option for data
    that is missing, empty or inconsistent (a COCO json whose categories differ between train and test, a VOC split
    naming absent annotations). present=False (a dry run): nothing is read; absent files are fine."""
    if not present:
        return detect
    if pretrain.folder is not None:
        _check_folder(Path(pretrain.folder))
    if detect.format == COCO:
        return _check_coco(detect)
    if detect.format == VOC:
        return _check_voc(detect)
    return detect


def _check_folder(root: Path) -> None:
    """An ImageNet-style folder: train/ and val/ with the same class directories, each with images."""
    from classification.data.datasets import ImageFolderDataset

    try:
        train, val = ImageFolderDataset(root, "train"), ImageFolderDataset(root, "val")
    except (OSError, ValueError) as err:
        raise DataError(f"--pretrain-data {root}: {err}") from None
    if len(train.classes) < 2:  # a 1-class net's top-1 is 100% whatever it learns
        raise DataError(f"--pretrain-data {root}: train/ has one class directory ({train.classes[0]}); a classifier "
                        "needs at least two")
    if train.classes != val.classes:  # a label is an index into the sorted class list: it would mean another class
        differ = sorted(set(train.classes) ^ set(val.classes))[:3]
        raise DataError(f"--pretrain-data {root}: train/ and val/ have other class directories ({differ}, ...)")


def folder_train_images(folder: str) -> int:
    """Training images of an ImageNet-style folder (the pretraining stages' epoch length)."""
    from classification.data.datasets import ImageFolderDataset

    try:
        return len(ImageFolderDataset(folder, "train"))
    except (OSError, ValueError) as err:  # a dry run plans without checking the folder first
        raise DataError(f"--pretrain-data {folder}: {err}") from None


def _check_coco(detect: DetectData) -> DetectData:
    """Every side read as a leg's loader reads it (datasets.coco.load_coco_checked: ids, boxes, listed and present
    images), before anything is created; then what the job needs of them: objects to train on and to score."""
    categories, standard, files, train_dicts, images = [], [], [], [], []
    sides = [(side, role, option) for role, side, option in detect.sides()]
    for (json_file, image_root), role, option in sides:
        found, dicts, cats = _read_coco_side(json_file, image_root, role, option)
        categories.append(cats)
        files.append({os.path.realpath(d["file_name"]) for d in dicts})
        images.append(tuple(os.path.relpath(d["file_name"], image_root) for d in dicts))
        standard.append(next((name for name, split in PAPER_COCO_SPLITS.items() if split == found), None))
        if role == "train":
            train_dicts += dicts
    test_files = files[-1]
    if shared := len(set().union(*files[:-1]) & test_files):  # scored on what it trained on: said, not refused
        logger.warning(f"--detect-coco: {shared} of the {len(test_files)} test images are also training images "
                       f"({detect.test[0]} and {' + '.join(t[0] for t in detect.train_sets())}): their AP is not a "
                       "held-out score")
    for ((json_file, _), role, _option), other in zip(sides[1:], categories[1:]):
        if other != categories[0]:
            only_a = sorted(set(categories[0]) - set(other))[:3]
            only_b = sorted(set(other) - set(categories[0]))[:3]
            raise DataError(f"--detect-coco: the categories of {detect.train[0]} and {json_file} differ (only in "
                            f"train: {only_a}, only in {role if role == 'test' else 'the other train set'}: "
                            f"{only_b}): a class index would mean another class in evaluation")
    paper = len(sides) == 2 and None not in standard and standard[0] != standard[1]
    names = tuple(standard) if paper else (TRAIN_NAME, TEST_NAME)
    return replace(detect, classes=tuple(str(name) for _, name in categories[0]), names=names,
                   images=tuple(images), **_sizes(train_dicts))


def _read_coco_side(json_file: str, image_root: str, role: str,
                    option: str) -> tuple[tuple[str, int], list[dict], list]:
    """((file name, images), the dataset dicts, the categories) of one side, checked as a leg reads it."""
    from ..datasets.coco import DatasetFormatError, load_coco_checked, read_coco_json

    if not Path(image_root).is_dir():
        raise DataError(f"{option}: {role} image root {image_root}: no such directory")
    try:
        data = read_coco_json(json_file)
        cats = _categories(data, json_file)
        if not data.get("images"):
            raise DataError(f"{option}: {json_file}: no images (an empty {role} set)")
        found = (Path(json_file).name, len(data["images"]))
        has_annotations = "annotations" in data
        dicts = load_coco_checked(json_file, image_root, data=data)  # one parse of a large file, not two
    except DataError:
        raise
    except (OSError, DatasetFormatError, ValueError) as err:
        raise DataError(f"{option}: {err}") from None
    task = "train on" if role == "train" else "score"
    if not has_annotations:  # a test-dev style file: images without ground truth
        raise DataError(f"{option}: {json_file}: no 'annotations' list, so nothing to {task} (a file of "
                        "images without ground truth)")
    if not sum(not a["iscrowd"] for d in dicts for a in d["annotations"]):  # crowds: ignored by training, scoring
        raise DataError(f"{option}: {json_file}: no object that is not a crowd region, so nothing to {task} "
                        f"({len(dicts)} images)")
    return found, dicts, cats


def _sizes(train_dicts: list[dict]) -> dict:
    """What the data scale sizes the legs by: the train images, and their median shorter and longer side."""
    short = [min(d["height"], d["width"]) for d in train_dicts]
    long = [max(d["height"], d["width"]) for d in train_dicts]
    return {"train_images": len(train_dicts),
            "median_image": (int(statistics.median_low(short)), int(statistics.median_low(long)))}


def _categories(data: dict, json_file: str) -> list[tuple[int, str]]:
    """A COCO file's (id, name) pairs, sorted by id: integer ids, once each; string names."""
    cats = data.get("categories")
    if not isinstance(cats, list) or not cats or not all(isinstance(c, dict) for c in cats):
        raise DataError(f"--detect-coco: {json_file}: no 'categories' list (a COCO instances file names its "
                        "classes there)")
    for i, c in enumerate(cats):
        if type(c.get("id")) is not int or not isinstance(c.get("name"), str):
            raise DataError(f"--detect-coco: {json_file}: categories[{i}] needs an integer 'id' and a string "
                            f"'name', got {c.get('id')!r} / {c.get('name')!r}")
    ids = [c["id"] for c in cats]
    if len(set(ids)) != len(ids):
        raise DataError(f"--detect-coco: {json_file}: category id {next(i for i in ids if ids.count(i) > 1)} is "
                        "given twice")
    return sorted((c["id"], c["name"]) for c in cats)


def _check_voc(detect: DetectData) -> DetectData:
    """Every split's classes (the train splits' together are the job's), then each split through a leg's loader."""
    from ..datasets.validation import DatasetFormatError
    from ..datasets.voc import VOCFormatError, discover_voc_classes

    found = []
    for role, (dirname, split), option in detect.sides():
        if not Path(dirname).is_dir():
            raise DataError(f"{option} {dirname}: no such directory")
        try:
            found.append(discover_voc_classes(dirname, split))  # reads every annotation the split names
        except (OSError, VOCFormatError, DatasetFormatError) as err:
            raise DataError(f"{option} ({role} split {split!r}): {err}") from None
        if not found[-1]:
            raise DataError(f"{option} {dirname} [{split}]: its annotations name no object")
    classes, tested = sorted(set().union(*found[:-1])), found[-1]
    train = " + ".join(f"{Path(d).name} [{s}]" for d, s in detect.train_sets())
    if commas := [c for c in classes if "," in c]:  # the legs take the classes comma-separated (--voc-classes)
        raise DataError(f"--detect-voc {train}: class name {commas[0]!r} has a comma; "
                        "the legs are given the classes comma-separated: rename it in the annotations")
    unknown, unseen = sorted(set(tested) - set(classes)), sorted(set(classes) - set(tested))
    if unknown:
        raise DataError(f"--detect-voc: the test split {detect.test[1]!r} names classes the train split(s) "
                        f"{train} have no object of: {unknown[:5]} (a detector cannot learn them)")
    if unseen:  # nothing to score: left out of the mean, the job would rank on fewer classes than it trains
        raise DataError(f"--detect-voc: the test split {detect.test[1]!r} has no object of {unseen[:5]}, which the "
                        f"train split(s) {train} name: nothing to score them on")
    dicts = [_check_voc_split(*side, classes, option) for _, side, option in detect.sides()]  # names, boxes, images
    images = tuple(tuple(os.path.relpath(d["file_name"], side[0]) for d in split)
                   for (_, side, _), split in zip(detect.sides(), dicts))
    return replace(detect, classes=tuple(classes), images=images,
                   **_sizes([d for split in dicts[:-1] for d in split]))


def _check_voc_split(dirname: str, split: str, classes: list[str], option: str = "--detect-voc") -> list[dict]:
    """The split through a leg's own loader (datasets.voc.load_voc_instances), before anything is made; a missing
    JPEGImages/<id>.jpg beside a file of another extension is said to be that (VOC's layout names .jpg)."""
    from ..datasets.validation import DatasetFormatError
    from ..datasets.voc import VOCFormatError, load_voc_instances

    try:
        return load_voc_instances(dirname, split, classes)
    except FileNotFoundError as err:
        images = Path(dirname) / "JPEGImages"
        other = sorted(p.name for p in images.glob("*") if p.suffix.lower() != ".jpg")[:3] if images.is_dir() else []
        raise DataError(f"{option} {dirname} [{split}]: {err}" + (
            f" (JPEGImages/ holds {other}: VOC's layout reads <id>.jpg; convert them)" if other else "")) from None
    except (OSError, VOCFormatError, DatasetFormatError) as err:
        raise DataError(f"{option} {dirname} [{split}]: {err}") from None
