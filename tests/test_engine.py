"""The batch engine: worker threads keep order and stream, the graph starts at the layer, precision, channels-last."""

from __future__ import annotations

import threading
from pathlib import Path, PurePath

import numpy as np
import pytest
import torch

import gradcam_cli
from conftest import pictures_in, left_as_found, seeded, shared_timm_model, timm_model, write_image
from gradcam_cli.run.pipeline import Explainer
from gradcam_cli.settings import build_settings
from gradcam_cli.inputs.sources import Source
from gradcam_cli.run.workers import ordered_map

pytestmark = pytest.mark.usefixtures("one_thread")


def _folder(tmp_path: Path, count: int, bad: tuple[int, ...] = ()) -> Path:
    folder = tmp_path / "in"
    for i in range(count):
        path = folder / f"img_{i:03d}.png"
        if i in bad:
            folder.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"not an image")
        else:
            write_image(path, 64 + 8 * (i % 3), 48, seed=i)
    return folder


def test_ordered_map_keeps_order_and_a_bounded_window() -> None:
    from concurrent.futures import ThreadPoolExecutor

    consumed = []

    def source():
        for i in range(50):
            consumed.append(i)
            yield i

    with ThreadPoolExecutor(4) as pool:
        results = ordered_map(pool, lambda i: (threading.get_ident(), i * i), source(), window=5)
        first = next(results)
        assert first[1] == 0 and len(consumed) <= 6, "only a window of work runs ahead"
        rest = [value for _, value in results]
    assert rest == [i * i for i in range(1, 50)]


def test_records_come_in_input_order_with_bad_images_among_them(run_cli, tmp_path) -> None:
    folder = _folder(tmp_path, 11, bad=(2, 7))
    result = run_cli(
        "explain", folder, "--model", "test_resnet", "--no-pretrained", "-b", "3", "--workers", "4", "-o", tmp_path / "out", "--json"
    )
    assert result.code == 1
    records = result.records()
    assert [Path(r["input"]).name for r in records] == [f"img_{i:03d}.png" for i in range(11)]
    assert [r["ok"] for r in records] == [i not in (2, 7) for i in range(11)]


def test_worker_count_does_not_change_a_byte(run_cli, tmp_path) -> None:
    folder = _folder(tmp_path, 6)
    outputs = {}
    for workers in (1, 4):
        out = tmp_path / f"out{workers}"
        result = run_cli(
            "explain",
            folder,
            "--model",
            "test_resnet",
            "--no-pretrained",
            "-b",
            "4",
            "--workers",
            str(workers),
            "-o",
            out,
            "--json",
            "--save-raw",
        )
        assert result.code == 0, result.stderr
        outputs[workers] = {p.name: p.read_bytes() for p in pictures_in(out)}
    assert outputs[1] == outputs[4] and len(outputs[1]) == 12


def test_inputs_stream_through_a_bounded_window(tmp_path) -> None:
    """The first record is out long before the last input is read: memory holds a window, not the folder."""
    folder = _folder(tmp_path, 40)
    settings = build_settings({"model": "test_resnet", "pretrained": False, "batch_size": 4, "workers": 2, "output_dir": tmp_path / "o"})
    explainer = Explainer(settings)
    read = []

    def sources():
        for path in sorted(folder.iterdir()):
            read.append(path)
            yield Source(path, PurePath(path.name))

    seen_at_first_record = []
    explainer.run(sources(), lambda record: seen_at_first_record.append(len(read)))
    assert len(seen_at_first_record) == 40
    window = 2 * settings.run.batch_size
    assert seen_at_first_record[0] <= 2 * window + settings.run.batch_size, seen_at_first_record[0]


