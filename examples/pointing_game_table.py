"""Pointing game per CAM method, through the CLI, written into README.md.

The first 60 of ``pointing_game_check.py``'s fresh scenes (seed 7, its
non-square sizes; a seed never used in training) are saved as JPEGs and every registered
method runs end to end through ``gradcam explain`` on the shipped example model
(``--save-raw --json``), plus Grad-CAM with ``--aug-smooth`` and with
``--eigen-smooth``.  A hit is the argmax pixel of the raw map, at the original
image size, within ``--tolerance`` px of the shape's box.  Per method the table
gives hits, hit rate, classification accuracy of that run, blank maps, and wall
seconds per image of the whole CLI run (model loading included).

    python examples/pointing_game_table.py              # measure (about 5 min), rewrite the README table
    python examples/pointing_game_table.py --no-write   # measure, print only

The table replaces what lies between the README markers
``<!-- pointing-game-table:start -->`` and ``<!-- pointing-game-table:end -->``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from pointing_game_check import SIZES, distance_to_box  # noqa: E402
from shapes import make_scene  # noqa: E402

sys.path.insert(0, str(ROOT))
from gradcam_cli.cams.methods import METHODS  # noqa: E402  (the registry; imports no torch)

README = ROOT / "README.md"
START, END = "<!-- pointing-game-table:start -->", "<!-- pointing-game-table:end -->"
MODEL_ARGS = [
    "--model",
    "test_resnet",
    "--weights",
    str(HERE / "shapes_model" / "shapes_test_resnet.safetensors"),
    "--labels",
    str(HERE / "shapes_model" / "labels.txt"),
]
# Grad-CAM's post-processing variants, each an extra row right after plain gradcam.
VARIANTS = {"gradcam": [["--aug-smooth"], ["--eigen-smooth"]]}


@dataclass
class Row:
    method: str
    flags: list[str]
    scenes: int = 0
    hits: int = 0
    correct: int = 0
    blank: int = 0
    failed: int = 0
    seconds: float = 0.0
    misses: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return " ".join([self.method, *self.flags])


def make_scenes(folder: Path, n: int, seed: int) -> dict[str, tuple[int, tuple[int, int, int, int], tuple[int, int]]]:
    """n scenes as JPEGs in folder; name -> (label, box, (width, height))."""
    rng = np.random.default_rng(seed)
    truth = {}
    for i in range(n):
        width, height = SIZES[i % len(SIZES)]
        image, label, box = make_scene(rng, width, height)
        name = f"scene_{i:03d}.jpg"
        image.save(folder / name, quality=95)
        truth[name] = (label, box, (width, height))
    return truth


def run_method(row: Row, scenes: Path, out: Path, truth: dict, tolerance: float) -> Row:
    command = [
        sys.executable,
        "-m",
        "gradcam_cli.cli.app",
        "explain",
        str(scenes),
        *MODEL_ARGS,
        "--method",
        row.method,
        *row.flags,
        "--save-raw",
        "--json",
        "-q",
        "-o",
        str(out),
    ]
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    row.seconds = time.perf_counter() - started
    if result.returncode not in (0, 1):  # 1: some inputs failed, counted below
        raise SystemExit(f"`{' '.join(command)}` exited {result.returncode}:\n{result.stderr.strip()}")
    records = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    row.scenes = len(truth)
    seen = set()
    for record in records:
        name = Path(record["input"]).name
        seen.add(name)
        label, box, (width, height) = truth[name]
        if not record["ok"]:
            row.failed += 1
            row.misses.append(f"{name}: failed: {record['error']}")
            continue
        raw = np.load(record["targets"][0]["raw"])
        if raw.shape != (height, width):
            raise SystemExit(f"{row.label}: {name}: raw map is {raw.shape}, image is {height}x{width}")
        y, x = np.unravel_index(int(np.argmax(raw)), raw.shape)
        distance = distance_to_box(int(x), int(y), box)
        row.hits += distance <= tolerance
        row.correct += record["class_index"] == label
        row.blank += bool(record["blank"])
        if distance > tolerance:
            row.misses.append(f"{name}: argmax ({x},{y}) {distance:.0f}px from box {box}")
    row.failed += len(set(truth) - seen)
    return row


def table(rows: list[Row], n: int, seed: int, tolerance: float) -> str:
    lines = ["| method | hits | hit rate | accuracy | blank maps | s / image |", "|---|---:|---:|---:|---:|---:|"]
    for row in rows:
        failed = f" ({row.failed} failed)" if row.failed else ""
        lines.append(
            f"| `{row.label}` | {row.hits}/{row.scenes}{failed} | {row.hits / row.scenes:.0%} "
            f"| {row.correct / row.scenes:.0%} | {row.blank} | {row.seconds / row.scenes:.3f} |"
        )
    sizes = ", ".join(f"{w}x{h}" for w, h in SIZES)
    lines += [
        "",
        f"`python examples/pointing_game_table.py`: {n} scenes (seed {seed}, sizes {sizes}, JPEG), "
        f"hit = hottest pixel of the `--save-raw` map within {tolerance:g} px of the box; "
        "s / image is the wall time of the method's whole `gradcam explain` run on CPU "
        "divided by the scenes, so it includes starting Python and loading the model.",
    ]
    return "\n".join(lines)


def write_readme(text: str, readme: Path = README) -> None:
    """Replace what lies between the markers, re-reading the file just before writing."""
    content = readme.read_text(encoding="utf-8")
    start, end = content.find(START), content.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"{readme}: markers {START} ... {END} not found")
    head = content[: start + len(START)]
    readme.write_text(f"{head}\n{text}\n{content[end:]}", encoding="utf-8")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=60, help="scenes, the same for every method (60 keeps the run near 5 min on 2 cores)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--tolerance", type=float, default=15.0)
    ap.add_argument("--methods", nargs="*", help="only these registry names (default: all)")
    ap.add_argument("--no-write", action="store_true", help="print the table, leave README.md alone")
    ap.add_argument("--keep", type=Path, help="write scenes and maps here instead of a temporary folder")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every miss")
    args = ap.parse_args()

    names = args.methods or list(METHODS)
    unknown = [m for m in names if m not in METHODS]
    if unknown:
        raise SystemExit(f"unknown method(s) {unknown}; registry: {', '.join(METHODS)}")
    rows = []
    for name in METHODS:  # registry order whatever order --methods gave
        if name in names:
            rows += [Row(name, [])] + [Row(name, flags) for flags in VARIANTS.get(name, [])]

    with tempfile.TemporaryDirectory(prefix="pointing_game_") as tmp:
        work = args.keep or Path(tmp)
        scenes = work / "scenes"
        scenes.mkdir(parents=True, exist_ok=True)
        truth = make_scenes(scenes, args.n, args.seed)
        total = time.perf_counter()
        for row in rows:
            slug = row.label.replace(" --", "_").replace("+", "p")
            run_method(row, scenes, work / f"out_{slug}", truth, args.tolerance)
            print(
                f"{row.label:28s} {row.hits:3d}/{row.scenes} hits, {row.correct} correct, {row.blank} blank, "
                f"{row.failed} failed, {row.seconds:6.1f}s",
                file=sys.stderr,
                flush=True,
            )
            if args.verbose:
                for miss in row.misses:
                    print(f"    {miss}", file=sys.stderr)
        print(f"all methods: {time.perf_counter() - total:.0f}s", file=sys.stderr)

    text = table(rows, args.n, args.seed, args.tolerance)
    print(text)
    if not args.no_write:
        write_readme(text)
        print(f"wrote the table into {README}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
