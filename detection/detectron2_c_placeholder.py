"""Stands in for Detectron2's compiled extension `detectron2._C` where there is none.

Detectron2 0.6 imports `detectron2._C` at module level in four places (deformable conv, rotated RoIAlign, rotated box
IoU, the fast COCOeval), which makes `detectron2.layers`, `.structures`, `.modeling`, `.data`, `.engine` and
`.evaluation` unimportable without the C++ build, although Faster R-CNN needs none of those ops. Here the
environment queries answer and every op raises `Detectron2ExtensionMissing` (an ImportError) saying what is missing
and how to get a full build; the `detectron2::nms_rotated` torch op is registered to do the same.

Self-contained (the standard library and torch only): tools/patch_detectron2.py installs this file as
`detectron2/_C.py` of the patched sdist, so `from detectron2.modeling import build_model` works in the project's
environment without `import detection`; detection.compat loads the same file for a Detectron2 built some other way
without its extension.
"""

from __future__ import annotations

IS_PLACEHOLDER = True  # how detection.compat tells this module from a real build
REASON = "not built"  # why there is no real extension (detection.compat sets it when a build failed to load)

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


def missing(name: str) -> Detectron2ExtensionMissing:
    feature = next((f for key, f in _FEATURES.items() if name.startswith(key)), "a compiled Detectron2 op")
    return Detectron2ExtensionMissing(
        f"detectron2._C.{name} is not available ({REASON}); it is needed by {feature}. {_HOW_TO_FIX}")


# Used by detectron2.utils.collect_env.collect_env_info() (called by default_setup()).
def get_compiler_version() -> str:
    return f"N/A (detectron2._C missing: {REASON})"


def get_cuda_version() -> str:
    return "N/A (detectron2._C missing)"


def has_cuda() -> bool:
    return False


def __getattr__(name: str):
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(name)  # keep hasattr()/introspection/pickling sane
    raise missing(name)


def _register_nms_rotated():
    """The placeholder `detectron2::nms_rotated` op, unless a real one is registered; the Library object that
    holds the registration, or None."""
    import torch

    try:
        torch.ops.detectron2.nms_rotated  # noqa: B018  (a real op is already registered)
        return None
    except (AttributeError, RuntimeError):
        pass
    lib = torch.library.Library("detectron2", "DEF")
    lib.define("nms_rotated(Tensor boxes, Tensor scores, float iou_threshold) -> Tensor")

    def nms_rotated(boxes, scores, iou_threshold):
        raise missing("nms_rotated")

    lib.impl("nms_rotated", nms_rotated, "CompositeExplicitAutograd")
    return lib


_LIBRARY = _register_nms_rotated()  # the registration lives as long as this module
