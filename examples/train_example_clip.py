"""Train the offline example CLIP: open_clip's ``CLIP`` (tiny, see ``shapes_clip.py``) on captioned shapes scenes.

Why: explaining a CLIP-style model against prompts needs one whose right
answers are known, without downloading weights.  Scenes from
``shapes.make_detection_scene`` hold one or two shapes of different classes
with known boxes, so the map of "a square" can be checked against where the
square is (``clip_map_check.py``, ``tests/test_example_clip.py``).

Captions are written from each scene's content, a new one every time the
scene is drawn into a batch: one shape is "a star", "a photo of a star.",
"the star", ... (six templates); two shapes are "a square and a circle",
"a circle next to a square", ... (either order, four templates), or, one time
in three, only one of the two ("a circle": still true of the scene).  The
loss is CLIP's (cross-entropy over image-to-text and text-to-image
similarities, averaged, times the model's learnable logit scale, clamped at
100) with one change the captions call for: a batch holds the same caption,
or captions saying the same, many times, so each image's target is spread
evenly over every caption of the batch that is true of it (each shape it
names is in the scene), and each caption's over every image it is true of,
instead of the one it was drawn for.  Each distinct caption of a batch is
encoded once, and every batch also holds the four zero-shot prompts
("a circle", ..., "a star"), so that each image is contrasted with all four
shapes.

Training scenes are 128x128 (the model's input, no resize), flipped left to
right half the time, in three stages as the other example scripts train:
2 epochs on 4000 one-shape scenes with large shapes (45-75 % of the side),
2 epochs on 8000 scenes with shapes of 25-65 %, then 3 epochs on 12000 scenes
at about ``make_detection_scene``'s default sizes (22-45 %); half the scenes
of the last two stages hold two shapes.  Batches of 32, AdamW at 3e-4
(linear warm-up, cosine decay; 1e-3 did not learn in a 400-step trial).  Each epoch
ends with zero-shot accuracy on 400 fresh one-shape scenes from
``shapes.make_scene`` (128x128, default sizes) over the prompts "a circle",
"a square", "a triangle", "a star", and, on 200 fresh two-shape scenes, the
share whose two best prompts are its two shapes.  Nothing moves for the first
stage; the zero-shot accuracy climbs during the second (0.40, 0.62) and is
0.99 after the first epoch of the third.

With the default seed the run is reproducible tensor for tensor on CPU (two
runs gave the same weights; only the order of the file's metadata differs).

Run (measured: 5 min 55 s on 2 CPU cores with little else running, 53 s of
it generating 24,000 scenes; 16 min 1 s on the same cores shared with other
work)::

    python examples/train_example_clip.py

It ends with zero-shot accuracy 0.990 on the 400 one-shape scenes (chance
0.25) and the two best prompts right on 0.990 of the 200 two-shape scenes
(chance 1/6), both with the shipped fp16 weights.  Writes
``examples/shapes_clip_model/shapes_clip.safetensors`` (the state_dict in
fp16: 8.5 MB instead of 17, and ``--weights`` loads it into the fp32 model;
the figures printed at the end are those of the fp16 weights) and
``examples/shapes_clip_model/labels.txt`` (the class names, for
``gradcam explain --labels ... --template "a {}"``).

    python examples/train_example_clip.py --examples

only rewrites the README's two example scenes in ``examples/shapes_clip_scenes/``
(from their own seed, never used in training); it trains nothing.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from safetensors.torch import load_file, save_file

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from shapes import CLASSES, make_detection_scene, make_scene  # noqa: E402
from shapes_clip import CONFIG, MEAN, PROMPT, STD, build, tokenizer  # noqa: E402

OUT_DIR = HERE / "shapes_clip_model"
WEIGHTS = OUT_DIR / "shapes_clip.safetensors"
EXAMPLES_DIR = HERE / "shapes_clip_scenes"
EXAMPLES_SEED = 2026  # the example scenes' own stream; training uses SEED, +1, +3, +10, +20
EXAMPLES = (("circle", "square"), ("circle", "star"))  # the README's picture: the first scene holding each pair
SEED = 20240907
SIZE = CONFIG["vision_cfg"]["image_size"]
# (name, scenes, epochs, shape sizes as fractions of the side, share of scenes with two shapes)
STAGES = (
    ("large", 4000, 2, (0.45, 0.75), 0.0),
    ("mixed", 8000, 2, (0.25, 0.65), 0.5),
    ("target", 12000, 3, (0.22, 0.45), 0.5),
)
ONE = ("a {}", "a {}.", "a photo of a {}.", "a picture of a {}", "the {}", "one {}")
TWO = ("a {} and a {}", "a {} next to a {}", "a photo of a {} and a {}.", "{} and {}")
ONLY_ONE_OF_TWO = 1 / 3  # a two-shape scene's caption names one of them this often

Scenes = tuple[torch.Tensor, list[tuple[int, ...]]]  # uint8 (N, 3, H, W) images; each scene's classes


def scene_classes(
    rng: np.random.Generator, count: int, size_range: tuple[float, float], size: int = SIZE
) -> tuple[Image.Image, list[tuple[int, tuple[int, int, int, int]]]]:
    """A ``size`` x ``size`` detection scene with ``count`` shapes of different classes (redrawn until they differ;
    fewer when they do not fit): ``(image, [(class, box), ...])``."""
    while True:
        image, objects = make_detection_scene(rng, size, size, count_range=(count, count), size_range=size_range)
        if len({cls for cls, _ in objects}) == len(objects):
            return image, objects


def _make_chunk(args: tuple) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """``n`` scenes from an independent, reproducible stream: uint8 NHWC images and each one's classes."""
    seed, chunk, n, size_range, two = args
    rng = np.random.default_rng([seed, chunk])
    images, classes = [], []
    for _ in range(n):
        image, objects = scene_classes(rng, 2 if rng.random() < two else 1, size_range)
        images.append(np.asarray(image))
        classes.append(tuple(cls for cls, _ in objects))
    return np.stack(images), classes


