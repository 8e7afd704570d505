"""Train the tiny offline example model: timm ``test_resnet`` on synthetic shapes.

Why: the CLI needs a classifier whose "right answer" for a heat map is known,
without downloading weights.  Scenes from ``shapes.make_scene`` have one shape
with a known bounding box, so Grad-CAM can be checked (see
``pointing_game_check.py``).

Preprocessing is exactly the CLI default: squash-resize the whole scene to the
model input size (no crop), then normalise with the model's own data config.
Scene sizes and aspect ratios vary so the model sees squashed shapes.

Run (about 5-8 minutes on 2 CPU cores):

    python examples/train_example_model.py

Writes ``examples/shapes_model/shapes_test_resnet.safetensors`` (plain timm
state_dict keys) and ``examples/shapes_model/labels.txt``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from pathlib import Path

import numpy as np
import timm
import torch
import torch.nn.functional as F
from PIL import Image
from safetensors.torch import save_file

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from shapes import CLASSES, make_scene  # noqa: E402

MODEL_NAME = "test_resnet"
OUT_DIR = HERE / "shapes_model"
WEIGHTS = OUT_DIR / "shapes_test_resnet.safetensors"
SEED = 20240601
SIZE_RANGE = (0.22, 0.38)  # as make_scene's default
WARMUP_SIZE_RANGE = (0.45, 0.75)

_PIL_INTERP = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "nearest": Image.NEAREST}


def _random_size(rng: np.random.Generator) -> tuple[int, int]:
    """Random scene size with aspect ratio between 1:2 and 2:1."""
    short = int(rng.integers(160, 321))
    aspect = float(np.exp(rng.uniform(np.log(0.5), np.log(2.0))))
    w, h = (int(short * aspect), short) if aspect >= 1 else (short, int(short / aspect))
    return max(w, 32), max(h, 32)


def _make_chunk(args: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Generate ``n`` resized scenes from an independent, reproducible stream."""
    seed, chunk, n, size, interp, size_range = args
    rng = np.random.default_rng([seed, chunk])
    xs = np.empty((n, size, size, 3), np.uint8)
    ys = np.empty(n, np.int64)
    for i in range(n):
        img, cls, _ = make_scene(rng, *_random_size(rng), size_range=size_range)
        xs[i] = np.asarray(img.resize((size, size), _PIL_INTERP.get(interp, Image.BILINEAR)))
        ys[i] = cls
    return xs, ys


def make_dataset(
    seed: int, n: int, size: int, interp: str, size_range: tuple[float, float] = SIZE_RANGE, chunk: int = 250
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` scenes as uint8 NHWC + labels; identical for a given seed."""
    jobs = [(seed, c, min(chunk, n - c * chunk), size, interp, size_range) for c in range((n + chunk - 1) // chunk)]
    with mp.get_context("spawn").Pool(2) as pool:
        parts = pool.map(_make_chunk, jobs)
    xs = np.concatenate([p[0] for p in parts])
    ys = np.concatenate([p[1] for p in parts])
    return torch.from_numpy(xs), torch.from_numpy(ys)


def to_input(x_u8: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """uint8 NHWC -> normalised float NCHW, as the CLI feeds the model."""
    x = x_u8.permute(0, 3, 1, 2).float().div_(255.0)
    return (x - mean) / std


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n-warmup", type=int, default=4000, help="scenes with large shapes (stage 1)")
    ap.add_argument("--warmup-epochs", type=int, default=6)
    ap.add_argument("--n-train", type=int, default=10000, help="scenes at the target size (stage 2)")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--n-val", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=SEED)
    args = ap.parse_args()

    t0 = time.time()
    torch.manual_seed(args.seed)
    torch.set_num_threads(2)
    model = timm.create_model(MODEL_NAME, pretrained=False, num_classes=len(CLASSES))
    cfg = timm.data.resolve_model_data_config(model)
    size = cfg["input_size"][-1]
    interp = cfg["interpolation"]
    mean = torch.tensor(cfg["mean"]).view(1, 3, 1, 1)
    std = torch.tensor(cfg["std"]).view(1, 3, 1, 1)

    # Curriculum: from scratch, this tiny CNN sits at chance for hundreds of
    # steps on small shapes; large shapes get it off the plateau quickly.
    xwu, ywu = make_dataset(args.seed + 2, args.n_warmup, size, interp, WARMUP_SIZE_RANGE)
    xtr, ytr = make_dataset(args.seed, args.n_train, size, interp)
    xva, yva = make_dataset(args.seed + 1, args.n_val, size, interp)
    print(f"data: {len(xwu)} warm-up + {len(xtr)} train / {len(xva)} val scenes in {time.time() - t0:.0f}s", flush=True)

    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    gen = torch.Generator().manual_seed(args.seed)

    def evaluate() -> float:
        model.eval()
        correct = 0
        with torch.inference_mode():
            for i in range(0, len(xva), 200):
                correct += (model(to_input(xva[i : i + 200], mean, std)).argmax(1) == yva[i : i + 200]).sum().item()
        return correct / len(xva)

    def run_epoch(x: torch.Tensor, y: torch.Tensor, sched=None) -> float:
        model.train()
        perm = torch.randperm(len(x), generator=gen)
        tot = 0.0
        for i in range(0, len(x), args.batch_size):
            idx = perm[i : i + args.batch_size]
            loss = F.cross_entropy(model(to_input(x[idx], mean, std)), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step()
            tot += loss.item() * len(idx)
        return tot / len(x)

    for epoch in range(args.warmup_epochs):
        loss = run_epoch(xwu, ywu)
        print(f"warm-up {epoch + 1}/{args.warmup_epochs}: loss {loss:.3f}  val acc {evaluate():.3f}  ({time.time() - t0:.0f}s)", flush=True)
    steps = args.epochs * ((len(xtr) + args.batch_size - 1) // args.batch_size)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps, eta_min=args.lr * 0.02)
    for epoch in range(args.epochs):
        loss = run_epoch(xtr, ytr, sched)
        print(f"epoch {epoch + 1}/{args.epochs}: loss {loss:.3f}  val acc {evaluate():.3f}  ({time.time() - t0:.0f}s)", flush=True)

    acc = evaluate()
    OUT_DIR.mkdir(exist_ok=True)
    model.eval()
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(
        state, str(WEIGHTS), metadata={"model": MODEL_NAME, "classes": ",".join(CLASSES), "val_acc": f"{acc:.4f}", "seed": str(args.seed)}
    )
    (OUT_DIR / "labels.txt").write_text("\n".join(CLASSES) + "\n")
    print(f"final validation accuracy: {acc:.4f}")
    print(f"saved {WEIGHTS.relative_to(HERE.parent)} ({WEIGHTS.stat().st_size / 1e6:.2f} MB); total time {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
