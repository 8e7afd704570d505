"""A user's model that misbehaves: each fault is an error record or one line, never an internal error.

The hostile models are written as a user writes them, into the test's folder as `net.py`
(`--model net.py:NAME`): one that raises on a bright image, one that takes no batch of more
than one image, one that prints in its forward, one that calls `sys.exit()` while it is built,
one whose forward fails on the blank image of the load-time probe, one that scales its input in
place, and one that waits, mid-batch, for the test to let it go (the Ctrl-C test).
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from conftest import cli_command, cli_env, pictures_in, write_image

NET = """
import sys
import time
import warnings
from pathlib import Path

import torch
from torch import nn


class Small(nn.Module):
    def __init__(self, mode=""):
        super().__init__()
        torch.manual_seed(0)
        self.mode = mode
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        if self.mode == "bright" and bool((x.mean(dim=(1, 2, 3)) > 0.9).any()):
            raise ValueError("this image is too bright for me")  # BRIGHT
        if self.mode == "batch" and x.shape[0] > 1:
            raise RuntimeError("I take one image at a time")  # BATCH
        if self.mode == "print":
            print("forward of", tuple(x.shape))
        if self.mode == "warn":
            warnings.warn("mind the gap\\nbetween the lines")  # WARN
        if self.mode == "blank" and not bool(x.any()):
            raise RuntimeError("nothing to see")  # BLANK
        return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))


def exits():
    sys.exit(3)  # EXIT


class Gated(Small):
    # the second image's own forward (one image, not blank; the masked ones come two at a time) waits for the
    # first image's overlay, then says it is blocked and waits, mid-batch, until the test lets it go
    images = 0

    def forward(self, x):
        if x.shape[0] == 1 and bool(x.any()):
            self.images += 1
            if self.images == 2:
                while not Path("out/in/img_0.png.scorecam.png").exists():
                    time.sleep(0.01)
                Path("blocked").touch()
                while not Path("release").exists():
                    time.sleep(0.01)
        return super().forward(x)
"""

SIZE = ("--input-size", "32x32", "--mean", "0.5", "--std", "0.5")  # small and said: no notice about preprocessing


def _line_of(marker: str) -> int:
    """The line of net.py that carries `# MARKER`: where the user's code raised."""
    return next(number for number, text in enumerate(NET.splitlines(), start=1) if text.endswith(f"# {marker}"))


@pytest.fixture
def net(tmp_path: Path) -> Path:
    """net.py and four photos in in/ (img_2 is white: bright enough to fail); the test runs in this folder."""
    (tmp_path / "net.py").write_text(NET)
    for index in range(4):
        write_image(tmp_path / "in" / f"img_{index}.png", 48, 40, seed=index)
    from PIL import Image

    Image.fromarray(np.full((40, 48, 3), 255, np.uint8)).save(tmp_path / "in" / "img_2.png")
    return tmp_path


def _compute_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The batch sizes the engine asks the model's maps for, every call (the real computation runs)."""
    from gradcam_cli.run.pipeline import Explainer

    sizes: list[int] = []
    compute = Explainer.compute

    def counted(self, x, *items):
        sizes.append(int(x.shape[0]))
        return compute(self, x, *items)

    monkeypatch.setattr(Explainer, "compute", counted)
    return sizes


# ---------------------------------------------------------------- a model that raises while the images stream


@pytest.mark.parametrize("batch", ["4", "1"])
def test_an_image_the_model_raises_on_is_its_error_record_and_the_rest_are_done(run_cli, net, batch) -> None:
    result = run_cli("explain", "in", "--model", "net.py:Small", "--model-kwargs", "mode=bright", *SIZE, "-b", batch, "--json", "-o", "out")
    assert result.code == 1, result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    records = {Path(r["input"]).name: r for r in result.records()}
    assert sorted(records) == ["img_0.png", "img_1.png", "img_2.png", "img_3.png"]
    failed = records.pop("img_2.png")
    assert not failed["ok"]
    expected = f"the model failed on this image: ValueError: this image is too bright for me (net.py, line {_line_of('BRIGHT')})"
    assert expected in failed["error"]
    assert all(r["ok"] for r in records.values())
    assert sorted(p.name for p in pictures_in(net / "out")) == [f"{name}.gradcam.png" for name in sorted(records)]


