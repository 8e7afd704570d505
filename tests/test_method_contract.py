"""The contract every registered CAM method keeps, checked over the registry, not over a list kept by hand.

For each method in `METHODS`, on a small CNN and a small ViT (random weights, never pretrained):
maps of the input's size, finite, in [0, 1] under the default min-max norm and spanning it
unless flagged blank; blank flags set where a map must be blank; the model left as found, also
when its forward raises after the target layer; a citation of the method's paper. Then the
registry's names against pytorch-grad-cam's classes, and a check that the as-found check can fail.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable

import pytest
import torch

from conftest import SmallCnn, assert_left_as_found, left_as_found, model_state, require, seeded, timm_model
from gradcam_cli.cams.engine import compute_cams
from gradcam_cli.cams.methods import METHODS, MethodKind
from gradcam_cli.cams.targets import TargetChoice
from gradcam_cli.layers.paths import resolve_layers
from gradcam_cli.maps import CamBatch

require("timm")

pytestmark = pytest.mark.usefixtures("one_thread")

NAMES = list(METHODS)
TOPK = 2  # two target ranks per image: every runner's per-rank loop is exercised


def small_cnn() -> torch.nn.Module:
    torch.manual_seed(0)
    return SmallCnn().eval()


def small_vit() -> torch.nn.Module:
    """timm's test_vit (width 64, a class token) at 48x80: a 3x5 patch grid, so a swapped H and W shows."""
    return timm_model("test_vit", img_size=(48, 80))


# case → (model factory, input shape (N, 3, H, W), layer); 32x48 gives conv2 a 8x12 map (non-square, upsampled)
CASES: dict[str, tuple[Callable[[], torch.nn.Module], tuple[int, ...], str]] = {
    "cnn": (small_cnn, (2, 3, 32, 48), "conv2"),
    "vit": (small_vit, (2, 3, 48, 80), "blocks.-1.norm1"),
}


def explain(model: torch.nn.Module, x: torch.Tensor, layer: str, name: str) -> CamBatch:
    """The engine, as `gradcam_cli.cam` calls it, for the top TOPK classes; the model must come back as found."""
    with left_as_found(model):
        return compute_cams(
            model,
            x,
            resolve_layers(model, [layer]),
            METHODS[name],
            TargetChoice(topk=TOPK),
            num_prefix_tokens=getattr(model, "num_prefix_tokens", None),
        )


# ---------------------------------------------------------------- maps: size, finite, [0, 1]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", NAMES)
def test_maps_have_the_input_size_are_finite_and_span_0_to_1(name: str, case: str) -> None:
    make, shape, layer = CASES[case]
    model = make()
    x = seeded(41, *shape)
    batch = explain(model, x, layer, name)

    n, _, h, w = shape
    assert batch.maps.shape == (n, TOPK, h, w)
    assert batch.blank.shape == (n, TOPK) and batch.blank.dtype == torch.bool
    assert torch.equal(batch.targets, model(x).topk(TOPK, dim=1).indices)
    assert torch.isfinite(batch.maps).all() and batch.finite.all()
    assert batch.maps.min() >= 0 and batch.maps.max() <= 1
    # A positive control for the blank test below: on random weights every method finds a pattern
    # here (checked for these seeds). Without it, "flat maps are blank" would also pass with every
    # map blank.
    assert not batch.blank.any(), batch.blank
    # Min-max: each map's smallest value becomes (low - low) / span = 0 and its largest
    # (high - low) / span = 1, both exact in floating point (x - x = 0, x / x = 1), so no tolerance.
    flat = batch.maps.flatten(2)
    assert (flat.amin(dim=2) == 0).all() and (flat.amax(dim=2) == 1).all()


# ---------------------------------------------------------------- blank maps


def flat_layer_cnn() -> torch.nn.Module:
    """A SmallCnn whose conv2 output is the same at every position, whatever the image.

    conv1's weights are zero and its bias -1, so act1 outputs zeros everywhere; conv2 then sees
    zeros (zero-padded too) and outputs its bias at every position, and bn2 and act2 keep that
    flat. The score still depends on conv2 (its gradients are not zero; this is not the "score
    does not depend on the layer" error), but no position differs from another: there is nothing
    to localise, so every map must be flat, hence blank, and zeros rather than NaN.
    FullGrad ignores the layer; for it the whole network is flat: the input gradient is exactly
    zero (conv1's weights), conv1's bias gradient is zero (act1 is dead), and conv2's and bn2's
    bias gradients are the same at every position (act2's mask is flat and the pooling is a mean).
    """
    model = small_cnn()
    with torch.no_grad():
        model.conv1.weight.zero_()
        model.conv1.bias.fill_(-1.0)
    return model