def _saved_bytes(target: str) -> int:
    """Bytes autograd saves for backward during one explanation with `target` as the layer."""
    model = shared_timm_model("test_resnet")
    total = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        total[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        gradcam_cli.cam(model, seeded(31, 2, 3, 128, 128), target)
    return total[0]


def test_the_graph_starts_at_the_target_layer() -> None:
    """Nothing below the layer is kept for backward: a late layer saves far less than an early one."""
    late, early = _saved_bytes("layer4"), _saved_bytes("layer1")
    assert late * 4 < early, (late, early)


def test_parameters_get_no_gradient_and_keep_their_flags() -> None:
    model = timm_model("test_resnet")  # not the shared one: references fill .grad
    with left_as_found(model):  # requires_grad and .grad (None) among the rest
        gradcam_cli.cam(model, seeded(32, 1, 3, 64, 64), "layer3")
    assert all(p.grad is None for p in model.parameters())


def test_channels_last_pipeline_matches_the_api(tmp_path) -> None:
    """The CLI's engine (channels-last, workers) computes the same maps as the plain API."""
    settings = build_settings({"model": "test_resnet", "pretrained": False, "output_dir": tmp_path / "o"})
    explainer = Explainer(settings)
    assert explainer.channels_last
    convs = [m for m in explainer.model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert all(c.weight.is_contiguous(memory_format=torch.channels_last) for c in convs)
    x = seeded(33, 2, 3, 160, 160)
    engine = explainer.compute(x)
    plain = gradcam_cli.cam(explainer.model, x.contiguous(), "layer4")
    torch.testing.assert_close(engine.maps[:, 0], plain, atol=1e-4, rtol=0)


def test_bf16_precision_on_cpu_gives_close_maps_in_fp32(run_cli, tmp_path) -> None:
    src = write_image(tmp_path / "cat.png", 96, 64, seed=3)
    maps = {}
    for precision in ("fp32", "bf16"):
        out = tmp_path / precision
        result = run_cli(
            "explain", src, "--model", "test_resnet", "--no-pretrained", "--precision", precision, "--save-raw", "-o", out, "--json"
        )
        assert result.code == 0, result.stderr
        (record,) = result.records()
        assert record["settings"]["precision"] == {"fp32": "fp32", "bf16": "bfloat16"}[precision]
        maps[precision] = np.load(record["targets"][0]["raw"])
    assert maps["bf16"].dtype == np.float32
    assert np.corrcoef(maps["fp32"].ravel(), maps["bf16"].ravel())[0, 1] > 0.95


def test_unknown_precision_is_a_usage_error(run_cli, tmp_path) -> None:
    src = write_image(tmp_path / "cat.png", 32, 32)
    result = run_cli("explain", src, "--model", "test_resnet", "--no-pretrained", "--precision", "fp8", "-o", tmp_path / "o")
    assert result.code == 2 and "--precision" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "model_name,layer,shape",
    [
        ("test_resnet", "layer4", (2, 3, 96, 128)),
        ("test_vit", "blocks.-1.norm1", (2, 3, 160, 160)),
    ],
)
def test_topk_from_one_forward_equals_one_class_at_a_time(model_name: str, layer: str, shape: tuple) -> None:
    from gradcam_cli.cams.engine import compute_cams
    from gradcam_cli.layers.paths import resolve_layers
    from gradcam_cli.cams.methods import get_method
    from gradcam_cli.cams.targets import TargetChoice

    model = shared_timm_model(model_name)
    x = seeded(34, *shape)
    forwards = []
    handle = model.register_forward_hook(lambda *_: forwards.append(1))
    try:
        batch = compute_cams(
            model,
            x,
            resolve_layers(model, [layer], model_name),
            get_method("gradcam"),
            TargetChoice(topk=3),
            num_prefix_tokens=getattr(model, "num_prefix_tokens", None),
        )
    finally:
        handle.remove()
    assert len(forwards) == 1, "the top 3 classes share one forward"
    for k in range(3):
        single = gradcam_cli.cam(model, x, layer, classes=batch.targets[:, k].tolist())
        torch.testing.assert_close(batch.maps[:, k], single, atol=1e-5, rtol=0)
