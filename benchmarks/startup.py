"""Time to the first overlay: a one-image `gradcam explain`, phase by phase, against the floor and pytorch-grad-cam.

For each model, in alternating rounds, each a fresh process timed end to end:
- `python -c "import torch"`, the first part of the floor;
- `gradcam explain IMG --model M --weights M.safetensors` (the path a pretrained or fine-tuned model takes),
  its phases read from the stamps the run writes where GRADCAM_TIMINGS says (gradcam_cli/timings.py);
- the same with `--no-pretrained` (random weights, initialised as the hub does);
- pytorch-grad-cam's README loop on the same image and weights (benchmarks/reference_gradcam.py).
Then, in this process, the second part of the floor: one forward and backward of the same model on one
image, warm (the median of 5 after 2 unmeasured). The floor is their sum: what no program that imports
torch and runs the model once can beat. Last, the commands a user looks things up with (`--help`,
`methods`, `layers`).

    python benchmarks/startup.py                      # resnet50, vit_base_patch16_224, convnext_tiny; 5 rounds
    python benchmarks/startup.py --models resnet50 --rounds 3
    python benchmarks/startup.py --readme             # also write the tables into README.md

Not a test: timings depend on the machine (and on what of the libraries its page cache holds: the
first round is run and dropped). Prints ratios, which travel better.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from speed import make_images, write_readme  # noqa: E402 - the benchmarks share their helpers

MODELS = ("resnet50", "vit_base_patch16_224", "convnext_tiny")
PHASES = (  # the stamp that ends each phase, and its name in the table
    ("interpreter", "interpreter"),
    ("imports", "imports"),
    ("build", "build"),
    ("weights", "weights"),
    ("ready", "layers, classes"),
    ("first batch", "first batch"),
    ("written", "write"),
)


def gradcam_command() -> list[str]:
    """The console script a user runs, beside this Python; else the module."""
    script = Path(sys.executable).parent / "gradcam"
    return [str(script)] if script.exists() else [sys.executable, "-m", "gradcam_cli"]


def timed(command: list[str], env: dict[str, str] | None = None) -> float:
    """Wall seconds of a fresh process, which must succeed."""
    start = time.time()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=False)
    seconds = time.time() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr.decode()[-2000:]}")
    return seconds


def phased(command: list[str], stamps: Path) -> dict[str, float]:
    """The run's phases in seconds (each from the end of the one before; `exit` after the last overlay) and `total`."""
    stamps.unlink(missing_ok=True)
    start = time.time()
    total = timed(command, env={**os.environ, "GRADCAM_TIMINGS": str(stamps)})
    marks = json.loads(stamps.read_text())
    phases, before = {}, start
    for stamp, _ in PHASES:
        if stamp in marks:
            phases[stamp] = marks[stamp] - before
            before = marks[stamp]
    phases["exit"] = start + total - before
    phases["total"] = total
    return phases


def save_weights(model: str, path: Path) -> None:
    """The model's timm weights (random, seeded) as a .safetensors file, as a fine-tuned checkpoint would come."""
    import timm
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(0)
    net = timm.create_model(model, pretrained=False)
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(path))


def warm_forward_backward(model: str, weights: Path, repeats: int = 5) -> float:
    """Seconds for one forward and backward of one image through the model, warm: the run's own work, done bare."""
    import timm
    import torch
    from safetensors.torch import load_file

    net = timm.create_model(model, pretrained=False).eval()
    net.load_state_dict(load_file(str(weights)))
    size = net.pretrained_cfg["input_size"][1:]

    def once() -> float:
        start = time.perf_counter()
        scores = net(torch.rand(1, 3, *size))
        scores[0, scores.argmax()].backward()
        net.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    once(), once()
    return median(once() for _ in range(repeats))


def benchmark_model(model: str, image_folder: Path, tmp: Path, rounds: int) -> dict:
    """Every program on this model, alternating, round after round; the medians of the rounds kept."""
    weights = tmp / f"{model}.safetensors"
    save_weights(model, weights)
    image = next(image_folder.glob("*.jpg"))
    reference = importlib.util.find_spec("pytorch_grad_cam") is not None
    ours = [*gradcam_command(), "explain", str(image), "--model", model, "-q", "--replace"]
    runs: dict[str, list] = {"torch": [], "weights": [], "random": [], "reference": []}
    for r in range(rounds + 1):  # round 0 fills the page cache and is dropped
        keep = r > 0
        seconds = timed([sys.executable, "-c", "import torch"])
        phases_w = phased([*ours, "--weights", str(weights), "-o", str(tmp / "out_w")], tmp / "stamps.json")
        phases_r = phased([*ours, "--no-pretrained", "-o", str(tmp / "out_r")], tmp / "stamps.json")
        ref = None
        if reference:
            out = tmp / "out_ref"
            shutil.rmtree(out, ignore_errors=True)
            command = [sys.executable, str(HERE / "reference_gradcam.py"), str(image_folder), str(out), "--model", model]
            ref = timed([*command, "--weights", str(weights)])
        if keep:
            runs["torch"].append(seconds)
            runs["weights"].append(phases_w)
            runs["random"].append(phases_r)
            runs["reference"].append(ref)
    work = warm_forward_backward(model, weights)
    return {
        "model": model,
        "import_torch": median(runs["torch"]),
        "forward_backward": work,
        "weights": _median_phases(runs["weights"]),
        "random": _median_phases(runs["random"]),
        "reference": median(runs["reference"]) if reference else None,
    }


