"""detection.main_job.graph: running the stage graph -- a failed stage stops it and names its log, a stop request
the signal handler could not raise still stops the stages, each stage records the code that ran it, --fresh
deletes only what the job made."""

import json
import os
import threading
import time
from dataclasses import replace

import pytest

from classification.engine.run_files import STAGE_LOG, STAGE_RECORD
from detection.engine.code_version import code_version, describe_versions
from detection.main_job import graph
from detection.main_job.graph import (
    STOP_REQUESTED,
    Estimator,
    StageConflict,
    read_stage_record,
    run_graph,
)
from detection.main_job.plan import Stage
from detection.project import project_files


def _stages(tmp_path, code: str, n: int = 2) -> list[Stage]:
    script = tmp_path / "stage.py"
    script.write_text(code)
    return [Stage(f"stage {c}", tmp_path / c, [str(script)], "detect", "m", "scratch", 1,
                  deps=[tmp_path / "a"] if c != "a" else []) for c in "ab"[:n]]


def _planned_stage(out, name, argv_out=None):
    """A stage of this job's plan with the record a finished stage leaves (its argv names its output dir)."""
    stage = Stage(f"stage {name}", out / "detect" / name, ["train_det.py", "OUTPUT_DIR", str(out / "detect" / name)],
                  "detect", "m", "scratch", 1)
    stage.out.mkdir(parents=True, exist_ok=True)
    (stage.out / STAGE_RECORD).write_text(json.dumps({"argv": ["train_det.py", "OUTPUT_DIR",
                                                               str(argv_out or stage.out)], "threads": 1}))
    return stage


def test_fresh_deletes_only_what_the_job_made(tmp_path):
    from detection.main_job.cli import _fresh

    stage = _planned_stage(tmp_path, "vgg16_bn_p0_d0")
    other = tmp_path / "detect" / "my_own_run"
    other.mkdir()
    (other / "model_final.pth").write_text("x")
    earlier_plan = tmp_path / "detect" / "resnet101_p1_d0"  # this job's directory, an earlier plan's stage
    earlier_plan.mkdir()
    (earlier_plan / STAGE_RECORD).write_text(json.dumps({"argv": ["OUTPUT_DIR", str(earlier_plan)]}))
    moved_in = tmp_path / "detect" / "copied_from_elsewhere"  # a record naming another directory
    moved_in.mkdir()
    (moved_in / STAGE_RECORD).write_text(json.dumps({"argv": ["OUTPUT_DIR", "/elsewhere/detect/x"]}))
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "report").mkdir()
    _fresh(tmp_path, [stage], lambda m: None)
    assert not stage.out.exists() and not (tmp_path / "report").exists()
    assert (other / "model_final.pth").is_file() and (tmp_path / "notes.txt").is_file()
    assert not earlier_plan.exists() and (moved_in / STAGE_RECORD).is_file()


def test_fresh_never_deletes_through_a_symlinked_stage_parent_or_a_stage_another_job_recorded(tmp_path):
    """--fresh deleted another job's stage (and a user's file in it) through a symlinked pretrain/."""
    from detection.main_job.cli import _fresh
    from detection.main_job.plan import PlanError

    elsewhere = tmp_path / "other_job"
    theirs = _planned_stage(elsewhere, "vgg16_bn_p0_d0")
    (theirs.out / "my_notes.txt").write_text("mine")
    job = tmp_path / "job"
    job.mkdir()
    (job / "detect").symlink_to(elsewhere / "detect")
    ours = Stage("s", job / "detect" / "vgg16_bn_p0_d0", [], "detect", "m", "scratch", 1)
    with pytest.raises(PlanError, match=r"--fresh: .*job/detect is a symbolic link; refusing to delete through it"):
        _fresh(job, [ours], lambda m: None)
    assert (theirs.out / "my_notes.txt").is_file()
    (job / "detect").unlink()
    copied = _planned_stage(job, "vgg16_bn_p0_d0", argv_out=theirs.out)  # a record that names another directory
    _fresh(job, [copied], lambda m: None)
    assert (copied.out / STAGE_RECORD).is_file()


