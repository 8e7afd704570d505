"""Pointing game: does this tool's Grad-CAM on the example model point at the shape?

Why: a heat-map tool is only useful if the heat lands on the evidence.  On
fresh synthetic scenes (a seed never used in training, non-square sizes) each
scene goes through ``gradcam_cli.explain`` (the same code as ``gradcam explain
IMAGE`` with the example preset: the default layer, ``layer4``, the predicted
class, the map put back onto the scene at its own width x height), and a hit
is counted when the map's hottest pixel lies within ``--tolerance`` px of the
shape's bounding box.  ``tests/test_pointing_game.py`` checks the same through
the command line on other scenes.

    python examples/pointing_game_check.py            # 100 scenes, seed 7

Exits non-zero when the hit rate is below ``--min-rate``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))  # this checkout's gradcam_cli, installed or not
from shapes import CLASSES, make_scene  # noqa: E402

import gradcam_cli  # noqa: E402

WEIGHTS = HERE / "shapes_model" / "shapes_test_resnet.safetensors"
LABELS = HERE / "shapes_model" / "labels.txt"
SIZES = [(320, 240), (240, 320), (400, 260), (200, 300)]


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
    model = gradcam_cli.load_model("test_resnet", weights=args.weights, labels=LABELS, pretrained=False, device="cpu")

    rng = np.random.default_rng(args.seed)
    hits, correct = 0, 0
    per_size: dict[tuple[int, int], list[int]] = {s: [0, 0] for s in SIZES}
    for i in range(args.n):
        w, h = SIZES[i % len(SIZES)]
        img, cls, box = make_scene(rng, w, h)
        result = gradcam_cli.explain(img, model)
        assert result.map.shape == (h, w)
        yy, xx = np.unravel_index(int(np.argmax(result.map)), result.map.shape)
        d = distance_to_box(int(xx), int(yy), box)
        hit = d <= args.tolerance
        hits += hit
        correct += result.class_index == cls
        per_size[(w, h)][0] += hit
        per_size[(w, h)][1] += 1
        if args.verbose and not hit:
            print(f"  miss #{i}: {w}x{h} {CLASSES[cls]} (pred {result.class_name}) box={box} argmax=({xx},{yy}) dist={d:.0f}px")

    rate = hits / args.n
    print("per size: " + ", ".join(f"{w}x{h} {a}/{b}" for (w, h), (a, b) in per_size.items()))
    print(f"classification accuracy: {correct / args.n:.3f}")
    print(f"pointing game (argmax within {args.tolerance:g}px of bbox): {hits}/{args.n} = {rate:.1%}")
    return 0 if rate >= args.min_rate else 1


if __name__ == "__main__":
    sys.exit(main())