def test_a_model_that_takes_no_batch_is_run_one_image_at_a_time(run_cli, net, monkeypatch) -> None:
    """The batch fails, each image alone works: said once, and later batches hold one image (no failed batch each time)."""
    write_image(net / "in" / "img_4.png", 40, 40, seed=4)
    sizes = _compute_sizes(monkeypatch)
    result = run_cli("explain", "in", "--model", "net.py:Small", "--model-kwargs", "mode=batch", *SIZE, "-b", "4", "--json", "-o", "out")
    assert result.code == 0, result.stderr
    assert len(result.records()) == 5 and all(r["ok"] for r in result.records())
    said = [line for line in result.stderr.splitlines() if "at once" in line]
    assert len(said) == 1 and f"RuntimeError: I take one image at a time (net.py, line {_line_of('BATCH')})" in said[0]
    assert "explaining one image at a time" in said[0]
    assert sizes == [4, 1, 1, 1, 1, 1], "the failed batch once, its images alone, then the fifth alone"


def test_a_model_that_does_not_fail_costs_one_call_per_batch(run_cli, net, monkeypatch) -> None:
    """No retry without a failure: the per-image retry does not double the cost of a well-behaved model."""
    write_image(net / "in" / "img_2.png", 40, 40, seed=2)  # no longer white
    sizes = _compute_sizes(monkeypatch)
    result = run_cli("explain", "in", "--model", "net.py:Small", "--model-kwargs", "mode=bright", *SIZE, "-b", "3", "--json", "-o", "out")
    assert result.code == 0, result.stderr
    assert sizes == [3, 1]


def test_an_error_of_the_engine_itself_is_still_an_internal_error(run_cli, net, monkeypatch) -> None:
    """Only what the model raises becomes an image's error record: a fault in our own code must not hide as one."""
    from gradcam_cli.cams import engine

    monkeypatch.setattr(engine, "finish_maps", None)  # a bug raised in the engine's own frame: None is not callable
    result = run_cli("explain", "in", "--model", "net.py:Small", *SIZE, "--json", "-o", "out")
    assert result.code == 3 and "internal error: TypeError" in result.stderr, result.stderr
    assert result.records() == []


# ---------------------------------------------------------------- loading: sys.exit(), a failing probe, prints


def test_sys_exit_while_building_is_one_line_naming_the_line(run_cli, net) -> None:
    result = run_cli("explain", "in", "--model", "net.py:exits", "-o", "out")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.code == 2 and len(lines) == 1, result.stderr
    assert f"calling net.py:exits failed: it called sys.exit(3) (net.py, line {_line_of('EXIT')})" in lines[0]


def test_a_forward_that_fails_on_the_load_probe_is_one_line_naming_the_line(run_cli, net) -> None:
    result = run_cli("explain", "in", "--model", "net.py:Small", "--model-kwargs", "mode=blank", *SIZE, "-o", "out")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.code == 2 and len(lines) == 1, result.stderr
    assert "its forward failed on a blank 32x32 image: RuntimeError: nothing to see" in lines[0]
    assert f"(net.py, line {_line_of('BLANK')})" in lines[0] and "internal error" not in lines[0]


def test_masked_forwards_the_model_cannot_take_are_one_line_before_any_image(run_cli, net) -> None:
    """scorecam's masked forwards run in chunks: a model that takes one image at a time is told so at once."""
    result = run_cli("explain", "in", "--model", "net.py:Small", "--model-kwargs", "mode=batch", *SIZE, "--method", "scorecam", "-o", "out")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.code == 2 and len(lines) == 1, result.stderr
    assert "RuntimeError: I take one image at a time" in lines[0] and "--cam-batch-size 1" in lines[0]
    ok = run_cli("explain", "in", "--model", "net.py:Small", "--model-kwargs", "mode=batch", *SIZE, "--method", "scorecam",
                 "--cam-batch-size", "1", "--json", "-o", "out")  # fmt: skip
    assert ok.code == 0 and len(ok.records()) == 4, ok.stderr


def test_what_the_model_prints_goes_to_stderr(run_cli, net, capsys) -> None:
    result = run_cli("explain", "in", "--model", "net.py:Small", "--model-kwargs", "mode=print", *SIZE, "-b", "2", "--json", "-o", "out")
    assert result.code == 0, result.stderr
    assert len(result.records()) == 4
    printed = capsys.readouterr()
    assert "forward of" not in printed.out, "the process's stdout carries records only"
    assert "forward of (2, 3, 32, 32)" in printed.err