def test_a_stop_request_the_signal_handler_could_not_raise_still_stops_the_stages(tmp_path):
    """Python swallows a KeyboardInterrupt raised in a fork hook (a SIGTERM landing while Popen starts a stage):
    the handler also sets STOP_REQUESTED, and run_graph polls it -- the running stage is stopped, none started."""
    stages = _stages(tmp_path, "import time; time.sleep(60)\n")
    timer = threading.Timer(1.5, STOP_REQUESTED.set)  # the flag alone, as when the exception was swallowed
    timer.start()
    t0 = time.time()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_graph(stages, 1, 1, Estimator({}, 1), lambda m: None)
    finally:
        timer.cancel()
        STOP_REQUESTED.clear()
    assert time.time() - t0 < 10  # the stage got SIGINT and ended; nobody waited for its 60 s
    assert (tmp_path / "a" / STAGE_LOG).exists() and not (tmp_path / "b").exists()


def test_a_failed_stage_stops_the_graph_and_names_its_log(tmp_path):
    stages = _stages(tmp_path, "import sys; print('boom: the reason'); sys.exit(3)\n")
    lines = []
    with pytest.raises(RuntimeError, match="stage a \\(exit 3\\)") as err:
        run_graph(stages, 2, 1, Estimator({}, 2), lines.append)
    assert "boom: the reason" in str(err.value) and str(tmp_path / "a" / STAGE_LOG) in str(err.value)
    assert not (tmp_path / "b").exists() and any("started: stage a" in ln for ln in lines)


def test_each_stage_records_the_code_that_ran_it_and_a_resume_at_other_code_adds_one(tmp_path, monkeypatch):
    """The record names the git commit (and uncommitted changes) of every run of the stage; the code version is
    provenance, not a setting: a resume at another commit is allowed, a change of command is still refused."""
    here = code_version(project_files().root)
    if here["commit"] is None:
        pytest.skip("not a git checkout (an installed copy): the commit is recorded as unknown")
    assert len(here["commit"]) == 40 and isinstance(here["dirty"], bool)
    (a,) = _stages(tmp_path, "import sys; sys.exit(3)\n", n=1)
    with pytest.raises(RuntimeError):
        run_graph([a], 1, 1, Estimator({}, 1), lambda m: None)
    assert json.loads((a.out / STAGE_RECORD).read_text()) == {"argv": a.argv, "threads": 1, "code": [here],
                                                              "inputs": {}}
    other = {"commit": "f" * 40, "dirty": False}
    monkeypatch.setattr(graph, "code_version", lambda repo: other)  # the next run: a checkout at another commit
    with pytest.raises(RuntimeError):
        run_graph([a], 1, 1, Estimator({}, 1), lambda m: None)  # not refused: the same command resumes
    assert read_stage_record(a.out).code == [here, other]
    changed = Stage("stage a", a.out, [*a.argv, "--more"], "detect", "m", "scratch", 1)
    with pytest.raises(StageConflict, match="other settings"):
        run_graph([changed], 1, 1, Estimator({}, 1), lambda m: None)
    with pytest.raises(StageConflict, match=r"is unfinished and ran with 1 thread\(s\): rerun with --threads 1 to "
                                            "resume it, or delete that directory to restart it with 2"):
        run_graph([a], 1, 2, Estimator({}, 1), lambda m: None)
    monkeypatch.setattr(graph, "stage_done", lambda s: True)  # finished: reused at any thread count, record kept
    run_graph([a], 1, 2, Estimator({}, 1), lambda m: None)
    assert read_stage_record(a.out).threads == 1
    assert code_version(tmp_path) == {"commit": None, "dirty": None}  # outside a checkout: unknown, never guessed
    assert describe_versions([code_version(tmp_path)]) == "unknown (not a git checkout)"


