"""The Detectron2 plugin's models: every config builds, each design trains a step, parity with Detectron2's own
R-50-C4, pretrained weights of every format reach the right detector parameters."""

import glob
import pickle

import numpy as np
import pytest
import torch
import torchvision
from detectron2.modeling import build_model
from detectron2.structures import Boxes, Instances
from detectron2.utils.events import EventStorage

import backbones
from backbones.blocks import set_norm_folding
from conftest import with_random_bn_statistics
from detection import BackbonesCheckpointer, get_detection_cfg
from detection.modeling import BackbonesRCNN, BackbonesRes5ROIHeads, BackbonesTrunk, VGGFC67Head

pytestmark = pytest.mark.d2main  # runs again against Detectron2 main (make test-d2main)

CONFIGS = sorted(glob.glob("configs/COCO-Detection/faster_rcnn_*.yaml")
                 + glob.glob("configs/PascalVOC-Detection/faster_rcnn_*.yaml"))
TINY = ["MODEL.WEIGHTS", "", "MODEL.DEVICE", "cpu", "MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE", "16",
        "MODEL.RPN.PRE_NMS_TOPK_TRAIN", "200", "MODEL.RPN.POST_NMS_TOPK_TRAIN", "32",
        "MODEL.RPN.PRE_NMS_TOPK_TEST", "100", "MODEL.RPN.POST_NMS_TOPK_TEST", "16",
        "INPUT.MIN_SIZE_TEST", "96", "INPUT.MAX_SIZE_TEST", "128"]


def tiny_cfg(path, *extra):
    return get_detection_cfg(path, TINY + list(extra))


def one_image(h=96, w=128):
    img = torch.rand(3, h, w) * 255
    inst = Instances((h, w), gt_boxes=Boxes(torch.tensor([[10.0, 12.0, 60.0, 70.0], [70.0, 20.0, 120.0, 90.0]])),
                     gt_classes=torch.tensor([1, 3]))
    return {"image": img, "instances": inst, "height": h, "width": w}


def test_all_configs_are_found():
    names = {p.split("/")[-1] for p in CONFIGS}
    assert names == {"faster_rcnn_vgg16.yaml", "faster_rcnn_R_101_C4.yaml", "faster_rcnn_R_50_C4.yaml",
                     "faster_rcnn_plain_34_C4.yaml", "faster_rcnn_R_34_C4.yaml", "faster_rcnn_R_101_FPN.yaml",
                     "faster_rcnn_vgg16_voc2012.yaml", "faster_rcnn_R_101_C4_voc2012.yaml"}
    assert len(CONFIGS) == 14


@pytest.mark.parametrize("path", CONFIGS)
def test_every_config_builds_with_paper_settings(path):
    cfg = get_detection_cfg(path, ["MODEL.WEIGHTS", "", "MODEL.DEVICE", "cpu"])
    assert cfg.INPUT.MIN_SIZE_TEST == 600 and cfg.INPUT.MAX_SIZE_TEST == 1000
    if "FPN" not in path:  # COCO: 4 anchor scales (py-faster-rcnn's COCO model), VOC: 3
        assert cfg.MODEL.RPN.POST_NMS_TOPK_TEST == 300
        scales = [128, 256, 512] if "PascalVOC" in path else [64, 128, 256, 512]
        assert list(cfg.MODEL.ANCHOR_GENERATOR.SIZES[0]) == scales
    assert cfg.MODEL.ROI_HEADS.NUM_CLASSES == (20 if "PascalVOC" in path else 80)
    model = build_model(cfg)
    trunk = model.backbone if isinstance(model.backbone, BackbonesTrunk) else model.backbone.bottom_up
    assert isinstance(model, BackbonesRCNN) and isinstance(trunk, BackbonesTrunk)
    arch = model.backbones_model.arch
    assert f"{arch['family'].replace('resnet', 'resnet' if arch.get('residual', True) else 'plain')}{arch['depth']}" \
        == cfg.MODEL.BACKBONES.NAME.replace("_bn", "")
    assert all(getattr(trunk, n) is getattr(model.backbones_model, n) for n in trunk.stage_names)


