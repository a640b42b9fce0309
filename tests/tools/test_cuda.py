"""The CUDA paths, checked on a GPU (`tools/device_check.py` runs these; each skips here without CUDA): BN folding,
RoIAlign (torchvision's on CUDA) against the CPU reference, channels_last, the classification trainer's AMP step
with its GradScaler state saved and resumed, Detectron2's AMPTrainer with our R-101-C4 and VGG-16 detectors, and
a 2-process NCCL launch where two GPUs are visible."""

import json

import pytest
import torch

import backbones
from backbones.blocks import set_norm_folding
from conftest import det_args, run_tool

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible (a GPU check)")]


@pytest.fixture
def full_fp32():
    """Equality checks in true fp32: cuDNN convolutions use TF32 by default on Ampere and later (10-bit mantissa), so
    two correct but differently ordered computations (folded vs unfolded, channels_last vs NCHW) differ by ~1e-2
    relative -- a precision setting, not an error of the code under test (first device check, H200)."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def _net(name, **kw):
    torch.manual_seed(0)
    return backbones.create_model(name, num_classes=10, width=0.5, **kw).cuda()


@pytest.mark.parametrize("name", ["resnet50", "vgg16_bn"])
def test_bn_folding_on_cuda_equals_unfolded(name, full_fp32):
    model = _net(name, norm="FrozenBN")  # training mode: FrozenBN folds with gradients
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.eval()  # VGG's classifier: two passes with other dropout masks differ by more than any fold could
    with torch.no_grad():
        for n, b in model.named_buffers():
            if n.endswith("running_var"):
                b.uniform_(0.5, 2.0)
    x = torch.randn(4, 3, 64, 64, device="cuda", requires_grad=True)
    outs, grads = [], []
    for fold in (True, False):
        set_norm_folding(model, fold)
        model.zero_grad()
        x.grad = None
        y = model(x)
        y.square().sum().backward()
        outs.append(y.detach())
        grads.append([x.grad.clone()] + [p.grad.clone() for p in model.parameters() if p.grad is not None])
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-4, atol=1e-4)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)


def test_roi_align_on_cuda_matches_the_cpu_path():
    from detection.modeling.roi_align import FastBackwardROIAlign

    torch.manual_seed(0)
    feats = torch.randn(2, 8, 20, 24, dtype=torch.float64)
    rois = torch.tensor([[0, 1.0, 2.0, 15.0, 12.0], [1, 0.0, 0.0, 23.0, 19.0], [0, 5.5, 3.2, 9.1, 18.7]],
                        dtype=torch.float64)
    pool = FastBackwardROIAlign((7, 7), 0.5, 0, aligned=True)
    results = []
    for device in ("cpu", "cuda"):
        f = feats.to(device, copy=True).requires_grad_(True)  # a leaf on each device (its own .grad)
        out = pool(f, rois.to(device))
        out.pow(2).sum().backward()
        results.append((out.detach().cpu(), f.grad.cpu()))
    torch.testing.assert_close(results[0][0], results[1][0])
    torch.testing.assert_close(results[0][1], results[1][1])


def test_channels_last_on_cuda_equals_nchw(full_fp32):
    model = _net("resnet50").eval()
    x = torch.randn(2, 3, 96, 96, device="cuda")
    with torch.no_grad():
        ref = model(x)
        model_cl = model.to(memory_format=torch.channels_last)
        out = model_cl(x.contiguous(memory_format=torch.channels_last))
    torch.testing.assert_close(out, ref, rtol=1e-3, atol=1e-3)


def test_classification_amp_step_and_grad_scaler_resume(tmp_path):
    from classification.engine.trainer import ClsConfig, train

    def cfg(out, iterations):
        return ClsConfig(model="cifar_resnet20", dataset="embedded", image_size=32, train_samples=256, val_samples=64,
                         iterations=iterations, batch_size=32, lr=0.05, eval_period=iterations, checkpoint_period=4,
                         workers=0, amp=True, output_dir=str(out))

    res = train(cfg(tmp_path / "a", 4))
    assert res["history"]["train_error"] and all(e == e for e in res["history"]["test_error"])  # finite, not NaN
    state = torch.load(tmp_path / "a" / "model_final.pth", weights_only=True)
    assert state["scaler"] and state["scaler"]["scale"] > 0  # the AMP loss scale is checkpointed
    (tmp_path / "a" / "model_final.pth").rename(tmp_path / "a" / "model_0000004.pth")
    (tmp_path / "a" / "last_checkpoint").write_text("model_0000004.pth")
    res = train(cfg(tmp_path / "a", 8))  # resumes at 4 with the scaler state
    assert res["images_seen"] == 8 * 32
    assert torch.load(tmp_path / "a" / "model_final.pth", weights_only=True)["scaler"]["scale"] > 0


@pytest.mark.parametrize("config,name", [("faster_rcnn_R_101_C4.yaml", "resnet101"),
                                         ("faster_rcnn_vgg16.yaml", "vgg16")])
def test_detectron2_amp_trainer_with_our_detectors(tiny_data, tmp_path, config, name):
    args = det_args(tiny_data, tmp_path / "run", 6)
    args[args.index("configs/COCO-Detection/faster_rcnn_R_34_C4.yaml")] = f"configs/COCO-Detection/{config}"
    args[args.index("MODEL.BACKBONES.NAME") + 1] = name
    proc = run_tool(*args, "MODEL.DEVICE", "cuda", "SOLVER.AMP.ENABLED", "True", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "with AMPTrainer" in (tmp_path / "run" / "log.txt").read_text()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.json").read_text().splitlines()]
    losses = [r["total_loss"] for r in rows if "total_loss" in r]
    assert losses and all(torch.isfinite(torch.tensor(v)) for v in losses)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="a 2-process NCCL launch needs two visible GPUs")
def test_two_process_nccl_launch(tiny_data, tmp_path):
    args = det_args(tiny_data, tmp_path / "ddp", 4)
    proc = run_tool(args[0], "--num-gpus", "2", *args[1:], "MODEL.DEVICE", "cuda", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "ddp" / "model_final.pth").is_file()
