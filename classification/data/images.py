"""Reading an image file, the one way both pipelines do it (classification datasets and the detection mapper).

Every failure names the file: missing, unreadable, truncated, or a decompression bomb (an image whose pixel count
exceeds PIL's safety limit: a few KB of PNG that would take gigabytes to decode). EXIF orientation is applied;
16/32-bit integer images are scaled to 8 bits (PIL's convert() would clip everything above 255 to white).
"""

from __future__ import annotations

import logging
import os

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from backbones.bounded_read import MiB, UnreadableFile, regular_file

__all__ = ["ImageReadError", "open_image", "image_size", "check_image_file"]


logger = logging.getLogger(__name__)

IMAGE_FILE_LIMIT = 2048 * MiB  # the encoded file; PIL's decompression-bomb limit bounds the decoded pixels


class ImageReadError(RuntimeError):
    """An image that cannot be used; the message names the file."""


_noted_12_bit = False


def _to_8bit(im: Image.Image, path) -> Image.Image:
    global _noted_12_bit
    a = np.asarray(im, dtype=np.float64)
    top = 65535.0 if im.mode.startswith("I;16") or a.max() > 255 else 255.0
    if top == 65535.0 and a.max() <= 4095 and not _noted_12_bit:  # said once: a dataset has thousands of them
        _noted_12_bit = True
        logger.warning(f"{path}: a 16-bit image whose values stay below 4096 (12-bit data?); scaled from the "
                       "16-bit range, as every 16-bit image (it looks dark); rescale such files to 8 bits yourself "
                       "to use their full range")
    return Image.fromarray(np.clip(a / top * 255.0 + 0.5, 0, 255).astype(np.uint8), "L")


def _float_to_8bit(im: Image.Image, path) -> Image.Image:
    """A float image (PIL mode F, e.g. a 32-bit TIFF): values in [0, 1] scaled by 255, in [0, 255] kept; PIL's
    convert() clipped [0, 1] to black (train_cls trained at chance and exited 0). Anything else is refused."""
    a = np.asarray(im, dtype=np.float64)
    lo, hi = (float(a.min()), float(a.max())) if a.size else (0.0, 0.0)
    if not (np.isfinite(a).all() and lo >= 0 and hi <= 255):
        raise ImageReadError(f"{path}: a float image with values in [{lo:g}, {hi:g}]; only [0, 1] or [0, 255] "
                             "(and finite) can be read as an image")
    scale = 255.0 if hi <= 1.0 else 1.0
    return Image.fromarray(np.clip(a * scale + 0.5, 0, 255).astype(np.uint8), "L")


def check_image_file(path: str | os.PathLike) -> None:
    """ImageReadError unless `path` is an existing regular file within IMAGE_FILE_LIMIT (a FIFO blocks open())."""
    if not os.path.exists(path):
        raise ImageReadError(f"{path}: image file not found")
    try:
        regular_file(path, limit=IMAGE_FILE_LIMIT)
    except UnreadableFile as err:
        raise ImageReadError(str(err)) from None


def image_size(path: str | os.PathLike) -> tuple[int, int]:
    """(width, height) from the file's header, without decoding it; ImageReadError naming the file."""
    check_image_file(path)
    try:
        with Image.open(path) as im:
            return im.size
    except (OSError, UnidentifiedImageError, ValueError, SyntaxError) as err:
        raise ImageReadError(f"{path}: cannot read the image ({err})") from None


def open_image(path: str | os.PathLike) -> Image.Image:
    """The decoded image (any 8-bit PIL mode: RGB, L, RGBA, P, CMYK, ...; callers convert to what they need)."""
    check_image_file(path)  # a FIFO blocked the loader forever
    try:
        with Image.open(path) as im:
            im.load()  # decode now, so a truncated file fails here, not later
            im = ImageOps.exif_transpose(im)
            if im.mode in ("I;16", "I;16B", "I;16L", "I"):
                im = _to_8bit(im, path)
            elif im.mode == "F":
                im = _float_to_8bit(im, path)
            return im
    except FileNotFoundError:
        raise ImageReadError(f"{path}: image file not found") from None
    except Image.DecompressionBombError as err:
        raise ImageReadError(f"{path}: refused to decode: {err}") from None
    except (OSError, UnidentifiedImageError, ValueError, SyntaxError) as err:
        raise ImageReadError(f"{path}: cannot read image ({err})") from None
