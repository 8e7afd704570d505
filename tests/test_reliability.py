"""Reliability: a model explained a thousand times is left as found and memory stays flat;
a non-finite image fails alone; outputs stay under the output folder whatever the inputs.

The long soak over thousands of files in a child process is `benchmarks/soak.py`
(not part of the default run).
"""

from __future__ import annotations

import gc
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import gradcam_cli
from conftest import is_run_file, pictures_in, assert_left_as_found, model_state, seeded, timm_model, write_image

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = ("--model", "test_resnet", "--no-pretrained", "--json")


# ---------------------------------------------------------------- many runs, one model


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    raise AssertionError("no VmRSS in /proc/self/status")


def _tensor_count() -> int:
    gc.collect()
    count = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # isinstance on torch's deprecated module aliases warns
        for obj in gc.get_objects():
            try:
                count += isinstance(obj, torch.Tensor)
            except ReferenceError:  # weak proxies whose referent is gone
                pass
    return count


# (method, layer, runs after the warm-up): 1,000 of the default, a few hundred of each other kind
# layer3, not layer4: at 32x32 layer4 is one cell, which is refused (its map could only be blank)
RUNS = (("gradcam", "layer3", 1000), ("eigencam", "layer3", 200), ("guided-gradcam", "layer3", 200), ("scorecam", "layer1", 100))
WARM_UP = 50


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="RSS is read from /proc")
@pytest.mark.slow
def test_one_model_explained_1500_times_is_left_as_found_and_memory_stays_flat() -> None:
    model = timm_model("test_resnet")
    # a fine-tuning setup the runs must not disturb: train mode, one stage in eval, a frozen stem
    model.train()
    model.layer1.eval()
    for p in model.conv1.parameters():
        p.requires_grad_(False)
    x = seeded(31, 1, 3, 32, 32)
    x_before = x.clone()
    before = model_state(model)
    assert not any(before["hooks"].values())

    def explain(method: str, layer: str, i: int) -> torch.Tensor:
        classes = None if i % 2 else i % 10  # the top class and a fixed one, alternately
        return gradcam_cli.cam(model, x, layer, method=method, classes=classes)

    for i in range(WARM_UP):  # every kind once or more, so its allocations are made before measuring
        method, layer, _ = RUNS[i % len(RUNS)]
        explain(method, layer, i)
    tensors_before, rss_before = _tensor_count(), _rss_mb()

    last = {}
    for method, layer, runs in RUNS:
        for i in range(runs):
            maps = explain(method, layer, i)
        last[method] = maps
    del maps
    for method, maps in last.items():
        assert maps.shape == (1, 32, 32) and torch.isfinite(maps).all(), method
    last.clear()
    tensors_after, rss_after = _tensor_count(), _rss_mb()

    # modules, hooks, train/eval and inplace flags, requires_grad, .grad, weights and BatchNorm statistics,
    # grad and inference mode, function modes (guided backprop's)
    assert_left_as_found(model, before)
    assert torch.equal(x, x_before) and not x.requires_grad and x.grad is None
    # A leak of one graph or one activation per run would add thousands of live tensors; a few
    # come and go with torch's caches.
    assert tensors_after - tensors_before <= 10, (tensors_before, tensors_after)
    # 1,500 runs after the warm-up. The inputs are tiny, so RSS is dominated by the allocator:
    # glibc keeps freed chunks in its arenas and their high-water mark can creep by a few MB
    # without any live object. A leaked graph (its activations and gradients, ~100 KB a run
    # here) would add well over 100 MB; 20 MB leaves the allocator its noise and catches that.
    growth = rss_after - rss_before
    print(f"RSS {rss_before:.1f} -> {rss_after:.1f} MB, tensors {tensors_before} -> {tensors_after}")
    assert growth < 20, f"RSS grew {growth:.1f} MB over 1,500 runs ({rss_before:.0f} -> {rss_after:.0f} MB)"


# ---------------------------------------------------------------- one image with NaN or inf


