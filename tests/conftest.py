import os
import sys
from pathlib import Path

import pytest
import torch

import detection  # noqa: F401  (first: lets detectron2 import without its compiled ops)

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"

# Two pytest-xdist workers share two cores: one intra-op thread each keeps the machine from oversubscribing.
torch.set_num_threads(int(os.environ.get("TEST_TORCH_THREADS", "1")))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared (project reference material) is not present in this checkout")
    return SHARED


def run_tool(*args, cwd=REPO, timeout=600, env=None):
    """Run a command-line tool with this interpreter; returns CompletedProcess (text)."""
    import subprocess

    full_env = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=full_env)
