"""backbones.inference: the fast inference path equals the eager model, leaves it unchanged, and falls back to the
eager folded copy with one warning where torch.compile cannot run."""

import warnings

import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters

import backbones
from backbones import inference
from backbones.blocks import Conv2dNorm


def _with_statistics(model: nn.Module) -> nn.Module:
    """Non-trivial norm statistics and affine values: with the init's (mean 0, var 1, scale 1) a wrong fold could
    still give the right answer."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.BatchNorm2d, backbones.FrozenBatchNorm2d, nn.GroupNorm)):
                for name, lo, hi in (("running_mean", -0.3, 0.3), ("running_var", 0.5, 2.0), ("weight", 0.5, 1.5),
                                     ("bias", -0.2, 0.2)):
                    t = getattr(m, name, None)
                    if t is not None:
                        t.copy_(torch.rand(t.shape, generator=g) * (hi - lo) + lo)
    return model.eval()


@pytest.mark.parametrize("name,options", [("resnet18", {}), ("resnet50", {"norm": "FrozenBN"}),
                                          ("resnet18", {"norm": "GN"}), ("vgg11_bn", {}),
                                          ("cifar_resnet20", {"preact": True})])
def test_folded_channels_last_copy_gives_the_eager_outputs(name, options):
    torch.manual_seed(0)
    model = _with_statistics(backbones.create_model(name, num_classes=10, **options))
    x = torch.randn(2, 3, 64, 64)
    fast = backbones.optimize_for_inference(model, compile=False)
    with torch.no_grad():
        expected = model(x)
        got = fast(x)
    torch.testing.assert_close(got, expected, atol=1e-4 * float(expected.abs().max()), rtol=1e-4)
    foldable_left = [n for n, m in fast.named_modules() if isinstance(m, Conv2dNorm) and m.norm is not None
                     and m._foldable()]
    assert foldable_left == []  # every affine norm became a conv bias
    if options.get("norm") == "GN":  # not an affine map of its input: kept
        assert any(isinstance(m, nn.GroupNorm) for m in fast.modules())


def test_the_optimized_copy_leaves_the_model_unchanged():
    model = _with_statistics(backbones.create_model("resnet18", num_classes=10)).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fast = backbones.optimize_for_inference(model, compile=False)
    assert model.training and all(p.requires_grad for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert sum(isinstance(m, Conv2dNorm) for m in model.modules()) == 20
    assert not any(p.requires_grad for p in fast.parameters())
    out = fast(torch.randn(1, 3, 32, 32, requires_grad=True))
    assert not out.requires_grad  # no autograd graph, whatever the input


@pytest.mark.slow
def test_compiled_copy_gives_the_eager_outputs():
    """The whole path, torch.compile with Inductor's freezing included (a compile of ~10-30 s on 2 cores)."""
    reason = inference.compile_unavailable_reason("cpu")
    if reason is not None:
        pytest.skip(reason)
    torch.manual_seed(0)
    model = _with_statistics(backbones.create_model("cifar_resnet20"))
    x = torch.randn(4, 3, 32, 32)
    fast = backbones.optimize_for_inference(model)
    counters["inductor"].clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a silent fallback to eager would not test the compile
        got = fast(x)
    assert fast.compiled and fast.compile_seconds > 0
    if torch.backends.mkldnn.is_available():  # freezing in effect: weights prepacked, conv + ReLU (+ add) fused
        assert counters["inductor"]["mkldnn_conv_weight_pack_matcher_count"] >= 19  # every conv of ResNet-20
        assert counters["inductor"]["mkldnn_conv_binary_unary_fusion_matcher_count"] > 0
    seconds = fast.compile_seconds
    fast(x)
    assert fast.compile_seconds == seconds  # the same shape: no compile, nothing added
    with torch.no_grad():
        expected = model(x)
    torch.testing.assert_close(got, expected, atol=1e-4 * float(expected.abs().max()), rtol=1e-4)


def test_without_a_compiler_one_warning_and_the_eager_folded_copy(monkeypatch):
    monkeypatch.setattr(inference, "compile_unavailable_reason", lambda device: "no C++ compiler (test)")
    model = _with_statistics(backbones.create_model("cifar_resnet20"))
    with pytest.warns(UserWarning, match=r"not compiling \(no C\+\+ compiler \(test\)\)") as caught:
        fast = backbones.optimize_for_inference(model)
    assert len(caught) == 1 and not fast.compiled
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x), atol=1e-5, rtol=1e-4)


def test_a_compile_that_fails_warns_once_and_runs_eagerly_from_then_on():
    model = _with_statistics(backbones.create_model("cifar_resnet20"))
    fast = inference.InferenceModule(inference.fold_norms_into_convs(model), compile=False, channels_last=True)

    def broken(*args, **kwargs):
        raise torch._dynamo.exc.BackendCompilerFailed(lambda *a: None, RuntimeError("compiler exploded"), None)

    fast.__dict__["_compiled"] = broken
    x = torch.randn(2, 3, 32, 32)
    with pytest.warns(UserWarning, match="torch.compile failed") as caught:
        first = fast(x)
    assert len(caught) == 1 and not fast.compiled
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(fast(x), first)  # eager from then on, no second warning


def test_compile_unavailable_reason_names_the_missing_cpu_compiler(monkeypatch):
    from torch._inductor import cpp_builder

    def missing():
        raise RuntimeError("Compiler g++ not found")

    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", missing)
    assert inference.compile_unavailable_reason("cpu") == \
        "no C++ compiler for Inductor's CPU backend (RuntimeError: Compiler g++ not found)"
