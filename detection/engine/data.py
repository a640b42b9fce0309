"""Detection data loading for the trainer: robust image reading and exactly resumable data order.

- DetectionMapper: Detectron2's DatasetMapper (Faster R-CNN path) reading images with the project's one reader
  (classification.data.images: every error names the file; 16-bit images scaled, not clipped; decompression
  bombs refused), converting any mode (L, CMYK, RGBA, P) as Detectron2.
- classification.data.sampling's ResumableSampler + SeededSamples (shared with classification): the index stream
  of a run is a function of SEED only, and the augmentation of the k-th sample a function of (SEED, k); after
  `--resume` from iteration i the loader restarts at sample i * batch, so an interrupted run continues exactly as
  the uninterrupted one would have.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import torch
from detectron2.config import configurable
from detectron2.data import (
    DatasetFromList,
    DatasetMapper,
    MetadataCatalog,
    build_detection_test_loader,
    build_detection_train_loader,
)
from detectron2.data import detection_utils as utils
from detectron2.data import transforms as T
from detectron2.data.build import filter_images_with_only_crowd_annotations, get_detection_dataset_dicts
from detectron2.utils import comm
from PIL import Image

from classification.data.images import ImageReadError, open_image
from classification.data.sampling import ResumableSampler, SeededSamples

__all__ = ["ImageReadError", "read_image", "size_mismatch_error", "DetectionMapper", "ResumableTrainLoader",
           "train_dataset_dicts", "build_train_loader", "build_test_loader"]

logger = logging.getLogger(__name__)


def read_image(file_name: str, image_format: str) -> np.ndarray:
    """The image as Detectron2 wants it (H, W, C in `image_format`), read by the project's one image reader."""
    return utils.convert_PIL_to_numpy(open_image(file_name), image_format)


def _annotation_source(record: dict, datasets: tuple[str, ...]) -> str:
    """The file that recorded `record`'s size (the error path only): the COCO json or the VOC XML of whichever of
    `datasets` holds its image, "its annotation" when none is known."""
    path = os.path.abspath(record["file_name"])

    def holds(root) -> bool:
        return bool(root) and path.startswith(os.path.join(os.path.abspath(root), ""))

    found = []
    for name in datasets:
        meta = MetadataCatalog.get(name)
        if getattr(meta, "dirname", None) and holds(meta.dirname):  # VOC (its json_file, if any, is a conversion)
            found.append(os.path.join(meta.dirname, "Annotations", f"{record.get('image_id')}.xml"))
        elif getattr(meta, "json_file", None) and holds(getattr(meta, "image_root", None)):
            found.append(meta.json_file)
    return " or ".join(dict.fromkeys(found)) or "its annotation"


def _exif_orientation(file_name: str) -> int | None:
    try:
        with Image.open(file_name) as im:
            return im.getexif().get(0x0112)  # the Orientation tag
    except (OSError, ValueError, SyntaxError):
        return None


def size_mismatch_error(record: dict, image: np.ndarray, datasets: tuple[str, ...] = ()) -> ImageReadError:
    """One line naming the image file, its size, the size the annotation file recorded for it, and that file; for
    swapped sizes the usual cause, an EXIF orientation tag (read_image applies it, as Detectron2's does)."""
    height, width = image.shape[:2]
    file_name = record["file_name"]
    source = _annotation_source(record, datasets)
    message = (f"{file_name}: the image is {width}x{height} (width x height) but {source} records "
               f"{record.get('width')}x{record.get('height')} for it")
    if (width, height) == (record.get("height"), record.get("width")):
        tag = _exif_orientation(file_name)
        cause = (f"the file's EXIF orientation tag ({tag}) rotates it by 90 degrees when it is read" if tag in
                 (5, 6, 7, 8) else "an EXIF orientation tag rotating the image when it is read is the usual cause")
        message += (f"; width and height are swapped: {cause} (Detectron2 applies it too). Save the image upright "
                    "without the tag, or record the rotated size and boxes")
    else:
        message += f"; correct the width and height recorded in {source}"
    return ImageReadError(message)


_noted_exif = False  # said once a process: a dataset has thousands of such images
_exif_checked: set[str] = set()  # files whose tag was read: each header is opened once a process, not every epoch


def note_exif_orientation(file_name: str, image: np.ndarray) -> None:
    """An image whose EXIF orientation tag flips or rotates it when read (read_image applies the tag, as Detectron2
    does) while its size cannot show it: a mirror or a half turn (tags 2-4) at any shape, a quarter turn (5-8) of
    a square image (of any other shape it fails the size check). Its boxes must be for the upright image; said
    once."""
    global _noted_exif
    if _noted_exif or file_name in _exif_checked:
        return
    _exif_checked.add(file_name)
    tag = _exif_orientation(file_name)
    if tag in (2, 3, 4) or (tag in (5, 6, 7, 8) and image.shape[0] == image.shape[1]):
        _noted_exif = True
        logger.warning(f"{file_name}: its EXIF orientation tag ({tag}) flips or rotates the image when it is read "
                       "(Detectron2 does the same) and its size does not show it: its boxes must be for the upright "
                       "image. Said once; other images may carry the tag too")


