"""Do the example CLIP's prompt maps lie on the shape the prompt names?

Why: a map of "a square" is only useful if its heat lands on the square.  On
fresh two-shape scenes (256x256, two different classes, default shape sizes,
a seed never used in training) this runs the command line once per method
and layer::

    gradcam explain SCENES/ --model examples/shapes_clip.py:build \\
        --weights examples/shapes_clip_model/shapes_clip.safetensors \\
        --input-size 128 --mean 0.5 --std 0.5 \\
        --prompt "a circle" --prompt "a square" --prompt "a triangle" --prompt "a star" \\
        --method M --layer L --save-raw

and, for each scene and each of its two shapes, reads the map of "a <shape>"
at the scene's size: the share of its energy (its sum) inside that shape's
bounding box, the share inside the other shape's box, and whether its peak
lies in its own box.  It prints the means over scenes and shapes, and how
often the own box holds more energy than the other box.  A box covers about
9 % of a scene on average, which is what a flat map would put in it.

    python examples/clip_map_check.py                       # 20 scenes, seed 11, the last two blocks' norms
    python examples/clip_map_check.py --n 50 --seed 3 --layer visual.transformer.resblocks.-3.ln_1
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from shapes import CLASSES, make_detection_scene  # noqa: E402

MODEL = [
    "--model", f"{HERE / 'shapes_clip.py'}:build",
    "--weights", str(HERE / "shapes_clip_model" / "shapes_clip.safetensors"),
    "--input-size", "128", "--mean", "0.5", "--std", "0.5",
]  # fmt: skip
PROMPTS = [f"a {name}" for name in CLASSES]
DEFAULT_LAYER = "visual.transformer.resblocks.-1.ln_1"  # gradcam's for this model
LAYERS = [DEFAULT_LAYER, "visual.transformer.resblocks.-2.ln_1"]

Box = tuple[int, int, int, int]


def two_shape_scenes(seed: int, n: int, size: int = 256) -> list[tuple[Image.Image, list[tuple[int, Box]]]]:
    """``n`` scenes of ``size`` x ``size`` with exactly two shapes of different classes, default shape sizes."""
    rng = np.random.default_rng(seed)
    out: list[tuple[Image.Image, list[tuple[int, Box]]]] = []
    while len(out) < n:
        image, objects = make_detection_scene(rng, size, size, count_range=(2, 2))
        if len(objects) == 2 and objects[0][0] != objects[1][0]:
            out.append((image, objects))
    return out


def energy(raw: np.ndarray, box: Box) -> float:
    """The share of the map's sum inside ``box`` (x1/y1 exclusive)."""
    x0, y0, x1, y1 = box
    total = float(raw.sum())
    return float(raw[y0:y1, x0:x1].sum()) / total if total > 0 else 0.0


def peak_in(raw: np.ndarray, box: Box) -> bool:
    y, x = np.unravel_index(int(np.argmax(raw)), raw.shape)
    return bool(box[0] <= x < box[2] and box[1] <= y < box[3])


def explain(folder: Path, out: Path, method: str, layer: str | None) -> dict[str, dict[str, np.ndarray]]:
    """Run the command line on the scenes of ``folder``; each scene's raw map per prompt."""
    args = [sys.executable, "-m", "gradcam_cli", "explain", str(folder), *MODEL, *[a for p in PROMPTS for a in ("--prompt", p)]]
    args += ["--method", method, "--save-raw", "-o", str(out), "--json", "-q", *(["--layer", layer] if layer else [])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"gradcam failed ({done.returncode}):\n{done.stderr}")
    maps: dict[str, dict[str, np.ndarray]] = {}
    for line in done.stdout.splitlines():
        record = json.loads(line)
        maps[Path(record["input"]).stem] = {t["class_name"]: np.load(t["raw"]) for t in record["targets"]}
    return maps


def measure(scenes: list[tuple[Image.Image, list[tuple[int, Box]]]], maps: dict[str, dict[str, np.ndarray]]) -> dict[str, float]:
    own, other, peaks, wins = [], [], [], []
    for i, (_, objects) in enumerate(scenes):
        for k, (cls, box) in enumerate(objects):
            raw = maps[f"scene{i:03d}"][f"a {CLASSES[cls]}"]
            mine, theirs = energy(raw, box), energy(raw, objects[1 - k][1])
            own.append(mine)
            other.append(theirs)
            wins.append(mine > theirs)
            peaks.append(peak_in(raw, box))
    return {"own": float(np.mean(own)), "other": float(np.mean(other)), "wins": float(np.mean(wins)), "peak": float(np.mean(peaks)),
            "own_min": float(np.min(own)), "margin_min": float(np.min(np.subtract(own, other)))}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20, help="scenes")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--methods", nargs="+", default=["gradcam", "hirescam"])
    ap.add_argument("--layer", action="append", help=f"target layer (repeatable: one run each); default {', '.join(LAYERS)}")
    args = ap.parse_args()
    scenes = two_shape_scenes(args.seed, args.n)
    box_area = np.mean([(b[2] - b[0]) * (b[3] - b[1]) / 256**2 for _, objects in scenes for _, b in objects])
    print(f"{args.n} two-shape scenes (seed {args.seed}), 256x256; a box covers {box_area:.3f} of a scene on average")
    print(f"{'layer':48s} {'method':9s} {'own box':>8s} {'other box':>9s} {'own>other':>9s} {'peak in own':>11s} {'min own-other':>13s}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "scenes"
        folder.mkdir()
        for i, (image, _) in enumerate(scenes):
            image.save(folder / f"scene{i:03d}.png")
        for layer in args.layer or LAYERS:
            for method in args.methods:
                m = measure(scenes, explain(folder, Path(tmp) / f"out-{method}-{layer}", method, layer))
                name = layer + (" (default)" if layer == DEFAULT_LAYER else "")
                print(f"{name:48s} {method:9s} {m['own']:8.3f} {m['other']:9.3f} {m['wins']:9.3f}"
                      f" {m['peak']:11.3f} {m['margin_min']:13.3f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
