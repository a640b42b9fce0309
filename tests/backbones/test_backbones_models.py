"""Model zoo of backbones/: names, feature API, options (shortcut, stride placement, pre-activation, norm, freezing)."""

import pytest
import torch
from torch import nn

import backbones
from backbones import FrozenBatchNorm2d, create_model, list_models
from backbones.blocks import BottleneckBlock, Conv2dNorm, PadShortcut

EXPECTED = (
    [f"resnet{d}" for d in (18, 34, 50, 101, 152)] + [f"plain{d}" for d in (18, 34, 50, 101, 152)]
    + [f"cifar_resnet{d}" for d in (20, 32, 44, 56, 110, 1202)] + [f"cifar_plain{d}" for d in (20, 32, 44, 56, 110)]
    + [f"vgg{d}" for d in (11, 13, 16, 19)] + [f"vgg{d}_bn" for d in (11, 13, 16, 19)]
)


def test_list_models_is_exactly_the_documented_set():
    assert sorted(list_models()) == sorted(EXPECTED)
    assert list_models("vgg16*") == ["vgg16", "vgg16_bn"]


def test_unknown_model_and_option_errors_are_clear():
    with pytest.raises(ValueError, match="unknown model 'resnet51'.*resnet50"):
        create_model("resnet51")
    with pytest.raises(TypeError, match="stride_in_3x3"):
        create_model("resnet50", stride_in_3x3=True)
    with pytest.raises(ValueError, match="plain nets have no shortcut"):
        create_model("plain34", shortcut="B")
    with pytest.raises(ValueError, match="shortcut must be 'A', 'B' or 'C'"):
        create_model("resnet34", shortcut="D")
    with pytest.raises(ValueError, match="unknown norm 'LN'"):
        create_model("resnet18", norm="LN")


def _input_size(name):
    return 32 if name.startswith("cifar") else 64


@pytest.mark.parametrize("name", EXPECTED)
def test_feature_info_matches_a_real_forward(name):
    torch.manual_seed(0)
    model = create_model(name, num_classes=7).eval()
    s = _input_size(name)
    x = torch.randn(1, 3, s, s)
    with torch.no_grad():
        feats = model.forward_features(x)
        logits = model(x)
    assert list(feats) == model.stage_names == [f.name for f in model.feature_info]
    expected_names = ["conv1", "conv2", "conv3", "conv4", "conv5"] if name.startswith("vgg") else (
        ["stem", "res2", "res3", "res4"] if name.startswith("cifar") else ["stem", "res2", "res3", "res4", "res5"])
    assert list(feats) == expected_names
    for info in model.feature_info:
        f = feats[info.name]
        assert f.shape[1] == info.channels, info
        assert f.shape[-1] == s // info.stride and f.shape[-2] == s // info.stride, info
    assert logits.shape == (1, 7)


def test_paper_strides_and_widths():
    r50 = {f.name: (f.channels, f.stride) for f in create_model("resnet50").feature_info}
    assert r50 == {"stem": (64, 4), "res2": (256, 4), "res3": (512, 8), "res4": (1024, 16), "res5": (2048, 32)}
    r18 = {f.name: (f.channels, f.stride) for f in create_model("resnet18").feature_info}
    assert r18["res5"] == (512, 32)
    cifar = {f.name: (f.channels, f.stride) for f in create_model("cifar_resnet20").feature_info}
    assert cifar == {"stem": (16, 1), "res2": (16, 1), "res3": (32, 2), "res4": (64, 4)}
    vgg = {f.name: (f.channels, f.stride) for f in create_model("vgg16").feature_info}
    assert vgg["conv5"] == (512, 16)  # conv5_3 at stride 16: pool5 lives in the head (py-faster-rcnn)


def test_forward_features_stops_early_and_rejects_unknown_names():
    model = create_model("resnet50").eval()
    calls = []
    model.res5.register_forward_hook(lambda *a: calls.append("res5"))
    out = model.forward_features(torch.randn(1, 3, 64, 64), ["res3", "res4"])
    assert list(out) == ["res3", "res4"] and calls == []
    with pytest.raises(KeyError, match="no stage 'res6'"):
        model.forward_features(torch.randn(1, 3, 64, 64), ["res6"])


