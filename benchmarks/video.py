"""Side-by-side speed on a video: `gradcam explain clip.mp4` against a frame loop written with pytorch-grad-cam and OpenCV.

One run, the programs alternating, each a fresh process timed end to end
(start-up and model build included, peak RSS from the kernel): a clip of a
shape crossing a cluttered scene (examples/shapes.py's `make_moving_scene`),
640x360 at 30 frames/s, H.264, and torchvision's resnet18 with random weights,
GradCAM of the top class on layer4 both ways, an overlay video written both
ways. Ours: the frames decoded one at a time by PyAV and explained in batches,
the overlay video encoded as the maps come. The reference
(reference_video.py): OpenCV reads, a GradCAM call per frame, OpenCV writes.
Our peak memory on a clip of half the length tells whether it grows with the
video (it should not: frames stream).

    python benchmarks/video.py                     # 10 s clip, 2 rounds
    python benchmarks/video.py --seconds 4 --rounds 1
    python benchmarks/video.py --readme            # also write the table into README.md

Not a test: timings depend on the machine. Prints ratios, which travel better.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(HERE))

from speed import run_timed, write_readme  # noqa: E402 - benchmarks/ is not a package

WIDTH, HEIGHT, RATE = 640, 360, 30


def make_clip(path: Path, seconds: float, seed: int = 7) -> int:
    """A clip of a shape crossing the scene, H.264 at 30 frames/s; returns its frame count."""
    import av
    from shapes import make_moving_scene

    frames = round(seconds * RATE)
    images, _, _ = make_moving_scene(np.random.default_rng(seed), WIDTH, HEIGHT, frames)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=RATE)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        for image in images:
            for packet in stream.encode(av.VideoFrame.from_ndarray(np.asarray(image), format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return frames


def ours(clip: Path, out: Path) -> list[str]:
    return [
        sys.executable, "-m", "gradcam_cli", "explain", str(clip), "--model", "torchvision:resnet18", "--no-pretrained",
        "--method", "gradcam", "--layer", "layer4", "-o", str(out), "--json", "-q",
    ]  # fmt: skip


def reference(clip: Path, out: Path) -> list[str]:
    return [sys.executable, str(HERE / "reference_video.py"), str(clip), str(out / "reference.mp4")]


def measure(seconds: float, rounds: int) -> dict[str, float]:
    """Best-of-rounds seconds of each program, and our peak RSS on the whole clip and on half of it."""
    best: dict[str, float] = {}
    rss: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        clip, half = Path(tmp) / "clip.mp4", Path(tmp) / "half.mp4"
        frames = make_clip(clip, seconds)
        make_clip(half, seconds / 2)
        for r in range(rounds):
            (Path(tmp) / f"r{r}").mkdir()
            for name, command in (
                ("ours", ours(clip, Path(tmp) / f"o{r}")),
                ("ref", reference(clip, Path(tmp) / f"r{r}")),
                ("ours_half", ours(half, Path(tmp) / f"h{r}")),
            ):
                timed = run_timed(command)
                best[name] = min(best.get(name, float("inf")), timed.seconds)
                rss[name] = max(rss.get(name, 0.0), timed.peak_rss_mb)
    return {
        "frames": frames, "ours_fps": frames / best["ours"], "ref_fps": frames / best["ref"],
        "speedup": best["ref"] / best["ours"], "rss_half": rss["ours_half"], "rss_all": rss["ours"],
    }  # fmt: skip


def table(row: dict[str, float], seconds: float, rounds: int) -> str:
    cpu = platform.processor() or platform.machine()
    return "\n".join([
        f"| {seconds:g} s clip, {WIDTH}x{HEIGHT} at {RATE} frames/s ({row['frames']:.0f} frames) | frames/s ours | "
        "frames/s pytorch-grad-cam + OpenCV | speed-up | our peak memory, half / whole clip |",
        "|---|---:|---:|---:|---:|",
        f"| resnet18, GradCAM on layer4 | {row['ours_fps']:.2f} | {row['ref_fps']:.2f} | **{row['speedup']:.1f}x** | "
        f"{row['rss_half']:.0f} / {row['rss_all']:.0f} MB |",
        "",
        f"Every frame explained and an overlay video written both ways, end to end (start-up included), best of {rounds} "
        f"round(s), each program a fresh process ({cpu}, {os.cpu_count()} cores). Command: "
        f"`python benchmarks/video.py --seconds {seconds:g} --rounds {rounds}`.",
    ])  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--readme", action="store_true", help="write the table into README.md")
    args = parser.parse_args()
    text = table(measure(args.seconds, args.rounds), args.seconds, args.rounds)
    print(text)
    if args.readme:
        write_readme(text, "video-table")


if __name__ == "__main__":
    main()
