"""Every example in README.md runs: the Python block executes as written, and each shell command either runs as
written (dry runs, conversions, comparisons) or -- where it needs GPUs, a cluster or ImageNet -- goes through its
tool's parser and the checks the tool makes before launching. The files the examples name (R-101.pkl, train.json,
/data/imagenet, ...) are written by the test in their real formats, at the sizes the examples name them.

A README command this table does not cover fails the test: an example is added with the way it is checked."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import backbones
from conftest import REPO, with_random_bn_statistics
from fabricated_runs import job_groups, main_job_dir
from weight_files import write_msra_pkl

README = REPO / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
RUN, CHECK, MAKE = "run", "check", "make"


@dataclass(frozen=True)
class How:
    """How a README command is exercised: RUN as written (plus `extra` arguments), CHECK through its tool's parser
    and pre-launch checks, MAKE a make target (the two set-up commands: CI runs `make test`, `make demo` is
    measured from a fresh clone before each release)."""

    mode: str
    extra: tuple[str, ...] = ()


PAPER_JOB = ("python tools/main_job.py --backbones resnet50 resnet101 --width 1 --weights resnet50=R-50.pkl "
             "--weights resnet101=R-101.pkl --arms frozenbn_pretrained --seeds 0 1 2 3 4 --scale paper --control 0.5 "
             "--detect-coco train.json train/ val.json val/ --slurm --gpus-per-stage 8 --partition gpu")
R101_C4 = "python tools/train_det.py --config-file configs/COCO-Detection/faster_rcnn_R_101_C4.yaml"
HOW = {
    "make demo": How(MAKE),
    "make test": How(MAKE),
    "python tools/main_job.py --preset family --backbones resnet18 plain18 vgg11_bn resnet34 --dry-run": How(RUN),
    "python tools/compare_jobs.py output/main_job /other/machine/output/main_job": How(RUN),
    PAPER_JOB: How(RUN, ("--dry-run",)),  # a cluster's job: its dry run reads the weights, checks the plan
    "python tools/main_job.py --preset paper --dry-run": How(RUN),
    f"{R101_C4} --num-gpus 8": How(CHECK),
    f"{R101_C4} --config-file configs/Embedded-Detection/smoke.yaml": How(CHECK),
    f"{R101_C4} --dataset-coco mydata /data/train.json /data/images DATASETS.TRAIN (\"mydata\",)": How(CHECK),
    "python tools/convert_weights.py R-101.pkl r101.pth": How(RUN),
    "python tools/train_cls.py --model resnet101 --dataset imagefolder --data-root /data/imagenet --num-gpus 8 "
    "--test-mode ten-crop": How(CHECK),
    f"{R101_C4} MODEL.WEIGHTS r101.pth": How(CHECK),
}


def readme_blocks(text: str, language: str) -> list[str]:
    return [m[2] for m in FENCE.finditer(text) if m[1] == language]


def readme_commands(text: str) -> list[list[str]]:
    """The shell commands of the README's bash blocks, continuation lines joined, comments dropped."""
    lines = "\n".join(readme_blocks(text, "bash")).replace("\\\n", " ").splitlines()
    return [words for line in lines if (words := shlex.split(line, comments=True))]


def how_of(words: list[str]) -> How:
    key = " ".join(words)
    if key not in HOW:
        raise KeyError(f"README command not covered by tests/test_readme_examples.py HOW: {key}")
    return HOW[key]


def run_python_example(code: str, cwd: Path) -> None:
    """Execute a README Python block in `cwd` (where its files are), the repository as the hub's source."""
    code = code.replace('"path/to/this/repo"', repr(str(REPO)))
    here = os.getcwd()
    os.chdir(cwd)
    try:
        exec(compile(code, "README.md (python block)", "exec"), {"__name__": "readme_example"})
    finally:
        os.chdir(here)


def check_before_launch(words: list[str], user: Path) -> None:
    """What the tool checks before it launches anything: its parser, then the config (train_det: the files and
    overrides merged, the datasets registered, the weights' conventions read, check_run_config; train_cls: the
    run's settings, validated)."""
    tool, argv = words[1], words[2:]
    here = os.getcwd()
    os.chdir(user)
    try:
        if tool == "tools/train_det.py":
            from detection.config import apply_weights_conventions, check_run_config, get_detection_cfg
            from detection.engine.train_net import build_parser, config_overrides, register_cli_datasets

            args = build_parser().parse_args(argv)
            register_cli_datasets(args)
            cfg = get_detection_cfg(args.config_file, config_overrides(args.opts), freeze=False, read_weights=False)
            apply_weights_conventions(cfg, log=False)
            cfg.freeze()
            check_run_config(cfg, training=not args.eval_only)
        elif tool == "tools/train_cls.py":
            from classification.engine.config import config_from_args
            from classification.engine.train_net import build_parser

            config_from_args(build_parser().parse_args(argv))
        else:
            raise AssertionError(f"no pre-launch check for {tool}")
    finally:
        os.chdir(here)


