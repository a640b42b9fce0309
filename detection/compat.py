"""Let Detectron2 import when its compiled extension `detectron2._C` is missing.

The project's environment has it already: tools/patch_detectron2.py installs detectron2_c_placeholder.py as the
patched sdist's `detectron2/_C.py` (environment queries answer, every op raises `Detectron2ExtensionMissing`, an
ImportError naming what is missing and how to get a full build), so `from detectron2.modeling import build_model`
works without importing this package. `install()` does the same for a Detectron2 built some other way without its
extension, or whose extension fails to load: it loads that file as `detectron2._C`. With a working compiled
extension it changes nothing.

It runs at module top level of something every process imports (our `detection/__init__.py` does it), so
DataLoader workers started with spawn/forkserver have it too.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

__all__ = ["Detectron2ExtensionMissing", "install", "has_compiled_ops", "detectron2_config_file"]

PLACEHOLDER = Path(__file__).with_name("detectron2_c_placeholder.py")
# The placeholder's ImportError subclass once install() has run (the class of the module in use: the sdist's copy
# or the one loaded here); ImportError itself where a real extension is loaded.
Detectron2ExtensionMissing: type[ImportError] = ImportError

_state: dict[str, object] = {}


def _is_placeholder(module) -> bool:
    return bool(getattr(module, "IS_PLACEHOLDER", False))


def _load_placeholder(reason: str):
    """detectron2_c_placeholder.py as `detectron2._C`, its REASON set."""
    import detectron2

    spec = importlib.util.spec_from_file_location("detectron2._C", PLACEHOLDER)
    module = importlib.util.module_from_spec(spec)
    sys.modules["detectron2._C"] = module
    spec.loader.exec_module(module)
    module.REASON = reason
    detectron2._C = module
    return module


def install() -> bool:
    """Make `detectron2._C` importable: the real extension when it loads, else the placeholder. Returns True when
    the placeholder is in use. Idempotent."""
    global Detectron2ExtensionMissing
    if "installed" not in _state:
        module = sys.modules.get("detectron2._C")
        if module is None:
            import detectron2  # noqa: F401

            reason = "not built"
            if importlib.util.find_spec("detectron2._C") is not None:
                try:
                    module = importlib.import_module("detectron2._C")  # a real build, or the sdist's placeholder
                except (ImportError, OSError) as err:  # e.g. undefined symbol after a torch upgrade
                    reason = f"failed to load: {err}"
            module = module or _load_placeholder(reason)
        _state["installed"] = _is_placeholder(module)
        if _state["installed"]:
            Detectron2ExtensionMissing = module.Detectron2ExtensionMissing
    return bool(_state["installed"])


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
