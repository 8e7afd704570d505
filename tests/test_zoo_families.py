"""The families the zoo sweep (benchmarks/zoo.py) found without a working default layer, each in a tiny config.

Each builds with random weights through the hub, as `gradcam explain --no-pretrained --model-kwargs ...` does,
and is explained at its default layer: the layer chosen and a map that is neither blank nor constant. What
broke, by family: a feature_info module that never runs (CoaT's `parallel_blocks` list), that is no module
(MViTv2's and Twins' `block.3`) or that sits one level down (Gemma4's `encoder.blocks`), a class-token head
that reads the last stage's patch tokens only through its attention (CrossViT, PiT, TNT, CoaT), and a
torchvision ViT built for another size than its DEFAULT weights' transforms say.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import gradcam_cli
from gradcam_cli.errors import LayerError

# family: timm name, builder kwargs (tiny), the default layer it must get (canonical path)
FAMILIES = {
    "coat": (
        "coat_tiny",
        dict(img_size=64, embed_dims=[16] * 4, serial_depths=[1] * 4, parallel_depth=2, num_heads=8, mlp_ratios=[2] * 4),
        "parallel_blocks.1.norm14",  # the list never runs; its last block hands x1 through and the head reads cls tokens
    ),
    "coat-lite": (
        "coat_lite_tiny",
        dict(img_size=64, embed_dims=[16] * 4, serial_depths=[1] * 4, num_heads=8, mlp_ratios=[2] * 4),
        "serial_blocks4.0.norm1",
    ),
    "crossvit": (
        "crossvit_tiny_240",
        dict(img_size=120, embed_dim=[16, 32], depth=[[1, 1, 0]], num_heads=[2, 2], mlp_ratio=[2, 2, 1]),
        "blocks.0.fusion.1.norm1",  # the fine branch's patch tokens as the other branch's class token queries them
    ),
    "pit": ("pit_xs_224", dict(img_size=64, base_dims=[8, 8, 8], depth=[1, 1, 2], heads=[2, 2, 2]), "transformers.2.blocks.1.norm1"),
    "tnt": (
        "tnt_s_patch16_224",
        dict(img_size=64, embed_dim=32, inner_dim=8, depth=2, num_heads_outer=2, num_heads_inner=2),
        "blocks.1.norm_out",  # not the block's first output, the inner pixel tokens
    ),
    "mvitv2": ("mvitv2_tiny", dict(img_size=[64, 64]), "norm"),
    "mvitv2-cls": ("mvitv2_small_cls", dict(img_size=[64, 64]), "stages.3.blocks.1.norm1"),
    "twins": (
        "twins_svt_small",
        dict(img_size=64, embed_dims=[16] * 4, depths=[1] * 4, num_heads=[1] * 4, wss=[4] * 4, sr_ratios=[8, 4, 2, 1]),
        "norm",
    ),
    "gemma4": (
        "gemma4_vit_167m",
        dict(img_size=96, embed_dim=32, depth=2, num_heads=2, head_dim=16, intermediate_size=64),
        "encoder.blocks.1",
    ),
}


def photo(size: int = 64) -> np.ndarray:
    """Smooth random blocks: something for the maps to differ over."""
    cells = (np.random.default_rng(0).random((8, 8, 3)) * 255).astype(np.uint8)
    return cells.repeat(size // 8, 0).repeat(size // 8, 1)


def assert_shows_something(shown: gradcam_cli.Explanation) -> None:
    assert not shown.targets[0].blank
    assert float(shown.map.max() - shown.map.min()) > 0.5


@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_explains_at_its_default_layer(family: str, one_thread: None) -> None:
    name, kwargs, layer = FAMILIES[family]
    ready = gradcam_cli.load_model(name, pretrained=False, device="cpu", model_kwargs={**kwargs, "num_classes": 5})
    size = kwargs["img_size"]
    assert ready.data_config.input_hw == ((size, size) if isinstance(size, int) else tuple(size))  # the size it was built for
    shown = gradcam_cli.explain(photo(), ready)
    assert shown.record.layers == [layer]
    assert_shows_something(shown)


@pytest.mark.parametrize("family", ["mvitv2", "twins"])
def test_layers_marks_a_default_where_feature_info_names_no_module(family: str, run_cli) -> None:
    name, kwargs, layer = FAMILIES[family]
    given = [part for key, value in kwargs.items() for part in ("--model-kwargs", f"{key}={json.dumps(value)}")]
    result = run_cli("layers", name, *given, "--json")
    assert result.code == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [row["name"] for row in rows if row["default"]] == [layer]
    assert next(row for row in rows if row["default"])["layout"] == "NLC tokens, 0 prefix + 2x2 grid"


def test_a_torchvision_vit_is_explained_at_the_size_it_was_built_for(one_thread: None) -> None:
    """vit_h_14's DEFAULT weights are 518 pixels, its random model 224: the transforms' size is the weights'."""
    import torch

    ready = gradcam_cli.load_model("torchvision:vit_b_16", pretrained=False, device="cpu", model_kwargs={"image_size": 64})
    assert ready.data_config.input_hw == (64, 64)
    torch.nn.init.normal_(ready.model.heads.head.weight, std=0.02)  # torchvision starts the head at zero: no class wins
    shown = gradcam_cli.explain(photo(), ready)
    assert shown.record.layers == ["encoder.layers.encoder_layer_11.ln_1"]
    assert_shows_something(shown)


def test_a_class_token_head_with_no_layer_to_read_says_so() -> None:
    """Nothing before the head carries the patch tokens to the class token: a message that says to name a layer."""
    import torch
    from torch import nn

    from gradcam_cli.layers.defaults import default_layer_paths

    class ClassTokenOnly(nn.Module):
        global_pool = "token"

        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Conv2d(3, 8, 8, stride=8)
            self.cls_token = nn.Parameter(torch.zeros(1, 1, 8))
            self.mix = nn.Linear(8, 8)  # per token: the class token never sees the patches
            self.head = nn.Linear(8, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            tokens = self.embed(x).flatten(2).transpose(1, 2)
            tokens = self.mix(torch.cat([self.cls_token.expand(len(x), -1, -1), tokens], 1))
            return self.head(tokens[:, 0])

    with pytest.raises(LayerError, match=r"depends on no position of its default layer 'mix'") as raised:
        default_layer_paths(ClassTokenOnly())
    assert "⟨layers⟩" in raised.value.hint