def test_a_warning_of_the_models_code_is_one_line_once(run_cli, net) -> None:
    """Python would print the warning with net.py's path, line number and source line, for every batch."""
    result = run_cli("explain", "in", "--model", "net.py:Small", "--model-kwargs", "mode=warn", *SIZE, "-b", "1", "--json", "-o", "out")
    assert result.code == 0, result.stderr
    assert len(result.records()) == 4
    said = [line for line in result.stderr.splitlines() if "mind the gap" in line]
    assert said == ["gradcam: UserWarning: mind the gap between the lines"], result.stderr
    assert "net.py" not in result.stderr


@pytest.mark.parametrize(
    "command",
    [
        ("eval", "in", "--methods", "gradcam", "--metrics", "deletion", "--steps", "2", "-o", "ev"),
        ("compare", "in", "--methods", "gradcam", "--layers", "conv", "-o", "cmp"),
        ("layers",),
    ],
    ids=["eval", "compare", "layers"],
)
def test_every_command_keeps_what_the_model_prints_off_stdout(run_cli, net, capsys, command) -> None:
    name, *rest = command
    model = ("net.py:Small", "--model-kwargs", "mode=print", "--input-size", "32x32")
    args = (name, *model) if name == "layers" else (name, *rest, "--model", *model, "--mean", "0.5", "--std", "0.5")
    result = run_cli(*args, "--json")
    assert result.code == 0, result.stderr
    printed = capsys.readouterr()
    assert "forward of" not in printed.out and "forward of" in printed.err
    assert all(json.loads(line) for line in result.stdout.splitlines())


@pytest.mark.slow
def test_stdout_stays_json_lines_when_the_model_prints(net) -> None:
    command = cli_command("explain", "in", "--model", "net.py:Small", "--model-kwargs", "mode=print", *SIZE, "-o", "out")
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=cli_env(), cwd=net)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]  # every line is JSON
    assert len(records) == 4 and all(r["ok"] for r in records)
    assert "forward of (1, 3, 32, 32)" in done.stderr


# ---------------------------------------------------------------- a model that changes its input in place


class _Halving(nn.Module):
    """Scales its input by 0.5, in place (`x.mul_`) or not: the same function, so the same maps."""

    def __init__(self, in_place: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.in_place = in_place
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.act = nn.ReLU()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.mul_(0.5) if self.in_place else x * 0.5
        return self.fc(self.act(self.conv(x)).mean(dim=(2, 3)))


@pytest.mark.parametrize(
    ("method", "options"),
    [("gradcam", {"aug_smooth": True}), ("fullgrad", {}), ("guided-gradcam", {}), ("scorecam", {"cam_batch_size": 5})],
)
def test_a_model_that_changes_its_input_in_place_gets_its_own_copy(method: str, options: dict) -> None:
    from gradcam_cli import cam

    x = torch.randn(2, 3, 24, 24, generator=torch.Generator().manual_seed(1))
    given = x.clone()
    expected = cam(_Halving(in_place=False), x, layers="conv", method=method, **options)
    maps = cam(_Halving(in_place=True), x, layers="conv", method=method, **options)
    assert torch.equal(x, given), "the caller's tensor is left as it was"
    # the same model maths on the same input: only float rounding may differ (none is expected on one thread)
    torch.testing.assert_close(maps, expected, rtol=0, atol=1e-6)


# ---------------------------------------------------------------- the Python API


class _Counting(nn.Module):
    """timm's test_resnet, counting how many forwards run at once; each lingers a moment so that calls that do not
    take turns overlap (the linger makes an overlap likely, it is never measured)."""

    def __init__(self) -> None:
        from conftest import timm_model

        super().__init__()
        self.inner = timm_model("test_resnet")
        self.lock, self.running, self.most = threading.Lock(), 0, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import time

        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            time.sleep(0.01)
            return self.inner(x)
        finally:
            with self.lock:
                self.running -= 1


def test_calls_from_several_threads_on_one_model_take_turns() -> None:
    """Twenty calls from four threads on one model: one at a time, each map the one a lone call gives, every flag restored."""
    from concurrent.futures import ThreadPoolExecutor

    from gradcam_cli import cam

    model = _Counting()
    frozen = {name for name, _ in model.named_parameters() if name.startswith(("inner.conv1", "inner.bn1"))}
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(name not in frozen)
    batches = [torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(i)) for i in range(20)]
    alone = [cam(model, x, layers="inner.layer4") for x in batches]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda x: cam(model, x, layers="inner.layer4"), batches))
    assert model.most == 1, "the calls took turns"
    for one, other in zip(alone, together):
        torch.testing.assert_close(one, other, rtol=0, atol=1e-6)  # the same maths on the same input
    assert {name for name, p in model.named_parameters() if not p.requires_grad} == frozen


