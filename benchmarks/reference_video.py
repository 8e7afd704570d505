"""The reference for benchmarks/video.py: a video explained with pytorch-grad-cam and OpenCV, as its users write it.

A frame loop: OpenCV's VideoCapture reads each frame, it is resized to the
model's 224x224 input and normalised, pytorch-grad-cam's GradCAM (the top
class, the last block of layer4) gives its map, `show_cam_on_image` draws it
on the frame, and OpenCV's VideoWriter appends it to an MP4 (its `mp4v` codec:
the H.264 encoder is not in OpenCV's wheels). One frame at a time, as the
library's video examples and most users' loops do.

    python benchmarks/reference_video.py clip.mp4 out.mp4 [--every N]
"""

from __future__ import annotations

import argparse

import cv2
import numpy as np
import torch
import torchvision
from pytorch_grad_cam import GradCAM
from pytorch_grad_cam.utils.image import show_cam_on_image

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("video")
    parser.add_argument("output")
    parser.add_argument("--every", type=int, default=1)
    args = parser.parse_args()
    model = torchvision.models.resnet18(weights=None).eval()
    cam = GradCAM(model=model, target_layers=[model.layer4[-1]])
    capture = cv2.VideoCapture(args.video)
    rate = capture.get(cv2.CAP_PROP_FPS) / args.every
    width, height = int(capture.get(cv2.CAP_PROP_FRAME_WIDTH)), int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT))
    writer = cv2.VideoWriter(args.output, cv2.VideoWriter_fourcc(*"mp4v"), rate, (width, height))
    index = 0
    while True:
        ok, bgr = capture.read()
        if not ok:
            break
        if index % args.every == 0:
            rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB).astype(np.float32) / 255.0
            small = cv2.resize(rgb, (224, 224), interpolation=cv2.INTER_LINEAR)
            x = torch.from_numpy(((small - MEAN) / STD).transpose(2, 0, 1)).unsqueeze(0)
            grayscale = cam(input_tensor=x, targets=None)[0]
            drawn = show_cam_on_image(rgb, cv2.resize(grayscale, (width, height)), use_rgb=True)
            writer.write(cv2.cvtColor(drawn, cv2.COLOR_RGB2BGR))
        index += 1
    capture.release()
    writer.release()


if __name__ == "__main__":
    main()
