"""The extractor leaves the model exactly as found and survives what breaks other CAM tools.

Hooks, train/eval flags (per module), parameter `.grad` and `requires_grad`
and buffers are compared before and after, on success and on errors; then the
bug-tracker classics: in-place ReLU, `no_grad`, `inference_mode`, frozen
models, layers that never run or that the score ignores, a reused ReLU.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import gradcam_cli
from conftest import SmallCnn, assert_left_as_found, model_state, require, seeded, timm_model, tv_resnet18
from gradcam_cli.errors import GradcamError, LayerError

timm = require("timm")

pytestmark = pytest.mark.usefixtures("one_thread")


# -- the model is left as found ------------------------------------------------


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_success_leaves_model_as_found(training: bool) -> None:
    model = timm_model("test_resnet").train(training)
    before = model_state(model)
    maps = gradcam_cli.cam(model, seeded(0, 2, 3, 64, 64), ["layer3", "layer4"])
    assert maps.shape == (2, 64, 64) and torch.isfinite(maps).all()
    assert model.training is training
    assert_left_as_found(model, before)  # in train mode: BatchNorm running stats untouched too


def test_mixed_train_eval_flags_are_restored_per_module() -> None:
    """A fine-tuning setup: train mode with frozen (eval) BatchNorm must come back as it was."""
    model = timm_model("test_resnet").train()
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.eval()
    before = model_state(model)
    gradcam_cli.cam(model, seeded(1, 1, 3, 64, 64), "layer4")
    assert_left_as_found(model, before)
    assert not model.bn1.training and model.layer1.training


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_bad_class_index_leaves_model_as_found(training: bool) -> None:
    model = timm_model("test_resnet").train(training)
    before = model_state(model)
    with pytest.raises(GradcamError, match="out of range"):
        gradcam_cli.cam(model, seeded(2, 2, 3, 64, 64), "layer4", classes=[0, 5000])
    assert_left_as_found(model, before)


def test_forward_that_raises_leaves_model_as_found() -> None:
    torch.manual_seed(0)
    model = SmallCnn(fail=True).train()
    before = model_state(model)
    with pytest.raises(RuntimeError, match="boom after the target layers"):
        gradcam_cli.cam(model, seeded(3, 1, 3, 32, 32), "conv1")
    assert_left_as_found(model, before)
    assert model.training


def test_parameter_grads_stay_none_and_requires_grad_unchanged() -> None:
    model = timm_model("test_resnet")
    model.layer1.requires_grad_(False)  # a mix of frozen and trainable parameters
    before = model_state(model)
    gradcam_cli.cam(model, seeded(4, 2, 3, 64, 64), "layer4")
    assert all(p.grad is None for p in model.parameters())
    assert_left_as_found(model, before)


# -- maps that other tools get wrong ---------------------------------------------


def _same_weights(inplace: bool, source: nn.Module | None = None) -> nn.Module:
    model = SmallCnn(inplace=inplace).eval()
    if source is not None:
        model.load_state_dict(source.state_dict())
    return model


def test_inplace_relu_after_target_layer_does_not_corrupt_the_map() -> None:
    torch.manual_seed(0)
    plain = _same_weights(inplace=False)
    inplace = _same_weights(inplace=True, source=plain)
    x = seeded(5, 2, 3, 32, 32)
    expected = gradcam_cli.cam(plain, x, "conv1")
    got = gradcam_cli.cam(inplace, x, "conv1")
    assert expected.flatten(1).amax(dim=1).min() > 0.99  # a real map
    torch.testing.assert_close(got, expected, atol=0, rtol=0)
    # the ReLU really did clip the layer's output: conv1 has negative values
    assert (plain.conv1(x) < 0).any()


def _manual_block_cam(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Grad-CAM of torchvision resnet18's `layer4.1.bn2` by hand, without hooks.

    That output is followed by `out += identity` (in place), then the shared ReLU.
    """
    import torch.nn.functional as F

    m = model
    with torch.enable_grad():
        h = m.maxpool(m.relu(m.bn1(m.conv1(x))))
        h = m.layer4[0](m.layer3(m.layer2(m.layer1(h))))
        block = m.layer4[1]
        act = block.bn2(block.conv2(block.relu(block.bn1(block.conv1(h)))))
        logits = m.fc(torch.flatten(m.avgpool(F.relu(act + h)), 1))
        score = logits.gather(1, logits.argmax(dim=1, keepdim=True)).sum()
        (grad,) = torch.autograd.grad(score, act)
    raw = (grad.mean(dim=(2, 3), keepdim=True) * act.detach()).sum(dim=1).clamp(min=0)
    flat = raw.flatten(1)
    raw = (raw - flat.amin(1)[:, None, None]) / (flat.amax(1) - flat.amin(1))[:, None, None]
    up = F.interpolate(raw[:, None], size=x.shape[-2:], mode="bilinear", align_corners=False)[:, 0]
    flat = up.flatten(1)
    return (up - flat.amin(1)[:, None, None]) / (flat.amax(1) - flat.amin(1))[:, None, None]


