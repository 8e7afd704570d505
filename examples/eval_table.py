"""The README's evaluation table: every method and the baselines, every metric, on the shipped example model.

Fresh synthetic scenes (a seed never used in training, non-square sizes) with
their shapes' boxes go through `gradcam eval` as a user runs it, every method,
every metric (ROAD and the pointing game included); the table is read from
its eval.json and written into README.md between the eval-table markers, with
the summary chart as docs/eval_summary.jpg.

    python examples/eval_table.py                  # 12 scenes; about 7 minutes on 2 CPU cores
    python examples/eval_table.py --scenes 8 --no-readme

The command it runs is printed, so the table can be reproduced by hand.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
from shapes import CLASSES, make_scene  # noqa: E402

from gradcam_cli.evaluate.measures import BY_NAME, MEASURES  # noqa: E402
from gradcam_cli.vocab import Method, Metric  # noqa: E402

SIZES = [(320, 240), (240, 320), (400, 260), (200, 300)]
START, END = "<!-- eval-table:start -->", "<!-- eval-table:end -->"


def write_scenes(folder: Path, count: int, seed: int) -> Path:
    """The scenes and a boxes CSV (`path,x0,y0,x1,y1,class`, x1 and y1 exclusive, as make_scene gives them)."""
    rng = np.random.default_rng(seed)
    rows = [["path", "x0", "y0", "x1", "y1", "class"]]
    for i in range(count):
        width, height = SIZES[i % len(SIZES)]
        image, label, box = make_scene(rng, width, height)
        image.save(folder / f"scene_{i:03d}.png")
        rows.append([f"scene_{i:03d}.png", *map(str, box), CLASSES[label]])
    boxes = folder / "boxes.csv"
    with boxes.open("w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    return boxes


def command(scenes: Path, boxes: Path, out: Path, methods: list[str], metrics: list[str]) -> list[str]:
    model = HERE / "shapes_model"
    return [
        "gradcam", "eval", str(scenes), "--model", "test_resnet", "--weights", str(model / "shapes_test_resnet.safetensors"),
        "--labels", str(model / "labels.txt"), "--methods", ",".join(methods), "--metrics", ",".join(metrics),
        "--boxes", str(boxes), "-o", str(out), "--quiet",
    ]  # fmt: skip


def table(summary: dict) -> str:
    """Markdown: a row per map set, a column per headline measure, the best of each column in bold."""
    columns = [m.name for m in MEASURES if m.headline and m.name in summary["measures"]]
    head = " | ".join(f"{BY_NAME[c].label} {'↑' if BY_NAME[c].higher_is_better else '↓'}" for c in columns)
    lines = [f"| map | {head} |", "|---|" + "---:|" * len(columns)]
    for name, result in summary["results"].items():
        cells = []
        for column in columns:
            mean = result[column]["mean"]
            text = "n/a" if mean is None else f"{mean:.3f}"
            cells.append(f"**{text}**" if name in summary["best"].get(column, []) else text)
        label = f"*{name}* (baseline)" if result["baseline"] else name
        lines.append(f"| {label} | {' | '.join(cells)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenes", type=int, default=12)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--methods", default=",".join(m.value for m in Method))
    parser.add_argument("--metrics", default=",".join(m.value for m in Metric if m is not Metric.energy))  # energy: a detector's
    parser.add_argument("--no-readme", action="store_true", help="print the table, leave README.md alone")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        scenes, out = Path(work) / "scenes", Path(work) / "out"
        scenes.mkdir()
        write_scenes(scenes, args.scenes, args.seed)
        # run in the folder, on relative paths: the random baseline is seeded by each input's path as given, so the
        # table is the same whatever temporary folder it was made in
        run = command(Path("scenes"), Path("scenes") / "boxes.csv", Path("out"), args.methods.split(","), args.metrics.split(","))
        print("$", shlex.join(run), "  # in a fresh folder", file=sys.stderr)
        subprocess.run(run, check=True, stdout=subprocess.DEVNULL, cwd=work)
        summary = json.loads((out / "eval.json").read_text())
        text = table(summary)
        note = (
            f"{summary['images']} fresh scenes (seed {args.seed}, sizes {', '.join(f'{w}x{h}' for w, h in SIZES)}), "
            f"{summary['steps']} steps, substrate {summary['substrate']}; written by `python examples/eval_table.py`."
        )
        print(text)
        print(note)
        if not args.no_readme:
            readme = ROOT / "README.md"
            body = readme.read_text(encoding="utf-8")
            block = f"{START}\n{text}\n\n{note}\n{END}"
            body = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _m: block, body, flags=re.S)
            readme.write_text(body, encoding="utf-8")
            with Image.open(out / "eval_summary.png") as chart:  # a JPEG: a tenth of the PNG's size, for the README
                chart.convert("RGB").save(ROOT / "docs" / "eval_summary.jpg", quality=88)


if __name__ == "__main__":
    main()
