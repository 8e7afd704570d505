"""Scale-out, side by side in one run: one process, N shards under torchrun, and the Ray Data runner, same folder.

Each case is `gradcam explain FOLDER` as a user types it, a fresh output folder
each, timed end to end (start-up, model build, Ray's cluster and actors
included): images per second and the ratio to one process. The overlays of
every case are compared with one process's, byte for byte.

    python benchmarks/scale.py                         # 96 images, resnet18, 1 process / 2 shards / Ray
    python benchmarks/scale.py --images 256 --processes 8 --device cuda   # a GPU node
    python benchmarks/scale.py --readme                # also write the table into README.md (scale-table markers)

Not a test: the numbers are the machine's. On a 2-core machine two processes
share the cores one process already used (torch runs its kernels on every
core), so the ratio there says what the start-up and the split cost, not what
eight GPUs give.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- scale-table:start -->", "<!-- scale-table:end -->"


def make_folder(folder: Path, count: int) -> None:
    """Photo-sized JPEGs (640x480) of smooth random blobs, reproducible."""
    import numpy as np
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for index in range(count):
        small = rng.integers(0, 256, size=(12, 16, 3), dtype=np.uint8)
        Image.fromarray(small).resize((640, 480), Image.BILINEAR).save(folder / f"img{index:04d}.jpg", quality=90)


def timed(command: list[str], env: dict[str, str]) -> float:
    began = time.perf_counter()
    done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - began


def pictures(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*.png"))}


def cases(args: argparse.Namespace, photos: Path, work: Path) -> list[tuple[str, list[str]]]:
    explain = ["-m", "gradcam_cli", "explain", str(photos), "--model", args.model, "--no-pretrained", "--device", args.device, "-q"]
    found = [("1 process", [sys.executable, *explain, "-o", str(work / "one")])]
    torchrun = Path(sys.executable).parent / "torchrun"
    if torchrun.exists():
        shards = [str(torchrun), "--nproc-per-node", str(args.processes), *explain, "-o", str(work / "shards")]
        found.append((f"{args.processes} shards (torchrun)", shards))
    if importlib.util.find_spec("ray") is not None and not args.no_ray:
        found.append(("Ray Data (local cluster)", [sys.executable, *explain, "--ray", "local", "-o", str(work / "ray")]))
    return found


def table(rows: list[tuple[str, float, bool]], images: int, args: argparse.Namespace) -> str:
    base = rows[0][1]
    lines = [
        f"{images} images (640x480 JPEG), `{args.model}` random weights, {args.device}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores; wall time end to end, start-up included.",
        "",
        "| run | seconds | images/s | vs 1 process | overlays as 1 process's |",
        "|---|---:|---:|---:|---|",
    ]
    for name, seconds, same in rows:
        same_files = "byte-identical" if same else "DIFFER"
        lines.append(f"| {name} | {seconds:.1f} | {images / seconds:.2f} | {base / seconds:.2f}x | {same_files} |")
    return "\n".join(lines)


def write_readme(text: str) -> None:
    readme = ROOT / "README.md"
    content = readme.read_text()
    if START not in content or END not in content:
        raise SystemExit(f"README.md has no {START} ... {END} markers")
    before, rest = content.split(START, 1)
    readme.write_text(before + START + "\n" + text + "\n" + END + rest.split(END, 1)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=96)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--processes", type=int, default=2, help="shards under torchrun")
    parser.add_argument("--no-ray", action="store_true", help="leave the Ray case out")
    parser.add_argument("--readme", action="store_true", help="write the table into README.md")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary)
        photos = work / "photos"
        make_folder(photos, args.images)
        rows = []
        for name, command in cases(args, photos, work):
            seconds = timed(command, env)
            out = Path(command[command.index("-o") + 1])
            rows.append((name, seconds, pictures(out) == pictures(work / "one")))
            print(f"{name}: {seconds:.1f} s", file=sys.stderr)
        shutil.rmtree(photos)
    text = table(rows, args.images, args)
    print(text)
    if args.readme:
        write_readme(re.sub(r"\n+$", "", text))


if __name__ == "__main__":
    main()