class _NanGradient(torch.autograd.Function):
    """Identity forward; the backward turns the gradient of the rows in `mask` into NaN."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(mask)
        return tensor.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        (mask,) = ctx.saved_tensors
        return torch.where(mask.view(-1, *[1] * (grad.dim() - 1)), torch.full_like(grad, float("nan")), grad), None


def _poison(kind: str):
    """A wrapper for a loaded model's forward: the pure white (uniform) image gets non-finite scores or gradients.

    The rest of the forward is the model's own (the target layer's hook fires as usual), so
    everything after it — the finiteness check, the writer, the records, the exit code — is the real path.
    """

    def wrap(model: torch.nn.Module) -> None:
        original = model.forward

        def forward(x: torch.Tensor) -> torch.Tensor:
            flat = x.detach().flatten(2)
            white = (flat.amax(dim=2) - flat.amin(dim=2)).amax(dim=1) < 1e-6  # the one uniform image of the batch
            if kind == "nan-gradient":  # finite scores, NaN gradient at the target layer (upstream of the head)
                return model.forward_head(_NanGradient.apply(model.forward_features(x), white))
            logits = original(x)
            bad = float("nan") if kind == "nan-score" else float("inf")
            return torch.where(white[:, None], torch.full_like(logits, bad), logits)

        model.forward = forward  # type: ignore[method-assign]

    return wrap


@pytest.mark.parametrize("kind", ["nan-score", "inf-score", "nan-gradient"])
def test_non_finite_image_is_an_error_record_and_the_rest_are_explained(run_cli, tmp_path, monkeypatch, kind):
    import gradcam_cli.model.load as models

    real_load = models.load_model
    wrap = _poison(kind)

    def load_model(*args, **kwargs):
        loaded = real_load(*args, **kwargs)
        wrap(loaded.model)
        return loaded

    monkeypatch.setattr(models, "load_model", load_model)
    folder = tmp_path / "in"
    for i in range(5):
        write_image(folder / f"img_{i}.png", 64, 48, seed=40 + i)
    folder.joinpath("img_2.png").unlink()
    Image.new("RGB", (64, 48), (255, 255, 255)).save(folder / "img_2.png")  # the one that goes non-finite
    out = tmp_path / "out"
    result = run_cli("explain", folder, *TINY, "-b", "5", "--save-raw", "-o", out)
    assert result.code == 1, result.stderr
    records = {Path(r["input"]).name: r for r in result.records()}
    assert sorted(records) == [f"img_{i}.png" for i in range(5)]
    bad = records.pop("img_2.png")
    assert bad["ok"] is False and bad["outputs"] == []
    assert "not finite" in bad["error"] and ("scores" in bad["error"] or "gradients" in bad["error"])
    assert "not finite" in result.stderr
    for name, record in records.items():
        assert record["ok"] is True and record["error"] is None, name
        raw = np.load(record["targets"][0]["raw"])
        assert raw.shape == (48, 64) and np.isfinite(raw).all() and raw.max() > 0.5, name
    assert not [p.name for p in out.rglob("img_2*")], "a file was written for the non-finite image"
    assert len(pictures_in(out)) == 8  # overlay + .npy for each of the 4 good images


# ---------------------------------------------------------------- outputs under -o, inputs untouched


def _tree(root: Path) -> dict[str, bytes | str]:
    """Every file below root (not following links): its bytes, or where a link points."""
    found: dict[str, bytes | str] = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath, name)
            key = str(path.relative_to(root))
            found[key] = f"-> {os.readlink(path)}" if path.is_symlink() else path.read_bytes()
    return found


def test_absolute_relative_and_symlinked_inputs_write_only_under_the_output_folder(run_cli, tmp_path, monkeypatch):
    """Absolute paths, `../x/...` and links to files elsewhere (named and found in a folder) all land under -o."""
    write_image(tmp_path / "x" / "img.png", seed=50)
    write_image(tmp_path / "y" / "img.png", seed=51)  # the same name as x/img.png, by absolute path
    write_image(tmp_path / "far" / "away" / "real.png", seed=52)
    write_image(tmp_path / "far" / "other.jpg", seed=53)
    links = tmp_path / "links"
    links.mkdir()
    (links / "named.png").symlink_to(tmp_path / "far" / "away" / "real.png")
    (links / "found.jpg").symlink_to(Path("..") / "far" / "other.jpg")  # relative link, found by the scan
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    before = _tree(tmp_path)

    out = tmp_path / "out"
    inputs = [
        "../x/img.png",
        str(tmp_path / "y" / "img.png"),
        str(links / "named.png"),
        "../links",
        str(tmp_path / "far" / "away" / ".." / "away" / "real.png"),
    ]
    result = run_cli("explain", *inputs, *TINY, "--save-raw", "-o", "../out")
    assert result.code == 0, result.stderr
    records = result.records()
    assert len(records) == 6 and all(r["ok"] for r in records)  # links/ gives named.png and found.jpg

    written = [Path(p) for r in records for t in r["targets"] for p in (t["overlay"], t["raw"])]
    resolved = [(work / p).resolve() for p in written]
    # links/named.png is named and also found in links/: the same path, the same outputs; all else distinct
    assert [Path(r["input"]).name for r in records[2:5]] == ["named.png", "found.jpg", "named.png"]
    assert records[2]["outputs"] == records[4]["outputs"]
    assert len(set(resolved)) == 10, "two inputs were given the same output"
    for path in resolved:
        assert path.is_relative_to(out.resolve()) and path.is_file(), path
    after = _tree(tmp_path)
    new = {k for k in after if k not in before and not is_run_file(k)}
    assert all(k.startswith("out" + os.sep) for k in new), sorted(new)
    assert len(new) == 10
    assert {k: after[k] for k in before} == before, "an input (or a link to one) was changed"


def test_output_folder_is_the_input_folder_and_inputs_are_named_every_way(run_cli, tmp_path, monkeypatch):
    """-o set to the input folder itself: inputs named by folder, absolute path and `../`; no input's bytes change."""
    folder = tmp_path / "pics"
    for i, name in enumerate(["a.png", "b.jpg", "c.v1.png", "d.gradcam.png.png"]):
        write_image(folder / name, 48 + 8 * i, 40, seed=60 + i)
    write_image(folder / "sub" / "e.png", seed=65)
    write_image(tmp_path / "far" / "f.png", seed=66)
    (folder / "link.png").symlink_to(tmp_path / "far" / "f.png")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    before = _tree(tmp_path)

    result = run_cli(
        "explain",
        "../pics",
        str(folder / "a.png"),
        "../pics/sub/e.png",
        str(folder / "link.png"),
        "-r",
        *TINY,
        "--save-raw",
        "-o",
        str(folder),
    )
    assert result.code == 0, result.stderr
    records = result.records()
    assert len(records) == 9 and all(r["ok"] for r in records)  # 6 in the folder, 3 named again
    after = _tree(tmp_path)
    assert {k: after[k] for k in before} == before, "an input was overwritten"
    new = sorted(k for k in after if k not in before and not is_run_file(k))
    # the 3 named again are the same paths as 3 found in the folder: the same outputs (overlay + .npy each)
    assert len(new) == 12 and all(k.startswith("pics" + os.sep) for k in new), new
    written = [(work / p).resolve() for r in records for t in r["targets"] for p in (t["overlay"], t["raw"])]
    assert len(set(written)) == 12

    # a second run into the same folder: its own overlays are skipped, no input changes
    again = run_cli("explain", "../pics", "-r", *TINY, "-o", str(folder))
    assert again.code == 0, again.stderr
    assert len(again.records()) == 6
    final = _tree(tmp_path)
    assert {k: final[k] for k in before} == before


def test_a_symlinked_input_is_not_replaced_by_another_inputs_overlay(run_cli, tmp_path):
    """An input is a link that lies where a.png's overlay goes: the overlay must not replace the link."""
    out = tmp_path / "out"
    write_image(tmp_path / "a.png", seed=70)
    write_image(tmp_path / "far" / "photo.png", seed=71)
    out.mkdir()
    link = out / "a.png.gradcam.png"
    link.symlink_to(tmp_path / "far" / "photo.png")
    (tmp_path / "via.png").symlink_to(link)  # the link reached as an input under another name
    result = run_cli("explain", "a.png", "via.png", *TINY, "-b", "1", "-o", out)
    records = {Path(r["input"]).name: r for r in result.records()}
    assert link.is_symlink(), "the link under the output folder (an input, via via.png) was replaced by an overlay"
    assert records["via.png"]["ok"] is True
    assert result.code == 1 and "overwrite" in records["a.png"]["error"]
