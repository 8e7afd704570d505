"""The same job as `gradcam explain FOLDER` on a detector, written with pytorch-grad-cam as its tutorial teaches.

Its Faster R-CNN tutorial: run the model to get the boxes, then for each box a
`FasterRCNNBoxScoreTarget` holding only that box, `GradCAM` on the layers the
head reads, `show_cam_on_image` with the box drawn, `cv2.imwrite`. Each box
costs a forward and a backward of its own (BaseCAM runs the model on every
call). The model is torchvision's, random weights (seeded), its box score
threshold opened so random weights detect something; the top K boxes are explained.

    python benchmarks/reference_detection.py FOLDER OUT --detections 5
"""

from __future__ import annotations

import argparse
from pathlib import Path

import cv2
import numpy as np
import torch
import torchvision
from PIL import Image
from pytorch_grad_cam import GradCAM
from pytorch_grad_cam.utils.image import show_cam_on_image
from pytorch_grad_cam.utils.model_targets import FasterRCNNBoxScoreTarget

MODEL = "fasterrcnn_mobilenet_v3_large_320_fpn"
LAYERS = ("backbone.fpn.layer_blocks.0", "backbone.fpn.layer_blocks.1")  # what the heads read, as ours defaults to


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--detections", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torchvision.models.get_model(MODEL, weights=None, weights_backbone=None, box_score_thresh=0.0).eval()
    modules = dict(model.named_modules())
    args.out.mkdir(parents=True, exist_ok=True)
    with GradCAM(model=model, target_layers=[modules[name] for name in LAYERS]) as cam:
        for path in sorted(args.folder.glob("*.jpg")):
            image = np.asarray(Image.open(path).convert("RGB"))
            image_float = np.float32(image) / 255
            input_tensor = torchvision.transforms.functional.to_tensor(image).unsqueeze(0)
            with torch.no_grad():
                found = model(input_tensor)[0]
            boxes = found["boxes"][: args.detections].numpy()
            labels = found["labels"][: args.detections].tolist()
            for k, (box, label) in enumerate(zip(boxes, labels)):
                targets = [FasterRCNNBoxScoreTarget(labels=[label], bounding_boxes=box[None, :])]
                grayscale_cam = cam(input_tensor, targets=targets)[0, :]
                visualization = show_cam_on_image(image_float, grayscale_cam, use_rgb=True)
                x1, y1, x2, y2 = (int(v) for v in box)
                cv2.rectangle(visualization, (x1, y1), (x2, y2), (255, 0, 0), 2)
                cv2.imwrite(str(args.out / f"{path.stem}.det{k}.png"), cv2.cvtColor(visualization, cv2.COLOR_RGB2BGR))


if __name__ == "__main__":
    main()
