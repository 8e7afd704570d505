"""The time to the first overlay: what a one-image run imports, the unfilled build, the deferred compiler.

No timing is asserted here (benchmarks/startup.py measures); these tests hold the
means in place: a run that imports only what it uses, a model built without
filling its parameters that gives the very maps the ordinary build gives, and
torch's compiler left unimported yet working when asked for.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLE_MODEL, EXAMPLES, ROOT, cli_command, cli_env

import torch
from torch import nn

# What a one-image run of a timm model never needs: the compiler torchvision and timm would import, the optional
# extras, and our own code for other commands.
NOT_IMPORTED = (
    "torch._dynamo", "torch._inductor", "triton", "sympy", "transformers", "ray", "scipy", "matplotlib", "pandas",
    "open_clip", "ultralytics", "segmentation_models_pytorch", "wandb", "tensorboard", "lightning", "rich",
    "gradcam_cli.report", "gradcam_cli.evaluate", "gradcam_cli.run.evaluation", "gradcam_cli.run.evaluation_extras",
    "gradcam_cli.run.ray_data", "gradcam_cli.outputs.grid", "gradcam_cli.outputs.charts", "gradcam_cli.outputs.bar_chart",
    "gradcam_cli.outputs.eval_files", "gradcam_cli.inputs.regions",
)  # fmt: skip

ONE_IMAGE_RUN = """
import json, sys
from gradcam_cli.cli.app import main
try:
    main(sys.argv[1:])
except SystemExit as done:
    assert done.code == 0, done.code
