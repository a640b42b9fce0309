"""Reading an image file, the one way both pipelines do it (classification datasets and the detection mapper).

Every failure names the file: missing, unreadable, truncated, or a decompression bomb (an image whose pixel count
exceeds PIL's safety limit: a few KB of PNG that would take gigabytes to decode). EXIF orientation is applied;
16/32-bit integer images are scaled to 8 bits (PIL's convert() would clip everything above 255 to white).
"""

from __future__ import annotations

import os

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

__all__ = ["ImageReadError", "open_image"]


class ImageReadError(RuntimeError):
    """An image that cannot be used; the message names the file."""


def _to_8bit(im: Image.Image) -> Image.Image:
    a = np.asarray(im, dtype=np.float64)
    top = 65535.0 if im.mode.startswith("I;16") or a.max() > 255 else 255.0
    return Image.fromarray(np.clip(a / top * 255.0 + 0.5, 0, 255).astype(np.uint8), "L")


def open_image(path: str | os.PathLike) -> Image.Image:
    """The decoded image (any 8-bit PIL mode: RGB, L, RGBA, P, CMYK, ...; callers convert to what they need)."""
    try:
        with Image.open(path) as im:
            im.load()  # decode now, so a truncated file fails here, not later
            im = ImageOps.exif_transpose(im)
            if im.mode in ("I;16", "I;16B", "I;16L", "I"):
                im = _to_8bit(im)
            return im
    except FileNotFoundError:
        raise ImageReadError(f"{path}: image file not found") from None
    except Image.DecompressionBombError as err:
        raise ImageReadError(f"{path}: refused to decode: {err}") from None
    except (OSError, UnidentifiedImageError, ValueError, SyntaxError) as err:
        raise ImageReadError(f"{path}: cannot read image ({err})") from None
