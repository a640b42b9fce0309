"""tools/benchmark.py (the tools/benchmarks package): the statistics behind every figure it prints, and one real
(cheap) section end to end."""

import json

import pytest

from benchmarks import stats, vs_commit
from conftest import run_tool


def test_verdicts_need_the_whole_interval_on_one_side_of_one():
    faster = stats.ratio_stats([2.0, 2.1, 1.9, 2.05, 2.0, 1.95, 2.02], [1.0] * 7)
    assert faster["verdict"] == "faster" and faster["ratio"] == pytest.approx(2.0, rel=0.03)
    assert faster["ci95"][0] > 1.0 and faster["rounds"] == 7
    slower = stats.ratio_stats([1.0] * 7, [1.5, 1.6, 1.4, 1.55, 1.5, 1.45, 1.52])
    assert slower["verdict"] == "slower" and slower["ci95"][1] < 1.0
    noisy = stats.ratio_stats([0.8, 1.3, 0.9, 1.2, 1.0, 1.25, 0.85], [1.0] * 7)
    assert noisy["verdict"].startswith("parity") and noisy["ci95"][0] < 1.0 < noisy["ci95"][1]


def test_alternate_times_every_side_each_round_in_alternating_order():
    calls = []
    times = stats.alternate({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=3, warmup=1)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"] and [len(v) for v in times.values()] == [3, 3]


@pytest.mark.slow
def test_peak_section_end_to_end(tmp_path):
    out = tmp_path / "bench.json"
    md = tmp_path / "bench.md"
    proc = run_tool("tools/benchmark.py", "--only", "peak", "--repeats", "3", "--threads", "1", "--json", out,
                    "--markdown", md, timeout=600)  # one thread, as every tool a test runs (conftest)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["machine"]["threads"] >= 1 and res["machine"]["torch"] and "onednn" in res["machine"]
    assert res["peak"]["matmul_gflops"] > 0 and 0 < res["peak"]["resnet50_fraction_of_peak"] < 2
    assert "### peak" in md.read_text() and "Machine:" in md.read_text()


@pytest.mark.slow
def test_detect_vs_commit_trains_each_tree_in_its_own_worker(tmp_path, monkeypatch, repo_root):
    """The earlier side is the commit's own code: extracted from git, run in a worker that imports that tree's
    packages (refused otherwise) on that tree's embedded data (checked equal to ours)."""
    from detection.engine.code_version import code_version

    monkeypatch.setenv("DETECTRON2_DATASETS", str(tmp_path / "datasets"))  # the current side's data
    res = vs_commit.bench_main_job_detect_vs_commit(3, iterations=1, commit="HEAD", legs=("vgg16_bn_pretrained",),
                                                    work_dir=tmp_path)
    head = code_version(repo_root)["commit"]
    assert res["baseline_commit"] == head and (tmp_path / "trees" / head / ".extracted").is_file()
    assert list(res) == ["conditions", "baseline_commit", "current", "vgg16_bn_pretrained"]
    row = res["vgg16_bn_pretrained"]
    assert row["rounds"] == 9 and row["ratio"] > 0 and row["ms_per_iteration_baseline"] > 0
    assert row["sides"]["baseline"]["optimizer"] == row["sides"]["current"]["optimizer"]  # HEAD vs this tree
    assert (tmp_path / "trees" / head / "datasets" / "embedded" / "manifest.json").is_file()  # its own data
    again = vs_commit.bench_main_job_detect_vs_commit(3, commit="no-such-commit", work_dir=tmp_path)
    assert "no-such-commit" in again["error"] and "not a commit" in again["error"]


def test_a_worker_that_imports_another_trees_code_is_refused(tmp_path, repo_root):
    tree = tmp_path / "tree"  # configs but no `detection` package: the worker finds the installed one instead
    tree.mkdir()
    (tree / "configs").symlink_to(repo_root / "configs")
    with pytest.raises(RuntimeError, match="imported detection from"):
        vs_commit.LegWorker(tree, "vgg16_bn", ["configs/COCO-Detection/faster_rcnn_vgg16.yaml",
                                               "configs/Embedded-Detection/smoke.yaml"], False, 1, 1,
                            tmp_path / "worker.log")


def test_training_data_digest_tells_other_data_apart(tmp_path):
    from detection.datasets.embedded import EmbeddedSpec, generate_embedded_dataset

    spec = {"num_train": 4, "num_val": 2, "num_holdout": 1, "image_size": 64, "min_object": 16, "max_object": 32}
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        generate_embedded_dataset(tmp_path / name, EmbeddedSpec(**spec, seed=seed))
    digests = {name: vs_commit.training_data_digest(tmp_path / name) for name in "abc"}
    assert digests["a"] == digests["b"] != digests["c"]


@pytest.mark.slow
def test_the_dataset_sections_time_both_sides_on_generated_files_and_check_the_results_agree(tmp_path, monkeypatch):
    """coco_train_load, voc07_eval, coco_val_eval and folder_scan at a tiny scale: each side runs, the results of
    ours and the reference's are compared (records, per-class AP, the 12 COCO numbers, the sample lists), and a
    side's peak memory comes from a fresh process."""
    from benchmarks import coco_train_load, coco_val_eval, folder_scan, voc07_eval

    monkeypatch.setenv("BENCHMARK_GENERATED_DIR", str(tmp_path))  # the fresh processes inherit it
    for bench, agree in ((coco_train_load.bench_coco_train_load, "identical_records"),
                         (voc07_eval.bench_voc07_eval, "identical_per_class_ap50"),
                         (coco_val_eval.bench_coco_val_eval, "identical_stats"),
                         (folder_scan.bench_folder_scan, "identical_samples")):
        row = bench(3, scale=0.0005, memory=bench is folder_scan.bench_folder_scan)
        assert row[agree] is True, (bench.__name__, row)
        assert row["rounds"] == 3 and row["ratio"] > 0 and "scale 0.0005" in row["conditions"]
    assert {"ours", "reference", "ours_over_reference"} <= set(row["memory"])
    assert row["memory"]["ours"]["peak_mib"] >= row["memory"]["ours"]["baseline_mib"] > 0
    assert (tmp_path / "coco_train-x0.0005" / ".complete").is_file()  # generated once, where it was told
