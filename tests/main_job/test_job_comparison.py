"""tools/compare_jobs.py: two runs of the main job (another thread count or machine) stage by stage -- the numbers
that moved, the stages that ran other settings (named, not averaged in as noise), the verdicts recomputed in each
job -- on job directories written in the job's formats."""

import json

import pytest

from conftest import run_tool
from detection.main_job.compare import compare_jobs, comparison_lines
from fabricated_runs import job_groups, job_stage, main_job_dir


def test_two_jobs_are_compared_stage_by_stage_and_their_verdicts_recomputed(tmp_path):
    """Job A's legs are in the run layout before 2026-12-06 (summary in metrics.json), B's in Detectron2's."""
    a = main_job_dir(tmp_path / "a", "/home/x/repo", 1, groups=job_groups(90.0, 95.0, 0.2))
    b = main_job_dir(tmp_path / "b", "/scratch/y/clone", 2, r101_iters="6400", r101_ap50=93.0, vgg_ap50=94.0,
             pre_top1=79.5, groups=job_groups(93.5, 94.0, 1.0), summary="evaluation.json")
    job_stage(b, "detect/resnet101_scratch_d0", ["tools/train_det.py"], 2, "{not json")  # only in B
    job_stage(b, "detect/vgg16_bn_scratch_d0", ["tools/train_det.py"], 2, "{")
    job_stage(a, "detect/vgg16_bn_scratch_d0", ["tools/train_det.py"], 1, "{")  # in both, unusable in both
    cmp = compare_jobs(a, b)
    assert cmp["threads"] == {"A": [1], "B": [2]}
    # the repository and output paths differ between the machines; only MAX_ITER is a difference in settings
    assert cmp["settings_differ"] == [{"stage": "detect/resnet101_p0_d0",
                                       "differences": ["SOLVER.MAX_ITER 3200 vs 6400"]}]
    assert cmp["only_in_b"] == ["detect/resnet101_scratch_d0"] and cmp["only_in_a"] == []
    assert [u["stage"] for u in cmp["unusable"]] == ["detect/vgg16_bn_scratch_d0"]
    rows = {(r["stage"], r["metric"]): r for r in cmp["rows"]}
    assert rows[("pretrain/resnet101_p0", "top-1 error")]["diff"] == pytest.approx(0.5)  # error 20.0 -> 20.5
    assert rows[("detect/vgg16_bn_p0_d0", "AP50")]["diff"] == pytest.approx(-1.0)
    assert not rows[("detect/resnet101_p0_d0", "AP50")]["same_settings"]
    assert ("detect/vgg16_bn_p0_d0", "APl") not in rows  # NaN: undefined, not compared
    # the run with other settings (+3 AP50) is not counted as movement
    assert cmp["moved"]["AP50"] == {"mean_abs_diff": pytest.approx(1.0), "max_abs_diff": pytest.approx(1.0), "n": 1}
    (v,) = cmp["verdicts"]  # recomputed from each job's per-pretraining-run values with comparison.compare
    # 2 units a side with sd 0.2 between them: se = sqrt(0.2²/2 + 0.2²/2) = 0.2, Welch df 2, t(0.975, 2) = 4.3027
    assert v["A"]["call"] == "vgg16_bn_pretrained" and v["A"]["delta"] == pytest.approx(-5.0)
    assert v["A"]["interval"] == pytest.approx([-5.0 - 4.3027 * 0.2, -5.0 + 4.3027 * 0.2], abs=1e-3)
    assert v["B"]["call"] is None and not v["same_call"]
    assert "no call: the family-adjusted interval includes 0" in v["B"]["text"]
    text = "\n".join(comparison_lines(cmp))
    assert "NOT the same call" in text and "(other settings)" in text and "only in B (not compared)" in text
    same = compare_jobs(a, main_job_dir(tmp_path / "a2", "/home/x/repo", 1, groups=job_groups(90.0, 95.0, 0.2)))
    assert all(r["diff"] == 0 for r in same["rows"]) and same["verdicts"][0]["same_call"]
    assert "every matched stage ran the same command" in "\n".join(comparison_lines(same))


