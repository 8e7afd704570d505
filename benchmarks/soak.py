"""Soak test: thousands of small images through one `gradcam explain` process.

    python benchmarks/soak.py                 # 5,000 images (about 1% broken), batch 32
    python benchmarks/soak.py --count 500     # a quicker run while developing

Generates a folder of small PNG and JPEG images with a few deliberately broken
files among them (zero-byte, truncated, not an image at all), runs

    python -m gradcam_cli explain FOLDER --model test_resnet --no-pretrained -b 32 --json -o OUT

as a child process, samples the child's RSS (VmRSS in /proc/PID/status) every
0.5 s alongside how many records it has printed, and checks:

* memory is flat: the peak RSS over the last 10% of the records is within 10%
  of the peak over the 10%-20% window (after the warm-up: imports, model build,
  the first batches and the worker threads' buffers);
* every input is accounted for exactly once: the set of `input` paths of the
  records is the set of generated files, and no input has two records;
* the counts add up: ok + failed == inputs, failed == the broken files (and
  exactly those), one overlay per ok record under the output folder;
* the exit code is 1 when broken files exist (0 otherwise).

Prints a short report; exits 1 if any check fails. Linux only (reads /proc).
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]


def make_images(folder: Path, count: int, broken_every: int, seed: int = 0) -> tuple[list[Path], set[Path]]:
    """`count` files of 64x48 (PNG and JPEG alternately); every `broken_every`-th is broken, in turn
    zero bytes, truncated to a third, or text with an image suffix."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths, broken = [], set()
    kinds = ("zero-byte", "truncated", "not-an-image")
    for i in range(count):
        suffix = ".png" if i % 2 == 0 else ".jpg"
        path = folder / f"img_{i:05d}{suffix}"
        small = rng.integers(0, 256, size=(6, 8, 3), dtype=np.uint8)
        image = Image.fromarray(small).resize((64, 48), Image.BILINEAR)
        buffer = io.BytesIO()
        image.save(buffer, format="PNG" if suffix == ".png" else "JPEG", quality=90)
        data = buffer.getvalue()
        if broken_every and i % broken_every == broken_every // 2:
            kind = kinds[len(broken) % len(kinds)]
            data = b"" if kind == "zero-byte" else data[: len(data) // 3] if kind == "truncated" else b"hello\n"
            broken.add(path.resolve())
        path.write_bytes(data)
        paths.append(path.resolve())
    return paths, broken


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def run_child(
    folder: Path, out: Path, batch: int, stdout_path: Path, stderr_path: Path, interval: float
) -> tuple[int, list[tuple[float, int, float]], float]:
    """Run the CLI; samples are (seconds since start, records printed so far, RSS MB)."""
    env = dict(os.environ)
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"})
    command = [
        sys.executable,
        "-m",
        "gradcam_cli",
        "explain",
        str(folder),
        "--model",
        "test_resnet",
        "--no-pretrained",
        "-b",
        str(batch),
        "--json",
        "-o",
        str(out),
    ]
    samples: list[tuple[float, int, float]] = []
    start = time.perf_counter()
    with open(stdout_path, "wb") as stdout, open(stderr_path, "wb") as stderr:
        child = subprocess.Popen(command, stdout=stdout, stderr=stderr, cwd=ROOT, env=env)
        with open(stdout_path, "rb") as reader:
            lines = 0
            while True:
                code = child.poll()
                mb = rss_mb(child.pid) if code is None else None
                lines += reader.read().count(b"\n")
                if mb is not None:
                    samples.append((time.perf_counter() - start, lines, mb))
                if code is not None:
                    break
                time.sleep(interval)
    return child.returncode, samples, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=5000, help="images to generate (default 5000)")
    parser.add_argument("--broken-every", type=int, default=100, help="one broken file in N (default 100: 1%%)")
    parser.add_argument("--batch", type=int, default=32, help="-b for gradcam explain (default 32)")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between RSS samples")
    parser.add_argument("--tolerance", type=float, default=0.10, help="allowed RSS growth, end vs warm (0.10)")
    parser.add_argument("--workdir", type=Path, help="where to put the images and outputs (default: a temp folder)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="gradcam-soak-") as temp:
        work = (args.workdir or Path(temp)).resolve()
        folder, out = work / "images", work / "out"
        t0 = time.perf_counter()
        paths, broken = make_images(folder, args.count, args.broken_every)
        made = time.perf_counter() - t0
        print(f"generated {len(paths)} images ({len(broken)} broken) in {made:.1f} s under {folder}")
        code, samples, wall = run_child(folder, out, args.batch, work / "stdout.jsonl", work / "stderr.txt", args.interval)
        records = [json.loads(line) for line in (work / "stdout.jsonl").read_text().splitlines() if line.strip()]
        stderr_tail = (work / "stderr.txt").read_text(errors="replace").strip().splitlines()[-1:]
        overlays = sum(1 for _ in out.rglob("*.png")) if out.exists() else 0
        return report(args, paths, broken, code, samples, wall, records, stderr_tail, overlays)


def report(args, paths, broken, code, samples, wall, records, stderr_tail, overlays) -> int:
    n = len(paths)
    failures: list[str] = []

    def check(ok: bool, what: str) -> None:
        print(f"  [{'ok' if ok else 'FAIL'}] {what}")
        if not ok:
            failures.append(what)

    inputs = collections.Counter(Path(r["input"]).resolve() for r in records)
    ok_records = [r for r in records if r["ok"]]
    failed = {Path(r["input"]).resolve() for r in records if not r["ok"]}
    first_record = next((t for t, lines, _ in samples if lines > 0), None)
    warm = [mb for _, lines, mb in samples if 0.10 * n <= lines < 0.20 * n]
    end = [mb for _, lines, mb in samples if lines >= 0.90 * n]
    peak = max((mb for *_, mb in samples), default=float("nan"))
    steady = (n - 1) / (wall - first_record) if first_record and wall > first_record else float("nan")

    print(
        f"\n{n} inputs, batch {args.batch}: exit code {code}, {wall:.1f} s wall "
        f"(first record after {first_record or float('nan'):.1f} s, then {steady:.1f} images/s), "
        f"{len(samples)} RSS samples"
    )
    if stderr_tail:
        print(f"  stderr: {stderr_tail[0]}")
    if warm and end:
        print(
            f"  RSS: peak {max(warm):.1f} MB over records 10-20%, peak {max(end):.1f} MB over the last 10%, "
            f"final {end[-1]:.1f} MB, overall peak {peak:.1f} MB"
        )
    print(f"  records: {len(records)} ({len(ok_records)} ok, {len(failed)} failed), {overlays} overlays written")
    print("checks:")
    if warm and end:
        growth = max(end) / max(warm) - 1.0
        check(growth <= args.tolerance, f"RSS flat: last 10% peak within {args.tolerance:.0%} of the 10-20% peak ({growth:+.1%})")
    else:
        check(False, "RSS flat: enough samples in the 10-20% and last-10% windows (run more images?)")
    twice = [p for p, c in inputs.items() if c > 1]
    check(not twice, f"no input has two records ({len(twice)} have)")
    check(
        set(inputs) == set(paths),
        f"the records' inputs are the generated files ({len(set(paths) - set(inputs))} missing, {len(set(inputs) - set(paths))} extra)",
    )
    check(len(ok_records) + len(failed) == n, f"ok + failed == inputs ({len(ok_records)} + {len(failed)} vs {n})")
    check(failed == broken, f"failed == the broken files ({len(failed)} vs {len(broken)}, {len(failed ^ broken)} differ)")
    check(overlays == len(ok_records), f"one overlay per ok record ({overlays} vs {len(ok_records)})")
    expected = 1 if broken else 0
    check(code == expected, f"exit code {expected} ({code})")
    print("PASS" if not failures else f"FAIL: {len(failures)} check(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
