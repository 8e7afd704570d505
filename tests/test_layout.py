"""Layer outputs in any layout become N×C×H×W without a hand-written reshape.

Unit checks of `detect_layout` / `Layout.to_nchw` on synthetic and real
shapes, then end to end: `cam()` on token models equals pytorch-grad-cam fed
the reshape a user would have to write.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

import gradcam_cli
from conftest import require, seeded, small_tv_vit, timm_model
from gradcam_cli.errors import LayoutError
from gradcam_cli.option_words import as_flag
from gradcam_cli.layout import MAX_PREFIX_TOKENS, Layout, LayoutHints, channels_dim_hint, detect_layout, patch_grid

timm = require("timm")


pytestmark = pytest.mark.usefixtures("one_thread")


def multi_prefix_vit(**kwargs: object) -> torch.nn.Module:
    """A tiny ViT with a class token and 4 register tokens: 5 prefix tokens."""
    args = dict(img_size=64, depth=2, embed_dim=32, num_heads=2, num_classes=10, reg_tokens=4, class_token=True)
    args.update(kwargs)
    return timm_model("vit_tiny_patch16_224", **args)


def output_of(model: torch.nn.Module, module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    seen: list[torch.Tensor] = []
    handle = module.register_forward_hook(lambda _m, _i, out: seen.append(out))
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()
    return seen[-1]


def tokens_from_grid(grid: torch.Tensor, prefix: int) -> torch.Tensor:
    """NCHW → NLC with `prefix` extra tokens in front, as a ViT lays them out."""
    n, c, h, w = grid.shape
    patches = grid.permute(0, 2, 3, 1).reshape(n, h * w, c)
    return torch.cat([torch.full((n, prefix, c), 99.0), patches], dim=1)


# -- channels-first and channels-last maps ---------------------------------------


def test_nchw_map_passes_through() -> None:
    t = seeded(0, 2, 64, 7, 10)
    layout = detect_layout(tuple(t.shape), (224, 320), LayoutHints())
    assert layout == Layout("NCHW", (7, 10))
    assert layout.to_nchw(t) is t


def test_real_nchw_layer_is_detected() -> None:
    model = timm_model("test_resnet")
    module = model.layer4
    out = output_of(model, module, seeded(1, 1, 3, 96, 128))
    layout = detect_layout(tuple(out.shape), (96, 128), LayoutHints(channels_dim=channels_dim_hint(module)))
    assert layout == Layout("NCHW", (3, 4))


def test_convnext_block_norm_is_channels_last() -> None:
    model = timm_model("test_convnext")
    module = model.stages[-1].blocks[-1].norm
    out = output_of(model, module, seeded(2, 1, 3, 160, 160))
    assert out.shape[-1] == 64 and tuple(out.shape[1:3]) == (5, 5)  # really NHWC in timm
    assert channels_dim_hint(module) == -1
    for hints in (LayoutHints(channels_dim=-1), LayoutHints()):
        layout = detect_layout(tuple(out.shape), (160, 160), hints)
        assert layout == Layout("NHWC", (5, 5))
        torch.testing.assert_close(layout.to_nchw(out), out.permute(0, 3, 1, 2))


def test_synthetic_nhwc_needs_the_channels_hint_when_both_readings_fit() -> None:
    nchw = seeded(3, 2, 16, 16, 17)
    nhwc = nchw.permute(0, 2, 3, 1).contiguous()  # (2, 16, 17, 16): also reads as 16 channels on 17x16
    shape, size = tuple(nhwc.shape), (64, 64)  # both grids follow the square input about equally well
    with pytest.raises(LayoutError, match="grid=HxW"):
        detect_layout(shape, size, LayoutHints())
    layout = detect_layout(shape, size, LayoutHints(channels_dim=-1))
    assert layout == Layout("NHWC", (16, 17))
    torch.testing.assert_close(layout.to_nchw(nhwc), nchw)
    assert detect_layout(shape, size, LayoutHints(channels_dim=1)) == Layout("NCHW", (17, 16))


def test_the_reading_that_follows_the_input_aspect_wins() -> None:
    """(N, 32, 40, 40) from a 160x160 input: 40x40 is the grid, not 32x40 (timm test_resnet layer1)."""
    assert detect_layout((1, 32, 40, 40), (160, 160), LayoutHints()) == Layout("NCHW", (40, 40))
    # channels-last from a 48x64 input: 6x8 keeps the input's 3:4, 8x12 does not
    assert detect_layout((2, 6, 8, 12), (48, 64), LayoutHints()) == Layout("NHWC", (6, 8))


def test_grid_hint_settles_the_4d_ambiguity_both_ways() -> None:
    shape, size = (2, 6, 8, 12), (48, 64)
    assert detect_layout(shape, size, LayoutHints(grid=(6, 8))) == Layout("NHWC", (6, 8))
    assert detect_layout(shape, size, LayoutHints(grid=(8, 12))) == Layout("NCHW", (8, 12))
    with pytest.raises(LayoutError, match="has no 5x5 grid; check grid"):
        detect_layout(shape, size, LayoutHints(grid=(5, 5)))


def test_2d_output_has_no_spatial_layout() -> None:
    with pytest.raises(LayoutError, match="no spatial dimensions"):
        detect_layout((2, 1000), (224, 224), LayoutHints(), "fc")
    with pytest.raises(LayoutError):
        detect_layout((2, 1000), (224, 224), LayoutHints(grid=(14, 14)), "fc")


# -- token sequences ---------------------------------------------------------------


@pytest.mark.parametrize("prefix", [0, 1, 5])
def test_tokens_back_to_the_grid_with_prefix_tokens(prefix: int) -> None:
    grid = seeded(4, 2, 16, 6, 10)
    tokens = tokens_from_grid(grid, prefix)
    layout = detect_layout(tuple(tokens.shape), (96, 160), LayoutHints(num_prefix_tokens=prefix))
    assert layout == Layout("NLC", (6, 10), prefix)
    torch.testing.assert_close(layout.to_nchw(tokens), grid)


def test_class_token_vit_layer() -> None:
    model = timm_model("test_vit")
    out = output_of(model, model.blocks[-1].norm1, seeded(5, 1, 3, 160, 160))
    assert tuple(out.shape[:2]) == (1, 101)
    for hints in (LayoutHints(num_prefix_tokens=model.num_prefix_tokens), LayoutHints()):
        assert detect_layout(tuple(out.shape), (160, 160), hints) == Layout("NLC", (10, 10), 1)


def test_register_token_only_vit_layer() -> None:
    model = timm_model("test_vit2")
    assert model.cls_token is None and model.num_prefix_tokens == 1  # one register token
    out = output_of(model, model.blocks[-1].norm1, seeded(6, 1, 3, 64, 96))
    hints = LayoutHints(num_prefix_tokens=model.num_prefix_tokens)
    assert detect_layout(tuple(out.shape), (64, 96), hints) == Layout("NLC", (4, 6), 1)


@pytest.mark.parametrize("hinted", [True, False], ids=["model-hint", "no-hint"])
def test_several_prefix_tokens(hinted: bool) -> None:
    """1 class + 4 register tokens; without the hint, 21 tokens also factor as 1 + 4x5."""
    model = multi_prefix_vit()
    assert model.num_prefix_tokens == 5
    out = output_of(model, model.blocks[-1].norm1, seeded(7, 1, 3, 64, 64))
    hints = LayoutHints(num_prefix_tokens=5 if hinted else None)
    assert detect_layout(tuple(out.shape), (64, 64), hints) == Layout("NLC", (4, 4), 5)


def test_several_prefix_tokens_non_square_without_hint() -> None:
    """65 tokens on 96x160 also read as 0 + 5x13 and 1 + 8x8; only 5 + 6x10 follows the input."""
    tokens = tokens_from_grid(seeded(8, 1, 8, 6, 10), prefix=5)
    assert detect_layout(tuple(tokens.shape), (96, 160), LayoutHints()) == Layout("NLC", (6, 10), 5)


def test_non_square_dynamic_size_vit() -> None:
    model = timm_model("test_vit2")  # dynamic_img_size=True
    out = output_of(model, model.blocks[-1].norm1, seeded(9, 1, 3, 96, 160))
    assert out.shape[1] == 1 + 6 * 10
    layout = detect_layout(tuple(out.shape), (96, 160), LayoutHints(num_prefix_tokens=1))
    assert layout == Layout("NLC", (6, 10), 1)
    assert layout.to_nchw(out).shape == (1, out.shape[-1], 6, 10)


def test_tokens_that_fit_no_grid_ask_for_grid_and_grid_resolves_them() -> None:
    shape, size = (1, 5000, 8), (32, 32)  # more tokens than the input has pixels for
    with pytest.raises(LayoutError, match="grid=HxW"):
        detect_layout(shape, size, LayoutHints(), "blocks.3")
    assert detect_layout(shape, size, LayoutHints(grid=(50, 100))) == Layout("NLC", (50, 100), 0)
    assert detect_layout(shape, size, LayoutHints(grid=(49, 102))) == Layout("NLC", (49, 102), 2)
    with pytest.raises(LayoutError, match="5000 tokens; grid=80x80 needs 6400; no grid of the 32x32 input fits") as info:
        detect_layout(shape, size, LayoutHints(grid=(80, 80)))
    assert "5000 tokens; --grid 80x80 needs 6400" in info.value.spelled(as_flag)  # what the command line says


# -- --grid must fit the token count (issue 9) -----------------------------------


def test_grid_that_leaves_too_many_prefix_tokens_is_refused_with_the_grid_that_fits() -> None:
    """3x3 on 101 tokens would read 92 patch tokens as prefix tokens: a meaningless map, not a map."""
    shape = (1, 101, 192)
    with pytest.raises(LayoutError) as caught:
        detect_layout(shape, (160, 160), LayoutHints(grid=(3, 3), num_prefix_tokens=1), "blocks.11.norm1")
    assert caught.value.spelled(as_flag) == (
        "layer 'blocks.11.norm1' output (1, 101, 192) has 101 tokens; --grid 3x3 leaves 92 of them as prefix "
        "tokens (at most 16); a 10x10 grid fits (1 prefix token)"
    )
    assert "; grid=3x3 leaves 92" in str(caught.value)  # the Python API's words
    # the limit itself is allowed, one more is not
    assert detect_layout((1, 116, 8), (160, 160), LayoutHints(grid=(10, 10))) == Layout("NLC", (10, 10), 16)
    with pytest.raises(LayoutError, match="leaves 17 of them"):
        detect_layout((1, 117, 8), (160, 160), LayoutHints(grid=(10, 10)))


def test_grid_with_more_cells_than_tokens_names_the_token_count() -> None:
    with pytest.raises(LayoutError, match=r"has 101 tokens; grid=11x11 needs 121; a 10x10 grid fits") as info:
        detect_layout((1, 101, 8), (160, 160), LayoutHints(grid=(11, 11)), "blocks.0")
    assert "--grid 11x11 needs 121" in info.value.spelled(as_flag)


def test_cli_refuses_a_grid_that_does_not_fit(run_cli, tmp_path) -> None:
    from conftest import write_image

    src = write_image(tmp_path / "cat.png", 96, 64, seed=5)
    result = run_cli("explain", src, "--model", "test_vit", "--no-pretrained", "--grid", "3x3", "-o", tmp_path / "out")
    assert result.code == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith("gradcam: error: layer 'blocks.")
    assert "101 tokens; --grid 3x3 leaves 92 of them as prefix tokens (at most 16); a 10x10 grid fits" in errors[0]
    assert "Traceback" not in result.stderr


def test_grid_hint_overrides_the_guess_for_tokens() -> None:
    grid = seeded(10, 1, 8, 3, 12)  # an odd grid for a 96x160 input, stated by the user
    tokens = tokens_from_grid(grid, prefix=2)
    layout = detect_layout(tuple(tokens.shape), (96, 160), LayoutHints(grid=(3, 12)))
    assert layout == Layout("NLC", (3, 12), 2)
    torch.testing.assert_close(layout.to_nchw(tokens), grid)


# -- the patch grid decides each layer's prefix count (issue 8) -------------------

SMALL = dict(img_size=96, depth=2, embed_dim=32, num_heads=2, num_classes=10)


def small(name: str, size: int | tuple[int, int] = 96, **kwargs: object) -> Callable[[], torch.nn.Module]:
    return lambda: timm_model(name, **{**SMALL, "img_size": size, **kwargs})


# family: (builder, input size). Where it can, a size at which the model-wide prefix count misreads
# the patch tokens: 10x10 - 1 = 99 = 9x11, and (DeiT) 8x10 - 2 = 78 = 6x13.
FAMILIES: dict[str, tuple[Callable[[], torch.nn.Module], tuple[int, int]]] = {
    "vit": (small("vit_tiny_patch16_224", 160), (160, 160)),
    "deit-distilled-non-square": (small("deit_tiny_distilled_patch16_224", (128, 160)), (128, 160)),
    "vit-reg4": (small("vit_tiny_patch16_224", reg_tokens=4), (96, 96)),
    "vit-reg4-non-square": (small("vit_tiny_patch16_224", reg_tokens=4, dynamic_img_size=True), (96, 64)),
    # init_values=1: the default LayerScale (1e-5) leaves gradients near 1e-16, a blank map for the reference
    "cait": (small("cait_xxs24_224", 160, depth_token_only=1, init_values=1.0), (160, 160)),
    "xcit": (small("xcit_nano_12_p16_224", 160), (160, 160)),
    "xcit-non-square": (small("xcit_nano_12_p16_224"), (96, 64)),
}


def test_patch_grid_comes_from_the_model_at_the_input_size() -> None:
    vit = timm_model("vit_tiny_patch16_224", **SMALL)
    assert patch_grid(vit, (96, 96)) == (6, 6)
    dynamic = timm_model("vit_tiny_patch16_224", dynamic_img_size=True, **SMALL)
    assert patch_grid(dynamic, (96, 160)) == (6, 10)
    padded = timm_model("vit_tiny_patch16_224", dynamic_img_size=True, dynamic_img_pad=True, **SMALL)
    assert patch_grid(padded, (100, 90)) == (7, 6)  # padded up to whole patches
    xcit = timm_model("xcit_nano_12_p16_224", **SMALL)  # a stem of four stride-2 convolutions
    assert patch_grid(xcit, (96, 64)) == (6, 4)
    assert patch_grid(xcit, (90, 70)) == (6, 5)  # each padded 3x3 conv rounds up
    assert patch_grid(small_tv_vit(), (96, 96)) == (6, 6)  # torchvision: conv_proj and patch_size
    assert patch_grid(timm_model("test_resnet"), (96, 96)) is None  # no patch embedding: the shape decides


def test_patch_grid_beats_the_model_wide_prefix_count() -> None:
    """196 tokens with the model's "1 prefix" read as 1 + 13x15; the patch grid says 0 + 14x14."""
    hints = LayoutHints(num_prefix_tokens=1, patch_grid=(14, 14))
    assert detect_layout((1, 196, 8), (224, 224), LayoutHints(num_prefix_tokens=1)) == Layout("NLC", (13, 15), 1)
    assert detect_layout((1, 196, 8), (224, 224), hints) == Layout("NLC", (14, 14), 0)
    assert detect_layout((1, 197, 8), (224, 224), hints) == Layout("NLC", (14, 14), 1)
    assert detect_layout((1, 196 + MAX_PREFIX_TOKENS, 8), (224, 224), hints).prefix_tokens == MAX_PREFIX_TOKENS