def zeroed_norm_vit() -> torch.nn.Module:
    """The small ViT with the last block's norm1 scaled to zero (weight and bias 0): the layer outputs
    exactly zero at every token, so every channel is zero and a layer method has nothing to weigh."""
    model = small_vit()
    with torch.no_grad():
        model.blocks[-1].norm1.weight.zero_()
        model.blocks[-1].norm1.bias.zero_()
    return model


def assert_all_blank(batch: CamBatch) -> None:
    assert batch.blank.all(), batch.blank
    assert torch.equal(batch.maps, torch.zeros_like(batch.maps))  # zeros, never NaN or a stretched flat map
    assert batch.finite.all()


@pytest.mark.parametrize("name", NAMES)
def test_a_flat_layer_gives_blank_maps(name: str) -> None:
    model = flat_layer_cnn()
    _, shape, layer = CASES["cnn"]
    assert_all_blank(explain(model, seeded(42, *shape), layer, name))


# FullGrad (the NETWORK kind) does not read the layer: the zeroed norm leaves its map as it was
@pytest.mark.parametrize("name", [n for n, m in METHODS.items() if m.kind is not MethodKind.NETWORK])
def test_a_zero_token_layer_gives_blank_maps(name: str) -> None:
    model = zeroed_norm_vit()
    _, shape, layer = CASES["vit"]
    assert_all_blank(explain(model, seeded(43, *shape), layer, name))


# ---------------------------------------------------------------- the model left as found


def mixed_state_cnn(fail: bool) -> torch.nn.Module:
    """In-place ReLUs, train mode (bn2 would update its statistics), a frozen conv1, a user's own hook."""
    torch.manual_seed(0)
    model = SmallCnn(inplace=True, fail=fail).train()
    model.conv1.requires_grad_(False)
    return model


@pytest.mark.parametrize("fails", [False, True], ids=["succeeds", "forward-raises"])
@pytest.mark.parametrize("name", NAMES)
def test_model_left_as_found(name: str, fails: bool) -> None:
    model = mixed_state_cnn(fails)
    calls = []
    model.conv2.register_forward_hook(lambda *_: calls.append(1))  # the user's: must stay, and run
    x = seeded(44, 2, 3, 32, 48)
    with left_as_found(model) as before:
        assert before["hooks"][("conv2", "_forward_hooks")]  # the user's hook is part of what must stay
        if fails:
            with pytest.raises(RuntimeError, match="boom after the target layers"):
                compute_cams(model, x, resolve_layers(model, ["conv2"]), METHODS[name], TargetChoice())
        else:
            batch = compute_cams(model, x, resolve_layers(model, ["conv2"]), METHODS[name], TargetChoice())
            assert torch.isfinite(batch.maps).all()
    assert calls, "the forward never reached the target layer"
    assert model.training and model.act1.inplace and model.act2.inplace


def _add_hook(model: torch.nn.Module) -> None:
    model.conv2.register_forward_hook(lambda *_: None)


def _swap_module(model: torch.nn.Module) -> None:
    model.act1 = torch.nn.ReLU()


def _fill_grad(model: torch.nn.Module) -> None:
    model.fc.weight.grad = torch.zeros_like(model.fc.weight)


def _patch_forward(model: torch.nn.Module) -> None:
    model.fc.forward = model.fc.forward


def _step_statistics(model: torch.nn.Module) -> None:
    model.bn2.running_mean += 1


def _change_weight(model: torch.nn.Module) -> None:
    with torch.no_grad():
        model.conv1.weight[0, 0, 0, 0] += 1