class DetectionMapper(DatasetMapper):
    """DatasetMapper for box detection with the project's image reader (in training, SeededSamples has seeded the
    RNGs for this sample before the mapper's augmentation draws from them). `datasets`: the datasets it maps
    (default DATASETS.TRAIN), whose annotation files an error names."""

    @configurable
    def __init__(self, is_train: bool = True, *, datasets: tuple[str, ...] = (), **kwargs):
        super().__init__(is_train, **kwargs)
        self.datasets = tuple(datasets)

    @classmethod
    def from_config(cls, cfg, is_train: bool = True, datasets: tuple[str, ...] | None = None):
        ret = super().from_config(cfg, is_train)
        ret["datasets"] = tuple(cfg.DATASETS.TRAIN if datasets is None else datasets)
        return ret

    def __call__(self, dataset_dict):
        dataset_dict = dict(dataset_dict)
        if "annotations" in dataset_dict:
            dataset_dict["annotations"] = [dict(a) for a in dataset_dict["annotations"]]
        image = read_image(dataset_dict["file_name"], self.image_format)
        try:
            utils.check_image_size(dataset_dict, image)
        except utils.SizeMismatchError:  # Detectron2's says neither which file recorded the size nor why
            raise size_mismatch_error(dataset_dict, image, self.datasets) from None
        note_exif_orientation(dataset_dict["file_name"], image)
        aug_input = T.AugInput(image)
        transforms = self.augmentations(aug_input)
        image = aug_input.image
        dataset_dict["image"] = torch.as_tensor(np.ascontiguousarray(image.transpose(2, 0, 1)))
        if not self.is_train:
            dataset_dict.pop("annotations", None)
            return dataset_dict
        if "annotations" in dataset_dict:
            self._transform_annotations(dataset_dict, transforms, image.shape[:2])
        return dataset_dict


def drop_difficult(dicts: list[dict]) -> list[dict]:
    """Training targets without the objects VOC marks difficult (py-faster-rcnn USE_DIFF False); logged."""
    dropped, out = 0, []
    for d in dicts:
        anns = d.get("annotations")
        if not anns or not any(a.get("difficult", 0) for a in anns):
            out.append(d)  # COCO has no difficult objects: its records are not copied
            continue
        kept = [a for a in anns if not a.get("difficult", 0)]
        dropped += len(anns) - len(kept)
        out.append({**d, "annotations": kept})
    if dropped:
        logger.info(f"{dropped} difficult objects are not training targets (DATALOADER.VOC_TRAIN_DIFFICULT False)")
    return out


def check_test_datasets(cfg) -> None:
    """Before training: every DATASETS.TEST is registered and has the training data's classes, in the same order
    and with the same dataset ids (a val split missing a class, or a COCO val with renumbered category ids, used
    to be scored against the wrong classes: AP50 53.8 -> 33.7 measured)."""
    from detectron2.data import DatasetCatalog

    registered = set(DatasetCatalog.list())
    for name in (*cfg.DATASETS.TRAIN, *cfg.DATASETS.TEST):
        if name not in registered:
            raise KeyError(f"DATASETS: {name!r} is not a registered dataset (register it with --dataset-coco / "
                           "--dataset-voc, or use one of: " + ", ".join(sorted(registered)[:12]) + ", ...)")
    train = MetadataCatalog.get(cfg.DATASETS.TRAIN[0]) if cfg.DATASETS.TRAIN else None
    if train is None or not getattr(train, "thing_classes", None):
        return
    for name in cfg.DATASETS.TEST:
        meta = MetadataCatalog.get(name)
        if not getattr(meta, "thing_classes", None):
            DatasetCatalog.get(name)  # a COCO json sets its classes when loaded
        if list(meta.thing_classes) != list(train.thing_classes):
            raise ValueError(f"DATASETS.TEST {name!r} has classes {list(meta.thing_classes)}, but the model is trained "
                             f"on {list(train.thing_classes)} ({cfg.DATASETS.TRAIN[0]}): the same classes, in the same "
                             "order, are needed to score it")
        ids_train = getattr(train, "thing_dataset_id_to_contiguous_id", None)
        ids_test = getattr(meta, "thing_dataset_id_to_contiguous_id", None)
        if ids_train and ids_test and ids_train != ids_test:
            raise ValueError(f"DATASETS.TEST {name!r} numbers its categories {ids_test}, the training data "
                             f"{ids_train}: renumbered category ids would score each class against another")


