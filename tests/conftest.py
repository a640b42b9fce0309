"""Shared test helpers: the repository paths, a tiny embedded detection dataset (COCO and VOC layouts, registered
as tiny_train / tiny_val / tiny_voc_train / tiny_voc_val), running a tool, and the train_det command line."""

import contextlib
import os
import sys
from pathlib import Path

import pytest
import torch

import detection  # noqa: F401  (first: lets detectron2 import without its compiled ops)
from detection.datasets.embedded import EmbeddedSpec, register_embedded

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
# tools/ is not an installed package: its benchmarks package (tools/benchmarks/) is imported as the tools import it,
# from the tools directory (appended: nothing there shadows an installed module)
sys.path.append(str(REPO / "tools"))
TINY_SPEC = EmbeddedSpec(num_train=12, num_val=8, image_size=96, min_object=24, max_object=48, seed=3)

# Two pytest-xdist workers share two cores: one intra-op thread each keeps the machine from oversubscribing. The
# processes a test starts (the tools through run_tool, Slurm jobs) inherit it through OMP_NUM_THREADS: at torch's
# default of one thread per core, two workers' tools ran 4 threads on 2 cores and OpenMP's spin-waits made a
# tool-running test ~3x slower. A test about thread counts passes its own (the main job's --threads).
TEST_THREADS = os.environ.get("TEST_TORCH_THREADS", "1")
os.environ["OMP_NUM_THREADS"] = TEST_THREADS
torch.set_num_threads(int(TEST_THREADS))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared (project reference material) is not present in this checkout")
    return SHARED


@pytest.fixture
def no_slurm(monkeypatch, tmp_path):
    """This machine as one without Slurm, whatever it has: every directory of PATH that holds Slurm's commands
    (submitit picks Slurm whenever `srun` is found; here /bin and /usr/bin) replaced by one of links to its other
    commands (submitit itself runs `tail` when a job left no result), and no SLURM_* variables (a test run inside a
    job)."""
    import shutil

    commands = {"srun", "sbatch", "squeue", "scontrol", "sinfo", "salloc", "sacct", "scancel"}
    shadow = tmp_path / "path_without_slurm"
    shadow.mkdir()
    path = []
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if not any(os.path.exists(os.path.join(d, c)) for c in commands):
            path.append(d)
            continue
        for name in os.listdir(d):
            if name not in commands and not os.path.lexists(shadow / name):  # /bin and /usr/bin may be one
                (shadow / name).symlink_to(os.path.join(d, name))
        if str(shadow) not in path:
            path.append(str(shadow))
    monkeypatch.setenv("PATH", os.pathsep.join(path))
    for name in [n for n in os.environ if n.startswith("SLURM_")]:
        monkeypatch.delenv(name)
    assert shutil.which("srun") is None and shutil.which("tail") is not None