def _median_phases(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: median(run[key] for run in runs) for key in runs[0]}


def lookup_commands(rounds: int) -> list[tuple[str, float]]:
    """The commands a user looks things up with, and `python -c pass` for scale: median seconds."""
    commands = [
        ("python -c pass", [sys.executable, "-c", "pass"]),
        ("python -c 'import torch'", [sys.executable, "-c", "import torch"]),
        ("gradcam --help", [*gradcam_command(), "--help"]),
        ("gradcam explain --help", [*gradcam_command(), "explain", "--help"]),
        ("gradcam methods", [*gradcam_command(), "methods"]),
        ("gradcam layers resnet50", [*gradcam_command(), "layers", "resnet50"]),
    ]
    times: dict[str, list[float]] = {name: [] for name, _ in commands}
    for _ in range(rounds):
        for name, command in commands:
            times[name].append(timed(command))
    return [(name, median(values)) for name, values in times.items()]


def _s(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds:.2f}"


def table(results: list[dict], rounds: int, command: str) -> str:
    """The phases of each run, the floor, and the ratios, as a README table."""
    import torch

    names = [name for _, name in PHASES]
    lines = [
        f"| model | run | {' | '.join(names)} | exit | **total** | floor | total / floor | pytorch-grad-cam | its time / ours |",
        "|---|---|" + "---|" * (len(names) + 6),
    ]
    for result in results:
        floor = result["import_torch"] + result["forward_backward"]
        for run, label in (("weights", "`--weights`"), ("random", "`--no-pretrained`")):
            phases = result[run]
            cells = [_s(phases.get(stamp)) for stamp, _ in PHASES]
            with_weights = run == "weights"
            ref = result["reference"] if with_weights else None
            speedup = f"{ref / phases['total']:.2f}x" if ref else "–"
            lines.append(
                f"| {result['model']} | {label} | {' | '.join(cells)} | {_s(phases['exit'])} | **{phases['total']:.2f}** | "
                f"{floor:.2f} ({result['import_torch']:.2f} + {result['forward_backward']:.2f}) | "
                f"**{phases['total'] / floor:.2f}x** | {_s(ref)} | {speedup} |"
            )
    lines.append("")
    lines.append(
        f"Seconds, the median of {rounds} alternating rounds (a first one dropped), one 800x600 JPEG; each phase runs "
        "from the end of the one before: `interpreter` is Python and the command line, `imports` torch, timm and "
        "torchvision, `weights` the checkpoint read and loaded, `layers, classes` the target layer, classes and "
        'device, `exit` the records and the process\'s end. The floor is `python -c "import torch"` plus one warm '
        "forward and backward of the same model on one image. pytorch-grad-cam: its README's loop "
        "(benchmarks/reference_gradcam.py) on the same image and weights, a fresh process. "
        f"{os.cpu_count()} CPU cores ({platform.machine()}), {torch.get_num_threads()} threads, torch {torch.__version__}. "
        f"Command: `{command}`."
    )
    return "\n".join(lines)


def lookup_table(rows: list[tuple[str, float]], rounds: int) -> str:
    lines = ["| command | seconds |", "|---|---|"]
    lines += [f"| `{name}` | {seconds:.2f} |" for name, seconds in rows]
    lines += ["", f"The median of {rounds} rounds, the same machine; `layers` builds the model with random weights."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--readme", action="store_true", help="write the tables into README.md")
    args = parser.parse_args()
    command = "python benchmarks/startup.py" + ("" if args.models == list(MODELS) else f" --models {' '.join(args.models)}")
    command += "" if args.rounds == 5 else f" --rounds {args.rounds}"
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        images = tmp / "images"
        make_images(images, 1)
        results = []
        for model in args.models:
            results.append(benchmark_model(model, images, tmp, args.rounds))
            print(f"{model}: done", file=sys.stderr)
    text = table(results, args.rounds, command)
    lookups = lookup_table(lookup_commands(args.rounds), args.rounds)
    print(text, "", lookups, sep="\n")
    if args.readme:
        write_readme(text, "startup-table")
        write_readme(lookups, "lookup-table")


if __name__ == "__main__":
    main()