@pytest.mark.parametrize("config,head_layers,key", [
    ("faster_rcnn_R_101_C4", ("res5",), "res5.2.conv3.weight"),
    ("faster_rcnn_vgg16", ("fc6", "fc7"), "fc7.weight")])
def test_a_detector_builds_its_backbones_model_once(monkeypatch, tmp_path, config, head_layers, key):
    """Trunk and RoI head are the stages of one model: built once, and loading pretrained weights builds no copy."""
    import detection.modeling.backbone as adapter

    name = "resnet101" if "R_101" in config else "vgg16"
    weights = backbones.save_pretrained(backbones.create_model(name, num_classes=10, width=0.25), tmp_path / "w.pth")
    calls = []
    real = adapter.create_model
    monkeypatch.setattr(adapter, "create_model", lambda *a, **k: calls.append(a) or real(*a, **k))
    cfg = tiny_cfg(f"configs/COCO-Detection/{config}.yaml", "MODEL.BACKBONES.WIDTH", "0.25")
    model = build_model(cfg)
    BackbonesCheckpointer(model).load(str(weights))
    assert len(calls) == 1
    head = model.roi_heads if "res5" in head_layers else model.roi_heads.box_head
    for layer in head_layers:
        assert getattr(head, layer) is getattr(model.backbones_model, layer)
    src = torch.load(weights, weights_only=True)["model"]
    detector_key = ("roi_heads." if "res5" in key else "roi_heads.box_head.") + key
    assert torch.equal(model.state_dict()[detector_key], src[key])


@pytest.mark.parametrize("name", ["faster_rcnn_vgg16", "faster_rcnn_R_101_C4", "faster_rcnn_plain_34_C4",
                                  "faster_rcnn_R_34_C4", "faster_rcnn_R_101_FPN"])
def test_one_training_step(name):
    torch.manual_seed(0)
    cfg = tiny_cfg(f"configs/COCO-Detection/{name}.yaml", "MODEL.BACKBONES.NORM", "BN")
    model = build_model(cfg).train()
    params = [p for p in model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]
    opt = torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    with EventStorage(0):
        losses = model([one_image(), one_image()])
    total = sum(losses.values())
    assert set(losses) == {"loss_cls", "loss_box_reg", "loss_rpn_cls", "loss_rpn_loc"}
    assert torch.isfinite(total)
    total.backward()
    opt.step()
    changed = sum(not torch.equal(a, p) for a, p in zip(before, params))
    assert changed > 0.9 * len(params)


def test_c4_head_is_the_nets_own_res5():
    r34 = build_model(tiny_cfg("configs/COCO-Detection/faster_rcnn_R_34_C4.yaml"))
    assert isinstance(r34.roi_heads, BackbonesRes5ROIHeads)
    assert type(r34.roi_heads.res5[0]).__name__ == "BasicBlock" and len(r34.roi_heads.res5) == 3
    assert r34.roi_heads.box_predictor.cls_score.in_features == 512
    plain = build_model(tiny_cfg("configs/COCO-Detection/faster_rcnn_plain_34_C4.yaml"))
    assert all(b.shortcut is None for b in plain.roi_heads.res5)
    assert all(b.shortcut is None for stage in ("res2", "res3", "res4") for b in getattr(plain.backbone, stage))
    assert not hasattr(plain.backbone, "res5")  # res5 lives in the RoI head only
    pre = build_model(tiny_cfg("configs/COCO-Detection/faster_rcnn_R_50_C4.yaml", "MODEL.BACKBONES.PREACT", "True"))
    assert pre.roi_heads.final_norm is not None
    with EventStorage(0):
        pre.train()([one_image()])