def test_vgg_exposes_fc6_fc7_and_layer_names():
    m = create_model("vgg16")
    assert m.fc6.in_features == 512 * 7 * 7 and m.fc6.out_features == 4096 and m.fc7.out_features == 4096
    assert [n for n, _ in m.conv5.named_children()] == ["pool4", "conv5_1", "relu5_1", "conv5_2", "relu5_2",
                                                        "conv5_3", "relu5_3"]
    assert m.conv1.conv1_1.bias is not None and m.conv1.conv1_1.norm is None
    assert isinstance(create_model("vgg16_bn").conv1.conv1_1.norm, nn.BatchNorm2d)


@pytest.mark.parametrize("size", [32, 48])
def test_vgg_head_on_a_1x1_pool5_equals_fc6_over_the_7x7_copies(size):
    """Below 64 px pool5 is 1x1: the head uses fc6's weight summed over the 49 positions instead of pooling to 7x7
    copies. Output and every gradient must equal torchvision's adaptive-pooling path."""
    torch.manual_seed(0)
    m = create_model("vgg16_bn", num_classes=10, width=0.25, dropout=0.0).eval()
    x = torch.randn(3, 3, size, size)
    conv5 = m.forward_features(x, ["conv5"])["conv5"]
    assert m.pool5(conv5).shape[-2:] == (1, 1)
    calls = []
    hook = m.fc6.register_forward_hook(lambda mod, args, out: calls.append(args[0].shape[1]))
    # the path a 7x7 map takes: adaptive pooling, then fc6 over all 49 positions
    out, ref = m(x), m.forward_head(conv5, fold_1x1_pool5=False)
    hook.remove()
    assert calls == [m.fc6.in_features], "the folded head must not call fc6 on 49 copies; the reference must"
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    grads = torch.autograd.grad(out.square().sum(), list(m.parameters()))
    ref_grads = torch.autograd.grad(ref.square().sum(), list(m.parameters()))
    names = [n for n, _ in m.named_parameters()]
    assert torch.count_nonzero(grads[names.index("fc6.weight")]) > 0
    for (name, _), g, r in zip(m.named_parameters(), grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-6, msg=lambda s, n=name: f"{n}: {s}")


def _shortcut_params(model):
    return sum(p.numel() for b in model.blocks() if b.shortcut is not None for p in b.shortcut.parameters())


@pytest.mark.parametrize("depth", [18, 34, 50, 101, 152])
def test_plain_net_is_the_residual_net_minus_projections(depth):
    res, plain = create_model(f"resnet{depth}"), create_model(f"plain{depth}")
    n_res = sum(p.numel() for p in res.parameters())
    n_plain = sum(p.numel() for p in plain.parameters())
    assert n_res - n_plain == _shortcut_params(res) > 0
    assert all(b.shortcut is None for b in plain.blocks())
    # same layers otherwise, name for name
    res_keys = {k for k in res.state_dict() if ".shortcut." not in k}
    assert res_keys == set(plain.state_dict())


def test_shortcut_options_a_b_c():
    a, b, c = (create_model("resnet34", shortcut=s) for s in "ABC")
    assert _shortcut_params(a) == 0 and any(isinstance(blk.shortcut, PadShortcut) for blk in a.blocks())
    n_proj_b = sum(isinstance(blk.shortcut, Conv2dNorm) for blk in b.blocks())
    n_proj_c = sum(isinstance(blk.shortcut, Conv2dNorm) for blk in c.blocks())
    assert n_proj_b == 3  # only where dimensions increase (res3, res4, res5 first blocks)
    assert n_proj_c == 16  # every block
    x = torch.randn(2, 3, 64, 64)
    for m in (a, b, c):
        assert m.eval()(x).shape == (2, 1000)


def test_option_a_zero_pads_and_subsamples():
    sc = PadShortcut(4, 8, stride=2)
    x = torch.randn(1, 4, 6, 6)
    y = sc(x)
    assert y.shape == (1, 8, 3, 3)
    torch.testing.assert_close(y[:, :4], x[:, :, ::2, ::2])
    assert y[:, 4:].abs().sum() == 0


