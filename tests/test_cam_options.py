"""Post-processing options (--combine, --relu, --norm, --aug-smooth) and the method options of the CLI.

Expected maps are computed by hand here, with plain torch from hooked
activations and gradients, not through our pipeline's functions.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import gradcam_cli
from conftest import seeded, shared_timm_model, write_image
from gradcam_cli.cams.augment import VIEWS, View

pytestmark = pytest.mark.usefixtures("one_thread")

SHAPE = (2, 3, 96, 128)


def _minmax(m: torch.Tensor) -> torch.Tensor:
    flat = m.flatten(1)
    low, high = flat.min(1).values[:, None, None], flat.max(1).values[:, None, None]
    return (m - low) / (high - low)


def _hand_gradcam_layers(model: torch.nn.Module, x: torch.Tensor, names: list[str]) -> list[torch.Tensor]:
    """Signed Grad-CAM maps (N, h, w) per layer for each image's top class, from hooks and autograd."""
    modules = dict(model.named_modules())
    saved: dict[str, torch.Tensor] = {}
    handles = [modules[n].register_forward_hook(lambda _m, _i, o, n=n: saved.__setitem__(n, o)) for n in names]
    try:
        logits = model(x)
    finally:
        for h in handles:
            h.remove()
    score = logits.gather(1, logits.argmax(1, keepdim=True)).sum()
    grads = torch.autograd.grad(score, [saved[n] for n in names])
    return [(g.mean(dim=(2, 3), keepdim=True) * saved[n]).sum(1).detach() for n, g in zip(names, grads)]


