"""tools/benchmark.py (detection.benchmarks): the statistics behind every figure it prints, and one real (cheap)
section end to end."""

import json

import pytest

from conftest import run_tool
from detection import benchmarks as benchmark


def test_verdicts_need_the_whole_interval_on_one_side_of_one():
    faster = benchmark.ratio_stats([2.0, 2.1, 1.9, 2.05, 2.0, 1.95, 2.02], [1.0] * 7)
    assert faster["verdict"] == "faster" and faster["ratio"] == pytest.approx(2.0, rel=0.03)
    assert faster["ci95"][0] > 1.0 and faster["rounds"] == 7
    slower = benchmark.ratio_stats([1.0] * 7, [1.5, 1.6, 1.4, 1.55, 1.5, 1.45, 1.52])
    assert slower["verdict"] == "slower" and slower["ci95"][1] < 1.0
    noisy = benchmark.ratio_stats([0.8, 1.3, 0.9, 1.2, 1.0, 1.25, 0.85], [1.0] * 7)
    assert noisy["verdict"].startswith("parity") and noisy["ci95"][0] < 1.0 < noisy["ci95"][1]


def test_alternate_times_every_side_each_round_in_alternating_order():
    calls = []
    times = benchmark.alternate({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=3,
                                warmup=1)
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
