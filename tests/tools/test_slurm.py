"""The cluster path against a real Slurm (a private two-node cluster started for the session, tools/slurm-local.sh):
train_det / train_cls on a CPU partition match a local run; submitit preemption (USR2) and a Slurm-side requeue
(`scontrol requeue`) both resume and end with the weights of an uninterrupted run; 2 nodes x 1 process and 1 node
x 2 processes (gloo) agree; a job the partition cannot run is refused at submission."""

import json
import re
import subprocess
import time

import pytest
import torch

from conftest import det_args, run_tool
from detection.main_job.family import COST_FIELDS
from detection.main_job.results import RUN_FIELDS

# one cluster serves every worker (conftest.slurm_cluster); the group keeps them on one worker where xdist's
# loadgroup works (not under pytest 9.2 + pytest-xdist 3.8), which spares jobs queueing behind each other
pytestmark = [pytest.mark.slow, pytest.mark.slurm, pytest.mark.xdist_group("slurm")]

ITERS = 40  # long enough that a requeue lands mid-run (Slurm kills 5 s after its SIGTERM)
ENV = {"OMP_NUM_THREADS": "1"}  # the local reference and the jobs (which inherit the environment) alike


def _slurm(tmp_path, *more) -> list[str]:
    """Submission flags of a CPU-partition job (they go before the KEY VALUE overrides)."""
    return ["--slurm", "--gpus-per-node", "0", "--timeout", "10", "--job-dir", str(tmp_path / "jobs"), *more]


def _det(tiny_data, out, *extra):
    return det_args(tiny_data, out, ITERS, *extra, "SOLVER.CHECKPOINT_PERIOD", "4", "TEST.EVAL_PERIOD", "0")