def test_inplace_add_after_target_layer_matches_a_hand_computed_map() -> None:
    model = tv_resnet18()
    x = seeded(6, 1, 3, 64, 96)
    ours = gradcam_cli.cam(model, x, "layer4.1.bn2")
    torch.testing.assert_close(ours, _manual_block_cam(model, x), atol=1e-5, rtol=0)


def test_reused_relu_module_works_and_keeps_its_last_call() -> None:
    """torchvision's BasicBlock calls one `self.relu` twice; its last call is the block's output."""
    model = tv_resnet18()
    x = seeded(7, 2, 3, 64, 64)
    before = model_state(model)
    block = gradcam_cli.cam(model, x, "layer4.1")
    shared_relu = gradcam_cli.cam(model, x, "layer4.1.relu")
    assert torch.isfinite(block).all() and block.flatten(1).amax(dim=1).min() > 0.99
    torch.testing.assert_close(shared_relu, block, atol=1e-6, rtol=0)
    assert_left_as_found(model, before)


@pytest.mark.parametrize("context", ["no_grad", "inference_mode"])
def test_grad_disabled_contexts_give_the_same_map(context: str) -> None:
    model = timm_model("test_resnet")
    x = seeded(8, 2, 3, 64, 64)
    expected = gradcam_cli.cam(model, x, "layer4")
    with getattr(torch, context)():
        x_inside = x.clone()  # under inference_mode this is an inference tensor
        got = gradcam_cli.cam(model, x_inside, "layer4")
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)


def test_fully_frozen_model_still_works() -> None:
    model = timm_model("test_resnet")
    x = seeded(9, 2, 3, 64, 64)
    expected = gradcam_cli.cam(model, x, "layer4")
    frozen = copy.deepcopy(model).requires_grad_(False)
    before = model_state(frozen)
    got = gradcam_cli.cam(frozen, x, "layer4")
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    assert not any(p.requires_grad for p in frozen.parameters())
    assert_left_as_found(frozen, before)


def test_input_tensor_is_not_modified() -> None:
    model = timm_model("test_resnet")
    x = seeded(10, 1, 3, 64, 64)
    kept = x.clone()
    gradcam_cli.cam(model, x, "layer4")
    assert torch.equal(x, kept) and not x.requires_grad and x.grad is None


# -- layers that cannot explain the score --------------------------------------


def test_layer_that_never_runs_says_so() -> None:
    torch.manual_seed(0)
    model = SmallCnn().eval()
    before = model_state(model)
    with pytest.raises(LayerError, match="never ran") as info:
        gradcam_cli.cam(model, seeded(11, 1, 3, 32, 32), "unused")
    assert "index" not in str(info.value) and "'unused'" in str(info.value)
    assert_left_as_found(model, before)


@pytest.mark.parametrize("detached", [False, True], ids=["discarded", "detached-and-discarded"])
def test_layer_the_score_does_not_depend_on_is_a_clear_error(detached: bool) -> None:
    torch.manual_seed(0)
    model = SmallCnn(side_branch=True, detached_side=detached).eval()
    before = model_state(model)
    with pytest.raises(LayerError, match="does not depend on layer 'side'"):
        gradcam_cli.cam(model, seeded(12, 1, 3, 32, 32), "side")
    assert_left_as_found(model, before)
    # the same model explains fine from a layer on the main path
    assert torch.isfinite(gradcam_cli.cam(model, seeded(12, 1, 3, 32, 32), "conv2")).all()


@pytest.mark.parametrize("name, default", [("test_resnet", "layer4"), ("test_vit", "blocks.-1.norm1")])
def test_cam_without_layers_takes_the_family_default(name: str, default: str) -> None:
    """`cam(model, x)` explains the layer `gradcam explain` would, the one `gradcam layers` marks."""
    from torchvision.models import resnet18

    model = timm_model(name)
    size = model.pretrained_cfg["input_size"][1:]
    x = seeded(4, 2, 3, *size)
    torch.testing.assert_close(gradcam_cli.cam(model, x), gradcam_cli.cam(model, x, default))
    plain = resnet18(num_classes=10).eval()  # no timm metadata: the last spatial stage, found by a probe
    y = seeded(5, 1, 3, 64, 64)
    torch.testing.assert_close(gradcam_cli.cam(plain, y), gradcam_cli.cam(plain, y, "layer4"))