def _up(m: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    return F.interpolate(m[:, None], size=size, mode="bilinear", align_corners=False)[:, 0]


@pytest.mark.parametrize("how", ["mean", "max", "product"])
def test_combine_merges_layers_as_documented(how: str) -> None:
    model = shared_timm_model("test_resnet")
    x = seeded(21, *SHAPE)
    layers = ["layer3", "layer4"]
    per_layer = [_up(_minmax(m.clamp(min=0)), SHAPE[2:]) for m in _hand_gradcam_layers(model, x, layers)]
    stacked = torch.stack(per_layer)
    merged = {"mean": stacked.mean(0), "max": stacked.amax(0), "product": stacked.prod(0)}[how]
    ours = gradcam_cli.cam(model, x, layers, combine=how)
    torch.testing.assert_close(ours, _minmax(merged), atol=1e-4, rtol=0)


def test_combine_modes_differ() -> None:
    model = shared_timm_model("test_resnet")
    x = seeded(22, *SHAPE)
    maps = [gradcam_cli.cam(model, x, ["layer3", "layer4"], combine=how) for how in ("mean", "max", "product")]
    assert not torch.allclose(maps[0], maps[1], atol=1e-3) and not torch.allclose(maps[0], maps[2], atol=1e-3)


def test_no_relu_and_no_norm_give_the_signed_raw_map() -> None:
    """On a ViT norm layer the Grad-CAM sum takes both signs; --no-relu --norm none keeps it as it is."""
    model = shared_timm_model("test_vit")
    x = seeded(23, 2, 3, 160, 160)
    ours = gradcam_cli.cam(model, x, "blocks.-1.norm1", relu=False, norm="none")

    saved = {}
    handle = model.blocks[-1].norm1.register_forward_hook(lambda _m, _i, o: saved.setdefault("a", o))
    try:
        logits = model(x)
    finally:
        handle.remove()
    (grad,) = torch.autograd.grad(logits.gather(1, logits.argmax(1, keepdim=True)).sum(), saved["a"])
    patches, patch_grads = saved["a"][:, 1:], grad[:, 1:]  # the class token is not on the grid
    tokens = (patch_grads.mean(dim=1, keepdim=True) * patches).sum(-1).detach()
    hand = _up(tokens.reshape(2, 10, 10), (160, 160))

    assert ours.min() < 0 < ours.max(), "the signed map keeps negative evidence"
    torch.testing.assert_close(ours, hand, atol=1e-5, rtol=1e-4)
    clipped = gradcam_cli.cam(model, x, "blocks.-1.norm1", norm="none")
    torch.testing.assert_close(clipped, _up(tokens.clamp(min=0).reshape(2, 10, 10), (160, 160)), atol=1e-5, rtol=1e-4)
    signed = gradcam_cli.cam(model, x, "blocks.-1.norm1", relu=False)
    torch.testing.assert_close(signed, _minmax(hand), atol=1e-4, rtol=0)


# ------------------------------------------------------------------ aug-smooth


@pytest.mark.parametrize("view", VIEWS, ids=lambda v: f"flip{int(v.flip)}-x{v.scale}")
def test_every_view_maps_a_point_back_where_it_came_from(view: View) -> None:
    """A bright dot in the image lands, after the view and its undo, on the same pixel."""
    h, w = 64, 96
    image = torch.zeros(1, 1, h, w)
    y, x = 30, 40
    image[..., y - 2 : y + 3, x - 2 : x + 3] = 1.0
    seen = view.apply(image)
    back, covered = view.undo(seen)
    mass = back[0, 0] / back[0, 0].sum()
    centre = (float((mass.sum(1) * torch.arange(h)).sum()), float((mass.sum(0) * torch.arange(w)).sum()))
    assert abs(centre[0] - y) <= 1 and abs(centre[1] - x) <= 1, (view, centre)
    assert covered[y, x] == 1
    if view.scale > 1:
        assert covered[0, 0] == 0, "a zoomed-in view does not vote for the border it cut off"


def test_aug_smooth_averages_the_views_for_the_same_class() -> None:
    model = shared_timm_model("test_resnet")
    x = seeded(24, *SHAPE)
    plain = gradcam_cli.cam(model, x, "layer4")
    smooth = gradcam_cli.cam(model, x, "layer4", aug_smooth=True)
    assert smooth.shape == plain.shape and torch.isfinite(smooth).all()
    assert torch.allclose(smooth.flatten(1).amax(1), torch.ones(2))
    assert not torch.allclose(smooth, plain, atol=1e-3)
    # the classes of the unaugmented view are used for every view: same class, same map
    with torch.no_grad():
        top = model(x).argmax(1).tolist()
    torch.testing.assert_close(gradcam_cli.cam(model, x, "layer4", classes=top, aug_smooth=True), smooth)


# ------------------------------------------------------------------ CLI


@pytest.fixture()
def photo(tmp_path):
    return write_image(tmp_path / "in" / "cat.png", 96, 64, seed=5)


def test_cli_norm_none_writes_raw_values_and_a_display_overlay(run_cli, photo, tmp_path) -> None:
    out = tmp_path / "out"
    result = run_cli(
        "explain", photo, "--model", "test_vit", "--no-pretrained", "--norm", "none", "--no-relu", "--save-raw", "-o", out, "--json"
    )
    assert result.code == 0, result.stderr
    (record,) = result.records()
    raw = np.load(record["targets"][0]["raw"])
    assert raw.shape == (64, 96) and raw.min() < 0, "signed raw values, not a [0,1] map"
    assert record["settings"]["norm"] == "none" and record["settings"]["relu"] is False
    assert (out / "in" / "cat.png.gradcam.png").is_file()


def test_cli_save_guided_writes_the_colour_image(run_cli, photo, tmp_path) -> None:
    out = tmp_path / "out"
    result = run_cli(
        "explain", photo, "--model", "test_resnet", "--no-pretrained", "--method", "guided-gradcam", "--save-guided", "-o", out, "--json"
    )
    assert result.code == 0, result.stderr
    (record,) = result.records()
    guided = record["targets"][0]["guided"]
    assert guided.endswith("in/cat.png.guided-gradcam.guided.png")
    from PIL import Image

    with Image.open(guided) as im:
        assert im.size == (96, 64) and im.mode == "RGB"
    # a re-run into the same folder does not take its own outputs for inputs: it holds no image
    again = run_cli("explain", out, "--model", "test_resnet", "--no-pretrained", "-o", out, "--json")
    assert again.code == 1 and [r["error"] for r in again.records()] == [f"{out}: no image file in this folder"]


def test_cli_save_guided_needs_the_guided_method(run_cli, photo, tmp_path) -> None:
    result = run_cli("explain", photo, "--model", "test_resnet", "--no-pretrained", "--save-guided", "-o", tmp_path / "o")
    assert result.code == 2
    assert "--method guided-gradcam" in result.stderr and "Traceback" not in result.stderr


def test_cli_fullgrad_says_layer_is_ignored(run_cli, photo, tmp_path) -> None:
    result = run_cli(
        "explain",
        photo,
        "--model",
        "test_resnet",
        "--no-pretrained",
        "--method",
        "fullgrad",
        "--layer",
        "layer3",
        "-o",
        tmp_path / "o",
        "--json",
    )
    assert result.code == 0, result.stderr
    assert "--layer is ignored" in result.stderr
    (record,) = result.records()
    assert "bias layers" in record["layers"][0]


@pytest.mark.parametrize("option", [("--norm", "raw"), ("--combine", "median"), ("--cam-batch-size", "0")])
def test_cli_refuses_bad_option_values(run_cli, photo, tmp_path, option) -> None:
    result = run_cli("explain", photo, "--model", "test_resnet", "--no-pretrained", *option, "-o", tmp_path / "o")
    assert result.code == 2 and "Traceback" not in result.stderr
    assert option[0] in result.stderr


@pytest.mark.slow
def test_preset_sets_method_options(run_cli, photo, tmp_path) -> None:
    preset = tmp_path / "p.yaml"
    preset.write_text(
        "model: test_resnet\npretrained: false\nmethod: scorecam\ncam_batch_size: 5\n"
        "eigen_smooth: true\ncombine: max\nlayers: [layer3, layer4]\n"
    )
    result = run_cli("explain", photo, "--config", preset, "-o", tmp_path / "o", "--json")
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert record["method"] == "scorecam" and record["layers"] == ["layer3", "layer4"]
    assert record["settings"]["eigen_smooth"] is True and record["settings"]["combine"] == "max"
