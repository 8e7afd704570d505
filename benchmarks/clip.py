"""Side-by-side speed on a CLIP model: `gradcam explain FOLDER --prompt ...` against the same job written with pytorch-grad-cam.

One run, the programs alternating, each a fresh process timed end to end (start-up and model build included, peak
RSS from the kernel): 224x224 JPEG shapes scenes, each explained against 8 prompts on open_clip's ViT-B-32 with
random weights (seeded alike), GradCAM on the image tower's last block's `ln_1`, one overlay PNG per image and
prompt both ways. Ours: the prompts embedded once per run, one forward per batch of images (-b 8) and a backward per
prompt for the whole batch. The reference (reference_clip.py): pytorch-grad-cam's CLIP example, a forward of the
whole model (image and text towers) and a backward per image and prompt.

Before timing, both programs explain the first images of the folder with their maps saved (.npy) and the maps are
compared: both are GradCAM of the same similarity on the same layer, the square 224x224 images reach the model
unresized both ways (ours stretches the whole image, open_clip resizes the short side and centre-crops: the same
pixels at 224x224), and both normalise each 7x7 map to [0, 1] before the bilinear (half-pixel) upsampling and after.
What remains is float32 rounding (ours batches images and prompts, the reference does not), so the maps must agree
to 1e-4 on their [0, 1] scale; a wrong token, layer, target or resize differs by tenths.

    python benchmarks/clip.py                          # 64 images x 8 prompts, 1 round (the reference: half an hour on 2 cores)
    python benchmarks/clip.py --images 8 --rounds 1
    python benchmarks/clip.py --readme                 # also write the table into README.md (clip-table markers)

Not a test: timings depend on the machine. Prints ratios, which travel better.
"""

from __future__ import annotations

import argparse
import json
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

from speed import Timed, run_timed, write_readme  # noqa: E402 - benchmarks/ is not a package

SIZE = 224  # the model's input: both programs see the photo's own pixels (see the check)
MODEL = "ViT-B-32"
LAYER = "visual.transformer.resblocks.-1.ln_1"  # the reference's model.clip.visual.transformer.resblocks[-1].ln_1
PROMPTS = (
    "a photo of a circle",
    "a photo of a square",
    "a photo of a triangle",
    "a red shape",
    "a blue shape",
    "two shapes on a textured background",
    "a photo of a dog",
    "a photo of a car",
)
TABLE = "clip-table"  # README's <!-- clip-table:start --> ... <!-- clip-table:end -->, written by speed.write_readme
TOLERANCE = 1e-4  # on maps in [0, 1]: float32 rounding only (see the docstring)


def make_scenes(folder: Path, count: int, seed: int = 13) -> None:
    """Shapes scenes of 224x224, one to three shapes each, saved as JPEG (quality 90)."""
    from shapes import make_detection_scene

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(count):
        image, _ = make_detection_scene(rng, SIZE, SIZE)
        image.save(folder / f"scene_{i:05d}.jpg", quality=90)


def ours(folder: Path, out: Path, prompts: tuple[str, ...], batch_size: int, device: str, raw: bool = False) -> list[str]:
    return [
        sys.executable, "-m", "gradcam_cli", "explain", str(folder), "--model", f"open_clip:{MODEL}", "--no-pretrained",
        "--layer", LAYER, "--method", "gradcam", *(f"--prompt={p}" for p in prompts), "--batch-size", str(batch_size),
        "--device", device, "-o", str(out), "--json", "-q", *(["--save-raw"] if raw else []),
    ]  # fmt: skip


def reference(folder: Path, out: Path, prompts: tuple[str, ...], device: str, raw: bool = False) -> list[str]:
    return [
        sys.executable, str(HERE / "reference_clip.py"), str(folder), str(out), *(f"--prompt={p}" for p in prompts),
        "--device", device, *(["--save-raw"] if raw else []),
    ]  # fmt: skip


def our_maps(out: Path) -> dict[tuple[str, int], Path]:
    """(image stem, prompt index) → our raw map, from the records (one per image, a target per prompt)."""
    found = {}
    for line in (out / "records.jsonl").read_text().splitlines():
        record = json.loads(line) if line.strip() else None
        if not record or not record.get("ok"):
            continue
        stem = Path(record["input"]).stem
        for target in record["targets"]:
            found[(stem, int(target["class_index"]))] = Path(target["raw"])
    return found


def pngs(out: Path) -> int:
    return sum(1 for _ in out.rglob("*.png"))