def test_token_counts_off_the_patch_grid_keep_the_older_reading() -> None:
    """A pooled stage (7x7 of a 14x14 patch grid) or a class token alone: the patch grid does not apply."""
    hints = LayoutHints(num_prefix_tokens=1, patch_grid=(14, 14))
    assert detect_layout((1, 50, 8), (224, 224), hints) == Layout("NLC", (7, 7), 1)
    assert detect_layout((1, 49, 8), (224, 224), LayoutHints(patch_grid=(14, 14))) == Layout("NLC", (7, 7), 0)
    too_many = 196 + MAX_PREFIX_TOKENS + 1
    assert detect_layout((1, too_many, 8), (224, 224), hints) == detect_layout(
        (1, too_many, 8), (224, 224), LayoutHints(num_prefix_tokens=1)
    )


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


@pytest.mark.parametrize("family", list(FAMILIES))
def test_patch_embed_and_its_projection_give_the_same_map(family: str) -> None:
    """The same tensor, token-shaped or as a conv map: the same map (was up to 0.98 apart on ViT)."""
    build, size = FAMILIES[family]
    model = build()
    x = seeded(13, 2, 3, *size)
    tokens = gradcam_cli.cam(model, x, "patch_embed")
    conv = gradcam_cli.cam(model, x, "patch_embed.proj")
    assert (conv.flatten(1).amax(dim=1) > 0.99).all()
    assert max_diff(tokens, conv) < 1e-5