def test_stride_placement():
    msra = create_model("resnet50")
    tv = create_model("resnet50", stride_in_1x1=False)
    first = msra.res3[0]
    assert isinstance(first, BottleneckBlock)
    assert first.conv1.stride == (2, 2) and first.conv2.stride == (1, 1)
    assert tv.res3[0].conv1.stride == (1, 1) and tv.res3[0].conv2.stride == (2, 2)
    assert msra.arch["stride_in_1x1"] is True and tv.arch["stride_in_1x1"] is False


@pytest.mark.parametrize("name", ["resnet18", "resnet50", "cifar_resnet20", "cifar_plain20"])
def test_preactivation_units(name):
    m = create_model(name, preact=True, num_classes=5).eval()
    first = m.res2[0]
    assert type(first).__name__.startswith("PreAct")
    assert isinstance(first.norm1, nn.BatchNorm2d)  # BN before the first conv
    assert m.final_norm is not None
    s = _input_size(name)
    assert m(torch.randn(2, 3, s, s)).shape == (2, 5)
    out = m(torch.randn(2, 3, s, s))
    out.sum().backward()


@pytest.mark.parametrize("norm,cls", [("BN", nn.BatchNorm2d), ("FrozenBN", FrozenBatchNorm2d),
                                      ("GN", nn.GroupNorm), ("SyncBN", nn.SyncBatchNorm)])
def test_norm_options(norm, cls):
    m = create_model("resnet18", norm=norm)
    assert isinstance(m.stem.conv1.norm, cls) and isinstance(m.res5[1].conv2.norm, cls)
    if norm != "SyncBN":  # SyncBN needs a process group in train mode; its module type is what matters here
        m.eval()(torch.randn(1, 3, 64, 64))


def test_frozen_bn_matches_bn_in_eval_and_has_no_parameters():
    bn = nn.BatchNorm2d(8)
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    bn.weight.data.uniform_(0.5, 1.5)
    bn.bias.data.uniform_(-1, 1)
    frozen = FrozenBatchNorm2d.convert_frozen_batchnorm(bn)
    x = torch.randn(2, 8, 5, 5)
    torch.testing.assert_close(frozen(x), bn.eval()(x))
    assert not list(frozen.parameters())


@pytest.mark.parametrize("freeze_at", [0, 1, 2, 5])
def test_freeze_at(freeze_at):
    m = create_model("resnet50", freeze_at=freeze_at)
    stages = m.stage_names
    for i, name in enumerate(stages):
        params = list(getattr(m, name).parameters())
        frozen = i < freeze_at
        assert all(p.requires_grad != frozen for p in params), name
        has_frozen_bn = any(isinstance(x, FrozenBatchNorm2d) for x in getattr(m, name).modules())
        assert has_frozen_bn == frozen, name
    with pytest.raises(ValueError, match="freeze_at=6 out of range"):
        create_model("resnet50", freeze_at=6)


def test_vgg_freeze_at_2_freezes_conv1_conv2():
    m = create_model("vgg16", freeze_at=2)
    assert not any(p.requires_grad for p in m.conv1.parameters())
    assert not any(p.requires_grad for p in m.conv2.parameters())
    assert all(p.requires_grad for p in m.conv3.parameters())


def test_block_freeze_converts_its_bn():
    m = create_model("resnet18")
    blk = m.res3[0].freeze()
    assert isinstance(blk.conv1.norm, FrozenBatchNorm2d) and isinstance(blk.shortcut.norm, FrozenBatchNorm2d)
    assert not any(p.requires_grad for p in blk.parameters())
    assert blk.in_channels == 64 and blk.out_channels == 128 and blk.stride == 2


def test_zero_init_residual():
    m = create_model("resnet50", zero_init_residual=True)
    assert all(b.conv3.norm.weight.abs().sum() == 0 for b in m.blocks())
    assert all(b.conv1.norm.weight.abs().sum() > 0 for b in m.blocks())
    m18 = create_model("resnet18", zero_init_residual=True)
    assert all(b.conv2.norm.weight.abs().sum() == 0 for b in m18.blocks())
    default = create_model("resnet50")
    assert all(b.conv3.norm.weight.abs().sum() > 0 for b in default.blocks())
    with pytest.raises(ValueError, match="plain net"):
        create_model("plain50", zero_init_residual=True)


