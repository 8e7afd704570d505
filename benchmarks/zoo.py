"""The zoo sweep: one small model per timm module and per torchvision family, random weights, default layer.

For each model, in a child process of its own (a model that hangs or eats the
memory costs only itself, within --timeout): built with random weights, its
default layer resolved, one synthetic scene explained with gradcam and with
eigencam through `gradcam_cli.explain` (the CLI's own path). The outcome is
`ok`, `blank` (nothing survived the ReLU), `flat` (a constant map) or the
error's first line; with the layer, its layout and token grid, and the time.
Random weights cannot tell a head that timm or torchvision initialise to
zero from a defect, so the head is re-initialised (normal, std 0.02) first.

    python benchmarks/zoo.py                      # every timm module and torchvision family (about 15 minutes)
    python benchmarks/zoo.py --only resnet,vit    # some timm modules
    python benchmarks/zoo.py --readme             # also write the table into README.md (zoo-table markers)
    python benchmarks/zoo.py --rows sweep.err --readme   # the table again from a sweep's JSON lines

A benchmark, not a test: CI tests a sample of layouts (tests/test_models.py).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT))
SIZE_WORDS = ("test", "atto", "femto", "pico", "nano", "micro", "tiny", "xxs", "xs", "mini", "small", "s", "lite", "b0")
START, END = "<!-- zoo-table:start -->", "<!-- zoo-table:end -->"


def smallest(names: list[str]) -> str:
    """The name that reads smallest: the earliest size word (test_, tiny, small...), then the shortest name."""

    def rank(name: str) -> tuple[int, int, str]:
        parts = re.split(r"[_.\-]", name.lower())
        word = min((i for i, w in enumerate(SIZE_WORDS) if w in parts or any(p.startswith(w) and w != "s" for p in parts)),
                   default=len(SIZE_WORDS))  # fmt: skip
        return word, len(name), name

    return min(names, key=rank)


def candidates(only: set[str] | None) -> list[str]:
    """One timm model per module (test_ models excluded where a module has others) and one per torchvision family."""
    import timm
    import torchvision

    chosen = []
    for module in timm.list_modules():
        if only and module not in only:
            continue
        names = [n for n in timm.list_models(module=module) if not n.startswith("test_")] or timm.list_models(module=module)
        if names:
            chosen.append(smallest(names))
    if only is None:
        families: dict[str, list[str]] = {}
        for name in torchvision.models.list_models(module=torchvision.models):
            families.setdefault(re.sub(r"(_?\d.*|_[a-z]+\d.*)$", "", name), []).append(name)
        chosen += [f"torchvision:{smallest(names)}" for names in families.values()]
    return chosen


def explain_one(name: str) -> dict:
    """In the child: build, re-initialise the head, explain one scene with both methods; the row."""
    import numpy as np
    import torch
    from shapes import make_scene

    from gradcam_cli import explain, load_model
    from gradcam_cli.layers.tree import layer_rows
    from gradcam_cli.model.checkpoint import classifier_name

    start = time.perf_counter()
    ready = load_model(name, pretrained=False, device="cpu")
    head = classifier_name(ready.model)
    if head is not None:
        for parameter in dict(ready.model.named_modules())[head].parameters():
            torch.nn.init.normal_(parameter, std=0.02)
    picture, _, _ = make_scene(np.random.default_rng(0), *ready.data_config.input_hw[::-1])
    photo = np.asarray(picture.convert("RGB"))
    row: dict = {"model": name, "source": ready.source.name}
    for method in ("gradcam", "eigencam"):
        shown = explain(photo, ready, method=method)
        row["layer"] = shown.record.layers[0] if shown.record.layers else ""
        flat = float(shown.map.max() - shown.map.min()) < 1e-6
        row[method] = "blank" if shown.targets[0].blank else "flat" if flat else "ok"
    rows = {r.name: r for r in layer_rows(ready.model, ready.data_config.input_hw, [], ready.num_prefix_tokens)}
    described = rows.get(row["layer"])
    row["layout"] = getattr(described, "layout", None) or ""
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def run_one(name: str, timeout: float) -> dict:
    command = [sys.executable, __file__, "--one", name]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"model": name, "gradcam": f"timeout ({timeout:.0f} s)", "eigencam": ""}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode == 0 and lines:
        return json.loads(lines[-1])
    error = next((line for line in reversed(done.stderr.splitlines()) if line.strip()), f"exit {done.returncode}")
    error = re.sub(r"^gradcam_cli\.errors\.\w+: ", "", error.strip())  # the package's own errors: their message only
    return {"model": name, "gradcam": "error: " + error[:160], "eigencam": ""}


def table(rows: list[dict]) -> str:
    lines = ["| model | gradcam | eigencam | default layer | layout | seconds |", "|---|---|---|---|---|---:|"]
    for row in rows:
        cells = [row["model"], row.get("gradcam", ""), row.get("eigencam", ""), f"`{row['layer']}`" if row.get("layer") else "",
                 str(row.get("layout", "")), str(row.get("seconds", ""))]  # fmt: skip
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    ok = sum(row.get("gradcam") == "ok" for row in rows)
    return "\n".join(lines) + f"\n\n{ok} of {len(rows)} explain with their default layer (gradcam, random weights, head re-initialised)."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="comma-separated timm modules (no torchvision)")
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--readme", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=Path, help="render the table from a sweep's JSON lines (its stderr) instead")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(explain_one(args.one)))
        return
    rows = []
    if args.rows:
        rows = [json.loads(line) for line in args.rows.read_text().splitlines() if line.startswith("{")]
        for row in rows:
            row["gradcam"] = re.sub(r"^error: gradcam_cli\.errors\.\w+: ", "error: ", row.get("gradcam", ""))
    for name in [] if args.rows else candidates(set(args.only.split(",")) if args.only else None):
        rows.append(run_one(name, args.timeout))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    text = table(rows)
    print(text)
    if args.readme:
        readme = ROOT / "README.md"
        body = readme.read_text(encoding="utf-8")
        body = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _m: f"{START}\n{text}\n{END}", body, flags=re.S)
        readme.write_text(body, encoding="utf-8")


if __name__ == "__main__":
    main()
