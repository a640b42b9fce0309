"""backbones.torchvision_detection: any backbones model inside torchvision's Faster R-CNN, without Detectron2."""

import subprocess
import sys

import pytest
import torch
import torchvision

import backbones
from backbones.torchvision_detection import faster_rcnn
from backbones.weight_formats import DETECTRON2_BGR_MEAN
from conftest import with_random_bn_statistics
from weight_files import write_detectron2_zoo_pkl, write_msra_pkl, write_torchvision_pth


def _targets():
    return [{"boxes": torch.tensor([[10.0, 20.0, 70.0, 90.0]]), "labels": torch.tensor([1])},
            {"boxes": torch.tensor([[30.0, 10.0, 100.0, 60.0], [5.0, 5.0, 40.0, 40.0]]),
             "labels": torch.tensor([2, 1])}]


@pytest.mark.parametrize("name,design", [("resnet18", "C4"), ("plain18", "C4"), ("resnet18", "FPN"),
                                         ("vgg11", "C4")])
def test_one_training_step_and_inference(name, design):
    torch.manual_seed(0)
    model = faster_rcnn(name, num_classes=3, design=design, min_size=128, max_size=160)
    model.rpn._pre_nms_top_n = {"training": 200, "testing": 100}
    model.rpn._post_nms_top_n = {"training": 50, "testing": 20}
    model.roi_heads.fg_bg_sampler.batch_size_per_image = 16
    model.train()
    images = [torch.rand(3, 120, 150), torch.rand(3, 128, 128)]
    losses = model(images, _targets())
    assert set(losses) == {"loss_classifier", "loss_box_reg", "loss_objectness", "loss_rpn_box_reg"}
    total = sum(losses.values())
    assert torch.isfinite(total)
    total.backward()
    model.eval()
    with torch.no_grad():
        out = model(images[:1])
    assert out[0]["boxes"].shape[1] == 4


def test_c4_uses_the_nets_res5_as_box_head_and_loads_weights(tmp_path):
    tv = torchvision.models.resnet18(weights=None)
    torch.save(tv.state_dict(), tmp_path / "r18.pth")
    model = faster_rcnn("resnet18", num_classes=3, weights=tmp_path / "r18.pth")
    assert torch.equal(model.roi_heads.box_head.res5[1].conv2.weight, tv.layer4[1].conv2.weight)
    assert torch.equal(model.backbone["stem"].conv1.weight, tv.conv1.weight)
    assert model.transform.image_mean == pytest.approx([0.485, 0.456, 0.406])


