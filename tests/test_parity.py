"""Parity with the reference: our Grad-CAM maps equal pytorch-grad-cam's `GradCAM`.

Same model, layer(s), input and targets on both sides; the reference gets the
reshape function a user would hand-write, we get only the layer's name.
Random weights (never pretrained), seeded inputs, eval mode; and the shipped
trained model, whose raw maps are negative in places (random weights give
none: there a map without its ReLU would pass too), also without the ReLU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest
import torch

import gradcam_cli
from conftest import example_batch, require, seeded, timm_model

timm = require("timm")
pytorch_grad_cam = require("pytorch_grad_cam")
from pytorch_grad_cam import GradCAM  # noqa: E402
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget  # noqa: E402

ATOL = 1e-4


pytestmark = pytest.mark.usefixtures("one_thread")


def token_reshape(prefix: int, h: int, w: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """The hand-written ViT reshape: drop prefix tokens, tokens → grid, NHWC → NCHW."""

    def reshape(tokens: torch.Tensor) -> torch.Tensor:
        grid = tokens[:, prefix:, :].reshape(tokens.size(0), h, w, tokens.size(2))
        return grid.permute(0, 3, 1, 2)

    return reshape


def reference(
    model: torch.nn.Module,
    x: torch.Tensor,
    layers: Sequence[torch.nn.Module],
    classes: Sequence[int] | None = None,
    reshape: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> np.ndarray:
    targets = None if classes is None else [ClassifierOutputTarget(int(c)) for c in classes]
    with GradCAM(model=model, target_layers=list(layers), reshape_transform=reshape) as explainer:
        return explainer(input_tensor=x, targets=targets)


def assert_parity(ours: torch.Tensor, ref: np.ndarray) -> None:
    assert ours.shape == ref.shape
    assert torch.isfinite(ours).all()
    # a real map on both sides, not two blank ones that agree trivially
    assert (ours.flatten(1).amax(dim=1) > 0.99).all()
    np.testing.assert_allclose(ours.numpy(), ref, atol=ATOL, rtol=0)


def test_timm_resnet_layer4_matches_reference() -> None:
    model = timm_model("test_resnet")
    x = seeded(1, 2, 3, 96, 128)
    assert_parity(gradcam_cli.cam(model, x, "layer4"), reference(model, x, [model.layer4]))


def test_torchvision_resnet18_non_square_matches_reference() -> None:
    torchvision = require("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    x = seeded(2, 2, 3, 96, 128)
    ours = gradcam_cli.cam(model, x, "layer4")
    assert ours.shape == (2, 96, 128)
    assert_parity(ours, reference(model, x, [model.layer4]))


def test_class_token_vit_matches_reference_with_hand_written_reshape() -> None:
    model = timm_model("test_vit")
    x = seeded(3, 2, 3, 160, 160)  # 16-pixel patches: a 10x10 grid after 1 class token
    ours = gradcam_cli.cam(model, x, "blocks.-1.norm1")
    ref = reference(model, x, [model.blocks[-1].norm1], reshape=token_reshape(1, 10, 10))
    assert_parity(ours, ref)


def test_one_class_per_image_matches_per_image_targets() -> None:
    model = timm_model("test_resnet")
    x = seeded(4, 3, 3, 96, 96)
    ranked = model(x).topk(4, dim=1).indices
    classes = [int(ranked[i, 1 + i]) for i in range(3)]  # the 2nd, 3rd and 4th best: never the top class
    assert len(set(classes)) > 1
    ours = gradcam_cli.cam(model, x, "layer4", classes=classes)
    assert_parity(ours, reference(model, x, [model.layer4], classes=classes))
    # and the classes matter: the top-1 maps are different
    assert not torch.allclose(ours, gradcam_cli.cam(model, x, "layer4"), atol=1e-3)


def test_one_class_for_the_whole_batch_matches_reference() -> None:
    model = timm_model("test_resnet")
    x = seeded(5, 2, 3, 64, 96)
    second = int(model(x)[0].topk(2).indices[1])
    ours = gradcam_cli.cam(model, x, "layer4.-1", classes=second)
    assert_parity(ours, reference(model, x, [model.layer4[-1]], classes=[second, second]))


LAYER_SETS = {
    "two-resolutions": (("layer3", "layer4"), lambda m: [m.layer3, m.layer4]),
    "three-resolutions": (("layer2", "layer3.-1", "layer4"), lambda m: [m.layer2, m.layer3[-1], m.layer4]),
}


@pytest.mark.parametrize("layer_set", list(LAYER_SETS))
def test_several_layers_and_top1_default_match_reference(layer_set: str) -> None:
    """Ours: per-layer normalised maps averaged and renormalised; the reference does the same."""
    paths, modules = LAYER_SETS[layer_set]
    model = timm_model("test_resnet")
    x = seeded(6, 2, 3, 96, 128)
    ours = gradcam_cli.cam(model, x, list(paths))  # classes=None: top-1 per image
    assert_parity(ours, reference(model, x, modules(model), classes=None))
    # combining layers is not the same as the last layer alone
    assert not torch.allclose(ours, gradcam_cli.cam(model, x, paths[-1]), atol=1e-3)


def test_layers_given_as_modules_equal_layers_given_as_paths() -> None:
    model = timm_model("test_resnet")
    x = seeded(7, 2, 3, 64, 64)
    by_path = gradcam_cli.cam(model, x, ["layer3", "layer4"])
    by_module = gradcam_cli.cam(model, x, [model.layer3, model.layer4])
    torch.testing.assert_close(by_path, by_module, atol=0, rtol=0)


@pytest.fixture(scope="module")
def trained() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    """The shipped example model (eval mode), its 8 scenes at 96x96 and each scene's top class."""
    return example_batch()


TRAINED_LAYERS = {"layer3": ["layer3"], "layer4": ["layer4"], "layer3+layer4": ["layer3", "layer4"]}


@pytest.mark.parametrize("which", ["top", "second"])
@pytest.mark.parametrize("layers", list(TRAINED_LAYERS))
def test_the_trained_example_model_matches_reference(trained, layers: str, which: str) -> None:
    model, x, top = trained
    classes = top.tolist() if which == "top" else [int(c) for c in model(x).topk(2, dim=1).indices[:, 1]]
    paths = TRAINED_LAYERS[layers]
    ours = gradcam_cli.cam(model, x, paths, classes=classes)
    assert_parity(ours, reference(model, x, [model.get_submodule(p) for p in paths], classes=classes))
    # the case can tell: without the ReLU the maps are others (by 100 times the tolerance at least)
    assert (gradcam_cli.cam(model, x, paths, classes=classes, relu=False) - ours).abs().amax() > 100 * ATOL


@pytest.mark.parametrize("layers", list(TRAINED_LAYERS))
def test_a_signed_map_matches_the_reference_without_its_relu(trained, layers: str, reference_signed: None) -> None:
    """relu=False: the raw map min-max scaled, negative part and all, as the reference computes it before its ReLU."""
    model, x, top = trained
    paths = TRAINED_LAYERS[layers]
    ours = gradcam_cli.cam(model, x, paths, relu=False)
    assert_parity(ours, reference(model, x, [model.get_submodule(p) for p in paths], classes=top.tolist()))