def _submit(argv, tmp_path) -> str:
    proc = run_tool(*argv, env=ENV, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return re.search(r"submitted (\d+)", proc.stdout).group(1)


def _wait(job_id: str, tmp_path, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        q = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True)
        if q.returncode == 0 and not q.stdout.strip():
            return
        time.sleep(1)
    subprocess.run(["scancel", job_id])
    logs = "".join(f.read_text()[-2000:] for f in (tmp_path / "jobs").glob(f"{job_id}/*_log.err"))
    pytest.fail(f"Slurm job {job_id} still queued or running after {timeout:.0f} s:\n{logs}")


def _submit_until_first_checkpoint(argv, out, tmp_path) -> str:
    job = _submit(argv, tmp_path)
    deadline = time.time() + 240
    while not (out / "last_checkpoint").is_file():
        assert time.time() < deadline, _job_log(job, tmp_path)
        time.sleep(0.5)
    return job


def _job_log(job_id: str, tmp_path) -> str:
    return "".join(f.read_text() for f in sorted((tmp_path / "jobs").glob(f"{job_id}/*_log.*")))


def _weights(out):
    return torch.load(out / "model_final.pth", weights_only=True)["model"]


def _assert_same_weights(a, b, **tol):
    assert set(a) == set(b)
    for k in a:
        torch.testing.assert_close(a[k], b[k], msg=k, **(tol or {"rtol": 0, "atol": 0}))


@pytest.fixture(scope="module")
def local_reference(tiny_data, tmp_path_factory):
    """The uninterrupted run, here, without Slurm."""
    out = tmp_path_factory.mktemp("reference") / "run"
    proc = run_tool(*_det(tiny_data, out), env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return _weights(out)


def test_train_det_on_a_cpu_partition_matches_a_local_run(slurm_cluster, tiny_data, tmp_path, local_reference):
    out = tmp_path / "run"
    job = _submit(_det(tiny_data, out, *_slurm(tmp_path)), tmp_path)
    _wait(job, tmp_path)
    assert json.loads((out / "evaluation.json").read_text())["iterations_completed"] == ITERS, _job_log(job, tmp_path)
    _assert_same_weights(_weights(out), local_reference)
    info = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout
    assert "NumCPUs=1" in info and "gres/gpu" not in info  # a CPU request: 1 CPU, no GPU


def test_submitit_preemption_resumes_to_the_uninterrupted_weights(slurm_cluster, tiny_data, tmp_path,
                                                                 local_reference):
    out = tmp_path / "run"
    job = _submit_until_first_checkpoint(_det(tiny_data, out, *_slurm(tmp_path)), out, tmp_path)
    subprocess.run(["scancel", "--signal=USR2", job], check=True)  # what Slurm sends before preempting
    _wait(job, tmp_path)
    log = _job_log(job, tmp_path)
    assert "requeue 1/" in log, log[-3000:]
    assert "Starting training from iteration 0" in (out / "log.txt").read_text()
    assert re.search(r"Starting training from iteration [1-9]", (out / "log.txt").read_text())
    _assert_same_weights(_weights(out), local_reference)


def test_a_slurm_side_requeue_resumes_to_the_uninterrupted_weights(slurm_cluster, tiny_data, tmp_path,
                                                                  local_reference):
    """`scontrol requeue` (also node failure, preemption without the user signal) re-runs the original
    submission, without --resume: SLURM_RESTART_COUNT tells it to resume instead of refusing OUTPUT_DIR."""
    out = tmp_path / "run"
    job = _submit_until_first_checkpoint(_det(tiny_data, out, *_slurm(tmp_path)), out, tmp_path)
    subprocess.run(["scontrol", "requeue", job], check=True)
    time.sleep(2)
    _wait(job, tmp_path)
    assert "restarted by Slurm (1 time(s)" in _job_log(job, tmp_path)
    assert json.loads((out / "evaluation.json").read_text())["iterations_completed"] == ITERS
    assert re.search(r"Starting training from iteration [1-9]", (out / "log.txt").read_text())
    _assert_same_weights(_weights(out), local_reference)


def test_two_nodes_and_two_processes_on_one_node_agree(slurm_cluster, tiny_data, tmp_path):
    """gloo across two slurmd nodes (127.0.0.1, 127.0.0.2) and two processes on one: the same world of 2."""
    runs = {}
    for name, layout in (("nodes", ["--nodes", "2", "--tasks-per-node", "1"]),
                         ("tasks", ["--nodes", "1", "--tasks-per-node", "2", "--cpus-per-task", "2"])):
        out = tmp_path / name
        job = _submit(det_args(tiny_data, out, 6, *_slurm(tmp_path, *layout), "SOLVER.CHECKPOINT_PERIOD", "6",
                               "TEST.EVAL_PERIOD", "0", "DATALOADER.NUM_WORKERS", "1"), tmp_path)
        runs[name] = (job, out)
    for job, out in runs.values():
        _wait(job, tmp_path, timeout=420)
        assert (out / "model_final.pth").is_file(), _job_log(job, tmp_path)[-3000:]
        assert "World size: 2" in (out / "log.txt").read_text() or (out / "log.txt.rank1").is_file()
    # one thread per process in both layouts (each process gets its task's CPUs / processes): the same arithmetic
    _assert_same_weights(_weights(runs["nodes"][1]), _weights(runs["tasks"][1]))


def test_train_cls_on_slurm_matches_a_local_run(slurm_cluster, tmp_path):
    argv = ["tools/train_cls.py", "--model", "cifar_resnet20", "--dataset", "embedded", "--image-size", "32",
            "--train-samples", "64", "--val-samples", "32", "--iterations", "6", "--batch-size", "16",
            "--eval-period", "6", "--checkpoint-period", "3", "--workers", "0"]
    local = run_tool(*argv, "--output-dir", tmp_path / "local", env=ENV)
    assert local.returncode == 0, local.stderr[-3000:]
    job = _submit([*argv, "--output-dir", tmp_path / "slurm", *_slurm(tmp_path)], tmp_path)
    _wait(job, tmp_path)
    assert (tmp_path / "slurm" / "model_final.pth").is_file(), _job_log(job, tmp_path)[-3000:]
    _assert_same_weights(_weights(tmp_path / "slurm"), _weights(tmp_path / "local"))


@pytest.mark.parametrize("request_args,complaint", [
    (["--gpus-per-node", "0", "--cpus-per-task", "8"], "8 CPUs per node (a node has 2"),
    (["--gpus-per-node", "1", "--cpus-per-gpu", "1"], "1 GPUs per node (a node has 0"),
    (["--gpus-per-node", "0", "--nodes", "3"], "3 nodes (it has 2"),
])
def test_a_job_the_partition_cannot_run_is_refused_at_submission(slurm_cluster, tiny_data, tmp_path, request_args,
                                                                 complaint):
    proc = run_tool(*det_args(tiny_data, tmp_path / "run", 2, "--slurm", *request_args), env=ENV, timeout=120)
    assert proc.returncode != 0 and complaint in proc.stderr and "not submitted" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()


def test_the_main_job_as_a_slurm_job_graph_reports_what_a_local_run_reports(slurm_cluster, tmp_path):
    """tools/main_job.py --slurm: one job per stage, detection after its pretraining (afterok), the report last;
    at a tiny schedule its results equal those of the same job run here."""
    # one backbone: its graph has every kind of edge (pretraining -> transfer, all -> report) at half the stages
    tiny = ["--backbones", "vgg16_bn", "--test-scenes", "100", "--pretrain-seeds", "0", "--seeds", "0",
            "--pretrain-epochs", "2", "--pretrain-images", "128", "--pretrain-val-images", "32", "--detect-iterations",
            "2", "--threads", "1"]
    submitted = run_tool("tools/main_job.py", "--slurm", "--output-dir", tmp_path / "slurm", *tiny, env=ENV,
                         timeout=300)
    assert submitted.returncode == 0, submitted.stdout[-2000:] + submitted.stderr[-3000:]
    ids = re.findall(r"submitted (\d+): ", submitted.stdout)
    report_id = re.search(r"report job (\d+) submitted", submitted.stdout).group(1)
    assert len(ids) == 3 and report_id == ids[-1]  # pretraining, the pretrained detector, the report
    waiting = subprocess.run(["scontrol", "show", "job", report_id], capture_output=True, text=True).stdout
    assert re.search(r"Dependency=afterok:\d+", waiting), waiting
    local = run_tool("tools/main_job.py", "--output-dir", tmp_path / "local", *tiny, env=ENV, timeout=900)
    assert local.returncode == 0, local.stderr[-3000:]
    for job in ids:
        _wait(job, tmp_path / "slurm", timeout=600)
    results = tmp_path / "slurm" / "results.json"
    assert results.is_file(), (tmp_path / "slurm" / "slurm" / "report.log").read_text()[-3000:]
    here, there = (json.loads(p.read_text()) for p in (results, tmp_path / "local" / "results.json"))
    assert here["leaderboard"], here  # one row: the backbone
    for row in here["leaderboard"] + there["leaderboard"]:  # times and memory of each run: measured, not computed
        for key in COST_FIELDS:
            del row[key]
    for key in RUN_FIELDS:  # the job's minutes, machine, day: of the run, not its results
        here.pop(key), there.pop(key)
    assert here == there
    assert (tmp_path / "slurm" / "report" / "report.html").is_file()


def test_a_real_data_main_job_on_slurm_survives_a_requeue_and_reports_what_a_local_run_reports(slurm_cluster,
                                                                                              tmp_path):
    """The real-data path on the cluster: --detect-coco files (the embedded set exported) and a --weights file, one
    Slurm job per stage; the stage is requeued by Slurm once after its first checkpoint, resumes from it, and the
    job's results equal those of the same job run here."""
    import torchvision

    from detection.datasets.export import export_embedded

    files = export_embedded(tmp_path / "data", classification=False)
    weights = tmp_path / "resnet18.pth"
    torch.manual_seed(0)
    torch.save(torchvision.models.resnet18().state_dict(), weights)
    job = ["--preset", "quick", "--backbones", "resnet18", "--weights", f"resnet18={weights}", "--width", "1",
           "--arms", "frozenbn_pretrained", "--seeds", "0", "--detect-iterations", "8", "--threads", "1",
           "--no-control", "--detect-coco", *files.coco_args("val_100")]  # one stage: the requeue is what is tested
    submitted = run_tool("tools/main_job.py", "--slurm", "--output-dir", tmp_path / "slurm", *job, env=ENV,
                         timeout=300)
    assert submitted.returncode == 0, submitted.stdout[-2000:] + submitted.stderr[-3000:]
    stage_id, report_id = re.findall(r"submitted (\d+): ", submitted.stdout)
    leg = tmp_path / "slurm" / "detect" / "resnet18_frozenbn_pretrained_given_d0"
    deadline = time.time() + 300
    while not (leg / "last_checkpoint").is_file():  # iteration 4 of 8 (the main job checkpoints at half)
        assert time.time() < deadline, (leg / "stage.log").read_text()[-3000:]
        time.sleep(0.5)
    subprocess.run(["scontrol", "requeue", stage_id], check=True)
    local = run_tool("tools/main_job.py", "--output-dir", tmp_path / "local", *job, env=ENV, timeout=600)
    assert local.returncode == 0, local.stderr[-3000:]
    for j in (stage_id, report_id):
        _wait(j, tmp_path / "slurm", timeout=600)
    assert re.search(r"Starting training from iteration [1-9]", (leg / "log.txt").read_text())
    results = tmp_path / "slurm" / "results.json"
    assert results.is_file(), (tmp_path / "slurm" / "slurm" / "report.log").read_text()[-3000:]
    here, there = (json.loads(p.read_text()) for p in (results, tmp_path / "local" / "results.json"))
    for row in here["leaderboard"] + there["leaderboard"]:
        for key in COST_FIELDS:
            del row[key]
    for key in RUN_FIELDS:
        here.pop(key), there.pop(key)
    assert here == there and here["groups"][0]["unit"] == "fine-tuning run"


def test_a_main_job_stage_spans_two_nodes_as_one_distributed_run(slurm_cluster, tmp_path):
    """--nodes-per-stage 2: a detection stage is one Slurm job on both nodes of the tests' cluster, one process
    each (CPU, gloo): node 0 writes stage.log, node 1 stage.node1.log, the run is one of world size 2."""
    import torchvision

    from detection.datasets.export import export_embedded

    files = export_embedded(tmp_path / "data", classification=False)
    weights = tmp_path / "resnet18.pth"
    torch.manual_seed(0)
    torch.save(torchvision.models.resnet18().state_dict(), weights)
    out = tmp_path / "job"
    submitted = run_tool("tools/main_job.py", "--slurm", "--nodes-per-stage", "2", "--preset", "quick",
                         "--backbones", "resnet18", "--weights", f"resnet18={weights}", "--width", "1", "--arms",
                         "frozenbn_pretrained", "--seeds", "0", "--detect-iterations", "2", "--threads", "1",
                         "--no-control", "--detect-coco", *files.coco_args("val_100"), "--output-dir", out, env=ENV,
                         timeout=300)
    assert submitted.returncode == 0, submitted.stdout[-2000:] + submitted.stderr[-3000:]
    stage_id, report_id = re.findall(r"submitted (\d+): ", submitted.stdout)
    nodes = subprocess.run(["scontrol", "show", "job", stage_id], capture_output=True, text=True).stdout
    assert re.search(r"NumNodes=2\b", nodes), nodes
    for j in (stage_id, report_id):
        _wait(j, out, timeout=600)
    leg = out / "detect" / "resnet18_frozenbn_pretrained_given_d0"
    assert (leg / "stage.node1.log").is_file(), (leg / "stage.log").read_text()[-3000:]
    assert "World size: 2" in (leg / "log.txt").read_text()
    assert json.loads((out / "results.json").read_text())["groups"][0]["values"]["AP"]
