"""backbones.torchvision_detection: any backbones model inside torchvision's Faster R-CNN, without Detectron2."""

import subprocess
import sys

import pytest
import torch
import torchvision

from backbones.torchvision_detection import faster_rcnn


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