def run_command(words: list[str], how: How, user: Path) -> subprocess.CompletedProcess:
    assert words[0] == "python", words
    proc = subprocess.run([sys.executable, *words[1:], *how.extra], cwd=user, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"{' '.join(words)}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return proc


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory, tiny_data) -> Path:
    """A user's working directory: the repository's tools and configs, MSRA's R-50.pkl / R-101.pkl (full width,
    Caffe2 blobs), a COCO train / val pair, two main-job directories."""
    user = tmp_path_factory.mktemp("readme_user")
    for name in ("tools", "configs"):
        (user / name).symlink_to(REPO / name)
    torch.manual_seed(0)
    for name, file in (("resnet50", "R-50.pkl"), ("resnet101", "R-101.pkl")):
        write_msra_pkl(with_random_bn_statistics(backbones.create_model(name)), user / file)
    ann = tiny_data / "annotations"
    for split in ("train", "val"):
        (user / f"{split}.json").symlink_to(ann / f"instances_{split}.json")
        (user / split).symlink_to(tiny_data)
    (user / "output").mkdir()
    main_job_dir(user / "a", "/home/x/repo", 1, groups=job_groups(90.0, 95.0, 0.2)).rename(user / "output/main_job")
    main_job_dir(user / "b", "/scratch/y/clone", 2, groups=job_groups(91.0, 94.0, 0.5))
    (user / "imagenet").mkdir()
    # the configs' MODEL.WEIGHTS detectron2://ImageNetPretrained/MSRA/R-101.pkl, as Detectron2 caches its download
    zoo = user / "iopath_cache/detectron2/ImageNetPretrained/MSRA"
    zoo.mkdir(parents=True)
    (zoo / "R-101.pkl").symlink_to(user / "R-101.pkl")
    return user


def _at_user_paths(words: list[str], user: Path) -> list[str]:
    """The README's absolute example paths, at the user directory's files."""
    paths = {"/data/train.json": user / "train.json", "/data/images": user / "train",
             "/data/imagenet": user / "imagenet", "/other/machine/output/main_job": user / "b/job"}
    return [str(paths.get(w, w)) for w in words]


def test_every_readme_command_is_covered_and_no_stale_entry_is_left():
    commands = {" ".join(w) for w in readme_commands(README.read_text(encoding="utf-8"))}
    assert commands, "README.md has no bash command: the pattern no longer matches its blocks"
    assert sorted(commands - set(HOW)) == [], "README commands without a way to run them here (add them to HOW)"
    assert sorted(set(HOW) - commands) == [], "HOW entries the README no longer has"


def test_the_readme_python_block_runs_as_written(user_dir):
    blocks = readme_blocks(README.read_text(encoding="utf-8"), "python")
    assert blocks, "README.md has no python block"
    for code in blocks:
        run_python_example(code, user_dir)


def test_the_readme_shell_commands_run_or_pass_their_tools_checks(user_dir, monkeypatch):
    """In README order, in one directory: convert_weights writes the r101.pth that the next command reads."""
    monkeypatch.setenv("FVCORE_CACHE", str(user_dir / "iopath_cache"))  # where Detectron2 finds its downloads
    for words in readme_commands(README.read_text(encoding="utf-8")):
        how = how_of(words)
        words = _at_user_paths(words, user_dir)
        if how.mode == RUN:
            run_command(words, how, user_dir)
        elif how.mode == CHECK:
            check_before_launch(words, user_dir)
        else:  # MAKE: the target exists and its recipe expands (make -n runs nothing)
            proc = subprocess.run(["make", "-n", *words[1:]], cwd=REPO, capture_output=True, text=True, timeout=60)
            assert proc.returncode == 0 and proc.stdout.strip(), f"{' '.join(words)}: {proc.stderr}"
    assert (user_dir / "r101.pth").is_file()


def test_a_broken_example_fails(user_dir, monkeypatch):
    monkeypatch.setenv("FVCORE_CACHE", str(user_dir / "iopath_cache"))
    with pytest.raises(ValueError, match="unknown model .resnet19."):
        run_python_example('import backbones; backbones.create_model("resnet19")', user_dir)
    with pytest.raises(AssertionError, match="no-such.pkl"):
        run_command(["python", "tools/convert_weights.py", "no-such.pkl", "x.pth"], How(RUN), user_dir)
    with pytest.raises(Exception, match="faster_rcnn_R_19_C4.yaml"):
        check_before_launch(["python", "tools/train_det.py", "--config-file",
                             "configs/COCO-Detection/faster_rcnn_R_19_C4.yaml"], user_dir)
    with pytest.raises(Exception, match="SOLVER.MAX_ITERS"):
        check_before_launch(["python", "tools/train_det.py", "--config-file",
                             "configs/COCO-Detection/faster_rcnn_R_101_C4.yaml", "SOLVER.MAX_ITERS", "10"], user_dir)
    with pytest.raises(KeyError, match="not covered"):
        how_of(["python", "tools/main_job.py", "--preset", "nonesuch"])
