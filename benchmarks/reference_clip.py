"""The same job as `gradcam explain FOLDER --prompt ...` on a CLIP model, written with pytorch-grad-cam as its CLIP example teaches.

Its usage_examples/clip_example.py, adapted to open_clip: a wrapper module whose forward runs the whole CLIP model,
the image and the prompts' tokens (the text tower inside every forward, as the example calls the full model with
its input_ids each time), and returns logits_per_image = logit_scale.exp() * cosine; the example's
`reshape_transform` (the class token dropped, the patch tokens a grid, channels first); `GradCAM` on the last
block's `ln_1`; then for each image and each prompt `cam(input_tensor, targets=[ClassifierOutputTarget(p)])`,
`show_cam_on_image`, `cv2.imwrite`. Each map costs a forward and a backward of its own (BaseCAM runs the model on
every call), nothing batched. The model is open_clip's ViT-B-32 with random weights (seeded as ours seeds them),
the images preprocessed by open_clip's own transform (shortest side to 224, centre crop, CLIP's mean and std).

Where it departs from the example, to do our job and no more: the wrapper returns the logits, not their softmax
over the prompts (ours explains each image-text similarity as the model scores it, so does this), prints nothing,
and tokenises the prompts once (the example runs its processor inside every forward; that cost is left out).

    python benchmarks/reference_clip.py FOLDER OUT --prompt "a dog" --prompt "a cat"
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import open_clip
import torch
from PIL import Image
from pytorch_grad_cam import GradCAM
from pytorch_grad_cam.utils.image import show_cam_on_image
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget
from torch import nn

MODEL = "ViT-B-32"


def reshape_transform(tensor: torch.Tensor, height: int = 7, width: int = 7) -> torch.Tensor:
    """The example's: drop the class token, tokens → a height x width grid, channels first (ViT-B-32 at 224: 7x7)."""
    result = tensor[:, 1:, :].reshape(tensor.size(0), height, width, tensor.size(2))
    return result.transpose(2, 3).transpose(1, 2)


class ImageClassifier(nn.Module):
    """The example's wrapper: the whole CLIP model on the image and every prompt, logits_per_image out."""

    def __init__(self, clip: nn.Module, prompts: Sequence[str]) -> None:
        super().__init__()
        self.clip: Any = clip  # open_clip's CLIP (its submodules by attribute, as the example reaches them)
        self.tokens = open_clip.get_tokenizer(MODEL)(list(prompts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        image_features, text_features, logit_scale = self.clip(x, self.tokens.to(x.device))  # normalised, scale exp()'d
        return logit_scale * image_features @ text_features.T  # logits_per_image, (N, prompts)


def build(prompts: Sequence[str], device: str = "cpu") -> tuple[ImageClassifier, Callable[[Image.Image], torch.Tensor], Callable]:
    """The wrapper (random weights, seeded), open_clip's eval transform, and what the overlay is drawn on."""
    torch.manual_seed(0)
    clip, _, preprocess = open_clip.create_model_and_transforms(MODEL, pretrained=None)
    shown = type(preprocess)(preprocess.transforms[:2])  # its resize and centre crop: the pixels the model sees
    return ImageClassifier(clip, prompts).to(device).eval(), preprocess, shown


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--prompt", action="append", required=True, help="repeat for several (one map each)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--save-raw", action="store_true", help="also write each map as .npy (benchmarks/clip.py's check)")
    args = parser.parse_args()
    model, preprocess, shown = build(args.prompt, args.device)
    target_layers = [model.clip.visual.transformer.resblocks[-1].ln_1]
    args.out.mkdir(parents=True, exist_ok=True)
    with GradCAM(model=model, target_layers=target_layers, reshape_transform=reshape_transform) as cam:
        for path in sorted(args.folder.glob("*.jpg")):
            image = Image.open(path).convert("RGB")
            input_tensor = preprocess(image).unsqueeze(0)
            rgb_img = np.float32(shown(image)) / 255
            for p in range(len(args.prompt)):
                grayscale_cam = cam(input_tensor=input_tensor, targets=[ClassifierOutputTarget(p)])[0, :]
                visualization = show_cam_on_image(rgb_img, grayscale_cam, use_rgb=True)
                cv2.imwrite(str(args.out / f"{path.stem}.prompt{p}.png"), cv2.cvtColor(visualization, cv2.COLOR_RGB2BGR))
                if args.save_raw:
                    np.save(args.out / f"{path.stem}.prompt{p}.npy", grayscale_cam)


if __name__ == "__main__":
    main()
