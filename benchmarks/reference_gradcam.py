"""The same job as `gradcam explain FOLDER`, written with pytorch-grad-cam as its README teaches.

Load each image with cv2, resize and normalise it (`preprocess_image`), run
`GradCAM` on one image at a time, blend with `show_cam_on_image` and write
the overlay with `cv2.imwrite`. The overlay is made at the photo's own size,
as ours is, so both programs write the same pictures.

    python benchmarks/reference_gradcam.py FOLDER OUT --model resnet50
    python benchmarks/reference_gradcam.py FOLDER OUT --model resnet50 --weights FILE.safetensors

With --weights the model is built as timm builds it and the checkpoint loaded over it
(`load_state_dict`), the way a fine-tuned model is used with pytorch-grad-cam.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import cv2
import numpy as np
import timm
import torch
from pytorch_grad_cam import GradCAM
from pytorch_grad_cam.utils.image import preprocess_image, show_cam_on_image

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def vit_reshape(tokens: torch.Tensor, height: int = 14, width: int = 14) -> torch.Tensor:
    """The README's hand-written reshape for ViT: drop the class token, tokens → grid, channels first."""
    result = tokens[:, 1:, :].reshape(tokens.size(0), height, width, tokens.size(2))
    return result.transpose(2, 3).transpose(1, 2)


def build(name: str, weights: Path | None = None) -> tuple[torch.nn.Module, list[torch.nn.Module], object]:
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False).eval()
    if weights is not None:
        from safetensors.torch import load_file

        model.load_state_dict(load_file(str(weights)))
    if name.startswith("vit"):
        return model, [model.blocks[-1].norm1], vit_reshape
    if name.startswith("convnext"):
        return model, [model.stages[-1]], None  # its README's target for ConvNeXt, the layer ours picks too
    return model, [model.layer4[-1]], None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--weights", type=Path)
    args = parser.parse_args()
    model, target_layers, reshape = build(args.model, args.weights)
    model = model.to(args.device)  # BaseCAM moves each input to the model's device
    args.out.mkdir(parents=True, exist_ok=True)
    with GradCAM(model=model, target_layers=target_layers, reshape_transform=reshape) as cam:
        for path in sorted(args.folder.glob("*.jpg")):
            rgb_img = cv2.imread(str(path), 1)[:, :, ::-1]
            rgb_img = np.float32(rgb_img) / 255
            input_tensor = preprocess_image(cv2.resize(rgb_img, (224, 224)), mean=MEAN, std=STD)
            grayscale_cam = cam(input_tensor=input_tensor, targets=None)[0, :]
            grayscale_cam = cv2.resize(grayscale_cam, (rgb_img.shape[1], rgb_img.shape[0]))
            visualization = show_cam_on_image(rgb_img, grayscale_cam, use_rgb=True)
            cv2.imwrite(str(args.out / f"{path.stem}.gradcam.png"), cv2.cvtColor(visualization, cv2.COLOR_RGB2BGR))


if __name__ == "__main__":
    main()
