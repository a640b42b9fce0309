"""tools/train_det.py end to end on a tiny dataset: train + evaluate, resume, eval-only, 2-process gloo, and a real
submitit executor (local) with a simulated preemption that requeues and resumes."""

import json
import os
import time
from pathlib import Path

import pytest
import torch
import yaml

from conftest import det_args, run_tool
from detection.report import load_run

pytestmark = [pytest.mark.slow,  # every test here runs the tools end to end
              pytest.mark.d2main]  # and runs again against Detectron2 main (make test-d2main)


def test_train_evaluate_and_outputs(tiny_data, tmp_path):
    out = tmp_path / "run"
    proc = run_tool(*det_args(tiny_data, out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    for f in ("config.yaml", "log.txt", "model_final.pth", "model_0000001.pth", "metrics.json", "evaluation.json",
              "last_checkpoint"):
        assert (out / f).is_file(), f
    assert list(out.glob("events.out.tfevents.*")) and not (out / "training_log.json").exists()
    recorded = yaml.safe_load((out / "config.yaml").read_text())["MODEL"]  # what ran, in Detectron2's keys too
    assert recorded["BACKBONES"]["NAME"] == "resnet18" and recorded["RESNETS"]["DEPTH"] == 18
    metrics = json.loads((out / "evaluation.json").read_text())
    bbox = metrics["evaluation"]["tiny_val"]["bbox"]
    assert set(bbox) >= {"AP", "AP50", "AP75", "APs", "APm", "APl", "AR100"} and metrics["iterations_completed"] == 4
    # metrics.json is Detectron2's JSONWriter log: a record per logged iteration, the evaluation scalars as its
    # EvalHook puts them ("bbox/AP", at the iteration after the last step), what D2's tools and plot scripts read
    log = [json.loads(line) for line in (out / "metrics.json").read_text().splitlines()]
    for f in [*out.glob("*.json"), *out.glob("inference/*/*.json")]:  # standard JSON: jq and JSON.parse read them
        text = f.read_text()
        for doc in text.splitlines() if f.name == "metrics.json" else [text]:
            json.loads(doc, parse_constant=lambda c, f=f: pytest.fail(f"{f.name} holds {c}, which is not JSON"))
    assert all(isinstance(r["iteration"], int) for r in log) and "total_loss" in log[0] and "lr" in log[0]
    assert log[-1]["iteration"] == 4 and log[-1]["bbox/AP"] == pytest.approx(bbox["AP"])
    assert (out / "inference" / "tiny_val" / "coco_eval_bbox.json").is_file()
    # the model-zoo columns, each measured by the run and read back by the one run reader
    assert metrics["measured_on"] == {"device": "cpu", "threads": 1, "processes": 1}
    assert metrics["inference"]["tiny_val"]["s_per_image"] > 0 and metrics["inference"]["tiny_val"]["images_timed"] == 3
    assert metrics["train"]["peak_memory_mb"] > 100 and metrics["parameters"] > 1e5
    run = load_run(out)
    assert run.train_s_per_iter > 0 and run.inference_s_per_image == metrics["inference"]["tiny_val"]["s_per_image"]
    assert "train:" in proc.stderr and "\r" not in proc.stderr  # the progress bar, as lines in a captured stream
    log_txt = (out / "log.txt").read_text()
    assert "\x1b[" not in log_txt and "\x1b[" not in proc.stdout  # the config dump uncoloured
    # Detectron2's evaluation lines, which users and scripts grep: print_csv_format's and the per-category table
    assert "copypaste: Task: bbox" in log_txt and "copypaste: AP,AP50,AP75,APs,APm,APl" in log_txt
    assert "Per-category bbox AP:" in log_txt and "| category" in log_txt
    ckpt = torch.load(out / "model_final.pth", weights_only=True)
    assert ckpt["trainer"]["_trainer"]["optimizer"]["state"]  # SGD momentum is checkpointed (D2 0.6 lost it)

    evaluated = run_tool(*det_args(tiny_data, tmp_path / "eval", 4, "--eval-only"), "MODEL.WEIGHTS",
                         str(out / "model_final.pth"))
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    again = json.loads((tmp_path / "eval" / "evaluation.json").read_text())["evaluation"]["tiny_val"]["bbox"]
    assert again["AP"] == pytest.approx(bbox["AP"])
    # EVAL.FAST_INFERENCE: the same weights evaluated through the compiled copy; a float-level change may move a
    # detection across a threshold, not the result
    fast = run_tool(*det_args(tiny_data, tmp_path / "eval_fast", 4, "--eval-only"), "MODEL.WEIGHTS",
                    str(out / "model_final.pth"), "EVAL.FAST_INFERENCE", "True")
    assert fast.returncode == 0, fast.stderr[-3000:]
    fast_metrics = json.loads((tmp_path / "eval_fast" / "evaluation.json").read_text())
    assert fast_metrics["evaluation"]["tiny_val"]["bbox"]["AP"] == pytest.approx(bbox["AP"], abs=1.0)
    assert fast_metrics["inference"]["tiny_val"]["fast_inference"] is True
    from backbones.inference import compile_unavailable_reason

    compiled = compile_unavailable_reason("cpu") is None
    assert (fast_metrics["inference"]["tiny_val"]["compile_seconds"] > 0) == compiled


def test_resume_continues_from_the_last_checkpoint(tiny_data, tmp_path):
    """Also from a run written before 2026-12-06 (summary in metrics.json, log in training_log.json): it continues in
    Detectron2's layout, its log whole (what was logged before the resume and after), nothing of it lost."""
    out = tmp_path / "resume"
    first = run_tool(*det_args(tiny_data, out, 2))
    assert first.returncode == 0, first.stderr[-3000:]
    (out / "metrics.json").rename(out / "training_log.json")  # the layout before 2026-12-06
    (out / "evaluation.json").rename(out / "metrics.json")
    assert load_run(out).status == "finished"
    second = run_tool(*det_args(tiny_data, out, 4, "--resume"))
    assert second.returncode == 0, second.stderr[-3000:]
    log = (out / "log.txt").read_text()
    assert "Starting training from iteration 2" in log
    assert json.loads((out / "evaluation.json").read_text())["iterations_completed"] == 4
    assert not (out / "training_log.json").exists()
    rows = [json.loads(line) for line in (out / "metrics.json").read_text().splitlines()]
    # logged every 20 iterations and at the last: each attempt's last iteration, then its evaluation (EvalHook)
    assert [(r["iteration"], "total_loss" in r, "bbox/AP" in r) for r in rows] == [
        (1, True, False), (2, False, True), (3, True, False), (4, False, True)]
    assert [r["iteration"] for r in load_run(out).train_log] == [1, 2, 3, 4]  # the report's reading of it


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two CPU processes need two cores (--num-gpus 2)")
def test_two_processes_with_gloo(tiny_data, tmp_path):
    out = tmp_path / "ddp"
    proc = run_tool(*det_args(tiny_data, out, 2, "--num-gpus", "2"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = (out / "log.txt").read_text()
    assert "World size: 2" in log and "DistributedDataParallel" in log
    assert (out / "evaluation.json").is_file()


def test_bad_config_key_names_the_key(tiny_data, tmp_path):
    proc = run_tool(*det_args(tiny_data, tmp_path / "bad", 2), "MODEL.NOT_A_KEY", "1")
    assert proc.returncode != 0 and "MODEL.NOT_A_KEY" in proc.stderr


def _children(pid: int) -> list[int]:
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def test_submitit_local_preemption_requeues_and_resumes(tiny_data, tmp_path, no_slurm):
    """A real submitit executor (cluster='local'): after the first checkpoint the task gets USR2, as Slurm sends
    on preemption; checkpoint() resubmits with --resume and the requeued job finishes from the checkpoint."""
    import signal

    import submitit

    from detection.engine.train_net import run

    out = tmp_path / "slurm"
    argv = det_args(tiny_data, out, 30, "--slurm", "--cluster", "local", "--job-dir", str(tmp_path / "jobs"),
                    "--timeout", "30")[1:]
    job = run(argv)
    assert isinstance(job, submitit.Job)
    deadline = time.time() + 240
    while not (out / "last_checkpoint").is_file():
        assert time.time() < deadline and not job.done(), job.stderr()
        time.sleep(0.5)
    tasks = _children(job._process.pid)
    assert tasks, "no submitit task process found"
    for pid in tasks:
        os.kill(pid, signal.SIGUSR2)  # preemption
    job.result()  # waits; raises if the job failed
    stderr = job.stderr() or ""
    assert "preempted" in stderr and "requeue 1/" in stderr, stderr[-3000:]
    assert "torch.jit.script" not in stderr  # fvcore's FutureWarning is hidden in the job too (SubmititJob)
    log = (out / "log.txt").read_text()
    assert "Loading trainer from" in log  # optimizer, scheduler and iteration restored
    resumed_at = [int(line.rsplit(" ", 1)[1]) for line in log.splitlines()
                  if "Starting training from iteration" in line]
    assert resumed_at[0] == 0 and resumed_at[-1] >= 2
    assert json.loads((out / "evaluation.json").read_text())["iterations_completed"] == 30


def test_submitit_repeated_timeouts_stop_after_the_bound(tiny_data, tmp_path, no_slurm):
    """Each allocation times out (the signal comes 45 s before a 1-minute limit: 15 s leave a loaded machine time to
    start the job and install its handler); after --max-requeues requeues the job stops with a message saying why."""
    from detection.engine.train_net import run

    out = tmp_path / "timeouts"
    argv = det_args(tiny_data, out, 100000, "--slurm", "--cluster", "local", "--job-dir", str(tmp_path / "jobs"),
                    "--timeout", "1", "--signal-delay", "45", "--max-requeues", "1")[1:]
    job = run(argv)
    with pytest.raises(Exception, match="not requeued|timed-out too many times|checkpoint function returned None"):
        job.result()
    assert "requeue 1/1" in (job.stderr() or "")


def test_a_run_scaled_by_the_linear_rule_records_and_finishes_what_it_trained(tiny_data, tmp_path):
    """SOLVER.REFERENCE_WORLD_SIZE (the main job's paper scale): Detectron2 rescales batch, lr and schedule to the
    processes that run; config.yaml records the rescaled values, so the run reads as finished at its own length
    (it read "incomplete: 8 of 4 iterations" when config.yaml kept the unscaled schedule)."""
    out = tmp_path / "run"
    proc = run_tool(*det_args(tiny_data, out, 4, "SOLVER.REFERENCE_WORLD_SIZE", "2", "SOLVER.BASE_LR", "0.002"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    cfg = (out / "config.yaml").read_text()
    assert all(line in cfg for line in ("  IMS_PER_BATCH: 1\n", "  MAX_ITER: 8\n", "  BASE_LR: 0.001\n",
                                        "  REFERENCE_WORLD_SIZE: 1\n"))
    run = load_run(out)
    assert run.status == "finished" and run.iterations == 8