CHANGES: dict[str, Callable[[torch.nn.Module], None]] = {
    "hook": _add_hook,
    "swapped module": _swap_module,
    "training flag": lambda m: m.bn2.train(not m.bn2.training),
    "inplace flag": lambda m: setattr(m.act1, "inplace", not m.act1.inplace),
    "requires_grad": lambda m: m.fc.weight.requires_grad_(False),
    ".grad": _fill_grad,
    "patched forward": _patch_forward,
    "running statistics": _step_statistics,
    "weight": _change_weight,
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_the_as_found_check_sees_each_change(change: str) -> None:
    model = small_cnn()
    before = model_state(model)
    assert_left_as_found(model, before)  # nothing changed: passes
    CHANGES[change](model)
    with pytest.raises(AssertionError):
        assert_left_as_found(model, before)


@pytest.mark.parametrize("mode", ["grad disabled", "function mode"])
def test_the_as_found_check_sees_torch_left_in_another_mode(mode: str) -> None:
    from torch.overrides import TorchFunctionMode

    class PassThrough(TorchFunctionMode):  # as guided backprop's, minus the hooks
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            return func(*args, **(kwargs or {}))

    model = small_cnn()
    before = model_state(model)
    context = torch.no_grad() if mode == "grad disabled" else PassThrough()
    with context, pytest.raises(AssertionError):
        assert_left_as_found(model, before)


# ---------------------------------------------------------------- citations and names

# arXiv identifiers since April 2007 are YYMM.NNNN, with five digits from January 2015 on
ARXIV = re.compile(r"\barXiv:(\d{2})(\d{2})\.(\d{4,5})\b")
DOI = re.compile(r"\bdoi:10\.\d{4,9}/\S+")
VENUE_YEAR = re.compile(r"\b(ICCV|CVPR|ECCV|WACV|BMVC|NeurIPS|ICLR|ICML|IJCNN|AAAI|TPAMI|IEEE T[A-Z]+)\b[^.;()]*?\b((?:19|20)\d\d)\b")
AUTHORS = re.compile(r"\b[A-Z][\w-]+ (?:et al\.|& [A-Z][\w-]+)")


def citation(name: str) -> str:
    """The registry keeps a method's summary and cost; its paper is cited in the first paragraph of
    the docstring of the module that registered it (the module of its compute function)."""
    doc = sys.modules[METHODS[name].compute.__module__].__doc__ or ""
    return " ".join(doc.strip().split("\n\n")[0].split())


@pytest.mark.parametrize("name", NAMES)
def test_each_method_cites_its_paper(name: str) -> None:
    text = citation(name)
    arxiv = [(int(yy), int(mm), number) for yy, mm, number in ARXIV.findall(text)]
    venues = [int(year) for _, year in VENUE_YEAR.findall(text)]
    assert AUTHORS.search(text), f"{name}: no authors ('Name et al.' or 'Name & Name') in {text!r}"
    assert arxiv or DOI.search(text) or venues, f"{name}: no arXiv id, DOI or venue and year in {text!r}"
    for yy, mm, number in arxiv:
        assert 1 <= mm <= 12 and (yy, mm) >= (7, 4), f"{name}: arXiv:{yy:02}{mm:02}.{number} is no arXiv id"
        assert len(number) == (5 if yy >= 15 else 4), f"{name}: arXiv:{yy:02}{mm:02}.{number} has the wrong length"
        if venues:  # a preprint comes before its venue, or at most a year after it (some are posted late)
            assert 2000 + yy <= max(venues) + 1, f"{name}: preprint of 20{yy:02} for a venue of {max(venues)}"


# Each registered name and the pytorch-grad-cam class(es) it reproduces (Guided Grad-CAM is
# GradCAM x GuidedBackpropReLUModel there); the parity tests compare them map by map.
EQUIVALENTS = {
    "gradcam": ("GradCAM",),
    "hirescam": ("HiResCAM",),
    "gradcam-elementwise": ("GradCAMElementWise",),
    "gradcam++": ("GradCAMPlusPlus",),
    "xgradcam": ("XGradCAM",),
    "layercam": ("LayerCAM",),
    "eigengradcam": ("EigenGradCAM",),
    "eigencam": ("EigenCAM",),
    "scorecam": ("ScoreCAM",),
    "ablationcam": ("AblationCAM",),
    "guided-gradcam": ("GradCAM", "GuidedBackpropReLUModel"),
    "fullgrad": ("FullGrad",),
}


def test_the_registry_holds_pytorch_grad_cams_methods_under_these_names() -> None:
    pytorch_grad_cam = require("pytorch_grad_cam")
    assert set(METHODS) == set(EQUIVALENTS)
    for name, classes in EQUIVALENTS.items():
        assert all(isinstance(getattr(pytorch_grad_cam, c, None), type) for c in classes), (name, classes)
        assert METHODS[name].name == name