def check(folder: Path, work: Path, images: int, prompts: tuple[str, ...], batch_size: int, device: str) -> dict[str, float]:
    """Both programs on the first `images` scenes, maps saved; the largest difference of prompt k's map of image i."""
    few = work / "check"
    few.mkdir()
    for path in sorted(folder.glob("*.jpg"))[:images]:
        os.link(path, few / path.name)
    run_timed(ours(few, work / "check_ours", prompts, batch_size, device, raw=True))
    run_timed(reference(few, work / "check_ref", prompts, device, raw=True))
    mine = our_maps(work / "check_ours")
    worst, blank, compared = 0.0, 0, 0
    for path in sorted(few.glob("*.jpg")):
        for k in range(len(prompts)):
            theirs = np.load(work / "check_ref" / f"{path.stem}.prompt{k}.npy")
            if (path.stem, k) not in mine:
                raise SystemExit(f"parity check: ours wrote no map for {path.name}, prompt {k} ({prompts[k]!r})")
            ours_map = np.load(mine[(path.stem, k)])
            if ours_map.shape != theirs.shape:
                raise SystemExit(f"parity check: {path.name}, prompt {k}: our map is {ours_map.shape}, the reference's {theirs.shape}")
            worst = max(worst, float(np.abs(ours_map - theirs).max()))
            blank += int(ours_map.max() == 0 and theirs.max() == 0)
            compared += 1
    print(f"parity check: {compared} maps ({blank} blank both ways), max |ours - reference| = {worst:.2e} (tolerance {TOLERANCE:.0e})")
    if worst > TOLERANCE:
        raise SystemExit("parity check failed: the programs do not explain the same thing; not timing them")
    return {"max_diff": worst, "compared": compared, "blank": blank}


def measure(images: int, rounds: int, prompts: tuple[str, ...], batch_size: int, device: str, check_images: int) -> dict[str, float]:
    """The parity check, then best-of-rounds seconds and the largest peak RSS of each program, the programs alternating."""
    best: dict[str, float] = {}
    rss: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        folder = work / "scenes"
        make_scenes(folder, images)
        parity = check(folder, work, min(check_images, images), prompts, batch_size, device) if check_images else {}
        for r in range(rounds):
            for name, command in (
                ("ours", ours(folder, work / f"o{r}", prompts, batch_size, device)),
                ("ref", reference(folder, work / f"r{r}", prompts, device)),
            ):
                timed: Timed = run_timed(command)
                print(f"round {r + 1}, {name}: {timed.seconds:.1f} s, peak RSS {timed.peak_rss_mb:.0f} MB", flush=True)
                best[name] = min(best.get(name, float("inf")), timed.seconds)
                rss[name] = max(rss.get(name, 0.0), timed.peak_rss_mb)
        written = {"ours_pngs": pngs(work / "o0"), "ref_pngs": pngs(work / "r0")}
    if written["ours_pngs"] != written["ref_pngs"] or written["ours_pngs"] != images * len(prompts):
        raise SystemExit(f"the programs wrote {written['ours_pngs']} and {written['ref_pngs']} overlays, not {images * len(prompts)}")
    return {
        "ours_ips": images / best["ours"], "ref_ips": images / best["ref"], "speedup": best["ref"] / best["ours"],
        "ours_rss": rss["ours"], "ref_rss": rss["ref"], **written, **parity,
    }  # fmt: skip


def table(row: dict[str, float], images: int, prompts: int, rounds: int, batch_size: int, command: str) -> str:
    cpu = platform.processor() or platform.machine()
    parity = (
        f"our maps equal the reference's to {row['max_diff']:.0e} on their [0, 1] scale ({row['compared']:.0f} maps checked)"
        if "max_diff" in row
        else "maps not checked"
    )
    lines = [
        f"| {images} images of {SIZE}x{SIZE} x {prompts} prompts | overlays, ours / reference | images/s ours | images/s "
        "pytorch-grad-cam | speed-up | peak memory, ours / reference |",
        "|---|---:|---:|---:|---:|---:|",
        f"| open_clip:{MODEL} | {row['ours_pngs']:.0f} / {row['ref_pngs']:.0f} | {row['ours_ips']:.2f} | {row['ref_ips']:.3f} | "
        f"**{row['speedup']:.1f}x** | {row['ours_rss']:.0f} / {row['ref_rss']:.0f} MB |",
        "",
        f"Random weights (seeded alike), GradCAM on `visual.transformer.resblocks[-1].ln_1` both ways, one overlay per image "
        f"and prompt; ours with `-b {batch_size}` (the prompts embedded once, a backward per prompt for each batch), the "
        f"reference as pytorch-grad-cam's CLIP example (the whole model, text tower included, and a backward per image and "
        f"prompt); {parity}. Best of {rounds} round(s), each program a fresh process ({cpu}, {os.cpu_count()} cores). "
        f"Command: `{command}`.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=len(PROMPTS), help=f"the first N of the {len(PROMPTS)} prompts")
    parser.add_argument("--rounds", type=int, default=1, help="each round runs both programs once")
    parser.add_argument("--batch-size", type=int, default=8, help="ours (-b)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (both programs)")
    parser.add_argument("--check-images", type=int, default=2, help="images in the parity check before timing (0: none)")
    parser.add_argument("--readme", action="store_true", help="write the table into README.md (between the clip-table markers)")
    args = parser.parse_args()
    if args.readme and f"<!-- {TABLE}:start -->" not in (ROOT / "README.md").read_text():
        raise SystemExit(f"README.md has no <!-- {TABLE}:start --> ... <!-- {TABLE}:end --> markers: add them where the table goes")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    prompts = PROMPTS[: args.prompts]
    row = measure(args.images, args.rounds, prompts, args.batch_size, args.device, args.check_images)
    command = " ".join(["python benchmarks/clip.py", *(a for a in sys.argv[1:] if a != "--readme")])
    text = table(row, args.images, len(prompts), args.rounds, args.batch_size, command)
    print(text)
    if args.readme:
        write_readme(text, TABLE)


if __name__ == "__main__":
    main()