def make_dataset(pool: Any, seed: int, n: int, size_range: tuple[float, float], two: float, chunk: int = 250) -> Scenes:
    """``n`` scenes, a share ``two`` of them with two shapes, made by ``pool``; identical for a given seed."""
    jobs = [(seed, c, min(chunk, n - c * chunk), size_range, two) for c in range((n + chunk - 1) // chunk)]
    parts = pool.map(_make_chunk, jobs)
    images = torch.from_numpy(np.concatenate([p[0] for p in parts])).permute(0, 3, 1, 2).contiguous()
    return images, [c for p in parts for c in p[1]]


def normalise(images: torch.Tensor) -> torch.Tensor:
    """uint8 (N, 3, H, W) to the model's input: [0, 1], then (x - mean) / std."""
    mean, std = torch.tensor(MEAN).view(1, 3, 1, 1), torch.tensor(STD).view(1, 3, 1, 1)
    # channels_last: the stem's convolutions take a third of the time or less (as in train_example_segmenter.py)
    return ((images.float() / 255 - mean) / std).contiguous(memory_format=torch.channels_last)


def caption(rng: np.random.Generator, classes: tuple[int, ...]) -> tuple[str, frozenset[int]]:
    """A caption true of a scene holding ``classes`` (distinct), and the classes it names."""
    names = [CLASSES[c] for c in classes]
    if len(names) == 1 or rng.random() < ONLY_ONE_OF_TWO:
        k = int(rng.integers(len(names)))
        return ONE[int(rng.integers(len(ONE)))].format(names[k]), frozenset([classes[k]])
    order = rng.permutation(len(names))
    return TWO[int(rng.integers(len(TWO)))].format(*(names[i] for i in order)), frozenset(classes)


def clip_loss(model: Any, images: torch.Tensor, classes: list[tuple[int, ...]], rng: np.random.Generator, tok: Any) -> torch.Tensor:
    """CLIP's symmetric cross-entropy, each row's target spread over the batch's texts (columns' over images) true of it."""
    drawn = [caption(rng, c) for c in classes] + [(PROMPT.format(name), frozenset([k])) for k, name in enumerate(CLASSES)]
    texts = sorted({text for text, _ in drawn})
    named = {text: names for text, names in drawn}
    img = model.encode_image(images, normalize=True)
    txt = model.encode_text(tok(texts), normalize=True)
    logits = model.logit_scale.exp() * img @ txt.T  # (images, distinct texts)
    truth = torch.tensor([[float(named[t] <= set(c)) for t in texts] for c in classes])
    to_text = -(truth / truth.sum(1, keepdim=True) * logits.log_softmax(1)).sum(1).mean()
    shown = truth.sum(0) > 0  # a plain prompt whose shape no scene of the batch holds has no image to pick
    to_image = -(truth[:, shown] / truth[:, shown].sum(0) * logits[:, shown].log_softmax(0)).sum(0).mean()
    return (to_text + to_image) / 2


@torch.inference_mode()
def evaluate(model: Any, single: Scenes, double: Scenes, tok: Any) -> dict[str, float]:
    """Zero-shot accuracy on one-shape scenes over ``PROMPT`` of each class; on two-shape scenes, the share whose
    two best prompts are its two shapes."""
    model.eval()
    txt = model.encode_text(tok([PROMPT.format(c) for c in CLASSES]), normalize=True)
    out = {}
    for key, (images, classes) in (("zero_shot", single), ("two_best", double)):
        sims = torch.cat([model.encode_image(normalise(images[i : i + 100]), normalize=True) @ txt.T for i in range(0, len(images), 100)])
        best = sims.topk(2, dim=1).indices.tolist()
        if key == "zero_shot":
            out[key] = float(np.mean([b[0] == c[0] for b, c in zip(best, classes)]))
        else:
            out[key] = float(np.mean([set(b) == set(c) for b, c in zip(best, classes)]))
    model.train()
    return out


def validation_sets(seed: int, n: int) -> tuple[Scenes, Scenes]:
    """Fresh scenes at the default shape sizes: ``n`` from ``make_scene`` (one shape), ``n // 2`` with two shapes."""
    rng = np.random.default_rng(seed)
    images: list[np.ndarray] = []
    classes: list[tuple[int, ...]] = []
    for _ in range(n):
        image, cls, _ = make_scene(rng, SIZE, SIZE)
        images.append(np.asarray(image))
        classes.append((cls,))
    single = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous(), classes
    images, classes = [], []
    while len(images) < n // 2:
        image, objects = scene_classes(rng, 2, (0.22, 0.38))
        if len(objects) == 2:
            images.append(np.asarray(image))
            classes.append(tuple(cls for cls, _ in objects))
    return single, (torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous(), classes)


def run_epoch(
    model: Any, data: Scenes, opt: Any, sched: Any, batch: int, gen: torch.Generator, rng: np.random.Generator, tok: Any
) -> float:
    """One pass over ``data`` in random order, each scene flipped left to right half the time; returns the mean loss."""
    images, classes = data
    perm = torch.randperm(len(images), generator=gen)
    flips = torch.rand(len(images), generator=gen) < 0.5
    total = 0.0
    for i in range(0, len(images) - batch + 1, batch):  # whole batches only: a contrastive loss wants its negatives
        idx = perm[i : i + batch]
        x = normalise(images[idx])
        x = torch.where(flips[idx].view(-1, 1, 1, 1), x.flip(-1), x).contiguous(memory_format=torch.channels_last)
        loss = clip_loss(model, x, [classes[j] for j in idx.tolist()], rng, tok)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        with torch.no_grad():
            model.logit_scale.clamp_(0, math.log(100))  # as open_clip's training clamps it
        total += float(loss.detach()) * len(idx)
    return total / (len(images) // batch * batch)


def _optimizer(model: torch.nn.Module, lr: float, steps: int) -> tuple[torch.optim.Optimizer, Any]:
    """AdamW, no weight decay on norms, biases, embeddings and the logit scale; linear warm-up then cosine to 2 %."""
    decay: list[torch.nn.Parameter] = []
    rest: list[torch.nn.Parameter] = []
    for name, p in model.named_parameters():
        (decay if p.ndim >= 2 and "embedding" not in name else rest).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": rest, "weight_decay": 0.0}], lr=lr)
    warm = min(100, steps // 10)
    sched = torch.optim.lr_scheduler.SequentialLR(
        opt,
        [
            torch.optim.lr_scheduler.LinearLR(opt, 0.05, 1.0, total_iters=warm),
            torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps - warm, eta_min=lr * 0.02),
        ],
        milestones=[warm],
    )
    return opt, sched


def save(model: torch.nn.Module, metrics: dict[str, float], seed: int) -> None:
    """Weights as fp16 safetensors (plain state_dict keys) plus labels.txt."""
    OUT_DIR.mkdir(exist_ok=True)
    state = {k: v.detach().half().contiguous() if v.is_floating_point() else v.contiguous() for k, v in model.state_dict().items()}
    meta = {"model": "shapes-clip", "classes": ",".join(CLASSES), "seed": str(seed), "input": f"{SIZE}x{SIZE}", "prompt": PROMPT}
    meta.update({k: f"{v:.4f}" for k, v in metrics.items()})
    save_file(state, str(WEIGHTS), metadata=meta)
    (OUT_DIR / "labels.txt").write_text("\n".join(CLASSES) + "\n")


def write_examples(out_dir: Path = EXAMPLES_DIR, seed: int = EXAMPLES_SEED) -> list[str]:
    """The README's example scenes: 256x256, for each pair of :data:`EXAMPLES` the first two-shape scene of ``seed``'s
    stream holding those two shapes (default shape sizes), as ``circle_square.png`` and so on.  Picked by what they
    hold, never by their maps.  Returns the names written."""
    rng = np.random.default_rng(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    wanted = {frozenset(CLASSES.index(name) for name in pair): "_".join(pair) for pair in EXAMPLES}
    names = []
    while wanted:
        image, objects = make_detection_scene(rng, 256, 256, count_range=(2, 2))
        name = wanted.pop(frozenset(cls for cls, _ in objects), None) if len(objects) == 2 else None
        if name is not None:
            image.save(out_dir / f"{name}.png")
            names.append(name)
    return names


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--examples", action="store_true", help="only rewrite examples/shapes_clip_scenes/ (no training)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every stage's scene count (a quick trial: 0.1)")
    ap.add_argument("--n-val", type=int, default=400, help="one-shape validation scenes (and half as many two-shape ones)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--seed", type=int, default=SEED)
    return ap.parse_args()


def main() -> None:
    args = _args()
    if args.examples:
        names = write_examples()
        print(f"wrote {len(names)} scenes to {EXAMPLES_DIR.relative_to(HERE.parent)}: {', '.join(names)}")
        return
    t0 = time.time()
    torch.manual_seed(args.seed)
    torch.set_num_threads(2)
    model = build().to(memory_format=torch.channels_last)
    model.train()
    tok = tokenizer()
    with mp.get_context("spawn").Pool(2) as pool:  # one pool: each worker imports torch once
        data = [make_dataset(pool, args.seed + 10 * k, max(args.batch_size, round(n * args.scale)), sizes, two)
                for k, (_, n, _, sizes, two) in enumerate(STAGES)]  # fmt: skip
    single, double = validation_sets(args.seed + 1, args.n_val)
    counts = " + ".join(str(len(d[1])) for d in data)
    print(f"data: {counts} train / {len(single[1])} + {len(double[1])} val scenes in {time.time() - t0:.0f}s")

    bs = args.batch_size
    steps = sum(epochs * (len(d[1]) // bs) for (_, _, epochs, _, _), d in zip(STAGES, data))
    opt, sched = _optimizer(model, args.lr, steps)
    gen = torch.Generator().manual_seed(args.seed)
    rng = np.random.default_rng(args.seed + 3)  # the captions
    for (stage, _, epochs, _, _), scenes in zip(STAGES, data):
        for epoch in range(epochs):
            loss = run_epoch(model, scenes, opt, sched, bs, gen, rng, tok)
            m = evaluate(model, single, double, tok)
            scale = float(model.logit_scale.detach().exp())
            print(
                f"{stage} {epoch + 1}/{epochs}: loss {loss:.3f}  logit scale {scale:.1f}  zero-shot {m['zero_shot']:.3f}"
                f"  two best {m['two_best']:.3f}  ({time.time() - t0:.0f}s)",
                flush=True,
            )
            save(model, m, args.seed)  # a usable file even if the run is cut short

    shipped = build()
    shipped.load_state_dict(load_file(str(WEIGHTS)), strict=True)  # fp16 into fp32, as --weights loads it
    m = evaluate(shipped, single, double, tok)
    save(model, m, args.seed)
    print(f"shipped fp16 weights on {len(single[1])} one-shape scenes: zero-shot accuracy {m['zero_shot']:.3f} (chance 0.25);")
    print(f"  on {len(double[1])} two-shape scenes, the two best prompts are the two shapes: {m['two_best']:.3f} (chance 1/6)")
    print(f"saved {WEIGHTS.relative_to(HERE.parent)} ({WEIGHTS.stat().st_size / 1e6:.2f} MB); total time {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
