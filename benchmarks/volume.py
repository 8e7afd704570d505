"""Time and peak memory of a 3-D volume through a small 3-D CNN: `gradcam explain scan.nii.gz` against the same job
written with nibabel and pytorch-grad-cam.

One run, the programs alternating, each a fresh process timed end to end
(start-up and model build included, peak RSS from the kernel): a 128x128x128
NIfTI (random intensities like a CT's), a small 3-D CNN (four Conv3d stages,
one input channel, random weights, seeded alike), GradCAM of the top class on
its last stage both ways. Ours writes the map as NIfTI with the scan's affine
and a montage; the reference (below, `--reference`) loads the scan with
nibabel, runs pytorch-grad-cam's GradCAM (which takes 3-D activations) and
saves the map with nibabel and the scan's affine.

    python benchmarks/volume.py                  # 128^3, 2 rounds
    python benchmarks/volume.py --side 96 --rounds 1
    python benchmarks/volume.py --readme         # also write the table into README.md

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
sys.path.insert(0, str(HERE))

from speed import run_timed, write_readme  # noqa: E402 - benchmarks/ is not a package

NET = """
import torch
from torch import nn


def stage(cin, cout):
    return nn.Sequential(nn.Conv3d(cin, cout, 3, padding=1), nn.BatchNorm3d(cout), nn.ReLU(), nn.MaxPool3d(2))


class Small3d(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(stage(1, 8), stage(8, 16), stage(16, 32), stage(32, 64))
        self.head = nn.Sequential(nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(64, 2))

    def forward(self, x):
        return self.head(self.features(x))


def build():
    torch.manual_seed(0)
    return Small3d().eval()
"""


def reference(scan: str, out: str, net_folder: str) -> None:
    """The same job with nibabel and pytorch-grad-cam: load, GradCAM on the last stage, save with the scan's affine."""
    import nibabel
    import torch
    from pytorch_grad_cam import GradCAM

    sys.path.insert(0, net_folder)
    from net import build

    image = nibabel.load(scan)
    data = np.asarray(image.dataobj, dtype=np.float32)
    low, high = np.percentile(data, (0.5, 99.5))
    x = torch.from_numpy(np.clip((data - low) / (high - low), 0, 1).astype(np.float32))[None, None]
    model = build()
    cam = GradCAM(model=model, target_layers=[model.features[-1]])(input_tensor=x, targets=None)[0]
    nibabel.save(nibabel.Nifti1Image(cam.astype(np.float32), image.affine), out)


def measure(side: int, rounds: int) -> dict[str, float]:
    import nibabel

    best: dict[str, float] = {}
    rss: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "net.py").write_text(NET)
        scan = Path(tmp) / "scan.nii.gz"
        data = np.random.default_rng(0).normal(0.0, 300.0, (side, side, side)).astype(np.float32)
        nibabel.save(nibabel.Nifti1Image(data, np.diag([0.8, 0.8, 1.5, 1.0])), str(scan))
        ours = [
            sys.executable, "-m", "gradcam_cli", "explain", str(scan), "--model", f"{tmp}/net.py:build",
            "--input-size", f"{side}x{side}x{side}", "--mean", "0", "--std", "1", "--method", "gradcam",
            "--layer", "features.3", "-o", f"{tmp}/out", "--json", "-q", "--replace",
        ]  # fmt: skip
        theirs = [sys.executable, __file__, "--reference", str(scan), f"{tmp}/ref.nii.gz", tmp]
        for _ in range(rounds):
            for name, command in (("ours", ours), ("ref", theirs)):
                timed = run_timed(command)
                best[name] = min(best.get(name, float("inf")), timed.seconds)
                rss[name] = max(rss.get(name, 0.0), timed.peak_rss_mb)
    return {"ours": best["ours"], "ref": best["ref"], "speedup": best["ref"] / best["ours"], "rss": rss["ours"], "ref_rss": rss["ref"]}


def table(row: dict[str, float], side: int, rounds: int) -> str:
    cpu = platform.processor() or platform.machine()
    return "\n".join([
        f"| a {side}x{side}x{side} NIfTI, a small 3-D CNN | seconds, ours | seconds, nibabel + pytorch-grad-cam | ratio | "
        "peak memory, ours / reference |",
        "|---|---:|---:|---:|---:|",
        f"| GradCAM on the last stage | {row['ours']:.1f} | {row['ref']:.1f} | {row['speedup']:.2f}x | "
        f"{row['rss']:.0f} / {row['ref_rss']:.0f} MB |",
        "",
        f"End to end (start-up, reading, the map written: ours as NIfTI with the scan's affine and a montage, the reference "
        f"as NIfTI), best of {rounds} round(s), each program a fresh process ({cpu}, {os.cpu_count()} cores). Command: "
        f"`python benchmarks/volume.py --side {side} --rounds {rounds}`.",
    ])  # fmt: skip


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--reference":
        reference(*sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--side", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--readme", action="store_true", help="write the table into README.md")
    args = parser.parse_args()
    text = table(measure(args.side, args.rounds), args.side, args.rounds)
    print(text)
    if args.readme:
        write_readme(text, "volume-table")


if __name__ == "__main__":
    main()
