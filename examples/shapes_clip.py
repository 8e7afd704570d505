"""A tiny CLIP (open_clip's own ``CLIP`` class) for the synthetic shapes scenes.

Why: explaining a CLIP-style model against text prompts needs one whose right
answers are known, offline, and small enough to ship in the repository.
``build()`` returns an ``open_clip.model.CLIP`` built from :data:`CONFIG`: a
ViT image tower and open_clip's text tower with its standard 49,408-token
vocabulary, so ``gradcam`` recognises it as CLIP-style and tokenises prompts
with open_clip's own ``SimpleTokenizer`` (at this model's ``context_length``).
``train_example_clip.py`` trains it contrastively on scenes from
``shapes.make_detection_scene`` captioned from their content ("a square",
"a circle and a star", ...).

Image tower (0.96 M parameters): 128x128 input, an 8x8 grid of tokens plus
the class token, width 128, 4 blocks of 4 heads, the class token pooled.  Its
patch projection ``visual.conv1`` is not open_clip's single 16x16 stride-16
convolution but a :class:`ConvStem` (a hybrid ViT, as in "Early convolutions
help transformers see better"): in trials, the tower with the plain projection
learned the shapes too slowly for a CPU budget of minutes (500 supervised
steps on large shapes: 0.40 accuracy, 0.76 with an earlier version of this
stem; contrastive runs of 300-400 steps stayed near chance).
The stem hands the transformer the same (N, 128, 8, 8) grid, so everything
after it (class token, positions, blocks, ``ln_post``, ``proj``) is open_clip's.

Text tower: width 64, 2 blocks of 4 heads, a context of 16 tokens (captions
are a few words), pooled at the end-of-text token as open_clip's CLIPs are.
Both towers project to a 64-d joint space.  Of the 4.2 M parameters, 3.2 M are
the text tower's token embedding (49,408 x 64, of which the captions use a
dozen rows); the weights ship in fp16 (8.5 MB instead of 17), which
``load_state_dict`` and ``gradcam --weights`` load into this fp32 model.

Input: ``(N, 3, 128, 128)`` RGB scaled to [0, 1], then normalised with
mean = std = 0.5 (in [-1, 1]); the CLI's options for that are
``--input-size 128 --mean 0.5 --std 0.5`` (the whole scene squashed to
128x128, as in training; without ``--input-size 128`` gradcam feeds 224x224
and the model refuses it: 197 tokens against 65 positions).  It was trained
on square scenes, so square images keep the shapes as it learned them.  The
default Grad-CAM layer is ``visual.transformer.resblocks.-1.ln_1`` (the last
block's norm before attention, class token dropped); ``resblocks.-2.ln_1``
with hirescam lands on the named shape more often (examples/README.md,
"Example CLIP").
"""

from __future__ import annotations

from typing import Any

from torch import nn

__all__ = ["CONFIG", "MEAN", "PROMPT", "STD", "ConvStem", "build", "tokenizer"]

MEAN = STD = (0.5, 0.5, 0.5)
PROMPT = "a {}"  # the zero-shot template: "a square", as the captions name a shape
CONFIG: dict[str, Any] = {
    "embed_dim": 64,
    "vision_cfg": {"image_size": 128, "patch_size": 16, "width": 128, "layers": 4, "head_width": 32, "mlp_ratio": 4.0},
    "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 64, "heads": 4, "layers": 2, "mlp_ratio": 4.0},
}


class ConvStem(nn.Sequential):
    """The ViT's patch projection as a small CNN (a hybrid ViT): a 4x4 stride-4 convolution, then 3x3 ones at strides
    1, 2, 1 and 2, BatchNorm and ReLU between them.  Each token comes out on the same 8x8 grid as a 16x16 stride-16
    projection's, but sees 52x52 pixels around its patch: about a whole shape."""

    # (out channels, kernel, stride, padding) of each convolution before the last (width, 3, 2, 1)
    SPECS = ((32, 4, 4, 0), (48, 3, 1, 1), (64, 3, 2, 1), (64, 3, 1, 1))

    def __init__(self, width: int) -> None:
        layers: list[nn.Module] = []
        c_in = 3
        for c_out, kernel, stride, padding in self.SPECS:
            layers += [nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=padding, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()]
            c_in = c_out
        super().__init__(*layers, nn.Conv2d(c_in, width, 3, stride=2, padding=1, bias=False))


def build() -> Any:
    """The untrained model (``open_clip.model.CLIP``, its patch projection ``visual.conv1`` a :class:`ConvStem`); load
    ``shapes_clip_model/shapes_clip.safetensors`` into it."""
    from open_clip.model import CLIP

    model = CLIP(**CONFIG)
    model.visual.conv1 = ConvStem(CONFIG["vision_cfg"]["width"])
    return model


def tokenizer() -> Any:
    """open_clip's own BPE tokenizer at this model's context length: what gradcam uses for this model's prompts."""
    from open_clip.tokenizer import SimpleTokenizer

    return SimpleTokenizer(context_length=CONFIG["text_cfg"]["context_length"])
