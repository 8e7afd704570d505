"""Pointing game: does Grad-CAM on the example model point at the shape?

Why: a heat-map tool is only useful if the heat lands on the evidence.  On
fresh synthetic scenes (a seed never used in training, non-square sizes) we
compute Grad-CAM with pytorch-grad-cam at the model's default target layer
(timm ``feature_info[-1]``, ``layer4`` for test_resnet), target = predicted
class, squash the 160x160 CAM back to the original width x height, and count a
hit when its argmax pixel lies within ``--tolerance`` px of the shape's
bounding box.  This is the reference the CLI's acceptance test mirrors.

    python examples/pointing_game_check.py            # 100 scenes, seed 7

Exits non-zero when the hit rate is below ``--min-rate``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import cv2
import numpy as np
import timm
import torch
from PIL import Image
from pytorch_grad_cam import GradCAM
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget
from safetensors.torch import load_file

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from shapes import CLASSES, make_scene  # noqa: E402

WEIGHTS = HERE / "shapes_model" / "shapes_test_resnet.safetensors"
SIZES = [(320, 240), (240, 320), (400, 260), (200, 300)]
_PIL_INTERP = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "nearest": Image.NEAREST}


def distance_to_box(x: int, y: int, box: tuple[int, int, int, int]) -> float:
    """Euclidean px distance from (x, y) to the box (x1/y1 exclusive); 0 inside."""
    x0, y0, x1, y1 = box
    dx = max(x0 - x, 0, x - (x1 - 1))
    dy = max(y0 - y, 0, y - (y1 - 1))
    return float(np.hypot(dx, dy))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--tolerance", type=float, default=15.0)
    ap.add_argument("--min-rate", type=float, default=0.85)
    ap.add_argument("--weights", type=Path, default=WEIGHTS)
    ap.add_argument("-v", "--verbose", action="store_true", help="print every miss")
    args = ap.parse_args()

    torch.set_num_threads(2)
    model = timm.create_model("test_resnet", pretrained=False, num_classes=len(CLASSES))
    model.load_state_dict(load_file(str(args.weights)), strict=True)
    model.eval()
    cfg = timm.data.resolve_model_data_config(model)
    size = cfg["input_size"][-1]
    interp = _PIL_INTERP.get(cfg["interpolation"], Image.BILINEAR)
    mean = np.asarray(cfg["mean"], np.float32)
    std = np.asarray(cfg["std"], np.float32)
    layer = model.get_submodule(model.feature_info[-1]["module"])

    rng = np.random.default_rng(args.seed)
    hits, correct = 0, 0
    per_size: dict[tuple[int, int], list[int]] = {s: [0, 0] for s in SIZES}
    with GradCAM(model=model, target_layers=[layer]) as cam:
        for i in range(args.n):
            w, h = SIZES[i % len(SIZES)]
            img, cls, box = make_scene(rng, w, h)
            x = (np.asarray(img.resize((size, size), interp), np.float32) / 255.0 - mean) / std
            x = torch.from_numpy(x.transpose(2, 0, 1)).unsqueeze(0)
            with torch.no_grad():
                pred = int(model(x).argmax(1))
            heat = cam(input_tensor=x, targets=[ClassifierOutputTarget(pred)])[0]
            heat = cv2.resize(heat, (w, h), interpolation=cv2.INTER_LINEAR)
            yy, xx = np.unravel_index(int(np.argmax(heat)), heat.shape)
            d = distance_to_box(int(xx), int(yy), box)
            hit = d <= args.tolerance
            hits += hit
            correct += pred == cls
            per_size[(w, h)][0] += hit
            per_size[(w, h)][1] += 1
            if args.verbose and not hit:
                print(f"  miss #{i}: {w}x{h} {CLASSES[cls]} (pred {CLASSES[pred]}) box={box} argmax=({xx},{yy}) dist={d:.0f}px")

    rate = hits / args.n
    print("per size: " + ", ".join(f"{w}x{h} {a}/{b}" for (w, h), (a, b) in per_size.items()))
    print(f"classification accuracy: {correct / args.n:.3f}")
    print(f"pointing game (argmax within {args.tolerance:g}px of bbox): {hits}/{args.n} = {rate:.1%}")
    return 0 if rate >= args.min_rate else 1


if __name__ == "__main__":
    sys.exit(main())