def test_residual_and_plain_share_every_layer_except_the_addition():
    torch.manual_seed(0)
    res = create_model("cifar_resnet20", num_classes=10).eval()
    plain = create_model("cifar_plain20", num_classes=10)
    plain.load_state_dict(res.state_dict())  # option A: no shortcut parameters, identical key sets
    plain.eval()
    x = torch.randn(1, 3, 32, 32)
    assert not torch.allclose(res(x), plain(x))
    for b in res.blocks():
        b.shortcut = None  # removing the shortcut turns the residual net into its plain twin
    torch.testing.assert_close(res(x), plain(x))


def test_backbones_never_imports_detectron2():
    import subprocess
    import sys

    code = ("import sys, backbones, backbones.convert\n"
            "m = backbones.create_model('resnet18')\n"
            "bad = [k for k in sys.modules if k.startswith('detectron2')]\n"
            "assert not bad, bad\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_public_api_is_exported():
    for name in ("create_model", "list_models", "load_pretrained", "complexity", "FeatureInfo"):
        assert hasattr(backbones, name)


def test_frozen_bn_affine_follows_every_change_of_its_buffers():
    """FrozenBN's cached (scale, shift) is reused while the buffers are unchanged and recomputed after each way a
    checkpoint or user changes them; a folded conv uses the new statistics."""

    def reference(m):
        scale = m.weight * (m.running_var + m.eps).rsqrt()
        return scale, m.bias - m.running_mean * scale

    def check(m):
        for got, want in zip(m.affine(), reference(m)):
            assert got.dtype == want.dtype and torch.equal(got, want)

    conv = Conv2dNorm(3, 4, 3, padding=1, norm="FrozenBN")
    m = conv.norm
    first = m.affine()
    assert m.affine()[0] is first[0]  # unchanged buffers: computed once
    with torch.no_grad():
        m.running_var.copy_(torch.tensor([0.5, 1.0, 2.0, 4.0]))  # in place
    check(m)
    m.load_state_dict({"weight": torch.tensor([1.0, 2.0, 3.0, 4.0]), "bias": torch.ones(4),
                       "running_mean": torch.full((4,), 0.25), "running_var": torch.ones(4)})
    check(m)
    m.running_mean = torch.full((4,), -1.0)  # a buffer replaced
    check(m)
    m.eps = 0.1
    check(m)
    conv.double()  # .to(): new buffers of another dtype
    check(m)
    x = torch.randn(1, 3, 8, 8, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(conv(x), m(torch.nn.functional.conv2d(x, conv.weight, padding=1)))


@pytest.mark.parametrize("norm", ["BN", "FrozenBN"])
def test_folded_weight_is_computed_once_per_state_at_inference_and_follows_every_change(norm, monkeypatch):
    """Under no_grad / inference_mode a folded conv reuses its folded weight while its weight and norm are unchanged
    and recomputes it after every supported way of changing them: an optimizer step, a loaded checkpoint, a replaced
    tensor or `.data`, `.to()` a dtype or layout, BN statistics recalibrated under no_grad; no cache in training."""
    torch.manual_seed(0)
    conv = Conv2dNorm(3, 4, 3, padding=1, norm=norm).double().eval()  # float64: a stale weight, not rounding
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    folds = []
    original = Conv2dNorm.folded_weight_and_bias
    monkeypatch.setattr(Conv2dNorm, "folded_weight_and_bias", lambda self: folds.append(1) or original(self))

    def check():
        with torch.no_grad():
            want = conv.norm(torch.nn.functional.conv2d(x.to(conv.weight.dtype), conv.weight, conv.bias, padding=1))
            got = conv(x.to(conv.weight.dtype))
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

    with torch.no_grad():
        conv.norm.running_var.uniform_(0.5, 2.0)
    check()
    n = len(folds)
    with torch.no_grad():
        conv(x), conv(x)
    assert len(folds) == n  # unchanged: computed once
    conv.load_state_dict({k: v + 0.25 for k, v in conv.state_dict().items()})  # in place: versions move
    check()
    with torch.no_grad():
        conv.weight.mul_(1.5)
    check()
    with torch.inference_mode():
        torch.testing.assert_close(conv(x), conv.norm(torch.nn.functional.conv2d(x, conv.weight, padding=1)))
    check()
    conv.weight.requires_grad_(True)
    conv(x).sum().backward()  # autograd on: built in the graph, no cache kept
    assert "_folded" not in conv.__dict__ and conv.weight.grad is not None
    torch.optim.SGD(conv.parameters(), lr=0.5).step()  # in-place update of the weight (and BN's affine)
    check()
    conv.norm.running_mean = torch.full((4,), -1.0, dtype=torch.float64)  # a buffer replaced
    check()
    conv.weight.data = conv.weight.data * 2  # a tensor's storage replaced through .data
    check()
    conv.to(memory_format=torch.channels_last)
    check()
    assert conv.__dict__["_folded"][1][0].is_contiguous(memory_format=torch.channels_last)
    if norm == "BN":  # recalibration (precise BN / AdaBN): train-mode passes under no_grad update the statistics
        conv.norm.momentum = None
        with torch.no_grad():
            conv.train()(torch.randn(8, 3, 8, 8, dtype=torch.float64) * 3 + 1)
        conv.eval()
        check()
    conv.float()
    check()
    copy = __import__("copy").deepcopy(conv)
    assert "_folded" not in copy.__dict__


@pytest.mark.parametrize("name,norm", [("resnet50", "BN"), ("resnet50", "FrozenBN"), ("vgg16_bn", "BN")])
def test_norm_folding_equals_conv_then_norm(name, norm):
    """An affine norm (FrozenBN; BN in eval mode) folded into its conv: the same outputs and, for FrozenBN in
    training, the same gradients (float64: exact up to rounding); the state dict is unchanged."""
    from backbones.blocks import set_norm_folding

    torch.manual_seed(0)
    model = create_model(name, num_classes=10, norm=norm).double()
    keys = list(model.state_dict())
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.BatchNorm2d, FrozenBatchNorm2d)):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    x = torch.randn(2, 3, 64, 64, dtype=torch.float64)
    model.train(norm == "FrozenBN")  # FrozenBN folds in training too; BN only with running statistics
    outs, grads = {}, {}
    for fold in (True, False):
        set_norm_folding(model, fold)
        model.zero_grad()
        out = model(x)
        outs[fold] = out.detach()
        if norm == "FrozenBN":
            out.square().sum().backward()
            grads[fold] = {k: p.grad.clone() for k, p in model.named_parameters()}
    torch.testing.assert_close(outs[True], outs[False], rtol=1e-10, atol=1e-10)
    for k, g in grads.get(False, {}).items():
        assert (grads[True][k] - g).norm() <= 1e-9 * g.norm(), k
    assert list(model.state_dict()) == keys


