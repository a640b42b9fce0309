#!/usr/bin/env python3
"""Backport the later upstream Detectron2 fixes into the v0.6 sources of the `pb1-detectron2` sdist.

Detectron2 0.6 (Nov 2021) predates numpy 2 (np.int/np.float/np.str removed), Pillow 10 (Image.LINEAR removed),
setuptools 81 (pkg_resources removed) and torch wheels without caffe2. Upstream fixed each of these after 0.6;
this script applies the same edits to an unpacked sdist, plus the setup.py changes needed because the sdist
ships no C++ sources (detectron2/layers/csrc). Every replacement must match exactly the expected number of
times: a different sdist fails loudly instead of being half-patched.

Usage: python tools/patch_detectron2.py SRC_DIR      (stdlib only; run by tools/setup_env.py)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Edit:
    path: str  # relative to the sdist root
    old: str
    new: str
    count: int = 1  # exact number of occurrences expected
    why: str = ""


_SETUP_TORCH_IMPORT = '''import torch
from torch.utils.cpp_extension import CUDA_HOME, CppExtension, CUDAExtension

torch_ver = [int(x) for x in torch.__version__.split(".")[:2]]
assert torch_ver >= [1, 8], "Requires PyTorch >= 1.8"
'''

_EXPORT_INIT_OLD = '''from .api import *
from .flatten import TracingAdapter
from .torchscript import scripting_with_instances, dump_torchscript_IR
'''
_EXPORT_INIT_NEW = '''from .flatten import TracingAdapter
from .torchscript import scripting_with_instances, dump_torchscript_IR

try:  # backport of upstream's later guard: caffe2 is optional (absent from torch wheels since 2.x)
    from caffe2.proto import caffe2_pb2 as _tmp  # noqa: F401
except ImportError:
    pass
else:
    from .api import *
'''

EDITS: tuple[Edit, ...] = (
    # --- setup.py: no compiled extension, no torch import at build time, model-zoo configs shipped -------------
    Edit("setup.py", _SETUP_TORCH_IMPORT, "", why="build without torch in the build env"),
    Edit(
        "setup.py",
        '    ext_modules=get_extensions(),\n    cmdclass={"build_ext": torch.utils.cpp_extension.BuildExtension},\n',
        "    ext_modules=[],  # the sdist has no detectron2/layers/csrc\n",
        why="skip the C++/CUDA extension build",
    ),
    Edit(
        "setup.py",
        'package_data={"detectron2.model_zoo": get_model_zoo_configs()},',
        'package_data={"detectron2.model_zoo": ["configs/*.yaml", "configs/**/*.yaml", "configs/**/*.py"]},',
        why="configs already live in detectron2/model_zoo/configs in the sdist; the glob of ./configs finds none",
    ),
    Edit("setup.py", '        "future",  # used by caffe2\n', "", why="caffe2 export only"),
    Edit("setup.py", '        "black==21.4b2",\n', "", why="only LazyConfig.to_py(); a 2021 pin"),
    # --- Pillow >= 10 -------------------------------------------------------------------------------------------
    Edit("detectron2/data/transforms/transform.py", "interp=Image.LINEAR", "interp=Image.BILINEAR"),
    # --- setuptools >= 81: no pkg_resources ---------------------------------------------------------------------
    Edit("detectron2/model_zoo/model_zoo.py", "import pkg_resources\n", ""),
    Edit(
        "detectron2/model_zoo/model_zoo.py",
        'cfg_file = pkg_resources.resource_filename(\n'
        '        "detectron2.model_zoo", os.path.join("configs", config_path)\n    )',
        'cfg_file = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", config_path)',
    ),
    # --- numpy >= 1.24 / 2.x: removed aliases -------------------------------------------------------------------
    Edit("detectron2/data/build.py", "dtype=np.int)", "dtype=int)", count=1, why="class histogram"),
    Edit("detectron2/data/build.py", "dtype=np.int\n", "dtype=int\n", count=1, why="class histogram"),
    Edit("detectron2/data/datasets/pascal_voc.py", "dtype=np.str)", "dtype=str)"),
    Edit("detectron2/evaluation/pascal_voc_evaluation.py", ".astype(np.bool)", ".astype(bool)", count=2),
    Edit("detectron2/evaluation/sem_seg_evaluation.py", "dtype=np.int)", "dtype=int)", count=2),
    Edit("detectron2/evaluation/sem_seg_evaluation.py", "dtype=np.float)", "dtype=float)", count=2),
    Edit("detectron2/evaluation/sem_seg_evaluation.py", ".astype(np.float)", ".astype(float)", count=3),
    Edit("detectron2/structures/masks.py", ".astype(np.bool)", ".astype(bool)", count=2),
    Edit("detectron2/structures/masks.py", "dtype=np.bool)", "dtype=bool)", count=1),
    Edit("detectron2/utils/visualizer.py", ".astype(np.bool)", ".astype(bool)", count=3),
    Edit("detectron2/utils/video_visualizer.py", "dtype=np.bool)", "dtype=bool)", count=1),
    # --- torch wheels without caffe2 ----------------------------------------------------------------------------
    Edit("detectron2/export/__init__.py", _EXPORT_INIT_OLD, _EXPORT_INIT_NEW),
    # --- torch 2: native schedulers derive from LRScheduler, not _LRScheduler (upstream's later fix) ------------
    Edit("detectron2/engine/hooks.py", "from collections import Counter\nimport torch\n",
         "from collections import Counter\nimport torch\n\n"
         "# torch >= 2.0: LRScheduler is the base class; _LRScheduler only a deprecated subclass of it\n"
         "_LRSchedulerBase = getattr(torch.optim.lr_scheduler, \"LRScheduler\",\n"
         "                           torch.optim.lr_scheduler._LRScheduler)\n",
         why="save and restore the state of torch-native LR schedulers on resume"),
    Edit("detectron2/engine/hooks.py", "isinstance(self.scheduler, torch.optim.lr_scheduler._LRScheduler)",
         "isinstance(self.scheduler, _LRSchedulerBase)", count=2,
         why="save and restore the state of torch-native LR schedulers on resume"),
    # --- Python 3.11: random.sample() no longer takes a set -----------------------------------------------------
    Edit("detectron2/data/common.py", "self._rng.sample(self._fallback_candidates, k=1)[0]",
         "self._rng.sample(sorted(self._fallback_candidates), k=1)[0]",
         why="MapDataset's retry after a failed sample raised TypeError on Python 3.11"),
    # --- hostile configs: never fall back to yaml.unsafe_load (fvcore's CfgNode does when allow_unsafe) --------
    Edit("detectron2/config/config.py", "def merge_from_file(self, cfg_filename: str, allow_unsafe: bool = True)",
         "def merge_from_file(self, cfg_filename: str, allow_unsafe: bool = False)",
         why="a YAML config with !!python tags must not run code (defence in depth; detection.config checks too)"),
)

MARKER = ".patched-by-resnet-detection-benchmark"
# Files added to the sdist, from this repository. detectron2/_C.py: the sdist has no C++ sources, so Detectron2's
# modules that import its extension at top level (layers, structures, modeling, ...) failed to import unless
# `import detection` had installed a stand-in first; the same stand-in, shipped as the package's own _C, makes the
# installed Detectron2 a normal one (its ops raise an ImportError naming the full build).
ADDED_FILES = {"detectron2/_C.py": Path(__file__).resolve().parent.parent / "detection" / "detectron2_c_placeholder.py"}


class PatchError(RuntimeError):
    pass


def patch_tree(root: Path) -> int:
    """Apply EDITS in place; returns the number of files changed. Idempotent via a marker file."""
    root = Path(root)
    if (root / MARKER).exists():
        return 0
    if not (root / "setup.py").is_file() or not (root / "detectron2" / "__init__.py").is_file():
        raise PatchError(f"{root} does not look like an unpacked detectron2 sdist (no setup.py / detectron2/)")
    # Check every edit against the pristine text first, so a mismatch leaves the tree untouched.
    texts: dict[str, str] = {}
    for e in EDITS:
        path = root / e.path
        if e.path not in texts:
            if not path.is_file():
                raise PatchError(f"{path}: file missing; this is not the expected pb1-detectron2 0.6 sdist")
            texts[e.path] = path.read_text(encoding="utf-8")
        found = texts[e.path].count(e.old)
        if found != e.count:
            raise PatchError(
                f"{path}: expected {e.count} occurrence(s) of {e.old!r}, found {found}; "
                "the sdist differs from pb1-detectron2 0.6 (check the pinned sha256)"
            )
        texts[e.path] = texts[e.path].replace(e.old, e.new)
    for rel, source in ADDED_FILES.items():
        if (root / rel).exists():
            raise PatchError(f"{root / rel}: exists already; this is not the expected pb1-detectron2 0.6 sdist")
        texts[rel] = source.read_text(encoding="utf-8")
    for rel, text in texts.items():
        (root / rel).write_text(text, encoding="utf-8")
    (root / MARKER).write_text("\n".join([f"{e.path}: {e.why}" for e in EDITS] +
                                         [f"{rel}: added from {src.name}" for rel, src in ADDED_FILES.items()]) + "\n")
    return len(texts)


_PROJECTS_END = (
    '    "detectron2.projects.panoptic_deeplab": "projects/Panoptic-DeepLab/panoptic_deeplab",\n'
    "}\n"
)
_PROJECTS_FILTER = "PROJECTS = {k: v for k, v in PROJECTS.items() if path.isdir(v)}  # a snapshot without projects/\n"


def drop_missing_projects(root: Path) -> bool:
    """A source tree (not the 0.6 sdist) is built as it is, but for one thing: a snapshot without `projects/` (the
    vendored main archive) cannot run its setup.py, which lists three project packages by path. Returns True when
    it edited setup.py to list only the projects present; a git checkout has them and is left untouched."""
    setup_py = Path(root) / "setup.py"
    text = setup_py.read_text(encoding="utf-8")
    if _PROJECTS_FILTER in text or (Path(root) / "projects").is_dir():
        return False
    if text.count(_PROJECTS_END) != 1:
        raise PatchError(f"{setup_py}: no PROJECTS mapping as in Detectron2 main, and no projects/ directory")
    setup_py.write_text(text.replace(_PROJECTS_END, _PROJECTS_END + _PROJECTS_FILTER), encoding="utf-8")
    return True


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        n = patch_tree(Path(argv[1]))
    except PatchError as err:
        print(f"patch_detectron2: {err}", file=sys.stderr)
        return 1
    print(f"patch_detectron2: {n} files patched" if n else "patch_detectron2: already patched")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