def check_num_classes(dicts: list[dict], cfg) -> None:
    """A category id >= MODEL.ROI_HEADS.NUM_CLASSES would fail mid-training with an IndexError: say it now."""
    top = max((a["category_id"] for d in dicts for a in d.get("annotations", [])), default=-1)
    classes = getattr(MetadataCatalog.get(cfg.DATASETS.TRAIN[0]), "thing_classes", None) if cfg.DATASETS.TRAIN \
        else None
    if classes and top < len(classes) < cfg.MODEL.ROI_HEADS.NUM_CLASSES:  # evaluation would meet a class it
        # cannot name only after the whole training (KeyError: 2)
        raise ValueError(f"DATASETS.TRAIN {tuple(cfg.DATASETS.TRAIN)} has {len(classes)} classes but "
                         f"MODEL.ROI_HEADS.NUM_CLASSES is {cfg.MODEL.ROI_HEADS.NUM_CLASSES}: set "
                         f"MODEL.ROI_HEADS.NUM_CLASSES {len(classes)} (a detector of more classes predicts ones its "
                         "evaluation cannot name)")
    if top >= cfg.MODEL.ROI_HEADS.NUM_CLASSES:
        names = [n for name in cfg.DATASETS.TRAIN for n in getattr(MetadataCatalog.get(name), "thing_classes", [])]
        raise ValueError(f"DATASETS.TRAIN {tuple(cfg.DATASETS.TRAIN)} has {max(top + 1, len(set(names)))} classes "
                         f"but MODEL.ROI_HEADS.NUM_CLASSES is {cfg.MODEL.ROI_HEADS.NUM_CLASSES}: set "
                         f"MODEL.ROI_HEADS.NUM_CLASSES {top + 1}")


class ResumableTrainLoader:
    """Detectron2's training loader over a ResumableSampler, started lazily so that a resume can move it.

    Its iterator creates the real one (worker processes, prefetching) on the first `next()`, not on `iter()`:
    Detectron2 0.6's SimpleTrainer calls `iter(data_loader)` in its constructor and main creates it on first use,
    and with this the trainer positions the stream (`set_start`) before either, without touching the trainer's
    private iterator.
    """

    def __init__(self, loader, sampler: ResumableSampler):
        self.loader, self.sampler = loader, sampler
        self._started = False

    def set_start(self, sample_position: int) -> None:
        if self._started:
            raise RuntimeError("the training stream has started; set its start before the first iteration")
        self.sampler.set_start(sample_position)

    def __iter__(self):
        self._started = True  # runs on the first next(): a generator's body waits for it
        yield from self.loader


def train_dataset_dicts(cfg) -> list[dict]:
    """The training images: VOC-difficult objects dropped (unless DATALOADER.VOC_TRAIN_DIFFICULT), and only then
    the images left without a usable object (DATALOADER.FILTER_EMPTY_ANNOTATIONS), so that an image whose objects
    are all difficult goes too; Detectron2 would filter before the drop and keep it as an empty image."""
    try:
        dicts = get_detection_dataset_dicts(cfg.DATASETS.TRAIN, filter_empty=False, min_keypoints=0,
                                            proposal_files=None)
    except AssertionError as err:  # Detectron2's "Dataset 'x' is empty!" (a COCO / VOC file refuses it first)
        raise ValueError(f"DATASETS.TRAIN {tuple(cfg.DATASETS.TRAIN)}: {err} A training dataset needs images") \
            from None
    if not cfg.DATALOADER.VOC_TRAIN_DIFFICULT:
        dicts = drop_difficult(dicts)
    if cfg.DATALOADER.FILTER_EMPTY_ANNOTATIONS and dicts and "annotations" in dicts[0]:  # after the drop
        dicts = filter_images_with_only_crowd_annotations(dicts)
    check_num_classes(dicts, cfg)
    return dicts


def build_train_loader(cfg) -> ResumableTrainLoader:
    """Detectron2's batching on a resumable, per-sample-seeded stream."""
    dicts = train_dataset_dicts(cfg)
    seed = cfg.SEED if cfg.SEED >= 0 else 0
    sampler = ResumableSampler(len(dicts), seed=seed, rank=comm.get_rank(), world_size=comm.get_world_size())
    loader = build_detection_train_loader(
        SeededSamples(DatasetFromList(dicts, copy=False), seed), mapper=DetectionMapper(cfg, True), sampler=sampler,
        total_batch_size=cfg.SOLVER.IMS_PER_BATCH, aspect_ratio_grouping=cfg.DATALOADER.ASPECT_RATIO_GROUPING,
        num_workers=cfg.DATALOADER.NUM_WORKERS)
    return ResumableTrainLoader(loader, sampler)


def build_test_loader(cfg, dataset_name: str):
    return build_detection_test_loader(cfg, dataset_name, mapper=DetectionMapper(cfg, False, datasets=(dataset_name,)))