def test_calibrate_frozen_bn_sets_the_scale_of_every_frozen_bn_and_of_nothing_else():
    """The pretrained-like scales every timing of a pretrained leg without its checkpoint uses (the benchmarks, the
    job's estimates and tools/detection_leg_worker.py, which passes another tree's FrozenBatchNorm2d class)."""
    from backbones.norm import PRETRAINED_BN_SCALE, calibrate_frozen_bn

    net = create_model("resnet18", num_classes=10, width=0.25, norm="FrozenBN")
    conv_before = [m.weight.clone() for m in net.modules() if isinstance(m, nn.Conv2d)]
    frozen = [m for m in net.modules() if isinstance(m, FrozenBatchNorm2d)]
    assert frozen and calibrate_frozen_bn(net) is net
    assert all(bool((m.weight == PRETRAINED_BN_SCALE).all()) for m in frozen)
    assert all(torch.equal(a, m.weight) for a, m in zip(conv_before, [m for m in net.modules()
                                                                       if isinstance(m, nn.Conv2d)]))

    class OtherTreesFrozenBN(FrozenBatchNorm2d):  # a class of another source tree: only it is found
        pass

    other = nn.Sequential(OtherTreesFrozenBN(4), FrozenBatchNorm2d(4))
    calibrate_frozen_bn(other, frozen_bn=OtherTreesFrozenBN, scale=0.5)
    assert bool((other[0].weight == 0.5).all()) and bool((other[1].weight == 1.0).all())
