"""Let Detectron2 import when its compiled extension `detectron2._C` is missing.

Detectron2 0.6 imports `detectron2._C` at module level in four places (deformable conv, rotated RoIAlign,
rotated box IoU, the fast COCOeval), which makes `detectron2.layers`, `.structures`, `.modeling`, `.data`,
`.engine` and `.evaluation` unimportable without the C++ build, although Faster R-CNN needs none of those ops.
`install()` puts a placeholder module there whose every op raises `Detectron2ExtensionMissing` (an ImportError)
saying what is missing and how to get a full build, and registers a placeholder `detectron2::nms_rotated` torch op
that does the same. With a working compiled extension it changes nothing.

It must run at module top level of something every process imports (our `detection/__init__.py` does it), so
DataLoader workers started with spawn/forkserver have it too.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path

__all__ = ["Detectron2ExtensionMissing", "install", "has_compiled_ops", "detectron2_config_file"]

_FEATURES = {
    "deform_conv": "deformable convolution (DeformConv / ModulatedDeformConv)",
    "modulated_deform_conv": "deformable convolution (DeformConv / ModulatedDeformConv)",
    "roi_align_rotated": "rotated RoIAlign (ROIAlignRotated)",
    "box_iou_rotated": "rotated boxes (pairwise_iou_rotated / RotatedBoxes IoU)",
    "nms_rotated": "rotated boxes (nms_rotated / batched_nms_rotated)",
    "COCOeval": "Detectron2's fast COCOeval (COCOeval_opt, COCOEvaluator(use_fast_impl=True))",
    "InstanceAnnotation": "Detectron2's fast COCOeval (COCOeval_opt, COCOEvaluator(use_fast_impl=True))",
    "ImageAnnotation": "Detectron2's fast COCOeval (COCOeval_opt, COCOEvaluator(use_fast_impl=True))",
}

_HOW_TO_FIX = (
    "This Detectron2 was installed without its compiled extension (e.g. the PyPI sdist pb1-detectron2, which has "
    "no C++ sources). For a full build: `pip install --no-build-isolation "
    "'git+https://github.com/facebookresearch/detectron2.git@v0.6'` with a C++ compiler (and the CUDA toolkit "
    "for GPU ops). Faster R-CNN training and evaluation do not need it; for COCO evaluation use "
    "detection.evaluation.COCOEvaluator (faster-coco-eval) or COCOEvaluator(..., use_fast_impl=False)."
)


class Detectron2ExtensionMissing(ImportError):
    """A Detectron2 feature needs the compiled `detectron2._C` extension, which is not available."""


def _missing(name: str, reason: str) -> Detectron2ExtensionMissing:
    feature = next((f for key, f in _FEATURES.items() if name.startswith(key)), "a compiled Detectron2 op")
    return Detectron2ExtensionMissing(
        f"detectron2._C.{name} is not available ({reason}); it is needed by {feature}. {_HOW_TO_FIX}"
    )


class _MissingExtension(types.ModuleType):
    """Stands in for `detectron2._C`: environment queries answer, every op raises a clear error."""

    def __init__(self, reason: str):
        super().__init__("detectron2._C", "placeholder for the missing compiled extension (detection.compat)")
        self.__spec__ = importlib.machinery.ModuleSpec("detectron2._C", loader=None)
        self._reason = reason

    # Used by detectron2.utils.collect_env.collect_env_info() (called by default_setup()).
    def get_compiler_version(self) -> str:
        return f"N/A (detectron2._C missing: {self._reason})"

    def get_cuda_version(self) -> str:
        return "N/A (detectron2._C missing)"

    def has_cuda(self) -> bool:
        return False

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # keep hasattr()/introspection/pickling sane
        raise _missing(name, self._reason)


_state: dict[str, object] = {}


def _register_nms_rotated_placeholder(reason: str) -> None:
    import torch

    try:
        torch.ops.detectron2.nms_rotated  # noqa: B018  (a real op is already registered)
        return
    except (AttributeError, RuntimeError):
        pass
    lib = torch.library.Library("detectron2", "DEF")
    lib.define("nms_rotated(Tensor boxes, Tensor scores, float iou_threshold) -> Tensor")

    def nms_rotated(boxes, scores, iou_threshold):
        raise _missing("nms_rotated", reason)

    lib.impl("nms_rotated", nms_rotated, "CompositeExplicitAutograd")
    _state["library"] = lib  # the registration lives as long as this object


def install() -> bool:
    """Install the placeholder if `detectron2._C` cannot be imported. Returns True if it was installed.

    Idempotent. Changes nothing when the compiled extension imports (a full Detectron2 build).
    """
    if "installed" in _state:
        return bool(_state["installed"])
    existing = sys.modules.get("detectron2._C")
    if existing is not None:
        _state["installed"] = isinstance(existing, _MissingExtension)
        return bool(_state["installed"])
    import detectron2

    reason = "not built"
    if importlib.util.find_spec("detectron2._C") is not None:
        try:
            importlib.import_module("detectron2._C")
            _state["installed"] = False
            return False
        except (ImportError, OSError) as err:  # e.g. undefined symbol after a torch upgrade
            reason = f"failed to load: {err}"
    stub = _MissingExtension(reason)
    sys.modules["detectron2._C"] = stub
    detectron2._C = stub
    _register_nms_rotated_placeholder(reason)
    _state["installed"] = True
    return True


def has_compiled_ops() -> bool:
    """True when a real `detectron2._C` is loaded (call after install())."""
    install()
    return not _state["installed"]


def detectron2_config_file(relative_path: str) -> str:
    """The path of one of Detectron2's own model-zoo configs, e.g. "COCO-Detection/faster_rcnn_R_50_C4_1x.yaml".

    Found beside the installed package, not through `detectron2.model_zoo`: on Detectron2 main that module imports
    `pkg_resources`, which setuptools 81 removed, so it fails to import in a current environment.
    """
    import detectron2

    path = Path(detectron2.__file__).resolve().parent / "model_zoo" / "configs" / relative_path
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such Detectron2 model-zoo config (is this a complete Detectron2 "
                                f"install? its configs are package data of detectron2.model_zoo)")
    return str(path)
