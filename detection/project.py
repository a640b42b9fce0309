"""Where the repository's tools and configs are: one function, no arithmetic on `__file__` elsewhere (the main job,
train_det's default config, the paper gate and the benchmarks ask it).

The main job runs tools/train_cls.py and tools/train_det.py as subprocesses and reads configs/: files of a
checkout, not of the installed packages. An installed wheel works as long as the job is started from a checkout
(or a checkout is named by the environment variable), and says clearly what is missing otherwise.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ProjectFiles", "project_files", "ENV_VAR", "ProjectFilesNotFound"]

ENV_VAR = "BACKBONES_PROJECT_ROOT"
_MARKERS = ("tools/train_cls.py", "tools/train_det.py", "configs/Base-Backbones.yaml")


class ProjectFilesNotFound(FileNotFoundError):
    """No checkout of the repository where the main job looked."""


@dataclass(frozen=True)
class ProjectFiles:
    root: Path

    def tool(self, name: str) -> Path:
        return self.root / "tools" / name

    def config(self, *parts: str) -> Path:
        return self.root.joinpath("configs", *parts)


def _is_checkout(d: Path) -> bool:
    return all((d / m).is_file() for m in _MARKERS)


def project_files(start: Path | None = None, *, needed_by: str = "") -> ProjectFiles:
    """$BACKBONES_PROJECT_ROOT if set, else the first of `start` (default: the working directory) and its parents
    that holds tools/train_cls.py, tools/train_det.py and configs/; ProjectFilesNotFound naming what is missing
    (needed_by: what the caller needs the checkout for, when not the main job)."""
    named = os.environ.get(ENV_VAR)
    if named:
        root = Path(named).expanduser().resolve()
        if not _is_checkout(root):
            missing = [m for m in _MARKERS if not (root / m).is_file()]
            raise ProjectFilesNotFound(f"{ENV_VAR}={named}: not a checkout of this repository (missing: "
                                       f"{', '.join(missing)})")
        return ProjectFiles(root)
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if _is_checkout(d):
            return ProjectFiles(d)
    why = needed_by or f"the main job runs {_MARKERS[0]} / {_MARKERS[1]} and reads configs/"
    raise ProjectFilesNotFound(f"{why} of a checkout of this repository: none at or above {here}; run it from the "
                               f"checkout or set {ENV_VAR}")
