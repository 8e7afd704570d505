"""The same job as `gradcam explain FOLDER` on a segmenter, written with pytorch-grad-cam as its tutorial teaches.

Its semantic segmentation tutorial: a wrapper returning the model's `out`,
one forward to get the predicted classes, then for each class present a
`SemanticSegmentationTarget(class, mask)` with the class's predicted mask,
`GradCAM` on the backbone's output, `show_cam_on_image`, `cv2.imwrite`. Each
class costs a forward and a backward of its own (BaseCAM runs the model on
every call). The model is torchvision's deeplabv3_mobilenet_v3_large with
random weights (seeded); classes covering at least 0.5% of the image are
explained, the background left out, as ours does by default. With `--shapes`
the model is the repository's example segmenter (a U-Net trained on shapes
scenes, examples/shapes_segmenter.py), GradCAM on its bottleneck.

    python benchmarks/reference_segmentation.py FOLDER OUT --size 512
    python benchmarks/reference_segmentation.py FOLDER OUT --size 512 --shapes
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import cv2
import numpy as np
import torch
import torchvision
from PIL import Image
from pytorch_grad_cam import GradCAM
from pytorch_grad_cam.utils.image import preprocess_image, show_cam_on_image
from pytorch_grad_cam.utils.model_targets import SemanticSegmentationTarget

MODEL = "deeplabv3_mobilenet_v3_large"
MIN_AREA = 0.005
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])


class Out(torch.nn.Module):
    """The tutorial's SegmentationModelOutputWrapper: the model's `out` tensor."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)["out"]


def deeplab() -> tuple[torch.nn.Module, torch.nn.Module, tuple[list[float], list[float]], int]:
    """torchvision's model behind the tutorial's wrapper, its backbone output, its statistics, its classes."""
    torch.manual_seed(0)
    model = Out(torchvision.models.get_model(MODEL, weights=None, weights_backbone=None).eval()).eval()
    return model, model.model.backbone["16"], IMAGENET, 21


def shapes() -> tuple[torch.nn.Module, torch.nn.Module, tuple[list[float], list[float]], int]:
    """The example segmenter with its shipped weights: it returns its scores as a tensor, no wrapper needed."""
    from safetensors.torch import load_file

    sys.path.insert(0, str(EXAMPLES))
    from shapes_segmenter import build

    model = build().eval()
    model.load_state_dict(load_file(EXAMPLES / "shapes_segmenter_model" / "shapes_segmenter.safetensors"))
    return model, model.bottleneck, ([0.5] * 3, [0.5] * 3), 5


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--shapes", action="store_true", help="the example segmenter instead of torchvision's")
    args = parser.parse_args()
    model, layer, (mean, std), classes = shapes() if args.shapes else deeplab()
    args.out.mkdir(parents=True, exist_ok=True)
    with GradCAM(model=model, target_layers=[layer]) as cam:
        for path in sorted(args.folder.glob("*.jpg")):
            image = np.asarray(Image.open(path).convert("RGB").resize((args.size, args.size), Image.BILINEAR))
            image_float = np.float32(image) / 255
            input_tensor = preprocess_image(image_float, mean=mean, std=std)
            with torch.no_grad():
                labels = model(input_tensor).argmax(dim=1)[0].numpy()
            for c in range(1, classes):
                mask = np.float32(labels == c)
                if mask.mean() < MIN_AREA:
                    continue
                grayscale_cam = cam(input_tensor=input_tensor, targets=[SemanticSegmentationTarget(c, mask)])[0, :]
                visualization = show_cam_on_image(image_float, grayscale_cam, use_rgb=True)
                cv2.imwrite(str(args.out / f"{path.stem}.class{c}.png"), cv2.cvtColor(visualization, cv2.COLOR_RGB2BGR))


if __name__ == "__main__":
    main()
