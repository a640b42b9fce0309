"""detection.modeling.inference: the detector's fast inference path gives the eager detector's outputs (ours and
Detectron2's built-in C4), wraps the trunk of C4 and FPN detectors, and its threaded RoIPool equals torchvision's."""

import pytest
import torch
from detectron2.modeling import build_model
from torchvision.ops import roi_pool

from backbones.inference import compile_unavailable_reason
from detection import get_detection_cfg
from detection.modeling.inference import DetectorPart, ThreadedRoIPool, compile_seconds, optimize_detector_for_inference

TINY = ["MODEL.WEIGHTS", "", "MODEL.DEVICE", "cpu", "MODEL.RPN.PRE_NMS_TOPK_TEST", "200",
        "MODEL.RPN.POST_NMS_TOPK_TEST", "40", "INPUT.MIN_SIZE_TEST", "96", "INPUT.MAX_SIZE_TEST", "128",
        "MODEL.ROI_HEADS.SCORE_THRESH_TEST", "0.0"]


def _detector(config: str, *extra: str):
    torch.manual_seed(0)
    return _with_statistics(build_model(get_detection_cfg(f"configs/COCO-Detection/{config}.yaml", TINY + list(extra))))


def _with_statistics(model):
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # FrozenBN statistics that a wrong fold would not survive
        for name, buf in model.named_buffers():
            if "norm" in name and name.endswith(("running_mean", "bias")):
                buf.copy_(torch.rand(buf.shape, generator=g) * 0.2 - 0.1)
            elif "norm" in name and name.endswith("running_var"):
                buf.copy_(torch.rand(buf.shape, generator=g) + 0.5)
            elif "norm" in name and name.endswith("weight"):  # a pretrained net's scale: a random deep trunk at
                buf.copy_(torch.rand(buf.shape, generator=g) * 0.1 + 0.15)  # ~1 overflows (calibrate_frozen_bn)
    return model.eval()


def _images():
    g = torch.Generator().manual_seed(2)
    return [{"image": torch.rand(3, 96, 128, generator=g) * 255, "height": 96, "width": 128}]


def _assert_same_detections(fast, model):
    batch = _images()
    with torch.no_grad():
        image = model.preprocess_image(batch).tensor
        want, got = model.backbone(image), fast.backbone(image)
        for k in want:
            torch.testing.assert_close(got[k], want[k], atol=1e-4 * float(want[k].abs().max()), rtol=1e-4)
        a, b = fast(batch)[0]["instances"], model(batch)[0]["instances"]
    # random heads score every class alike: near-ties may reorder, so the scores are compared sorted
    torch.testing.assert_close(a.scores.sort().values, b.scores.sort().values, atol=1e-5, rtol=1e-4)
    assert len(a) == len(b) > 0


@pytest.mark.parametrize("config,trunk", [("faster_rcnn_R_50_C4", "backbone"),
                                          ("faster_rcnn_R_101_FPN", "backbone.bottom_up")])
def test_fast_detector_gives_the_eager_detections(config, trunk):
    model = _detector(config, "MODEL.BACKBONES.NAME", "resnet18" if "C4" in config else "resnet101")
    fast = optimize_detector_for_inference(model, compile=False)
    assert isinstance(fast.get_submodule(trunk), DetectorPart)
    if "C4" in config:
        assert isinstance(fast.roi_heads.res5, DetectorPart)
        assert isinstance(fast.roi_heads.pooler.level_poolers[0], ThreadedRoIPool)  # on the CPU
    assert not model.backbone.__class__.__name__ == "DetectorPart"  # the model itself is not changed
    _assert_same_detections(fast, model)


def test_detectron2_builtin_c4_gets_the_same_path():
    from detectron2.config import get_cfg

    from detection.compat import detectron2_config_file

    cfg = get_cfg()
    cfg.merge_from_file(detectron2_config_file("COCO-Detection/faster_rcnn_R_50_C4_1x.yaml"))
    cfg.MODEL.DEVICE, cfg.INPUT.MIN_SIZE_TEST, cfg.INPUT.MAX_SIZE_TEST = "cpu", 96, 128
    cfg.MODEL.ROI_HEADS.SCORE_THRESH_TEST, cfg.MODEL.RPN.POST_NMS_TOPK_TEST = 0.0, 40
    torch.manual_seed(0)
    model = _with_statistics(build_model(cfg))
    fast = optimize_detector_for_inference(model, compile=False)
    assert isinstance(fast.backbone, DetectorPart) and isinstance(fast.roi_heads.res5, DetectorPart)
    assert fast.backbone.size_divisibility == model.backbone.size_divisibility  # read through the wrapper
    _assert_same_detections(fast, model)


def test_without_a_compiler_the_detector_runs_eagerly_after_one_warning(monkeypatch):
    from backbones import inference

    monkeypatch.setattr(inference, "compile_unavailable_reason", lambda device: "no C++ compiler (test)")
    model = _detector("faster_rcnn_R_50_C4", "MODEL.BACKBONES.NAME", "resnet18")
    with pytest.warns(UserWarning, match=r"not compiling \(no C\+\+ compiler \(test\)\)") as caught:
        fast = optimize_detector_for_inference(model)
    assert len(caught) == 1 and not fast.backbone.compiled and not fast.roi_heads.res5.compiled
    _assert_same_detections(fast, model)


@pytest.mark.parametrize("threads", [2, 3])
def test_threaded_roi_pool_equals_torchvision(threads):
    g = torch.Generator().manual_seed(0)
    features = torch.randn(2, 16, 24, 32, generator=g).contiguous(memory_format=torch.channels_last)
    xy = torch.rand(50, 2, generator=g) * torch.tensor([400.0, 300.0])
    rois = torch.cat([torch.randint(0, 2, (50, 1), generator=g).float(), xy, xy + torch.rand(50, 2, generator=g) * 200],
                     dim=1)
    got = ThreadedRoIPool((7, 7), 1 / 16, threads)(features, rois)
    assert torch.equal(got, roi_pool(features, rois, (7, 7), 1 / 16))


@pytest.mark.slow
def test_compiled_detector_gives_the_eager_detections():
    """The whole path with torch.compile (Inductor, freezing) on a small C4 detector (a compile of ~30 s)."""
    reason = compile_unavailable_reason("cpu")
    if reason is not None:
        pytest.skip(reason)
    model = _detector("faster_rcnn_R_50_C4", "MODEL.BACKBONES.NAME", "resnet18", "MODEL.BACKBONES.WIDTH", "0.25")
    fast = optimize_detector_for_inference(model)
    _assert_same_detections(fast, model)
    assert compile_seconds(fast) > 0 and fast.backbone.compiled and fast.roi_heads.res5.compiled
