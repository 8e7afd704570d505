"""Side-by-side speed on a detector: `gradcam explain FOLDER` against the same job written with pytorch-grad-cam.

One run, the programs alternating, each a fresh process timed end to end
(start-up and model build included, peak RSS from the kernel): 640x480
JPEG scenes, torchvision's fasterrcnn_mobilenet_v3_large_320_fpn with random
weights (its box threshold opened) and Ultralytics' YOLOv8n from its config
(random weights), the top K detections of each image explained with GradCAM
on the feature maps the heads read, one overlay per detection both ways
(ours with --each, and its picture of all boxes too).
Ours: one forward per batch of images and one batched backward for all their
detections. The reference (reference_detection.py): its tutorial's loop, a
forward and a backward per box. Also: the time each extra detection adds
(K against one), and our peak memory over 16 and 64 images (flat: the folder streams).

    python benchmarks/detection.py                     # 64 images, K = 5, 2 rounds
    python benchmarks/detection.py --images 16 --rounds 1
    python benchmarks/detection.py --readme            # also write the table into README.md

Not a test: timings depend on the machine. Prints ratios, which travel better.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(HERE))

from speed import run_timed  # noqa: E402 - benchmarks/ is not a package

MODELS = {  # our --model and options, and the reference's own arguments
    "fasterrcnn_mobilenet_v3_large_320_fpn": (
        [
            "--model",
            "torchvision:fasterrcnn_mobilenet_v3_large_320_fpn",
            "--model-kwargs",
            "box_score_thresh=0.0",
            "--input-size",
            "480x640",
        ],
        [],
    ),
    "yolov8n.yaml": (["--model", "yolo:yolov8n.yaml"], ["--yolo", "yolov8n.yaml"]),
}


def make_scenes(folder: Path, count: int, seed: int = 5) -> None:
    """Shapes scenes of 640x480, two to four objects each, saved as JPEG (quality 90)."""
    from shapes import make_detection_scene

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(count):
        image, _ = make_detection_scene(rng, 640, 480, count_range=(2, 4))
        image.save(folder / f"scene_{i:05d}.jpg", quality=90)


def ours(model: str, folder: Path, out: Path, detections: int) -> list[str]:
    return [
        sys.executable, "-m", "gradcam_cli", "explain", str(folder), *MODELS[model][0], "--no-pretrained",
        "--score-threshold", "0", "--max-detections", str(detections), "--method", "gradcam", "--each", "-o", str(out),
        "--json", "-q",
    ]  # fmt: skip


def reference(model: str, folder: Path, out: Path, detections: int) -> list[str]:
    own = MODELS[model][1]
    return [sys.executable, str(HERE / "reference_detection.py"), str(folder), str(out), "--detections", str(detections), *own]


def measure(model: str, images: int, detections: int, rounds: int) -> dict[str, float]:
    """Best-of-rounds seconds of each program at K and at one detection per image; our peak RSS at 16 and all images."""
    best: dict[str, float] = {}
    rss: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder, small = Path(tmp) / "scenes", Path(tmp) / "sixteen"
        make_scenes(folder, images)
        make_scenes(small, 16)
        for r in range(rounds):
            for name, command in (
                ("ours", ours(model, folder, Path(tmp) / f"o{r}", detections)),
                ("ref", reference(model, folder, Path(tmp) / f"r{r}", detections)),
                ("ours_1", ours(model, folder, Path(tmp) / f"o1{r}", 1)),
                ("ref_1", reference(model, folder, Path(tmp) / f"r1{r}", 1)),
                ("ours_16", ours(model, small, Path(tmp) / f"s{r}", detections)),
            ):
                timed = run_timed(command)
                best[name] = min(best.get(name, float("inf")), timed.seconds)
                rss[name] = max(rss.get(name, 0.0), timed.peak_rss_mb)
    extra = detections - 1
    return {
        "ours_ips": images / best["ours"],
        "ref_ips": images / best["ref"],
        "speedup": best["ref"] / best["ours"],
        "ours_per_detection": (best["ours"] - best["ours_1"]) / (images * extra) if extra else float("nan"),
        "ref_per_detection": (best["ref"] - best["ref_1"]) / (images * extra) if extra else float("nan"),
        "ours_per_image_1": best["ours_1"] / images,
        "ref_per_image_1": best["ref_1"] / images,
        "rss_16": rss["ours_16"],
        "rss_all": rss["ours"],
    }


def table(rows: dict[str, dict[str, float]], images: int, detections: int, rounds: int) -> str:
    cpu = platform.processor() or platform.machine()
    lines = [
        f"| {images} images of 640x480, {detections} detections each | images/s ours | images/s pytorch-grad-cam | speed-up "
        "| s per extra detection, ours / reference | s per image at one detection, ours / reference | our peak memory, 16 / "
        f"{images} images |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for model, row in rows.items():
        lines.append(
            f"| {model} | {row['ours_ips']:.2f} | {row['ref_ips']:.2f} | **{row['speedup']:.1f}x** | "
            f"{row['ours_per_detection']:.3f} / {row['ref_per_detection']:.3f} | {row['ours_per_image_1']:.2f} / "
            f"{row['ref_per_image_1']:.2f} | {row['rss_16']:.0f} / {row['rss_all']:.0f} MB |"
        )
    lines += [
        "",
        f"Random weights, GradCAM both ways, one overlay per detection both ways, best of {rounds} round(s), each program a "
        f"fresh process ({cpu}, {os.cpu_count()} cores). Command: `python benchmarks/detection.py --images {images} --rounds {rounds}`.",
    ]
    return "\n".join(lines)


def write_readme(text: str) -> None:
    readme = ROOT / "README.md"
    content = readme.read_text()
    marked = re.compile(r"(<!-- detection-table -->\n).*?(\n<!-- /detection-table -->)", re.S)
    if not marked.search(content):
        raise SystemExit("README.md has no <!-- detection-table --> markers")
    readme.write_text(marked.sub(lambda m: m.group(1) + text + m.group(2), content))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--detections", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated, of: " + ", ".join(MODELS))
    parser.add_argument("--readme", action="store_true", help="write the table into README.md")
    args = parser.parse_args()
    rows = {model: measure(model, args.images, args.detections, args.rounds) for model in args.models.split(",")}
    text = table(rows, args.images, args.detections, args.rounds)
    print(text)
    if args.readme:
        write_readme(text)


if __name__ == "__main__":
    main()