def test_no_detectron2_import():
    code = ("import sys\nfrom backbones.torchvision_detection import faster_rcnn\n"
            "faster_rcnn('resnet18', num_classes=2, design='FPN')\n"
            "assert not any(m.startswith('detectron2') for m in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


def _one_training_step(model) -> None:
    model.rpn._pre_nms_top_n = {"training": 200, "testing": 100}
    model.rpn._post_nms_top_n = {"training": 50, "testing": 20}
    model.roi_heads.fg_bg_sampler.batch_size_per_image = 16
    params = [p for p in model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]
    losses = model.train()([torch.rand(3, 120, 150), torch.rand(3, 128, 128)], _targets())
    total = sum(losses.values())
    assert torch.isfinite(total)
    total.backward()
    torch.optim.SGD(params, lr=0.01).step()
    assert any(not torch.equal(b, p) for b, p in zip(before, params, strict=True))


@pytest.fixture(scope="module")
def r50_reference():
    torch.manual_seed(0)
    return with_random_bn_statistics(backbones.create_model("resnet50")).eval()


@pytest.mark.parametrize("kind", ["msra", "detectron2_zoo", "torchvision"])
def test_trains_a_step_from_each_weights_format(tmp_path, r50_reference, kind):
    """MSRA's Caffe2 .pkl and a Detectron2 zoo .pkl (BGR, 0-255, stride in the 1x1) and torchvision's file (RGB,
    stride in the 3x3) all build the detector; BGR files are converted so that torchvision's RGB [0, 1] input
    computes what the file's net computed on BGR pixels minus their mean."""
    if kind == "torchvision":
        tv = with_random_bn_statistics(torchvision.models.resnet50(weights=None)).eval()
        path = write_torchvision_pth(tv, tmp_path / "r50.pth")
    else:
        write = write_msra_pkl if kind == "msra" else write_detectron2_zoo_pkl
        path = write(r50_reference, tmp_path / "R-50.pkl")
    det = faster_rcnn("resnet50", num_classes=3, weights_backbone=path, min_size=128, max_size=160)
    trunk = det.backbone.body if hasattr(det.backbone, "body") else det.backbone
    norm = det.input_normalization
    assert det.transform.image_mean == pytest.approx(list(norm.mean))
    rgb01 = torch.rand(1, 3, 64, 64)
    fed = (rgb01 - torch.tensor(norm.mean)[:, None, None]) / torch.tensor(norm.std)[:, None, None]
    with torch.no_grad():
        got = trunk.eval()(fed)["0"]
        if kind == "torchvision":
            want = torchvision.models._utils.IntermediateLayerGetter(tv, {"layer3": "0"})(fed)["0"]
        else:
            assert norm.std == pytest.approx((1 / 255,) * 3)  # MSRA: BGR pixels in 0-255, mean only
            bgr255 = rgb01.flip(1) * 255 - torch.tensor(DETECTRON2_BGR_MEAN)[:, None, None]
            want = r50_reference.forward_features(bgr255, ["res4"])["res4"]
    scale = want.abs().max().item()  # 0-255 inputs: activations in the hundreds, float32 rounding with them
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5 * scale)
    _one_training_step(det)


def test_trainable_backbone_layers_and_frozen_bn_as_torchvision(tmp_path):
    path = write_torchvision_pth(torchvision.models.resnet18(weights=None), tmp_path / "r18.pth")
    default = faster_rcnn("resnet18", num_classes=3, weights_backbone=path, design="FPN")
    body = default.backbone.body
    trains = {n: any(p.requires_grad for p in getattr(body, n).parameters()) for n in ("stem", "res2", "res3")}
    assert trains == {"stem": False, "res2": False, "res3": True}  # torchvision's 3: layer2..layer4
    assert isinstance(body.res3[0].conv1.norm, backbones.FrozenBatchNorm2d)
    everything = faster_rcnn("resnet18", num_classes=3, weights=path, trainable_backbone_layers=5, design="FPN")
    assert all(p.requires_grad for p in everything.backbone.body.stem.parameters())
    scratch = faster_rcnn("resnet18", num_classes=3, design="FPN")
    assert all(p.requires_grad for p in scratch.backbone.body.parameters())


@pytest.mark.bad_input
def test_torchvision_spellings_that_mean_something_else_here_get_one_line(tmp_path):
    with pytest.raises(ValueError, match=r"weights_backbone='IMAGENET1K_V1' names torchvision weights.*"
                                         r"resnet50-0676ba61\.pth"):
        faster_rcnn("resnet50", num_classes=3, weights_backbone="IMAGENET1K_V1")
    with pytest.raises(ValueError, match=r"weights_backbone='IMAGENET1K_V1' names torchvision weights"):
        faster_rcnn("resnet50", num_classes=3, weights_backbone=torchvision.models.ResNet50_Weights.IMAGENET1K_V1)
    with pytest.raises(TypeError, match="weights or weights_backbone"):
        faster_rcnn("resnet18", num_classes=3, weights="a.pth", weights_backbone="a.pth")
    with pytest.raises(ValueError, match="trainable_backbone_layers=2 without weights"):
        faster_rcnn("resnet18", num_classes=3, trainable_backbone_layers=2)
    path = write_torchvision_pth(torchvision.models.resnet18(weights=None), tmp_path / "r18.pth")
    with pytest.raises(ValueError, match=r"trainable_backbone_layers=6: 0\.\.5 for resnet18"):
        faster_rcnn("resnet18", num_classes=3, weights=path, trainable_backbone_layers=6)