def _model_and_batch():
    from conftest import shared_timm_model

    return shared_timm_model("test_resnet"), torch.zeros(2, 3, 64, 64)  # layer4: 2x2 (at 32x32 one cell, refused)


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (lambda m, x: {"model": m, "x": x[0]}, "this tensor is 3-D (3x64x64); one image (C, H, W) is a batch of one: x[None]"),
        (lambda m, x: {"model": m, "x": x.numpy()}, "takes x as a torch.Tensor (N, C, H, W), not ndarray"),
        (lambda m, x: {"model": m, "x": x.long()}, "floating-point input, not torch.int64"),
        (lambda m, x: {"model": "resnet50", "x": x}, "takes a torch.nn.Module as model, not str"),
        (lambda m, x: {"model": m, "x": x, "classes": 1.5}, "classes=1.5 (float) is not what classes takes: give None"),
        (lambda m, x: {"model": m, "x": x, "classes": "cat"}, "an int for every image, or a list of one int per image"),
        (lambda m, x: {"model": m, "x": x, "classes": [1, 2.5]}, "classes=[1, 2.5] (list) is not what classes takes"),
        (lambda m, x: {"model": m, "x": x, "classes": True}, "classes=True (bool) is not what"),
        (lambda m, x: {"model": m, "x": x, "method": 3}, "method must be a method's name (str)"),
        (lambda m, x: {"model": m, "x": x, "grid": (1.5, 2)}, "grid=(1.5, 2) is not (rows, columns)"),
    ],
)
def test_cam_arguments_of_a_wrong_type_are_usage_errors(arguments, says: str) -> None:
    from gradcam_cli import cam
    from gradcam_cli.errors import UsageError

    model, x = _model_and_batch()
    with pytest.raises(UsageError) as raised:
        cam(**arguments(model, x))
    assert says in str(raised.value)


def test_numpy_integers_are_class_indices() -> None:
    from gradcam_cli import cam

    model, x = _model_and_batch()
    torch.testing.assert_close(cam(model, x, classes=np.int64(1)), cam(model, x, classes=1), rtol=0, atol=0)
    torch.testing.assert_close(cam(model, x, classes=np.array([1, 2])), cam(model, x, classes=[1, 2]), rtol=0, atol=0)


def test_explain_classes_of_a_wrong_type_are_usage_errors(tmp_path: Path) -> None:
    from gradcam_cli import explain, load_model
    from gradcam_cli.errors import UsageError

    ready = load_model("test_resnet", pretrained=False, device="cpu")
    photo = write_image(tmp_path / "photo.png", 40, 32)
    with pytest.raises(UsageError, match=r"classes=1\.5 \(float\) is not what classes takes: give None \(the top class\), a class"):
        explain(photo, ready, classes=1.5)
    assert explain(photo, ready, classes=np.int64(3)).class_index == 3
    for option, value, says in [("topk", 1.5, "give a whole number"), ("alpha", True, "give a finite number"), ("caption", 1, "True or")]:
        with pytest.raises(UsageError, match=f"{option} .* give|{says}"):
            explain(photo, ready, **{option: value})
    assert len(explain(photo, ready, topk=np.int64(2)).targets) == 2


# ---------------------------------------------------------------- slow methods: cost, progress per view, Ctrl-C


def _forwards_said(stderr: str) -> int:
    line = next(line for line in stderr.splitlines() if "masked forwards per image" in line)
    return int(line.split(" runs ")[1].split(" masked")[0].replace(",", ""))


def test_the_cost_notice_counts_every_view_and_class(run_cli, net) -> None:
    base = ("explain", "in/img_0.png", "--model", "net.py:Small", *SIZE, "--method", "scorecam", "--json", "-o", "out")
    plain = run_cli(*base)
    smoothed = run_cli(*base, "--aug-smooth", "--topk", "2")
    assert plain.code == 0 and smoothed.code == 0, smoothed.stderr
    assert _forwards_said(plain.stderr) == 8, "one per channel of the probed layer (conv: 8 channels)"
    assert _forwards_said(smoothed.stderr) == 8 * 2 * 6
    assert "x 2 classes x 6 views of --aug-smooth" in smoothed.stderr