def test_vgg16_detector_layout():
    model = build_model(tiny_cfg("configs/COCO-Detection/faster_rcnn_vgg16.yaml"))
    assert model.backbone.output_shape()["conv5"].stride == 16
    head = model.roi_heads.box_head
    assert isinstance(head, VGGFC67Head) and head.fc6.in_features == 512 * 7 * 7 and head.fc7.out_features == 4096
    assert head.dropout.p == 0.0  # py-faster-rcnn's COCO VGG-16 prototxt has no drop6 / drop7
    voc = build_model(tiny_cfg("configs/PascalVOC-Detection/faster_rcnn_vgg16.yaml"))
    assert voc.roi_heads.box_head.dropout.p == 0.5  # its PASCAL VOC prototxt has them (0.5)
    frozen = {n.split(".")[0] for n, p in model.backbone.named_parameters() if not p.requires_grad}
    assert frozen == {"conv1", "conv2"}  # conv1_x, conv2_x: lr_mult 0 in py-faster-rcnn
    assert model.proposal_generator.rpn_head.conv.out_channels == 512  # rpn_conv/3x3: 512


def test_frozen_bn_by_default_in_c4():
    model = build_model(tiny_cfg("configs/COCO-Detection/faster_rcnn_R_50_C4.yaml"))
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    assert not norms  # every BN is a FrozenBatchNorm2d (paper: BN frozen at ImageNet statistics)
    assert not any(p.requires_grad for p in model.backbone.res2.parameters())
    assert all(p.requires_grad for p in model.backbone.res3.parameters())


def test_r50_c4_matches_detectron2_builtin():
    """Same weights -> same trunk features and res5 head output as Detectron2's own R-50-C4 (stride_in_1x1)."""
    from detectron2.config import get_cfg

    from detection.compat import detectron2_config_file

    torch.manual_seed(0)
    d2_cfg = get_cfg()
    d2_cfg.merge_from_file(detectron2_config_file("COCO-Detection/faster_rcnn_R_50_C4_1x.yaml"))
    d2_cfg.MODEL.DEVICE = "cpu"
    d2_cfg.MODEL.ANCHOR_GENERATOR.SIZES = [[64, 128, 256, 512]]  # py-faster-rcnn's COCO scales, as our configs
    d2_cfg.MODEL.ROI_BOX_HEAD.POOLER_TYPE = "ROIPool"  # the paper's RoI pooling, as our configs
    d2 = build_model(d2_cfg).eval()
    with torch.no_grad():  # give the FrozenBN non-trivial statistics
        for name, buf in d2.named_buffers():
            if name.endswith(("running_mean", "bias")) and "norm" in name:
                buf.uniform_(-0.1, 0.1)
            elif name.endswith(("running_var", "weight")) and "norm" in name:
                buf.uniform_(0.5, 1.5)
    ours = build_model(get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_50_C4.yaml",
                                         ["MODEL.WEIGHTS", "", "MODEL.DEVICE", "cpu",
                                          "MODEL.BACKBONES.CHANNELS_LAST", "False"])).eval()
    set_norm_folding(ours, False)  # the same operators as Detectron2 (folding and layout have their own tests)
    assert set(ours.state_dict()) == set(d2.state_dict())  # identical parameter names
    ours.load_state_dict(d2.state_dict())
    x = torch.randn(1, 3, 128, 160)
    with torch.no_grad():
        f_d2, f_ours = d2.backbone(x)["res4"], ours.backbone(x)["res4"]
        torch.testing.assert_close(f_ours, f_d2, atol=1e-4, rtol=1e-4)
        boxes = [Boxes(torch.tensor([[0.0, 0.0, 64.0, 64.0], [30.0, 40.0, 150.0, 120.0]]))]
        h_d2 = d2.roi_heads._shared_roi_transform([f_d2], boxes)
        h_ours = ours.roi_heads._shared_roi_transform([f_ours], boxes)
        torch.testing.assert_close(h_ours, h_d2, atol=1e-4, rtol=1e-4)


