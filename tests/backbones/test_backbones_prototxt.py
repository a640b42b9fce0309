"""Ground truth: our ResNet-50/101 (default options) against MSRA's released Caffe deploy prototxts
(tests/reference/prototxt, in the repository)."""

import re

import pytest

from backbones import create_model
from backbones.blocks import Conv2dNorm
from reference_sources import REFERENCE

PROTOTXT = REFERENCE / "prototxt"


def parse_prototxt_layers(text):
    """Minimal prototxt reader: a list of dicts (name, type, bottom, top, and flat params) per `layer { }`."""
    layers, depth, current = [], 0, None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if depth == 0 and re.match(r"layer\s*\{", line):
            current, depth = {"bottom": []}, 1
            continue
        if current is None:
            continue
        if line.endswith("{"):
            depth += 1
            continue
        if line == "}":
            depth -= 1
            if depth == 0:
                layers.append(current)
                current = None
            continue
        key, _, value = line.partition(":")
        value = value.strip().strip('"')
        if key == "bottom":
            current["bottom"].append(value)
        else:
            current[key.strip()] = value
    return layers


def caffe_name_to_ours(name):
    if name == "conv1":
        return "stem.conv1"
    m = re.fullmatch(r"res(\d)([a-z])(\d*)_branch(1|2a|2b|2c)", name)
    assert m, name
    stage, letter, num, branch = m.groups()
    index = int(num) if num else ord(letter) - ord("a")
    return f"res{stage}.{index}." + {"1": "shortcut", "2a": "conv1", "2b": "conv2", "2c": "conv3"}[branch]


def caffe_convs(path):
    layers = parse_prototxt_layers(path.read_text())
    channels = {"data": 3}
    convs, bn_of = [], {}
    for layer in layers:
        t, top = layer.get("type"), layer.get("top")
        if t == "Convolution":
            cin = channels[layer["bottom"][0]]
            channels[top] = int(layer["num_output"])
            convs.append(dict(name=layer["name"], top=top, kernel=int(layer["kernel_size"]),
                              stride=int(layer.get("stride", 1)), pad=int(layer.get("pad", 0)), cin=cin,
                              cout=int(layer["num_output"]), bias=layer.get("bias_term", "true") == "true"))
        elif t == "BatchNorm":
            bn_of[layer["bottom"][0]] = layer["name"]
        elif top is not None and layer["bottom"]:
            channels[top] = channels[layer["bottom"][0]]
    return convs, bn_of, layers


@pytest.mark.parametrize("depth", [50, 101])
def test_resnet_matches_msra_prototxt(depth):
    path = PROTOTXT / f"ResNet-{depth}-deploy.prototxt"
    convs, bn_of, layers = caffe_convs(path)
    model = create_model(f"resnet{depth}")
    ours = {n: m for n, m in model.named_modules() if isinstance(m, Conv2dNorm)}
    expected_order = [caffe_name_to_ours(c["name"]) for c in convs]
    assert sorted(expected_order) == sorted(ours), "different set of conv layers"
    assert len(convs) == {50: 53, 101: 104}[depth]
    for c in convs:
        name = caffe_name_to_ours(c["name"])
        m = ours[name]
        # Bias is not compared: the ResNet-50 release's conv1 has one (ResNet-101's has not), redundant before
        # BN; the weight loader folds it into the BN. Every other conv has bias_term: false, as ours.
        got = (m.kernel_size[0], m.stride[0], m.padding[0], m.in_channels, m.out_channels)
        want = (c["kernel"], c["stride"], c["pad"], c["cin"], c["cout"])
        assert m.bias is None
        assert not c["bias"] or (depth == 50 and c["name"] == "conv1")
        assert got == want, f"{c['name']} -> {name}: ours {got} vs prototxt {want}"
        # BN (+Scale) directly on every conv's output, in both
        assert c["top"] in bn_of, f"{c['name']} has no BatchNorm in the prototxt"
        assert m.norm is not None, f"{name} has no norm"
    # the residual additions: one Eltwise per block, each followed by a ReLU
    n_blocks = sum(1 for _ in model.blocks())
    eltwise = [layer for layer in layers if layer.get("type") == "Eltwise"]
    assert len(eltwise) == n_blocks
    relu_inputs = {layer["bottom"][0] for layer in layers if layer.get("type") == "ReLU"}
    assert all(e["top"] in relu_inputs for e in eltwise)
    fc = next(layer for layer in layers if layer.get("type") == "InnerProduct")
    assert int(fc["num_output"]) == model.fc.out_features == 1000
    assert model.fc.in_features == 2048


def test_block_order_in_prototxt_follows_stage_and_index():
    convs, _, _ = caffe_convs(PROTOTXT / "ResNet-101-deploy.prototxt")
    res4 = sorted({caffe_name_to_ours(c["name"]).split(".")[1] for c in convs
                   if caffe_name_to_ours(c["name"]).startswith("res4")}, key=int)
    assert res4 == [str(i) for i in range(23)]  # res4a, res4b1..res4b22