def test_an_added_option_is_named_and_the_stages_built_on_other_settings_are_not_noise(tmp_path):
    """B pretrained longer with one more option: the difference is aligned by option (not shifted item by item),
    and both detection legs, whose commands are identical, start from that pretraining -- other inputs, so they
    are named and kept out of the movement statistics."""
    a = main_job_dir(tmp_path / "a", "/r", 1, groups=job_groups(90.0, 95.0, 1.0),
             pre_options=("--iterations", "3750", "--checkpoint-period", "1875", "--val-samples", "2000"))
    b = main_job_dir(tmp_path / "b", "/r", 1, r101_ap50=93.0, groups=job_groups(93.0, 95.0, 1.0),
             pre_options=("--iterations", "15000", "--checkpoint-period", "1875", "--keep-checkpoints", "1",
                          "--val-samples", "2000"))
    cmp = compare_jobs(a, b)
    differ = {d["stage"]: d["differences"] for d in cmp["settings_differ"]}
    assert differ["pretrain/resnet101_p0"] == ["--iterations 3750 vs 15000", "--keep-checkpoints 1: only in B"]
    for leg in ("detect/resnet101_p0_d0", "detect/vgg16_bn_p0_d0"):
        assert differ[leg] == ["starts from pretrain/resnet101_p0, which ran other settings"]
    assert not any(r["same_settings"] for r in cmp["rows"]) and cmp["moved"] == {}
    text = "\n".join(comparison_lines(cmp))
    assert "detect/vgg16_bn_p0_d0: starts from pretrain/resnet101_p0" in text and "moved, AP50" not in text


def _set_code(job, *versions):
    for record in job.glob("*/*/main_job_stage.json"):
        rec = json.loads(record.read_text())
        record.write_text(json.dumps({**rec, "code": list(versions)}))


def test_the_code_versions_that_ran_the_stages_are_named(tmp_path):
    """Two runs at other commits (or a resume at another commit, or uncommitted changes) are not presented as
    reruns of the same code; records from before the job kept code versions say so."""
    a = main_job_dir(tmp_path / "a", "/r", 1, groups=job_groups(90.0, 95.0, 1.0))
    b = main_job_dir(tmp_path / "b", "/r", 1, groups=job_groups(90.0, 95.0, 1.0))
    text = "\n".join(comparison_lines(compare_jobs(a, b)))
    assert "code: A ran at not recorded, B at not recorded" in text
    sha_a, sha_b = "a" * 40, "b" * 40
    _set_code(a, {"commit": sha_a, "dirty": False})
    _set_code(b, {"commit": sha_a, "dirty": False})
    assert f"code: every matched stage ran at {sha_a[:10]} in both jobs" in "\n".join(comparison_lines(
        compare_jobs(a, b)))
    _set_code(b, {"commit": sha_a, "dirty": False}, {"commit": sha_b, "dirty": True})  # resumed at another commit
    cmp = compare_jobs(a, b)
    assert cmp["code"] == {"A": [sha_a[:10]], "B": [f"{sha_a[:10]} then {sha_b[:10]} with uncommitted changes"]}
    assert "are not only noise" in "\n".join(comparison_lines(cmp))
    _set_code(a, {"commit": sha_a, "dirty": True})  # the same commit, but changed files: not the same code
    _set_code(b, {"commit": sha_a, "dirty": True})
    assert "every matched stage ran at" not in "\n".join(comparison_lines(compare_jobs(a, b)))