# ---- MODEL.WEIGHTS in every format ------------------------------------------------------------------------



def test_torchvision_resnet_weights_set_conventions_and_fill_trunk_and_head(tmp_path):
    tv = with_random_bn_statistics(torchvision.models.resnet50(weights=None))
    torch.save(tv.state_dict(), tmp_path / "r50_tv.pth")
    cfg = get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_50_C4.yaml",
                            ["MODEL.DEVICE", "cpu", "MODEL.WEIGHTS", str(tmp_path / "r50_tv.pth")])
    assert cfg.INPUT.FORMAT == "RGB" and cfg.MODEL.BACKBONES.STRIDE_IN_1X1 is False
    assert cfg.MODEL.PIXEL_STD == pytest.approx([58.395, 57.12, 57.375])
    model = build_model(cfg)
    BackbonesCheckpointer(model).load(cfg.MODEL.WEIGHTS)
    assert torch.equal(model.backbone.stem.conv1.weight, tv.conv1.weight)
    assert torch.equal(model.backbone.res4[5].conv3.weight, tv.layer3[5].conv3.weight)
    assert torch.equal(model.roi_heads.res5[2].conv2.weight, tv.layer4[2].conv2.weight)
    assert torch.equal(model.roi_heads.res5[0].shortcut.norm.running_var, tv.layer4[0].downsample[1].running_var)


def test_vgg16_fc6_fc7_come_from_the_imagenet_classifier(tmp_path):
    tv = torchvision.models.vgg16(weights=None)
    torch.save(tv.state_dict(), tmp_path / "vgg16.pth")
    cfg = get_detection_cfg("configs/COCO-Detection/faster_rcnn_vgg16.yaml",
                            ["MODEL.DEVICE", "cpu", "MODEL.WEIGHTS", str(tmp_path / "vgg16.pth")])
    model = build_model(cfg)
    BackbonesCheckpointer(model).load(cfg.MODEL.WEIGHTS)
    assert torch.equal(model.roi_heads.box_head.fc6.weight, tv.classifier[0].weight)
    assert torch.equal(model.roi_heads.box_head.fc7.bias, tv.classifier[3].bias)
    assert torch.equal(model.backbone.conv5.conv5_3.weight, tv.features[28].weight)


def test_msra_caffe2_pkl_sets_bgr(tmp_path):
    ref = backbones.create_model("resnet50", norm="FrozenBN")
    blobs = {"conv1_w": ref.stem.conv1.weight.detach().numpy()}
    blobs["res_conv1_bn_s"] = np.ones(64, np.float32)
    blobs["res_conv1_bn_b"] = np.zeros(64, np.float32)
    sd = ref.state_dict()
    for key in sd:
        if key.startswith("res") and key.endswith(".weight") and sd[key].ndim == 4:
            stage, block, conv = key.split(".")[:3]
            branch = "branch1" if conv == "shortcut" else "branch2" + "abc"[int(conv[-1]) - 1]
            c2 = f"{stage}_{block}_{branch}"
            blobs[c2 + "_w"] = sd[key].numpy()
            n = sd[key].shape[0]
            blobs[c2 + "_bn_s"] = np.full(n, 0.5, np.float32)
            blobs[c2 + "_bn_b"] = np.zeros(n, np.float32)
    with open(tmp_path / "R-50.pkl", "wb") as f:
        pickle.dump({"blobs": blobs}, f)
    cfg = get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_50_C4.yaml",
                            ["MODEL.DEVICE", "cpu", "MODEL.WEIGHTS", str(tmp_path / "R-50.pkl"),
                             "MODEL.PIXEL_MEAN", "[1.0, 2.0, 3.0]", "INPUT.FORMAT", "RGB"])
    assert cfg.INPUT.FORMAT == "BGR" and cfg.MODEL.PIXEL_STD == [1.0, 1.0, 1.0]
    assert cfg.MODEL.PIXEL_MEAN == pytest.approx([103.53, 116.28, 123.675])
    model = build_model(cfg)
    BackbonesCheckpointer(model).load(cfg.MODEL.WEIGHTS)
    assert torch.equal(model.roi_heads.res5[1].conv1.weight, ref.res5[1].conv1.weight)
    assert torch.allclose(model.backbone.res3[0].conv2.norm.weight, torch.full((128,), 0.5))