def test_the_progress_of_masked_forwards_says_which_view() -> None:
    from gradcam_cli.run.prepare import prepare_run
    from gradcam_cli.settings import build_settings

    said: list[tuple[str, int, int]] = []
    settings = build_settings({"model": "test_resnet", "pretrained": False, "method": "scorecam", "aug_smooth": True, "cam_batch_size": 48})
    run = prepare_run(settings, progress=lambda what, done, total: said.append((what, done, total)), notices=False)
    run.compute(torch.zeros(1, 3, 64, 64))  # layer4: 2x2
    views = [what.split(":")[0] for what, done, total in said if done == total]
    assert views == [
        "view 1 of 6 (as given)",
        "view 2 of 6 (mirrored)",
        "view 3 of 6 (zoomed in)",
        "view 4 of 6 (zoomed in, mirrored)",
        "view 5 of 6 (zoomed out)",
        "view 6 of 6 (zoomed out, mirrored)",
    ]
    assert all(what.startswith("view ") for what, _, _ in said)


def test_masked_forward_methods_finish_each_image_on_its_own_and_the_others_batch(run_cli, net, monkeypatch) -> None:
    """scorecam's images are computed one by one (each written when done); gradcam's batch stays one call."""
    sizes = _compute_sizes(monkeypatch)
    result = run_cli("explain", "in", "--model", "net.py:Small", *SIZE, "--method", "scorecam", "-b", "4", "--json", "-o", "out")
    assert result.code == 0 and len(result.records()) == 4, result.stderr
    assert sizes == [1, 1, 1, 1]
    sizes.clear()
    result = run_cli("explain", "in", "--model", "net.py:Small", *SIZE, "-b", "4", "--json", "-o", "out2")
    assert result.code == 0 and sizes == [4]


def _lines(stream, into: queue.Queue) -> None:
    for line in stream:
        into.put(line)
    into.put(None)


def _wait_for(path: Path, process: subprocess.Popen, limit: float = 240.0) -> None:
    """Until the file exists; the process ending first fails the test (with what it said)."""
    import time

    deadline = time.monotonic() + limit  # a bound on a hang, not a measure: the test never asserts a duration
    while not path.exists():
        assert process.poll() is None, f"the run ended before {path.name} appeared"
        assert time.monotonic() < deadline, f"no {path.name} after {limit} s"
        time.sleep(0.02)


@pytest.mark.slow
def test_ctrl_c_mid_batch_is_acknowledged_at_once_and_keeps_every_finished_image(net) -> None:
    """Four images in one scorecam batch; once the first is written the model blocks mid-batch (the Gated model).

    Ctrl-C then: "stopping" comes on stderr while the model still blocks (the run cannot have ended), and once
    it is let go the run stops at the next chunk with the first image's files and record kept, the second's not.
    """
    command = cli_command(
        "explain", "in", "--model", "net.py:Gated", *SIZE, "--method", "scorecam", "--cam-batch-size", "2", "-b", "4", "-o", "out", "--json"
    )
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(), cwd=net)
    said: queue.Queue = queue.Queue()
    printed: queue.Queue = queue.Queue()
    for stream, lines in ((process.stderr, said), (process.stdout, printed)):
        threading.Thread(target=_lines, args=(stream, lines), daemon=True).start()
    try:
        _wait_for(net / "blocked", process)
        process.send_signal(signal.SIGINT)
        while True:
            line = said.get(timeout=120)
            assert line is not None, "stderr closed without a word of stopping"
            if "stopping" in line:
                break
        assert process.poll() is None, "acknowledged while the model still ran, before the run could end"
        assert "Ctrl-C again stops at once" in line
        (net / "release").touch()
        process.wait(timeout=120)
    finally:
        (net / "release").touch()
        process.kill()
    rest, stdout = [], []
    while (line := said.get(timeout=10)) is not None:
        rest.append(line)
    while (line := printed.get(timeout=10)) is not None:
        stdout.append(line)
    assert process.returncode == 130, "".join(rest)
    assert any("interrupted by Ctrl-C" in line for line in rest) and not any("Traceback" in line for line in rest), rest
    records = [json.loads(line) for line in stdout]
    assert [(r["input"], r["ok"]) for r in records] == [("in/img_0.png", True)]
    assert [p.name for p in pictures_in(net / "out")] == ["img_0.png.scorecam.png"]
    kept = [json.loads(line) for line in (net / "out" / "records.jsonl").read_text().splitlines()]
    assert [r["input"] for r in kept] == ["in/img_0.png"]
