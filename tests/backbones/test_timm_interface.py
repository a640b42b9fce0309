"""backbones.timm_interface: the model timm.create_model("rdb_*") returns keeps timm's contract -- the calls that
timm fine-tuning code and detectors taking a timm trunk make -- on a ResNet, a plain net and VGG-16(BN)."""

import pytest
import timm
import timm.optim
import torch
import torchvision

import backbones
import backbones.timm_models
from conftest import with_random_bn_statistics

NETS = ["rdb_resnet50", "rdb_plain34", "rdb_vgg16_bn"]


@pytest.fixture(scope="module", params=NETS)
def net(request):
    torch.manual_seed(0)
    return with_random_bn_statistics(timm.create_model(request.param)).eval()


def test_forward_is_forward_head_of_forward_features(net):
    x = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        features = net.forward_features(x)
        assert features.ndim == 4 and features.shape[1] == net.feature_info[-1]["num_chs"]
        torch.testing.assert_close(net.forward_head(features), net(x), rtol=0, atol=0)
        pooled = net.forward_head(features, pre_logits=True)
    assert pooled.shape == (2, net.num_features) and net.head_hidden_size == net.num_features
    assert net.num_classes == 1000 and net.get_classifier() is net.fc
    assert timm.data.resolve_data_config(model=net)["input_size"] == (3, 224, 224)


def test_feature_info_entries_are_timms_dicts_with_our_stages(net):
    names = backbones.create_model(net.default_cfg["architecture"].removeprefix("rdb_")).stage_names
    assert [f["module"] for f in net.feature_info] == names
    first = dict(net.feature_info[0])
    assert set(first) == {"num_chs", "reduction", "module"} and first["num_chs"] == net.feature_info[0].channels
    # the paper's stem ends with its max pool (stride 4), where timm's resnet reports the pre-pool act1 at 2
    assert first["reduction"] == (4 if first["module"] == "stem" else 1)


def test_forward_intermediates_are_the_stage_maps(net):
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        stages = list(net.stage_features(x).values())
        final, maps = net.forward_intermediates(x)
        torch.testing.assert_close(final, net.forward_features(x), rtol=0, atol=0)
        for got, want in zip(maps, stages, strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
        last_two = net.forward_intermediates(x, indices=2, intermediates_only=True)
        assert [m.shape for m in last_two] == [m.shape for m in stages[-2:]]
        assert len(net.forward_intermediates(x, indices=[0, -1], stop_early=True)[1]) == 2
    with pytest.raises(ValueError, match=r"indices=\[7\]: stage indices in -5\.\.4"):
        net.forward_intermediates(x, indices=[7])


def test_reset_classifier_to_n_classes_and_to_none(net):
    x = torch.rand(1, 3, 64, 64)
    before = net.fc
    try:
        net.reset_classifier(7)
        assert net(x).shape == (1, 7) and net.num_classes == 7
        assert net.fc.weight.std().item() == pytest.approx(0.01, rel=0.2)  # the builders' init, as at creation
        net.reset_classifier(0)
        assert isinstance(net.get_classifier(), torch.nn.Identity) and net(x).shape == (1, net.num_features)
    finally:
        net.fc, net.num_classes = before, 1000


@pytest.mark.parametrize("name", NETS)
def test_creation_options_num_classes_global_pool_drop_rate(name):
    trunk = timm.create_model(name, num_classes=0).eval()
    assert trunk.fc is None and trunk(torch.rand(1, 3, 64, 64)).shape == (1, trunk.num_features)
    dropped = timm.create_model(name, drop_rate=0.25)
    if name == "rdb_vgg16_bn":  # VGG's dropout sits after fc6 / fc7, as timm's VGG puts drop_rate there
        assert dropped.dropout.p == 0.25
        with pytest.raises(ValueError, match="global_pool='max' does not apply to VGG"):
            timm.create_model(name, global_pool="max")
        return
    assert dropped.drop_rate == 0.25
    both = timm.create_model(name, global_pool="catavgmax", num_classes=3).eval()
    assert both.fc.in_features == 2 * both.num_features and both(torch.rand(1, 3, 64, 64)).shape == (1, 3)
    maps = timm.create_model(name, global_pool="", num_classes=0).eval()
    assert maps(torch.rand(1, 3, 64, 64)).ndim == 4


@pytest.mark.bad_input
@pytest.mark.parametrize("option,value,words", [("drop_path_rate", 0.1, "stochastic depth"),
                                                ("drop_block_rate", 0.1, "DropBlock"),
                                                ("output_stride", 16, "a dilated output_stride")])
def test_timm_options_the_papers_nets_lack_are_refused_in_one_line(option, value, words):
    with pytest.raises(ValueError, match=rf"^rdb_resnet50: {option}={value}: {words}[^\n]*$"):
        timm.create_model("rdb_resnet50", **{option: value})
    timm.create_model("rdb_resnet18", output_stride=32, drop_path_rate=0.0)  # what the nets are: accepted


@pytest.mark.parametrize("name", NETS)
def test_a_timm_fine_tuning_step(name):
    """reset_classifier, layer-decay parameter groups from group_matcher, gradient checkpointing: one SGD step."""
    torch.manual_seed(0)
    net = timm.create_model(name, num_classes=0)
    net.reset_classifier(4)
    net.set_grad_checkpointing()
    optimizer = timm.optim.create_optimizer_v2(net, "sgd", lr=0.01, layer_decay=0.7)
    scales = sorted({g["lr_scale"] for g in optimizer.param_groups})
    assert len(scales) >= 4 and scales[-1] == 1.0  # stem .. head, each its own decayed rate
    first = next(p for n, p in net.named_parameters() if n.startswith(("stem.", "conv1.")))
    before = first.detach().clone()
    net.train()
    x, y = torch.rand(2, 3, 64, 64), torch.tensor([1, 3])
    loss = torch.nn.functional.cross_entropy(net(x), y)
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss) and not torch.equal(before, first)


