"""The same job as `gradcam explain FOLDER` on a detector, written with pytorch-grad-cam as its tutorial teaches.

Its Faster R-CNN tutorial: run the model to get the boxes, then for each box a
`FasterRCNNBoxScoreTarget` holding only that box, `GradCAM` on the layers the
head reads, `show_cam_on_image` with the box drawn, `cv2.imwrite`. Each box
costs a forward and a backward of its own (BaseCAM runs the model on every
call). The model is torchvision's, random weights (seeded), its box score
threshold opened so random weights detect something; the top K boxes are explained.

With `--yolo CONFIG` the model is Ultralytics' (a config, random weights): pytorch-grad-cam has no
YOLO target (its YOLO tutorial uses EigenCAM, one map for all boxes), so each box's target is
written as its users write one, a callable picking that anchor's class score from the head's
output; the boxes are Ultralytics' `non_max_suppression`'s, the input the photo letterboxed to 640.

    python benchmarks/reference_detection.py FOLDER OUT --detections 5
    python benchmarks/reference_detection.py FOLDER OUT --detections 5 --yolo yolov8n.yaml
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
    parser.add_argument("--yolo", help="an Ultralytics config (yolov8n.yaml): explain that model instead")
    args = parser.parse_args()
    if args.yolo:
        return yolo(args.folder, args.out, args.detections, args.yolo)
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


class AnchorScore:
    """One box's target: its anchor's score for its class, in the Detect head's output (N, 4 + classes, anchors)."""

    def __init__(self, anchor: int, label: int) -> None:
        self.anchor, self.label = anchor, label

    def __call__(self, output: torch.Tensor) -> torch.Tensor:
        return output[..., 4 + self.label, self.anchor].sum()


def letterboxed(image: np.ndarray, side: int = 640) -> np.ndarray:
    """The photo scaled into a side x side square, centred, grey 114 around it, as Ultralytics' LetterBox does."""
    height, width = image.shape[:2]
    scale = min(side / height, side / width)
    new_h, new_w = round(height * scale), round(width * scale)
    canvas = np.full((side, side, 3), 114, np.uint8)
    top, left = (side - new_h) // 2, (side - new_w) // 2
    canvas[top : top + new_h, left : left + new_w] = cv2.resize(image, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    return canvas


def yolo(folder: Path, out: Path, detections: int, config: str) -> None:
    """Each image's top boxes after NMS, one GradCAM per box on the layers the Detect head reads."""
    from ultralytics.nn.tasks import DetectionModel

    torch.manual_seed(0)
    model = DetectionModel(config, verbose=False).eval()
    head = model.model[-1]
    layers = [model.model[i] for i in head.f]

    def scores(x: torch.Tensor) -> torch.Tensor:
        return model(x)[0]  # (N, 4 + classes, anchors)

    class Head(torch.nn.Module):  # pytorch-grad-cam runs a module; this one returns the head's tensor
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return scores(x)

    out.mkdir(parents=True, exist_ok=True)
    with GradCAM(model=Head(), target_layers=layers) as cam:
        for path in sorted(folder.glob("*.jpg")):
            image = letterboxed(np.asarray(Image.open(path).convert("RGB")))
            image_float = np.float32(image) / 255
            input_tensor = torch.from_numpy(image_float).permute(2, 0, 1)[None]
            with torch.no_grad():
                y = scores(input_tensor)[0]
            best, label = y[4:].max(dim=0)
            boxes = torch.cat([y[:2] - y[2:4] / 2, y[:2] + y[2:4] / 2]).T
            keep = torchvision.ops.batched_nms(boxes, best, label, 0.7)[:detections]
            for k, anchor in enumerate(keep.tolist()):
                grayscale_cam = cam(input_tensor, targets=[AnchorScore(anchor, int(label[anchor]))])[0, :]
                visualization = show_cam_on_image(image_float, grayscale_cam, use_rgb=True)
                x1, y1, x2, y2 = (int(v) for v in boxes[anchor])
                cv2.rectangle(visualization, (x1, y1), (x2, y2), (255, 0, 0), 2)
                cv2.imwrite(str(out / f"{path.stem}.det{k}.png"), cv2.cvtColor(visualization, cv2.COLOR_RGB2BGR))


if __name__ == "__main__":
    main()