print(json.dumps(sorted(sys.modules)))
"""


def _one_image_run(tmp_path: Path, *args: str) -> tuple[list[str], dict[str, float]]:
    """The modules a one-image `gradcam explain` of the example (timm) model imported, and its phase stamps."""
    image = next((EXAMPLES / "shapes_images").glob("*.jpg"))
    stamps = tmp_path / "stamps.json"
    done = subprocess.run(
        [sys.executable, "-c", ONE_IMAGE_RUN, "explain", str(image), *EXAMPLE_MODEL, "-o", str(tmp_path / "out"), "-q", *args],
        capture_output=True, text=True, env={**cli_env(), "GRADCAM_TIMINGS": str(stamps)}, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1]), json.loads(stamps.read_text())


@pytest.mark.slow
def test_a_one_image_timm_run_imports_only_what_it_uses(tmp_path: Path) -> None:
    modules, stamps = _one_image_run(tmp_path)
    imported = sorted(m for m in modules if any(m == name or m.startswith(name + ".") for name in NOT_IMPORTED))
    assert imported == []
    assert "timm" in modules and "torchvision" in modules  # timm builds on torchvision: the compiler is what stays out
    # the phases a benchmark reads, stamped in the order the run goes through them
    order = ["interpreter", "imports", "build", "weights", "ready", "first batch", "written", "finished"]
    assert list(stamps) == order
    assert [stamps[p] for p in order] == sorted(stamps[p] for p in order)


COMPILER_AFTER_IMPORT = """
import sys, torch
from gradcam_cli.model.libraries import import_timm, import_torchvision
timm = import_timm(); torchvision = import_torchvision()
assert "torch._dynamo" not in sys.modules and "_dynamo" not in vars(torch)
boxes = torch.tensor([[0, 0, 0, 4, 4.0]])
pooled = torchvision.ops.roi_align(torch.arange(64.0).reshape(1, 1, 8, 8), boxes, 2)  # asks the compiler at run time
assert torch.compiler.disable.__module__ == "torch.compiler"  # torch's own again, once the libraries are in
from timm.layers import disable_compiler  # timm keeps the deferred one it found: still a disable, at the first call
twice = disable_compiler(lambda x: 2 * x)
assert "torch._dynamo" not in sys.modules and twice(torch.ones(1)).item() == 2.0 and "torch._dynamo" in sys.modules
compiled = torch.compile(lambda x: x * 2 + 1, backend="eager")
assert torch.equal(compiled(torch.ones(3)), torch.full((3,), 3.0))
import torch._dynamo
assert type(torch._dynamo).__name__ == "module" and hasattr(torch._dynamo, "reset")
print(pooled.flatten().tolist())
"""


@pytest.mark.slow
def test_the_compiler_stays_unimported_and_works_when_asked_for() -> None:
    done = subprocess.run([sys.executable, "-c", COMPILER_AFTER_IMPORT], capture_output=True, text=True, env=cli_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    plain = subprocess.run(
        [sys.executable, "-c", "import torch, torchvision; b = torch.tensor([[0, 0, 0, 4, 4.0]]); "
         "print(torchvision.ops.roi_align(torch.arange(64.0).reshape(1, 1, 8, 8), b, 2).flatten().tolist())"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.stdout == plain.stdout  # roi_align computes the same as with torchvision imported plainly


def test_a_deferred_disable_wraps_now_and_disables_on_the_first_call() -> None:
    from gradcam_cli.model.libraries import _deferred_disable

    asked: list[tuple] = []

    def original(fn, *args, **kwargs):
        asked.append((fn.__name__, args, kwargs))
        return lambda *a, **k: ("disabled", fn(*a, **k))

    def double(x: int) -> int:
        """Twice x."""
        return 2 * x

    deferred = _deferred_disable(original)(double)
    assert asked == [] and deferred.__name__ == "double" and deferred.__doc__ == "Twice x."
    assert deferred(3) == ("disabled", 6) and deferred(4) == ("disabled", 8)
    assert asked == [("double", (), {})]  # the compiler asked once, on the first call
    factory = _deferred_disable(original)(recursive=False)  # @disable(recursive=False)
    assert factory(double)(1) == ("disabled", 2) and asked[-1] == ("double", (), {"recursive": False})


# ------------------------------------------------------------------ the unfilled build


def _save(model: nn.Module, path: Path) -> Path:
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return path


def _maps_and_scores(loaded, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    from gradcam_cli import cam
    from gradcam_cli.layers.defaults import default_layer_paths

    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))
    layers = default_layer_paths(loaded.model, loaded.arch, loaded.source, input_hw=(size, size))
    result = cam(loaded.model, x, layers=layers)
    with torch.no_grad():
        return result, loaded.model(x)


def _loaded_both_ways(name: str, weights: Path, monkeypatch: pytest.MonkeyPatch):
    """load_model as a run does it (unfilled, then loaded), and as before (filled by the hub's init, then loaded)."""
    from gradcam_cli.model import load

    built: list[nn.Module | None] = []
    with monkeypatch.context() as spied:
        original = load.built_unfilled
        spied.setattr(load, "built_unfilled", lambda build, loads_weights: built.append(original(build, loads_weights)) or built[-1])
        unfilled = load.load_model(name, pretrained=False, weights=weights)
    assert built and built[-1] is not None  # the run's path: built unfilled, not the fallback
    with monkeypatch.context() as patched:
        patched.setattr(load, "built_unfilled", lambda build, loads_weights: None)  # the ordinary build
        filled = load.load_model(name, pretrained=False, weights=weights)
    return unfilled, filled


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet50", "vit_base_patch16_224", "convnext_tiny"])
def test_maps_are_bit_identical_to_the_filled_build_with_weights_given(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import timm_model

    weights = _save(timm_model(name), tmp_path / f"{name}.safetensors")
    unfilled, filled = _loaded_both_ways(name, weights, monkeypatch)
    assert unfilled.model is not filled.model
    maps, scores = _maps_and_scores(unfilled, 224)
    same_maps, same_scores = _maps_and_scores(filled, 224)
    assert torch.equal(scores, same_scores) and torch.equal(maps, same_maps)


@pytest.mark.parametrize(
    "name", ["resnet18", "efficientnet_b0", "mobilenetv3_small_100", "convnext_atto", "regnetx_002", "deit_tiny_patch16_224",
             "swin_tiny_patch4_window7_224", "eva02_tiny_patch14_224", "beit_base_patch16_224", "torchvision:resnet18",
             "torchvision:mobilenet_v3_small", "torchvision:vit_b_16"],
)  # fmt: skip
@pytest.mark.slow
def test_families_built_unfilled_score_exactly_as_built_filled(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every parameter comes from the checkpoint; what a builder computes (position indices, running stats) is kept."""
    from gradcam_cli.model import load

    torch.manual_seed(0)
    built, _, _ = load.build_model(name, pretrained=False)
    weights = _save(built, tmp_path / "w.safetensors")
    unfilled, filled = _loaded_both_ways(name, weights, monkeypatch)
    size = unfilled.data_config.input_hw[0]
    x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(unfilled.model(x), filled.model(x))
    buffers = dict(filled.model.named_buffers())
    assert all(torch.equal(buffer, buffers[key]) for key, buffer in unfilled.model.named_buffers())


class _WithPrivateParameter(nn.Module):
    """A module that keeps one parameter out of its own state dict: a checkpoint can never fill it."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = nn.Linear(3, 2)
        self.hidden = nn.Parameter(torch.ones(2))

    def _save_to_state_dict(self, destination, prefix, keep_vars):  # noqa: ANN001 - torch's signature
        destination[prefix + "seen.weight"] = self.seen.weight
        destination[prefix + "seen.bias"] = self.seen.bias


def test_a_parameter_no_checkpoint_can_fill_is_built_filled() -> None:
    from gradcam_cli.model.unfilled import built_unfilled

    assert built_unfilled(_WithPrivateParameter, loads_weights=False) is None
    model = built_unfilled(lambda: nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)), loads_weights=False)
    assert model is not None
    assert torch.equal(model[1].running_var, torch.ones(2))  # buffers are computed as ever; only parameters wait


def test_a_hub_load_that_misses_a_parameter_is_built_again_filled() -> None:
    from gradcam_cli.model.unfilled import built_unfilled

    source = nn.Linear(3, 2)

    def loads_all() -> nn.Module:
        model = nn.Linear(3, 2)
        model.load_state_dict(source.state_dict())
        return model

    def loads_the_weight_only() -> nn.Module:  # as a hub does when the head is new: strict=False, the bias left to init
        model = nn.Linear(3, 2)
        model.load_state_dict({"weight": source.weight.detach()}, strict=False)
        return model

    model = built_unfilled(loads_all, loads_weights=True)
    assert model is not None and torch.equal(model.weight, source.weight) and torch.equal(model.bias, source.bias)
    assert built_unfilled(loads_the_weight_only, loads_weights=True) is None


@pytest.mark.slow
def test_timm_pretrained_weights_from_a_file_load_unfilled(tmp_path: Path) -> None:
    """timm's own pretrained load (here from a local file) fills every parameter; a new head it leaves to init."""
    from conftest import timm_model

    from gradcam_cli.model.unfilled import built_unfilled
    from gradcam_cli.model.libraries import import_timm

    timm = import_timm()
    source = timm_model("resnet18")
    path = _save(source, tmp_path / "resnet18.safetensors")
    overlay = {"file": str(path)}
    model = built_unfilled(lambda: timm.create_model("resnet18", pretrained=True, pretrained_cfg_overlay=overlay), True)
    assert model is not None
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        assert torch.equal(model.eval()(x), source(x))
    new_head = lambda: timm.create_model("resnet18", pretrained=True, pretrained_cfg_overlay=overlay, num_classes=3)  # noqa: E731
    assert built_unfilled(new_head, True) is None


@pytest.mark.slow
def test_a_checkpoint_missing_a_key_is_one_line(tmp_path: Path) -> None:
    from conftest import timm_model
    from safetensors.torch import save_file

    state = {k: v.contiguous() for k, v in timm_model("resnet18").state_dict().items() if k != "layer1.0.conv1.weight"}
    save_file(state, str(tmp_path / "w.safetensors"))
    image = next((EXAMPLES / "shapes_images").glob("*.jpg"))
    done = subprocess.run(
        cli_command("explain", image, "-m", "resnet18", "--weights", tmp_path / "w.safetensors", "-o", tmp_path / "out"),
        capture_output=True, text=True, env=cli_env(), timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"gradcam: error: --weights {tmp_path / 'w.safetensors'} does not fit this architecture "
        "(missing: layer1.0.conv1.weight); check --model"
    ]


@pytest.mark.slow
@pytest.mark.parametrize(("call", "said"), [("main()", "frozen"), ("main(['methods'])", "not frozen")])
def test_the_command_leaves_its_objects_to_the_end_of_the_process(call: str, said: str) -> None:
    """As the `gradcam` command (argv from sys.argv), main freezes the garbage collector's objects before exiting;
    called by a script or test with its own argv, it leaves the caller's collector alone."""
    script = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('frozen' if gc.get_freeze_count() else 'not frozen'))\n"
        "from gradcam_cli.cli.app import main\n"
        f"sys.argv = ['gradcam', 'methods']\n{call}\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=cli_env(), timeout=120)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == said, done.stderr