def test_a_stage_whose_dependency_was_retrained_or_deleted_is_not_reused(tmp_path, monkeypatch):
    """A pretraining stage deleted and retrained with other settings: the detection stages trained from its old
    weights were reused (decided by path and command). The record keeps each dependency's final checkpoint by
    identity; a change stops the job naming both."""
    writes_weights = "import pathlib, sys\n(pathlib.Path(sys.argv[-1]) / 'model_final.pth').write_bytes(b'w')\n"
    a, b = (replace(s, argv=[*s.argv, str(s.out)]) for s in _stages(tmp_path, writes_weights))
    monkeypatch.setattr(graph, "stage_done", lambda s: (s.out / "model_final.pth").is_file())  # these scripts'
    run_graph([a, b], 1, 1, Estimator({}, 1), lambda m: None)
    assert read_stage_record(b.out).inputs == graph.input_identity(b.deps) != {}
    assert graph.check_stage(b, 1)  # unchanged: reused
    os.utime(a.out / "model_final.pth", (1, 1))  # copied without its times (cp -r): the same content, reused
    assert graph.check_stage(b, 1)
    record = json.loads((b.out / STAGE_RECORD).read_text())
    (b.out / STAGE_RECORD).write_text(json.dumps({**record, "inputs": {str(a.out): None}}))
    assert graph.check_stage(b, 1)  # recorded at Slurm submission, before the dependency ran: unknown, reused
    graph.record_inputs(b.out, b.deps)  # what the Slurm job body writes when it starts
    assert read_stage_record(b.out).inputs == graph.input_identity(b.deps)
    (a.out / "model_final.pth").write_bytes(b"retrained with other settings")
    with pytest.raises(StageConflict, match=rf"{b.out} was trained from {a.out / 'model_final.pth'}, which "
                                            r"changed since \(retrained\?\): delete"):
        graph.check_stage(b, 1)
    (a.out / "model_final.pth").unlink()
    with pytest.raises(StageConflict, match="which is gone"):
        graph.check_stage(b, 1)


def test_a_pretraining_stage_trained_with_the_earlier_batch_draws_is_not_reused(tmp_path):
    """Runs on the cached path before 2026-12-05 drew a batch's crops and flips from its first stream position (one
    process drew other crops than two): such a stage is not reused as equal to what this code trains."""
    from classification.engine.run_files import AUGMENTATION_STREAM, CONFIG_JSON

    stage = Stage("pretrain m", tmp_path / "pretrain" / "m_p0", ["train_cls.py"], "pretrain", "m", "", 1)
    stage.out.mkdir(parents=True)
    (stage.out / STAGE_RECORD).write_text(json.dumps({"argv": stage.argv, "threads": 1}))
    settings = {"dataset": "embedded", "embedded_cache": True, "seed": 0}
    (stage.out / CONFIG_JSON).write_text(json.dumps(settings))
    with pytest.raises(StageConflict, match=r"m_p0 was trained before the cached batches drew each sample's crops "
                                            r"and flips from its own stream position .* Delete that directory"):
        graph.check_stage(stage, 1)
    (stage.out / CONFIG_JSON).write_text(json.dumps({**settings, "augmentation_stream": AUGMENTATION_STREAM}))
    assert graph.check_stage(stage, 1) is False  # this code's record: resumed (unfinished here), not refused
    (stage.out / CONFIG_JSON).write_text(json.dumps({**settings, "embedded_cache": False}))
    assert graph.check_stage(stage, 1) is False  # the uncached path always drew per sample


@pytest.mark.bad_input
def test_fresh_deletes_the_reports_own_files_and_keeps_a_users_file_in_report(tmp_path):
    """bad7 case 10: --fresh deleted a report/ folder whole, the user's report/paper.tex with it, exit 0. It deletes
    the files report.json says the report made (a name with a path in it is not one), and keeps the folder when
    something else is in it, saying so."""
    from detection.main_job.cli import _fresh

    stage = _planned_stage(tmp_path, "vgg16_bn_p0_d0")
    report = tmp_path / "report"
    report.mkdir()
    for name in ("report.md", "report.html", "report.csv", "pr_curves.png", "degradation.png"):
        (report / name).write_text("made by the job")
    (report / "report.json").write_text(json.dumps({"files": ["report.md", "report.html", "report.json",
                                                              "report.csv", "pr_curves.png", "degradation.png",
                                                              "../notes.txt"]}))
    (report / "paper.tex").write_text("the user's")
    (tmp_path / "notes.txt").write_text("mine")
    said = []
    _fresh(tmp_path, [stage], said.append)
    assert sorted(p.name for p in report.iterdir()) == ["paper.tex"] and (tmp_path / "notes.txt").is_file()
    assert "(kept what the job did not make in" in said[0] and said[0].endswith("report: paper.tex)")
    (report / "paper.tex").unlink()
    (report / "report.json").write_text(json.dumps({"plots": ["pr_curves.png"]}))  # written before "files"
    (report / "pr_curves.png").write_text("x")
    _fresh(tmp_path, [stage], said.append)
    assert not report.exists()