def test_own_classification_checkpoint_and_detector_resume_format(tmp_path):
    ref = backbones.create_model("plain34", num_classes=10, norm="FrozenBN")
    backbones.save_pretrained(ref, tmp_path / "plain34.pth", extra={"optimizer": {}, "epoch": 1})
    cfg = get_detection_cfg("configs/COCO-Detection/faster_rcnn_plain_34_C4.yaml",
                            ["MODEL.DEVICE", "cpu", "MODEL.WEIGHTS", str(tmp_path / "plain34.pth")])
    model = build_model(cfg)
    BackbonesCheckpointer(model).load(cfg.MODEL.WEIGHTS)
    assert torch.equal(model.backbone.res3[2].conv1.weight, ref.res3[2].conv1.weight)
    assert torch.equal(model.roi_heads.res5[0].conv2.weight, ref.res5[0].conv2.weight)
    # a full detector checkpoint (what training writes) round-trips through the same checkpointer
    ckpt = BackbonesCheckpointer(model, save_dir=str(tmp_path))
    ckpt.save("model_final")
    other = build_model(cfg)
    BackbonesCheckpointer(other).load(str(tmp_path / "model_final.pth"))
    for (k, a), b in zip(model.state_dict().items(), other.state_dict().values()):
        assert torch.equal(a, b), k
    assert (tmp_path / "last_checkpoint").read_text() == "model_final.pth"


def test_wrong_architecture_weights_are_refused_with_the_keys(tmp_path):
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), tmp_path / "r18.pth")
    cfg = get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_50_C4.yaml",
                            ["MODEL.DEVICE", "cpu", "MODEL.WEIGHTS", str(tmp_path / "r18.pth")])
    model = build_model(cfg)
    with pytest.raises(backbones.IncompatibleWeightsError, match=r"(?s)missing in checkpoint.*res2.0.conv3.weight"):
        BackbonesCheckpointer(model).load(cfg.MODEL.WEIGHTS)


def test_malicious_pkl_refused_by_the_detector_checkpointer(tmp_path):
    class Evil:
        def __reduce__(self):
            return (exec, ("open('pwned', 'w')",))

    with open(tmp_path / "evil.pkl", "wb") as f:
        pickle.dump({"model": {"backbone.stem.conv1.weight": Evil()}}, f)
    model = build_model(tiny_cfg("configs/COCO-Detection/faster_rcnn_R_34_C4.yaml"))
    with pytest.raises(backbones.UnsafeCheckpointError, match="builtins.exec"):
        BackbonesCheckpointer(model).load(str(tmp_path / "evil.pkl"))