@pytest.mark.slow
def test_torchvision_weights_from_the_hub_cache_load_unfilled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--model torchvision:resnet18` with its weights in torch.hub's cache (put there by this test, as a download
    would): built unfilled, every parameter from the cached file, the scores those weights give."""
    from conftest import tv_resnet18

    from gradcam_cli.model import load

    source = tv_resnet18()
    cache = tmp_path / "hub" / "checkpoints"
    cache.mkdir(parents=True)
    torch.save(source.state_dict(), cache / "resnet18-f37072fd.pth")  # the file name the DEFAULT weights' URL ends in
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))
    built: list[nn.Module | None] = []
    original = load.built_unfilled
    monkeypatch.setattr(load, "built_unfilled", lambda build, loads_weights: built.append(original(build, loads_weights)) or built[-1])
    loaded = load.load_model("torchvision:resnet18", pretrained=True)
    assert built and built[-1] is not None
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert torch.equal(loaded.model(x), source(x))


@pytest.mark.slow
def test_timings_that_cannot_be_written_are_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        cli_command("methods"), capture_output=True, text=True, timeout=120,
        env={**cli_env(), "GRADCAM_TIMINGS": str(tmp_path / "no" / "such" / "folder.json")},
    )  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        f"gradcam: GRADCAM_TIMINGS={tmp_path / 'no' / 'such' / 'folder.json'}: cannot write the timings (No such file or directory)"
    ]
