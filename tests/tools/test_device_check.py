"""tools/device_check.py without a GPU: --list names every check (so a typo or a broken import shows here, not in
the GPU's 15 minutes), and without CUDA it says so in one line and exits 2."""

from conftest import run_tool


def test_device_check_lists_what_it_would_run():
    proc = run_tool("tools/device_check.py", "--list", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name in ("test_bn_folding_on_cuda_equals_unfolded", "test_roi_align_on_cuda_matches_the_cpu_path",
                 "test_classification_amp_step_and_grad_scaler_resume",
                 "test_detectron2_amp_trainer_with_our_detectors",
                 "test_two_process_nccl_launch", "detector_r101_c4_train", "backbone_infer"):
        assert name in proc.stdout, name
    assert "estimated" in proc.stdout


def test_device_check_without_cuda_says_so_and_exits_2(tmp_path):
    proc = run_tool("tools/device_check.py", "--output-dir", tmp_path / "out", env={"CUDA_VISIBLE_DEVICES": ""},
                    timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "no CUDA device visible" in proc.stderr
    assert not (tmp_path / "out").exists()