@pytest.mark.parametrize("config", ["faster_rcnn_R_101_C4", "faster_rcnn_vgg16"])
def test_folded_frozen_bn_gives_the_same_losses_and_gradients(config):
    """FrozenBN folded into the convs (the default) vs run apart: same losses (1e-4 relative), same gradients."""
    from detectron2.utils.events import EventStorage

    torch.manual_seed(0)
    name = "resnet101" if "R_101" in config else "vgg16_bn"
    model = build_model(tiny_cfg(f"configs/COCO-Detection/{config}.yaml", "MODEL.BACKBONES.NAME", name,
                                 "MODEL.BACKBONES.WIDTH", "0.25", "MODEL.BACKBONES.NORM", "FrozenBN"))
    with torch.no_grad():  # pretrained-like statistics
        for mod in model.backbones_model.modules():
            if isinstance(mod, backbones.FrozenBatchNorm2d):
                mod.running_mean.uniform_(-0.2, 0.2)
                mod.running_var.uniform_(0.5, 1.5)
                mod.weight.uniform_(0.3, 0.6)
                mod.bias.uniform_(-0.1, 0.1)
    model.train()
    runs = {}
    for fold in (True, False):
        set_norm_folding(model, fold)
        torch.manual_seed(1)  # the same proposals / RoI sampling
        model.zero_grad()
        with EventStorage(0):
            losses = model([one_image(), one_image()])
        sum(losses.values()).backward()
        grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
        runs[fold] = ({k: v.item() for k, v in losses.items()}, grads)
    for k, v in runs[False][0].items():
        assert runs[True][0][k] == pytest.approx(v, rel=1e-4, abs=1e-6), k
    assert set(runs[True][1]) == set(runs[False][1]) and runs[True][1]
    # Max pooling (VGG's pools, RoI max pooling) routes a gradient to the argmax, which a rounding difference can
    # move between near-tied inputs: one layer may differ by a few 1e-3 of its norm, the whole gradient by less.
    folded, apart = (torch.cat([r[1][k].flatten() for k in sorted(runs[False][1])]) for r in (runs[True], runs[False]))
    assert (folded - apart).norm() <= 1e-3 * apart.norm()
    for k, g in runs[False][1].items():
        assert (runs[True][1][k] - g).norm() <= 1e-2 * g.norm() + 1e-7, k


def test_channels_last_detector_gives_the_same_losses_as_nchw():
    """MODEL.BACKBONES.CHANNELS_LAST (the default) puts the trunk, the C4 head and the RPN head in channels_last;
    the losses equal the NCHW model's (1e-4 relative) for the same weights and sampling."""
    from detectron2.utils.events import EventStorage

    cl = torch.channels_last
    models = {}
    for flag in (True, False):
        torch.manual_seed(0)
        models[flag] = build_model(tiny_cfg("configs/COCO-Detection/faster_rcnn_R_101_C4.yaml",
                                            "MODEL.BACKBONES.NAME", "resnet101", "MODEL.BACKBONES.WIDTH", "0.25",
                                            "MODEL.BACKBONES.CHANNELS_LAST", str(flag))).train()
    models[False].load_state_dict(models[True].state_dict())
    convs = {flag: [m.weight for m in models[flag].proposal_generator.modules() if isinstance(m, torch.nn.Conv2d)]
             for flag in models}
    rpn_3x3 = [w for w in convs[True] if w.shape[-1] == 3]
    assert rpn_3x3 and all(w.is_contiguous(memory_format=cl) and not w.is_contiguous() for w in rpn_3x3)
    assert all(w.is_contiguous() for w in convs[False])
    losses = {}
    for flag, model in models.items():
        torch.manual_seed(1)  # the same proposals / RoI sampling
        with EventStorage(0):
            losses[flag] = {k: v.item() for k, v in model([one_image(), one_image()]).items()}
    for k, v in losses[False].items():
        assert losses[True][k] == pytest.approx(v, rel=1e-4, abs=1e-6), k


