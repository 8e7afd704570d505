"""Dotted layer paths, default targets per family, and `gradcam layers`.

Models are built without weights (timm test models, torchvision weights=None)
inside fixtures, so importing this module stays light.
"""

from __future__ import annotations

import re
from collections import OrderedDict

import pytest

from conftest import small_tv_vit, timm_model
from gradcam_cli.errors import LayerError
from gradcam_cli.layers.defaults import default_layer_paths
from gradcam_cli.layers.paths import resolve_layer
from gradcam_cli.model.timm_hub import TIMM
from gradcam_cli.model.torchvision_hub import TORCHVISION


@pytest.fixture(scope="module")
def test_resnet():
    return timm_model("test_resnet")


@pytest.fixture(scope="module")
def test_vit():
    return timm_model("test_vit")


@pytest.fixture(scope="module")
def test_convnext():
    return timm_model("test_convnext")


@pytest.fixture(scope="module")
def tv_vit():
    import torchvision

    return torchvision.models.vit_b_16(weights=None).eval()


def nested_model():
    """A model whose containers are named: an OrderedDict Sequential and a ModuleDict."""
    from torch import nn

    class Nested(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(OrderedDict([("conv", nn.Conv2d(3, 4, 3)), ("act", nn.ReLU())]))
            self.heads = nn.ModuleDict({"left": nn.Conv2d(4, 4, 1), "right": nn.Conv2d(4, 2, 1)})

        def forward(self, x):
            x = self.stem(x)
            return self.heads["right"](self.heads["left"](x)).mean((2, 3))

    return Nested()


class PlainCnn:
    """Built lazily: a custom CNN with no registry, no feature_info, a functional ReLU."""

    @staticmethod
    def build():
        import torch.nn.functional as F
        from torch import nn

        class Net(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.conv1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
                self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
                self.pool = nn.AdaptiveAvgPool2d(1)
                self.fc = nn.Linear(16, 5)

            def forward(self, x):
                x = F.relu(self.conv2(F.relu(self.conv1(x))))
                return self.fc(self.pool(x).flatten(1))

        return Net()


# ---------------------------------------------------------------- resolve_layer


def test_positive_and_negative_indices(test_resnet, test_vit, test_convnext):
    last = len(test_resnet.layer4) - 1
    layer = resolve_layer(test_resnet, "layer4.-1")
    assert layer.module is test_resnet.layer4[-1] and layer.name == f"layer4.{last}"
    assert resolve_layer(test_resnet, f"layer4.{last}").module is layer.module
    assert resolve_layer(test_resnet, "layer4.0.conv1").module is test_resnet.layer4[0].conv1

    norm = resolve_layer(test_vit, "blocks.-1.norm1")
    assert norm.module is test_vit.blocks[-1].norm1
    assert norm.name == f"blocks.{len(test_vit.blocks) - 1}.norm1"
    assert resolve_layer(test_vit, "blocks.-2.norm1").module is test_vit.blocks[-2].norm1

    stage = resolve_layer(test_convnext, "stages.-1")
    assert stage.module is test_convnext.stages[-1] and stage.name == f"stages.{len(test_convnext.stages) - 1}"
    # a top-level negative index counts over the root's children
    assert resolve_layer(test_resnet, "-1").module is test_resnet.fc


def test_names_inside_ordered_dict_sequential_and_module_dict():
    model = nested_model()
    assert resolve_layer(model, "stem.conv").module is model.stem.conv
    assert resolve_layer(model, "stem.0").module is model.stem.conv
    assert resolve_layer(model, "stem.-1").name == "stem.act"
    assert resolve_layer(model, "heads.right").module is model.heads["right"]
    assert resolve_layer(model, "heads.-1").name == "heads.right"
    assert resolve_layer(model, "heads.0").name == "heads.left"


def test_torchvision_vit_names(tv_vit):
    by_name = resolve_layer(tv_vit, "encoder.layers.encoder_layer_11.ln_1")
    by_index = resolve_layer(tv_vit, "encoder.layers.-1.ln_1")
    assert by_name.module is by_index.module
    assert by_index.name == "encoder.layers.encoder_layer_11.ln_1"


def test_bad_path_names_children_at_the_failing_step(test_resnet):
    with pytest.raises(LayerError) as caught:
        resolve_layer(test_resnet, "layer4.0.conv9", "test_resnet")
    message = str(caught.value)
    assert "\n" not in message
    assert "children of 'layer4.0'" in message
    for child in ("conv1", "bn1", "conv2", "downsample"):
        assert child in message
    assert "did you mean 'conv1'" in message or "did you mean 'conv2'" in message
    assert "gradcam layers test_resnet" in message

    with pytest.raises(LayerError) as caught:
        resolve_layer(test_resnet, "layr4", "test_resnet")
    assert "children of the root" in str(caught.value) and "did you mean 'layer4'" in str(caught.value)


def test_out_of_range_index(test_resnet):
    count = len(test_resnet.layer4)
    for token in (str(count), str(-count - 1), "99"):
        with pytest.raises(LayerError) as caught:
            resolve_layer(test_resnet, f"layer4.{token}", "test_resnet")
        message = str(caught.value)
        assert f"no '{token}'" in message
        assert f"indices -{count}..{count - 1}" in message
    with pytest.raises(LayerError, match="leaf module"):
        resolve_layer(test_resnet, "fc.0", "test_resnet")


# ---------------------------------------------------------------- default_layer_paths


def test_default_timm_families(test_resnet, test_vit, test_convnext):
    assert default_layer_paths(test_resnet, "test_resnet", TIMM) == ["layer4"]
    assert default_layer_paths(test_vit, "test_vit", TIMM) == ["blocks.-1.norm1"]
    (convnext,) = default_layer_paths(test_convnext, "test_convnext", TIMM)
    assert convnext in ("stages.3", test_convnext.feature_info[-1]["module"])
    assert resolve_layer(test_convnext, convnext).module is test_convnext.stages[-1]


@pytest.mark.parametrize(
    "arch, expected",
    [("resnet18", "layer4"), ("mobilenet_v3_small", "features.-1")],
)
def test_default_torchvision_cnns(arch, expected):
    import torchvision

    model = torchvision.models.get_model(arch, weights=None)
    assert default_layer_paths(model, arch, TORCHVISION) == [expected]
    resolve_layer(model, expected)


def test_default_torchvision_vit(tv_vit):
    assert default_layer_paths(tv_vit, "vit_b_16", TORCHVISION) == ["encoder.layers.-1.ln_1"]


def test_default_fallback_finds_last_spatial_module_of_a_plain_cnn():
    model = PlainCnn.build()
    assert default_layer_paths(model) == ["conv2"]
    assert model.training  # the probe forward restores the mode it found


# ---------------------------------------------------------------- gradcam layers

ROW = re.compile(r"^(?P<mark>[* ]) (?P<indent> *)(?P<name>\S+)  (?P<type>\S+)  (?P<shape>\S+)(  \[(?P<layout>.*)\])?$")


def rows(stdout: str) -> list[dict]:
    parsed = [ROW.match(line) for line in stdout.splitlines() if line.strip()]
    assert all(parsed), stdout
    return [m.groupdict() for m in parsed if m]


def test_layers_lists_modules_with_shapes_and_marks_the_default(run_cli):
    result = run_cli("layers", "test_resnet")
    assert result.code == 0, result.stderr
    table = rows(result.stdout)
    by_name = {row["name"]: row for row in table}
    assert {"conv1", "layer1", "layer4", "layer4.0.conv1", "fc"} <= set(by_name)
    assert [row["name"] for row in table if row["mark"] == "*"] == ["layer4"]
    assert re.fullmatch(r"1x\d+x5x5", by_name["layer4"]["shape"])
    assert by_name["layer4"]["layout"] == "NCHW 5x5"
    assert by_name["fc"]["shape"] == "1x1000"
    assert "default target: layer4" in result.stderr


def test_layers_depth_and_filter(run_cli):
    shallow = rows(run_cli("layers", "test_resnet", "--depth", "1").stdout)
    names = [row["name"] for row in shallow]
    assert "layer4" in names and "fc" in names
    assert not any("." in name for name in names)

    filtered = run_cli("layers", "test_resnet", "--filter", "Conv2d")
    assert filtered.code == 0
    table = rows(filtered.stdout)
    assert table and all(row["type"] == "Conv2d" for row in table)
    assert "layer4.0.conv2" in [row["name"] for row in table]


def test_layers_shows_token_layout_for_vit(run_cli):
    result = run_cli("layers", "test_vit")
    assert result.code == 0, result.stderr
    table = {row["name"]: row for row in rows(result.stdout)}
    blocks = sorted(name for name in table if re.fullmatch(r"blocks\.\d+", name))
    assert blocks
    for name in blocks:
        assert table[name]["layout"].startswith("NLC tokens, 1 prefix + ")
        assert re.search(r"\d+x\d+ grid", table[name]["layout"])
    last = blocks[-1]
    assert table[f"{last}.norm1"]["mark"] == "*"


def test_layers_reads_patch_embed_tokens_without_the_class_token(run_cli):
    """test_vit3 at 160x160: 100 patch tokens, 101 once the class token is in (99 would read as 9x11)."""
    import json

    result = run_cli("layers", "test_vit3", "--json")
    assert result.code == 0, result.stderr
    table = {row["name"]: row for row in map(json.loads, result.stdout.splitlines())}
    assert table["patch_embed"]["layout"] == "NLC tokens, 0 prefix + 10x10 grid"
    assert table["patch_embed.proj"]["layout"] == "NCHW 10x10"
    assert table["blocks.0.norm1"]["layout"] == "NLC tokens, 1 prefix + 10x10 grid"


# ---------------------------------------------------------------- token layouts per family (issue 8)

SMALL = dict(depth=2, embed_dim=32, num_heads=2, num_classes=10)


def small_timm(name, size, **kwargs):
    return lambda: timm_model(name, img_size=size, **SMALL, **kwargs)


# family: builder, input size, source, arch, the conv map that holds the real patch grid,
# prefix tokens at the default layer (0 where the class token comes after the blocks)
TOKEN_FAMILIES = {
    "vit": (small_timm("vit_tiny_patch16_224", 160), (160, 160), "timm", "vit", "patch_embed.proj", 1),
    "deit-distilled": (small_timm("deit_tiny_distilled_patch16_224", (128, 160)), (128, 160), "timm", "deit", "patch_embed.proj", 2),
    "vit-reg4": (small_timm("vit_tiny_patch16_224", 96, reg_tokens=4), (96, 96), "timm", "vit", "patch_embed.proj", 5),
    "vit-reg4-dynamic-non-square": (
        small_timm("vit_tiny_patch16_224", 96, reg_tokens=4, dynamic_img_size=True),
        (96, 160),
        "timm",
        "vit",
        "patch_embed.proj",
        5,
    ),
    "cait": (small_timm("cait_xxs24_224", 160, depth_token_only=1), (160, 160), "timm", "cait", "patch_embed.proj", 0),
    "xcit": (small_timm("xcit_nano_12_p16_224", 160), (160, 160), "timm", "xcit", "patch_embed.proj", 0),
    "xcit-odd-size": (small_timm("xcit_nano_12_p16_224", 160), (90, 70), "timm", "xcit", "patch_embed.proj", 0),
    "torchvision-vit": (lambda: small_tv_vit(160), (160, 160), "torchvision", "vit_b_16", "conv_proj", 1),
}


@pytest.mark.parametrize("family", list(TOKEN_FAMILIES))
def test_every_token_layer_gets_the_real_patch_grid(family):
    """Each layer's prefix count is its tokens minus the patch grid's cells, not the model-wide count."""
    from gradcam_cli.layers.paths import resolve_layers
    from gradcam_cli.layers.tree import layer_rows
    from gradcam_cli.model.hub import SOURCES
    from gradcam_cli.model.load import num_prefix_tokens

    build, size, source, arch, conv_map, default_prefix = TOKEN_FAMILIES[family]
    hub = next(s for s in SOURCES if s.name == source)  # the family's hub, by its name
    model = build()
    defaults = [layer.name for layer in resolve_layers(model, default_layer_paths(model, arch, hub))]
    rows = layer_rows(model, size, defaults, num_prefix_tokens(model, hub, arch))
    by_name = {row.name: row for row in rows}
    gh, gw = by_name[conv_map].shape[-2:]  # the grid as the embedding's convolution made it
    on_grid = [row for row in rows if row.shape and len(row.shape) == 3 and 0 <= row.shape[1] - gh * gw <= 16]
    assert len(on_grid) >= 4
    for row in on_grid:
        assert row.layout == f"NLC tokens, {row.shape[1] - gh * gw} prefix + {gh}x{gw} grid", row
    (default,) = [row for row in rows if row.is_default]
    assert default.layout == f"NLC tokens, {default_prefix} prefix + {gh}x{gw} grid"