def test_grad_checkpointing_gives_the_same_output_and_gradients():
    torch.manual_seed(0)
    net = timm.create_model("rdb_resnet18", num_classes=3).train()
    x = torch.rand(2, 3, 64, 64)
    grads = []
    for on in (False, True):
        net.zero_grad()
        net.set_grad_checkpointing(on)
        torch.manual_seed(1)
        net(x).sum().backward()
        grads.append(net.res3[0].conv1.weight.grad.clone())
    torch.testing.assert_close(grads[0], grads[1])


def test_checkpoint_path_loads_through_timms_loader(tmp_path):
    tv = with_random_bn_statistics(torchvision.models.resnet50(weights=None)).eval()
    torch.save(tv.state_dict(), tmp_path / "r50_tv.pth")
    x = torch.rand(1, 3, 64, 64)
    with pytest.raises(backbones.IncompatibleWeightsError, match="stride_in_1x1: weights trained with False"):
        timm.create_model("rdb_resnet50", checkpoint_path=str(tmp_path / "r50_tv.pth"))
    net = timm.create_model("rdb_resnet50", checkpoint_path=str(tmp_path / "r50_tv.pth"), stride_in_1x1=False)
    with torch.no_grad():
        torch.testing.assert_close(net.eval()(x), tv(x), rtol=1e-4, atol=1e-4)
    backbones.save_pretrained(net, tmp_path / "ours.pth")  # a fine-tuned net of ours, resumed through timm
    again = timm.create_model("rdb_resnet50", checkpoint_path=str(tmp_path / "ours.pth"), stride_in_1x1=False)
    with torch.no_grad():
        torch.testing.assert_close(again.eval()(x), net(x), rtol=0, atol=0)


@pytest.mark.bad_input
def test_checkpoint_path_of_another_net_is_refused_naming_keys(tmp_path):
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), tmp_path / "r18.pth")
    with pytest.raises(backbones.IncompatibleWeightsError, match=r"missing in checkpoint.*\n\s+res2\.2\."):
        timm.create_model("rdb_resnet34", checkpoint_path=str(tmp_path / "r18.pth"))


def test_intermediates_of_a_pre_activation_net_take_the_final_norm_only_at_the_last_stage():
    net = timm.create_model("rdb_resnet18", preact=True).eval()
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        stopped, maps = net.forward_intermediates(x, indices=[1], stop_early=True)
        torch.testing.assert_close(stopped, maps[0], rtol=0, atol=0)  # res2's map: no final BN-ReLU on it
        final, _ = net.forward_intermediates(x)
        torch.testing.assert_close(final, net.forward_features(x), rtol=0, atol=0)


def test_grad_checkpointing_checkpoints_every_block(monkeypatch):
    import backbones.timm_interface as interface

    calls = []
    real = interface.checkpoint_seq
    monkeypatch.setattr(interface, "checkpoint_seq", lambda stage, x: calls.append(stage) or real(stage, x))
    net = timm.create_model("rdb_resnet18", num_classes=3).train()
    net(torch.rand(1, 3, 64, 64))
    assert calls == []
    net.set_grad_checkpointing()
    net(torch.rand(1, 3, 64, 64))
    assert calls == [net.res2, net.res3, net.res4, net.res5]  # block by block, as timm's ResNet (the stem whole)


@pytest.mark.bad_input
def test_a_failed_reset_classifier_changes_nothing():
    net = timm.create_model("rdb_resnet18", num_classes=3)
    pool, fc = net.global_pool, net.fc
    with pytest.raises(ValueError, match="global_pool='' leaves the maps unpooled"):
        net.reset_classifier(5, global_pool="")
    assert net.global_pool is pool and net.fc is fc and net.num_classes == 3


@pytest.mark.bad_input
def test_what_would_silently_change_a_files_network_is_refused(tmp_path):
    tv = torchvision.models.resnet18(weights=None)
    torch.save(tv.state_dict(), tmp_path / "r18.pth")
    net = timm.create_model("rdb_resnet18")
    wrong_head = {**tv.state_dict(), "fc.weight": torch.zeros(10, 512), "fc.bias": torch.zeros(10)}
    with pytest.raises(backbones.IncompatibleWeightsError, match="shape mismatch"):
        net.load_state_dict(wrong_head, strict=False)  # strict=False forgives keys, not shapes
    r50 = torchvision.models.resnet50(weights=None).state_dict()
    with pytest.raises(backbones.IncompatibleWeightsError, match="stride_in_1x1"):
        timm.create_model("rdb_resnet50").load_state_dict(r50, strict=False)
    blobs = {"conv1_w": torch.zeros(64, 3, 7, 7)}  # MSRA's names: BGR, which tensors alone cannot convert
    with pytest.raises(ValueError, match=r"a caffe2 state dict \(BGR\).*pretrained_cfg_overlay"):
        net.load_state_dict(blobs)
    with pytest.raises(ValueError, match="changes the input of the file's classifier"):
        timm.create_model("rdb_resnet18", pretrained=True, pretrained_cfg_overlay=dict(file=str(tmp_path / "r18.pth")),
                          global_pool="catavgmax")
    with pytest.raises(ValueError, match="drop_rate and dropout name the same dropout"):
        timm.create_model("rdb_vgg11", drop_rate=0.1, dropout=0.2)
    with pytest.raises(ValueError, match="VGG's dropout .* is its builder's `dropout` option"):
        backbones.timm_interface.as_timm_model(backbones.create_model("vgg11"), drop_rate=0.3)