@contextlib.contextmanager
def _exclusive(lock_file: Path):
    """Held by one pytest process at a time (fcntl lock on `lock_file`)."""
    import fcntl

    with open(lock_file, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def make_fifo(path: Path, unblock_after: float = 5.0) -> Path:
    """A FIFO at `path` and a writer that opens and closes it after `unblock_after` seconds if a reader is waiting:
    a reader that (wrongly) opened it gets EOF then, so a regression fails its test instead of hanging the suite."""
    import threading
    import time

    os.mkfifo(path)

    def unblock():  # non-blocking: where the code under test (rightly) never opens it, no reader ever comes
        time.sleep(unblock_after)
        for _ in range(20):
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
                return
            except OSError:  # ENXIO: no reader (yet); ENOENT: the test's directory is gone
                time.sleep(0.05)
    threading.Thread(target=unblock, daemon=True).start()
    return path


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A private two-node Slurm cluster (tools/slurm-local.sh: its own state dir, pid files and ports; nodes
    127.0.0.1 and 127.0.0.2 of 2 CPUs, no GPUs), one for the whole test run: the xdist workers that need it share
    it (a count of users under a file lock; the first starts it, the last stops it), because the machine has one
    munged and a worker stopping "its" cluster stopped the other's (--dist loadgroup, which kept the Slurm tests on
    one worker, groups nothing under pytest 9.2 + pytest-xdist 3.8). Clients find it through SLURM_CONF. Skips
    where it cannot run: not root, or the Debian packages slurmctld slurmd slurm-client munge absent (.ci/run
    installs them)."""
    import json
    import shutil
    import subprocess
    import time

    missing = [c for c in ("slurmctld", "slurmd", "sbatch", "munged") if not shutil.which(c)]
    if os.geteuid() != 0 or missing:
        pytest.skip(f"a real Slurm needs root and the Debian packages slurmctld slurmd slurm-client munge "
                    f"({'not root' if os.geteuid() else 'missing: ' + ' '.join(missing)})")
    from classification.engine.launch import find_free_port

    base = tmp_path_factory.getbasetemp()
    # pytest-N/, the run's directory, common to its workers (without xdist: this process's own)
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    state, users, started_with = shared / "slurm", shared / "slurm.users", shared / "slurm.env.json"
    script = REPO / "tools" / "slurm-local.sh"

    def cluster(command: str, env: dict) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(script), command], env=dict(os.environ, **env), capture_output=True,
                              text=True, timeout=120)

    with _exclusive(shared / "slurm.lock"):
        count = int(users.read_text()) if users.exists() else 0
        if count == 0:
            port = find_free_port()  # slurmctld; the two slurmd take port + 1 and + 2
            env = {"SLURM_LOCAL_DIR": str(state), "SLURM_LOCAL_NODES": "2", "SLURM_LOCAL_PORT": str(port),
                   "SLURM_LOCAL_CPUS": "2",
                   "SLURM_LOCAL_FIRST_JOB_ID": str(int(time.time()) % 100_000 * 10 + 10)}
            up = cluster("start", env)
            if up.returncode != 0:
                cluster("stop", env)
                pytest.fail(f"the private Slurm cluster did not start: {up.stderr[-2000:]} (logs: {state}/log)")
            started_with.write_text(json.dumps(env))
        users.write_text(str(count + 1))
    mp = pytest.MonkeyPatch()
    mp.setenv("SLURM_CONF", str(state / "slurm.conf"))  # submitit, sbatch/squeue/scontrol and the jobs see it
    try:
        yield state
    finally:
        mp.undo()
        with _exclusive(shared / "slurm.lock"):
            count = int(users.read_text()) - 1
            users.write_text(str(count))
            if count == 0:
                cluster("stop", json.loads(started_with.read_text()))


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    """The embedded generator at 96 px: 12 train / 8 val scenes, COCO json and VOC XML of the same images."""
    from detectron2.data import DatasetCatalog

    root = tmp_path_factory.mktemp("tiny_det")
    register_embedded(root, TINY_SPEC, prefix="tiny")
    DatasetCatalog.get("tiny_train")  # generate the files now
    return root


def run_tool(*args, cwd=REPO, timeout=600, env=None):
    """Run a command-line tool with this interpreter; returns CompletedProcess (text)."""
    import subprocess

    full_env = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=full_env)


def det_args(data: Path, out: Path, max_iter: int = 4, *extra: str) -> list[str]:
    """tools/train_det.py on `tiny_data` at 64 px: R-18 C4 (width 0.25, smoke overlay), `max_iter` iterations."""
    return ["tools/train_det.py",
            "--config-file", "configs/COCO-Detection/faster_rcnn_R_34_C4.yaml",
            "--config-file", "configs/Embedded-Detection/smoke.yaml",
            "--dataset-coco", "tiny_train", str(data / "annotations/instances_train.json"), str(data),
            "--dataset-coco", "tiny_val", str(data / "annotations/instances_val.json"), str(data),
            *extra,
            "MODEL.BACKBONES.NAME", "resnet18", "DATASETS.TRAIN", '("tiny_train",)', "DATASETS.TEST",
            '("tiny_val",)', "INPUT.MIN_SIZE_TRAIN", "(64,)", "INPUT.MAX_SIZE_TRAIN", "64", "INPUT.MIN_SIZE_TEST",
            "64", "INPUT.MAX_SIZE_TEST", "64", "SOLVER.IMS_PER_BATCH", "2", "SOLVER.MAX_ITER", str(max_iter),
            "SOLVER.CHECKPOINT_PERIOD", "2", "SOLVER.WARMUP_ITERS", "1", "MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE", "8",
            "MODEL.RPN.POST_NMS_TOPK_TEST", "10", "DATALOADER.NUM_WORKERS", "0", "OUTPUT_DIR", str(out)]


def with_random_bn_statistics(model: torch.nn.Module, seed: int = 1) -> torch.nn.Module:
    """`model` in eval mode with non-trivial BN running statistics, so that a weights check is not passed by the
    identity statistics of a fresh net."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    return model.eval()