def test_rpn_matches_among_inside_anchors_as_py_faster_rcnn():
    """A hand-built image where the rules differ: the ground truth's best anchor crosses the border. Detectron2
    matches all anchors and then ignores the outside one, leaving the box without a positive; py-faster-rcnn
    (MATCH_INSIDE_ONLY, the paper configs) matches among inside anchors and makes the best inside one positive."""
    from detection.modeling import BackbonesRPN

    rpn = build_model(tiny_cfg("configs/COCO-Detection/faster_rcnn_R_34_C4.yaml")).proposal_generator
    assert isinstance(rpn, BackbonesRPN) and rpn.match_inside_only and rpn.anchor_boundary_thresh == 0
    anchors = [Boxes(torch.tensor([[-5.0, -5.0, 30.0, 30.0],    # crosses the border; IoU 0.73 with the box
                                   [0.0, 0.0, 20.0, 20.0],      # inside; IoU 0.44: the best inside anchor
                                   [60.0, 60.0, 90.0, 90.0]]))]  # inside, far away: background
    gt = [Instances((100, 100), gt_boxes=Boxes(torch.tensor([[0.0, 0.0, 30.0, 30.0]])),
                    gt_classes=torch.tensor([0]))]
    labels, matched = rpn.label_and_sample_anchors(anchors, gt)
    assert labels[0].tolist() == [-1, 1, 0]  # py-faster-rcnn: the best inside anchor is the box's positive
    assert matched[0][1].tolist() == [0.0, 0.0, 30.0, 30.0]
    rpn.match_inside_only = False
    labels, _ = rpn.label_and_sample_anchors(anchors, gt)
    assert labels[0].tolist() == [-1, -1, 0]  # Detectron2: the positive went to the outside anchor, then ignored
    rpn.anchor_boundary_thresh = -1  # no anchor is outside: both rules are Detectron2's
    rpn.match_inside_only = True
    labels, _ = rpn.label_and_sample_anchors(anchors, gt)
    assert labels[0].tolist() == [1, -1, 0]
    empty = [Instances((100, 100), gt_boxes=Boxes(torch.zeros(0, 4)), gt_classes=torch.zeros(0, dtype=torch.long))]
    rpn.anchor_boundary_thresh = 0
    labels, matched = rpn.label_and_sample_anchors(anchors, empty)  # an image without objects: all background
    assert labels[0].tolist() == [-1, 0, 0] and not matched[0].any()


def test_paper_configs_use_the_py_faster_rcnn_anchor_rules():
    for path in CONFIGS:
        cfg = tiny_cfg(path)
        assert cfg.MODEL.PROPOSAL_GENERATOR.NAME == "BackbonesRPN" and cfg.MODEL.RPN.MATCH_INSIDE_ONLY, path
        assert cfg.MODEL.ANCHOR_GENERATOR.OFFSET == 0.5, path


def test_trunk_features_equal_timms_and_the_backbones_api_for_the_same_weights(tmp_path):
    """The three ways a detector gets one of our backbones (the plugin, timm's features_only, our feature API)
    give the same maps for the same file: FrozenBN here, BN in eval there, to float tolerance."""
    import timm

    import backbones.timm_models  # noqa: F401  (registers rdb_*)

    tv = with_random_bn_statistics(torchvision.models.resnet18(weights=None))
    path = tmp_path / "r18_tv.pth"
    torch.save(tv.state_dict(), path)
    cfg = tiny_cfg("configs/COCO-Detection/faster_rcnn_R_101_FPN.yaml", "MODEL.BACKBONES.NAME", "resnet18",
                   "MODEL.WEIGHTS", str(path))
    detector = build_model(cfg).eval()
    BackbonesCheckpointer(detector).load(cfg.MODEL.WEIGHTS)
    via_timm = timm.create_model("rdb_resnet18", pretrained=True, features_only=True, out_indices=(1, 2, 3, 4),
                                 pretrained_cfg_overlay=dict(file=str(path))).eval()
    ours = backbones.create_model("resnet18", num_classes=0)
    backbones.load_pretrained(ours, path, drop_classifier=True)
    x = torch.randn(2, 3, 64, 96)
    with torch.no_grad():
        plugin = detector.backbone.bottom_up(x)
        api = ours.eval().forward_features(x, ["res2", "res3", "res4", "res5"])
        for name, t in zip(["res2", "res3", "res4", "res5"], via_timm(x), strict=True):
            torch.testing.assert_close(t, api[name], rtol=0, atol=0)
            torch.testing.assert_close(plugin[name].contiguous(), t, rtol=1e-4, atol=1e-4)