@pytest.mark.parametrize("family", ["cait", "xcit", "xcit-non-square"])
def test_default_layer_of_models_that_add_the_class_token_late(family: str) -> None:
    """CaiT and XCiT blocks hold patch tokens only: the default layer's map equals the one at --grid."""
    from gradcam_cli.layers.defaults import default_layer_paths
    from gradcam_cli.model.timm_hub import TIMM

    build, size = FAMILIES[family]
    model = build()
    (path,) = default_layer_paths(model, family, TIMM)
    x = seeded(14, 2, 3, *size)
    grid = (size[0] // 16, size[1] // 16)
    inferred = gradcam_cli.cam(model, x, path)
    assert (inferred.flatten(1).amax(dim=1) > 0.99).all()
    assert max_diff(inferred, gradcam_cli.cam(model, x, path, grid=grid)) < 1e-6


# -- end to end: cam() equals the reference given the hand-written reshape ---------


def reference(model: torch.nn.Module, x: torch.Tensor, layer: torch.nn.Module, prefix: int, grid: tuple[int, int]) -> np.ndarray:
    from pytorch_grad_cam import GradCAM

    def reshape(tokens: torch.Tensor) -> torch.Tensor:
        return tokens[:, prefix:, :].reshape(tokens.size(0), *grid, tokens.size(2)).permute(0, 3, 1, 2)

    with GradCAM(model=model, target_layers=[layer], reshape_transform=reshape) as explainer:
        return explainer(input_tensor=x, targets=None)


CASES: dict[str, tuple[Callable[[], torch.nn.Module], tuple[int, int], int, tuple[int, int]]] = {
    "test_vit": (lambda: timm_model("test_vit"), (160, 160), 1, (10, 10)),
    "test_vit2": (lambda: timm_model("test_vit2"), (64, 96), 1, (4, 6)),
    "test_vit2-non-square": (lambda: timm_model("test_vit2"), (96, 160), 1, (6, 10)),
    "reg4-vit": (multi_prefix_vit, (64, 64), 5, (4, 4)),
    "reg4-vit-non-square": (lambda: multi_prefix_vit(dynamic_img_size=True), (96, 160), 5, (6, 10)),
    # the class token comes after the blocks: no prefix token at the last block (issue 8)
    "cait": (FAMILIES["cait"][0], (160, 160), 0, (10, 10)),
    "xcit-non-square": (FAMILIES["xcit-non-square"][0], (96, 64), 0, (6, 4)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_cam_on_token_models_equals_the_manual_reshape(case: str) -> None:
    require("pytorch_grad_cam")
    build, size, prefix, grid = CASES[case]
    model = build()
    x = seeded(11, 2, 3, *size)
    ours = gradcam_cli.cam(model, x, "blocks.-1.norm1")
    assert ours.shape == (2, *size) and torch.isfinite(ours).all()
    assert ours.min() >= 0 and ours.max() <= 1
    assert (ours.flatten(1).amax(dim=1) > 0.99).all()  # a real map, not a blank one
    ref = reference(model, x, model.blocks[-1].norm1, prefix, grid)
    np.testing.assert_allclose(ours.numpy(), ref, atol=1e-4, rtol=0)


def test_convnext_channels_last_layer_equals_the_manual_permute() -> None:
    from pytorch_grad_cam import GradCAM

    model = timm_model("test_convnext")
    x = seeded(12, 1, 3, 160, 160)
    layer = model.stages[-1].blocks[-1].norm
    ours = gradcam_cli.cam(model, x, "stages.-1.blocks.-1.norm")
    with GradCAM(model=model, target_layers=[layer], reshape_transform=lambda t: t.permute(0, 3, 1, 2)) as explainer:
        ref = explainer(input_tensor=x, targets=None)
    assert ours.max() > 0.99
    np.testing.assert_allclose(ours.numpy(), ref, atol=1e-4, rtol=0)


# ------------------------------------------------------------------ what the run says of a layer's layout


def test_a_layer_without_spatial_dimensions_names_the_command_with_this_model(run_cli, tmp_path) -> None:
    from conftest import write_image

    image = write_image(tmp_path / "in.png", 64, 48)
    result = run_cli("explain", "-m", "test_resnet", "--no-pretrained", "--layer", "fc", "-o", tmp_path / "out", image)
    assert result.code == 2
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("gradcam: error: layer 'fc' output (1, 1000) has no spatial dimensions") and "MODEL" not in line
    assert line.endswith("(see: gradcam layers test_resnet)")


def test_an_input_too_small_for_the_layer_says_why_its_map_would_be_blank(run_cli, tmp_path) -> None:
    """test_resnet's layer4 downsamples 32 times: at 16x16 it is one cell, which shows no place (every map blank)."""
    from conftest import write_image

    image = write_image(tmp_path / "in.png", 64, 48)
    result = run_cli("explain", "-m", "test_resnet", "--no-pretrained", "--input-size", "16", "--json", "-o", tmp_path / "o", image)
    assert result.code == 2 and result.stdout == ""
    line = result.stderr.strip().splitlines()[-1]
    assert line == (
        "gradcam: error: layer 'layer4' output (1, 96, 1, 1) is a 1x1 grid at the 16x16 input: one cell shows no place, "
        "so its map would be blank; give a larger --input-size or an earlier layer with --layer (see: gradcam layers test_resnet)"
    )
    larger = run_cli("explain", "-m", "test_resnet", "--no-pretrained", "--input-size", "64", "--json", "-o", tmp_path / "o", image)
    assert larger.code == 0 and [r["blank"] for r in larger.records()] == [False], larger.stderr


TOKEN_NET = """
import torch
from torch import nn


class Embed(nn.Module):  # a patch embedding that cannot tell its grid (an unusual one)
    def __init__(self):
        super().__init__()
        self.proj = nn.Conv2d(3, 8, 8, stride=8)

    def dynamic_feat_size(self, size):
        raise ValueError("no grid for this size")

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class TokenNet(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.patch_embed = Embed()
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.norm(self.patch_embed(x)).mean(1))
"""


def test_a_patch_embedding_that_cannot_give_its_grid_is_said_once(run_cli, tmp_path, monkeypatch) -> None:
    """The fallback to reading the grid from the token count can pick another grid: the run says so, one line, once."""
    from conftest import write_image

    monkeypatch.chdir(tmp_path)
    (tmp_path / "net.py").write_text(TOKEN_NET)
    for index in range(2):
        write_image(tmp_path / "photos" / f"{index}.png", 64, 64, seed=index)
    result = run_cli("explain", "photos", "--model", "net.py:TokenNet", "--layer", "norm", "--input-size", "64",
                     "--mean", "0.5", "--std", "0.5", "--batch-size", "1", "--json", "-o", "out")  # fmt: skip
    assert result.code == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "patch embedding" in line]
    assert said == [
        "gradcam: the patch embedding (Embed) did not give its grid for the 64x64 input (no grid for this size); "
        "token layers are read from their count, which can pick another grid: --grid HxW settles it"
    ]
    assert len(result.records()) == 2

    with pytest.warns(gradcam_cli.errors.Notice, match=r"grid=HxW settles it"):  # a Python caller: a warning
        assert patch_grid(gradcam_cli.load_model("net.py:TokenNet", input_hw=64, mean=0.5, std=0.5).model, (64, 64)) is None