def test_compare_jobs_cli_writes_json_and_refuses_what_is_not_amain_job_dir(tmp_path):
    a = main_job_dir(tmp_path / "a", "/r", 1, groups=job_groups(90.0, 95.0, 1.0))
    same = tmp_path / "same"
    same.symlink_to(a)
    itself = run_tool("tools/compare_jobs.py", a, same, timeout=120)  # it reported perfect reproducibility
    assert itself.returncode == 2 and f"are the same job directory ({a.resolve()})" in itself.stderr
    copy = main_job_dir(tmp_path / "b", "/r", 1, groups=job_groups(90.0, 95.0, 1.0))  # another run, the same numbers
    out = tmp_path / "cmp.json"
    proc = run_tool("tools/compare_jobs.py", a, copy, "--json", out, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "the same call" in proc.stdout and json.loads(out.read_text())["moved"]["AP50"]["max_abs_diff"] == 0
    bad = run_tool("tools/compare_jobs.py", a, tmp_path, timeout=120)
    assert bad.returncode == 2 and f"{tmp_path}: not the output of a finished main job" in bad.stderr
    assert "Traceback" not in bad.stderr
    with pytest.raises(FileNotFoundError, match="no such directory"):
        compare_jobs(a, tmp_path / "missing")


def test_the_degradation_stages_and_comparisons_are_matched_and_recomputed(tmp_path):
    """A job with the degradation experiment: its stages are compared stage by stage (training error), and its
    deeper-vs-shallower comparison (lower error ahead) is recomputed in each job from results.json's values."""
    jobs = []
    for side, deep in (("a", [80.0, 82.0]), ("b", [30.0, 31.0])):
        job = main_job_dir(tmp_path / side, "/r", 1, groups=job_groups(90.0, 95.0, 0.2))
        for seed, err in enumerate(deep):
            d = job / "degradation" / f"cifar_plain56_s{seed}"
            job_stage(job, f"degradation/cifar_plain56_s{seed}", ["tools/train_cls.py", "--seed", str(seed)], 1,
                   {"final": {"top1": 100 - err}, "history": {"train_error": [90.0, err]}})
            (d / "model_final.pth").write_bytes(b"")
        res = json.loads((job / "results.json").read_text())
        res["degradation"] = [{"model": "cifar_plain56", "errors": {"train": {"s0": [deep[0]], "s1": [deep[1]]}}},
                              {"model": "cifar_plain20", "errors": {"train": {"s0": [35.0], "s1": [36.0]}}}]
        res["degradation_comparisons"] = [{"a": "cifar_plain56", "b": "cifar_plain20", "metric": "training error"}]
        (job / "results.json").write_text(json.dumps(res))
        jobs.append(job)
    cmp = compare_jobs(*jobs)
    rows = {(r["stage"], r["metric"]): r for r in cmp["rows"]}
    assert rows[("degradation/cifar_plain56_s0", "training error")]["diff"] == pytest.approx(30.0 - 80.0)
    (v,) = [v for v in cmp["verdicts"] if v["kind"] == "degradation_comparisons"]
    assert v["A"]["call"] == "cifar_plain20" and not v["A"]["higher_is_better"]  # the deeper plain net degrades in A
    assert v["B"]["call"] == "cifar_plain56" and not v["same_call"]  # and not in B
    assert "NOT the same call" in "\n".join(comparison_lines(cmp))


def test_a_job_whose_control_was_not_called_keeps_its_calls_when_recomputed(tmp_path):
    """results.json's reading (main_job/control.py) holds in the recomputation and vetoes nothing: the same numbers
    are called in a job that passed its control and in one that did not; a file written when the control vetoed
    calls ("gate") is read the same way."""
    a = main_job_dir(tmp_path / "a", "/r", 1, groups=job_groups(80.0, 95.0, 0.2))
    b = main_job_dir(tmp_path / "b", "/r", 1, groups=job_groups(80.0, 95.0, 0.2))
    res = json.loads((b / "results.json").read_text())
    for key in ("reading", "gate"):
        (b / "results.json").write_text(json.dumps({**res, key: "this job could not see even its control (x)"}))
        (v,) = compare_jobs(a, b)["verdicts"]
        assert v["A"]["call"] == v["B"]["call"] == "vgg16_bn_pretrained" and v["same_call"]


@pytest.mark.bad_input
def test_jobs_scored_on_other_test_data_are_not_called_the_same_command(tmp_path):
    """bad7 case 8: two jobs whose legs ran the same command on other test images (results.json's test_set: the
    registered set by content) were 'the same command' and their AP difference run-to-run movement."""
    a = main_job_dir(tmp_path / "a", "/r", 1, groups=job_groups(90.0, 95.0, 0.2))
    b = main_job_dir(tmp_path / "b", "/r", 1, groups=job_groups(91.0, 95.0, 0.2))
    for job, content in ((a, "sha256:" + "a" * 64), (b, "sha256:" + "b" * 64)):
        res = json.loads((job / "results.json").read_text())
        (job / "results.json").write_text(json.dumps({**res, "test_set": {"name": "mine_test", "content": content}}))
    cmp = compare_jobs(a, b)
    assert cmp["other_test_data"].startswith("scored on other test data (A: mine_test sha256:aaaaaaaaaaaa...")
    differ = {d["stage"]: d["differences"] for d in cmp["settings_differ"]}
    assert set(differ) == {"detect/resnet101_p0_d0", "detect/vgg16_bn_p0_d0"}  # the pretraining is not scored on it
    assert not any(r["same_settings"] for r in cmp["rows"] if r["stage"].startswith("detect/"))
    assert "AP50" not in cmp["moved"]
    assert "every matched stage ran the same command" not in "\n".join(comparison_lines(cmp))
