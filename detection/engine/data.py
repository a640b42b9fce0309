"""Detection data loading for the trainer: robust image reading and exactly resumable data order.

- DetectionMapper: Detectron2's DatasetMapper (Faster R-CNN path) with an image reader that names the file in
  every error (truncated JPEG, unreadable file), scales 16-bit images to 8 bits instead of clipping them (PIL's
  convert() would saturate everything above 255), and converts any other mode (L, CMYK, RGBA, P) as Detectron2.
- ResumableTrainingSampler + per-sample seeding: the index stream of a run is a function of SEED only, and the
  augmentation of the k-th sample a function of (SEED, k); after `--resume` from iteration i the loader restarts at
  sample i * batch, so an interrupted run continues exactly as the uninterrupted one would have.
"""

from __future__ import annotations

import itertools
import logging
import random

import numpy as np
import torch
from detectron2.data import DatasetMapper, build_detection_test_loader, build_detection_train_loader
from detectron2.data import detection_utils as utils
from detectron2.data import transforms as T
from detectron2.data.build import get_detection_dataset_dicts
from detectron2.utils import comm
from PIL import Image, ImageOps
from torch.utils.data import Sampler

__all__ = ["ImageReadError", "read_image", "DetectionMapper", "ResumableTrainingSampler", "build_train_loader",
           "build_test_loader"]

logger = logging.getLogger(__name__)


class ImageReadError(RuntimeError):
    """An image of the dataset cannot be used; the message names the file."""


def read_image(file_name: str, image_format: str) -> np.ndarray:
    try:
        with Image.open(file_name) as im:
            im.load()
            im = ImageOps.exif_transpose(im)
            if im.mode in ("I;16", "I;16B", "I;16L", "I"):  # 16/32-bit integer: keep the range, not the clip
                a = np.asarray(im, dtype=np.float64)
                top = 65535.0 if im.mode.startswith("I;16") or a.max() > 255 else 255.0
                im = Image.fromarray(np.clip(a / top * 255.0 + 0.5, 0, 255).astype(np.uint8), "L")
            return utils.convert_PIL_to_numpy(im, image_format)
    except FileNotFoundError:
        raise ImageReadError(f"{file_name}: image file not found") from None
    except (OSError, ValueError, SyntaxError) as err:
        raise ImageReadError(f"{file_name}: cannot read image ({err})") from None


class DetectionMapper(DatasetMapper):
    """DatasetMapper for box detection with the robust reader; takes (dict, sample position) pairs in training
    so that the augmentation randomness of each sample is seeded by its position in the run."""

    def __init__(self, cfg, is_train: bool = True, seed: int = 0):
        super().__init__(cfg, is_train)
        self.seed = seed

    def __call__(self, item):
        dataset_dict, position = item if isinstance(item, tuple) else (item, None)
        if position is not None:
            s = (self.seed * 1_000_003 + position) % (2**32)
            random.seed(s)
            np.random.seed(s)
            torch.manual_seed(s)
        dataset_dict = dict(dataset_dict)
        if "annotations" in dataset_dict:
            dataset_dict["annotations"] = [dict(a) for a in dataset_dict["annotations"]]
        image = read_image(dataset_dict["file_name"], self.image_format)
        try:
            utils.check_image_size(dataset_dict, image)
        except utils.SizeMismatchError as err:
            raise ImageReadError(f"{dataset_dict['file_name']}: {err}") from None
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


class ResumableTrainingSampler(Sampler):
    """Detectron2's infinite TrainingSampler with a fixed seed and a start position. Yields
    `position * size + index` (Detectron2's MapDataset wants an int key; _IndexedDicts decodes it)."""

    def __init__(self, size: int, *, shuffle: bool = True, seed: int = 0):
        if size <= 0:
            raise ValueError("the training dataset is empty")
        self.size, self.shuffle, self.seed = size, shuffle, seed
        self.rank, self.world = comm.get_rank(), comm.get_world_size()
        self.start = 0  # position in the global stream where iteration starts

    def set_start(self, position: int) -> None:
        self.start = position

    def _stream(self):
        g = torch.Generator().manual_seed(self.seed)
        while True:
            yield from (torch.randperm(self.size, generator=g) if self.shuffle else torch.arange(self.size)).tolist()

    def __iter__(self):
        stream = enumerate(self._stream())
        for position, index in itertools.islice(stream, self.start + self.rank, None, self.world):
            yield position * self.size + index


class _IndexedDicts(torch.utils.data.Dataset):
    def __init__(self, dicts):
        self.dicts = dicts

    def __len__(self):
        return len(self.dicts)

    def __getitem__(self, key):
        position, index = divmod(int(key), len(self.dicts))
        return self.dicts[index], position


def build_train_loader(cfg):
    """(loader, sampler): Detectron2's batching on a resumable, per-sample-seeded stream."""
    dicts = get_detection_dataset_dicts(cfg.DATASETS.TRAIN, filter_empty=cfg.DATALOADER.FILTER_EMPTY_ANNOTATIONS,
                                        min_keypoints=0, proposal_files=None)
    seed = cfg.SEED if cfg.SEED >= 0 else 0
    sampler = ResumableTrainingSampler(len(dicts), seed=seed)
    loader = build_detection_train_loader(
        _IndexedDicts(dicts), mapper=DetectionMapper(cfg, True, seed), sampler=sampler,
        total_batch_size=cfg.SOLVER.IMS_PER_BATCH, aspect_ratio_grouping=cfg.DATALOADER.ASPECT_RATIO_GROUPING,
        num_workers=cfg.DATALOADER.NUM_WORKERS)
    return loader, sampler


def build_test_loader(cfg, dataset_name: str):
    return build_detection_test_loader(cfg, dataset_name, mapper=DetectionMapper(cfg, False))
