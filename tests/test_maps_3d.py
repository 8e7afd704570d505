"""Maps of clips and volumes: a 5-D input (N, C, T, H, W) gives maps (N, T, H, W) with the guarantees of 2-D.

Random weights only (torchvision's video classifiers with weights=None, a tiny
3-D CNN), seeded inputs. Parity with pytorch-grad-cam 1.5.7 is checked before the
resize: its 3-D maps are resized by scipy's `zoom` (a cubic spline through the
corner cells), ours trilinearly with half-pixel centres (the 3-D form of the
cv2-style bilinear resize of every 2-D map), a choice, not an error. So the
reference is asked for its maps at the layer's own grid, and the comparison is
ours against our resize of those; the difference after the two resizes is
printed, not asserted.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch
from torch import nn

import gradcam_cli
from conftest import require, seeded
from gradcam_cli.cams.engine import compute_cams
from gradcam_cli.cams.methods import get_method
from gradcam_cli.cams.targets import TargetChoice
from gradcam_cli.errors import LayoutError, UsageError
from gradcam_cli.geometry import resize
from gradcam_cli.layers.paths import resolve_layer
from gradcam_cli.layout_3d import LayoutHints3d, channels_dim_hint_3d, detect_layout_3d, mvit_token_grid
from gradcam_cli.maps import normalise
from gradcam_cli.vocab import LayoutKind

pytestmark = pytest.mark.usefixtures("one_thread")

ATOL = 1e-4  # test_parity's: float32 sums in another order (numpy's, torch's) differ by ~1e-6 of a [0, 1] map
FLOAT32_EPS = float(np.finfo(np.float32).eps)
SVD_ROUNDING = 8 * FLOAT32_EPS  # test_methods': backward error of two float32 SVDs, relative to s1
MAP_GAIN = 2.0  # test_methods': how far a min-max map moves per radian the first singular vector turns
REFERENCES = {
    "gradcam": "GradCAM",
    "hirescam": "HiResCAM",
    "gradcam++": "GradCAMPlusPlus",
    "xgradcam": "XGradCAM",
    "layercam": "LayerCAM",
    "gradcam-elementwise": "GradCAMElementWise",
    "eigencam": "EigenCAM",
}


class TinyVolumeNet(nn.Module):
    """A 3-D CNN on one-channel volumes (a CT's N×1×D×H×W): two stride-1 stages around a stride-2 one."""

    def __init__(self, classes: int = 4) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv3d(1, 8, 3, padding=1), nn.ReLU(),
            nn.Conv3d(8, 16, 3, stride=2, padding=1), nn.BatchNorm3d(16), nn.ReLU(),
            nn.Conv3d(16, 16, 3, padding=1), nn.ReLU(),
        )  # fmt: skip
        self.head = nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3, 4)))


class SubVolumeNet(TinyVolumeNet):
    """Its score reads only the features inside BOX (layer cells: t, h, w slices): the map's place is known."""

    BOX = (slice(1, 3), slice(2, 6), slice(5, 11))  # of the 4x8x16 layer grid of an 8x16x32 volume

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inside = self.features(x)[(slice(None), slice(None), *self.BOX)]
        return self.head(inside.mean(dim=(2, 3, 4)))


def seeded_model(model: nn.Module, seed: int) -> nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        for parameter in model.parameters():
            if parameter.dim() == 1:  # biases and the norm's affine: not zeros and ones
                nn.init.normal_(parameter, std=0.2)
        for module in model.modules():
            if isinstance(module, nn.BatchNorm3d):  # statistics that are not the identity
                module.running_mean.normal_(0, 0.1)
                module.running_var.uniform_(0.5, 1.5)
    return model.eval()


@pytest.fixture(scope="module")
def r3d() -> nn.Module:
    torchvision = require("torchvision")
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return torchvision.models.get_model("r3d_18", weights=None).eval()


@pytest.fixture(scope="module")
def tiny() -> nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(1)
        return seeded_model(TinyVolumeNet(), 1)


def _reference(method: str, model: nn.Module, layer: nn.Module, x: torch.Tensor, classes: list[int], negate: bool = False) -> np.ndarray:
    """pytorch-grad-cam's maps at the layer's own grid, each min-max normalised as it does before its resize."""
    cams = require("pytorch_grad_cam")
    base_cam = require("pytorch_grad_cam.base_cam")
    eigen_cam = require("pytorch_grad_cam.eigen_cam")
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    patch = pytest.MonkeyPatch()
    real_scale, real_projection = base_cam.scale_cam_image, eigen_cam.get_2d_projection
    patch.setattr(base_cam, "scale_cam_image", lambda cam, target_size=None: real_scale(cam))  # normalised, not resized
    if negate:  # the other sign of the first principal component (an SVD's sign is arbitrary)
        patch.setattr(eigen_cam, "get_2d_projection", lambda a: -real_projection(a))
    try:
        with getattr(cams, REFERENCES[method])(model=model, target_layers=[layer]) as explainer:
            return explainer(input_tensor=x, targets=[ClassifierOutputTarget(c) for c in classes])
    finally:
        patch.undo()


def _zoomed_reference(method: str, model: nn.Module, layer: nn.Module, x: torch.Tensor, classes: list[int]) -> np.ndarray:
    """pytorch-grad-cam's own maps at the input's size (its scipy zoom), for the printed figure only."""
    cams = require("pytorch_grad_cam")
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    with getattr(cams, REFERENCES[method])(model=model, target_layers=[layer]) as explainer:
        return explainer(input_tensor=x, targets=[ClassifierOutputTarget(c) for c in classes])


def _eigen_tolerance(model: nn.Module, path: str, x: torch.Tensor) -> float:
    """ATOL widened by how far float32 rounding can turn the first singular vector: the gap between s1 and s2."""
    seen: list[torch.Tensor] = []
    handle = resolve_layer(model, path).module.register_forward_hook(lambda _m, _i, out: seen.append(out.detach()))
    with torch.no_grad():
        model(x)
    handle.remove()
    rows = seen[0].flatten(start_dim=2).transpose(1, 2).double()
    s = torch.linalg.svdvals(rows - rows.mean(dim=1, keepdim=True))
    kappa = float((s[:, 0] / (s[:, 0] - s[:, 1])).max())
    return ATOL + MAP_GAIN * SVD_ROUNDING * kappa


def _assert_parity(model: nn.Module, path: str, method: str, x: torch.Tensor, classes: list[int]) -> float:
    """Ours equals the reference's layer-grid maps put through our resize and normalisation; returns the max difference."""
    ours = gradcam_cli.cam(model, x, path, method=method, classes=classes)
    assert ours.shape == (x.shape[0], *x.shape[2:])
    assert torch.isfinite(ours).all() and (ours.flatten(1).amax(dim=1) > 0.99).all()  # real maps, not two blank ones
    layer = resolve_layer(model, path).module
    size = tuple(x.shape[2:])
    candidates = [_reference(method, model, layer, x, classes)]
    tolerance = ATOL
    if method == "eigencam":  # our sign rule (projection.py) against the reference's arbitrary one: either sign
        candidates.append(_reference(method, model, layer, x, classes, negate=True))
        tolerance = _eigen_tolerance(model, path, x)
    diffs = []
    for ref in candidates:
        assert ref.ndim == 4 and ref.shape[0] == x.shape[0]  # (N, t, h, w): the layer's grid
        expected = normalise(resize(torch.from_numpy(ref), size), 3)[0]
        diffs.append((ours - expected).abs().flatten(1).amax(dim=1))
    per_image = torch.stack(diffs).amin(dim=0)  # each image's map matches one sign
    assert (per_image <= tolerance).all(), f"{method}: max diff {per_image.tolist()} > {tolerance:.3g}"
    zoomed = _zoomed_reference(method, model, layer, x, classes)
    after = float(np.abs(ours.numpy() - zoomed).max())
    print(f"{method} {path}: max diff {float(per_image.max()):.2e} at the layer's grid; after the two resizes {after:.3f}")
    return float(per_image.max())


@pytest.mark.slow
@pytest.mark.parametrize("method", list(REFERENCES))
def test_r3d_18_maps_match_pytorch_grad_cam(r3d: nn.Module, method: str) -> None:
    x = seeded(3, 2, 3, 16, 64, 64)  # layer4's grid: 2x4x4
    _assert_parity(r3d, "layer4", method, x, [3, 7])


@pytest.mark.slow
@pytest.mark.parametrize("method", list(REFERENCES))
def test_tiny_volume_cnn_maps_match_pytorch_grad_cam(tiny: nn.Module, method: str) -> None:
    x = seeded(4, 2, 1, 8, 24, 32)  # a volume (D, H, W); the layer's grid 4x12x16
    _assert_parity(tiny, "features.6", method, x, [0, 2])


@pytest.mark.parametrize("method", ["hirescam", "layercam", "gradcam-elementwise"])
def test_the_map_lies_where_the_score_looks(method: str) -> None:
    """Position-wise methods: the score reads only BOX's features, so the layer's map is zero outside BOX, and the
    trilinear resize spreads it at most half a layer cell (one voxel at stride 2) beyond BOX's footprint."""
    with torch.random.fork_rng():
        torch.manual_seed(5)
        model = seeded_model(SubVolumeNet(), 5)
    x = seeded(6, 1, 1, 8, 16, 32)
    maps = gradcam_cli.cam(model, x, "features.6", method=method)[0]
    footprint = tuple(slice(2 * s.start, 2 * s.stop) for s in SubVolumeNet.BOX)  # stride 2 in every dim
    grown = tuple(slice(s.start - 1, s.stop + 1) for s in footprint)
    energy = maps.sum()
    inside = maps[footprint].sum() / energy
    assert float(maps.amax()) == 1.0 and float(energy) > 0
    assert float(maps[grown].sum() / energy) == pytest.approx(1.0, abs=1e-6)  # nothing beyond the half-cell spread
    # the resize's own spread: at stride 2 the voxel either side of a face takes 1/4 of the cell inside it and the
    # voxel inside keeps 3/4, so a map uniform over BOX keeps 1 - 0.5/L of its mass inside along an axis of L voxels:
    # 3.5/4 x 7.5/8 x 11.5/12 = 0.786 for the 4x8x12 footprint (measured: 0.786 for each method); a margin below it
    # for a map that peaks at BOX's faces
    assert float(inside) > 0.7, f"{method}: {float(inside):.3f} of the energy inside the sub-volume"
    print(f"{method}: {float(inside):.3f} of the map's energy inside the sub-volume")


def test_swin3d_channels_last_map() -> None:
    torchvision = require("torchvision")
    with torch.random.fork_rng():
        torch.manual_seed(2)
        model = torchvision.models.get_model("swin3d_t", weights=None).eval()
    x = seeded(7, 1, 3, 4, 96, 96)  # its norm's output (1, 2, 3, 3, 768): channels last
    maps = gradcam_cli.cam(model, x)  # the default layer, `norm`
    assert maps.shape == (1, 4, 96, 96)
    assert torch.isfinite(maps).all() and float(maps.amax()) == 1.0 and float(maps.amin()) == 0.0
    stage = gradcam_cli.cam(model, x, "features.-1")  # a Sequential of blocks: channels last read from the shape alone
    assert stage.shape == (1, 4, 96, 96) and torch.isfinite(stage).all() and float(stage.amax()) == 1.0


def test_s3d_map_and_its_blank_flag() -> None:
    """Random S3D's features shrink to ~1e-6 through its blocks, so the top class is its largest bias and its own
    features' contribution is negative everywhere: a blank map, flagged. Without the head's bias the score is the
    features' own, and the map is real."""
    torchvision = require("torchvision")
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = torchvision.models.get_model("s3d", weights=None).eval()
    x = seeded(8, 1, 3, 16, 224, 224)  # S3D's pooling needs 224 and at least 14 frames
    layers = [resolve_layer(model, "features.-1")]
    blank = compute_cams(model, x, layers, get_method("gradcam"), TargetChoice())
    assert blank.maps.shape == (1, 1, 16, 224, 224) and bool(blank.blank[0, 0]) and bool(blank.finite[0])
    assert float(blank.maps.abs().max()) == 0.0
    nn.init.zeros_(model.classifier[1].bias)
    maps = gradcam_cli.cam(model, x)
    assert maps.shape == (1, 16, 224, 224) and torch.isfinite(maps).all() and float(maps.amax()) == 1.0


def test_mvit_tokens_on_the_models_own_grid() -> None:
    """MViT's 16x224x224 clip: 8x56x56 tokens after its patch embedding, 8x28x28 after block 1's query pooling,
    8x14x14 after block 3's, 8x7x7 after block 14's (torchvision's mvit_v1_b stride_q)."""
    torchvision = require("torchvision")
    model = torchvision.models.get_model("mvit_v1_b", weights=None)
    assert mvit_token_grid(model, "blocks.0.norm1") == (8, 56, 56)
    assert mvit_token_grid(model, "blocks.1.norm1") == (8, 56, 56)  # the block's input: its pooling comes after
    assert mvit_token_grid(model, "blocks.1") == (8, 28, 28)
    assert mvit_token_grid(model, "blocks.4.norm1") == (8, 14, 14)
    assert mvit_token_grid(model, "blocks.-1.norm1") == (8, 7, 7)
    assert mvit_token_grid(model, "norm") == (8, 7, 7)
    assert mvit_token_grid(model, "blocks.3.attn.pool_q") is None  # inside the pooling: not said
    assert mvit_token_grid(nn.Linear(2, 2), "blocks.0.norm1") is None


@pytest.mark.slow
def test_mvit_map_of_its_default_layer() -> None:
    torchvision = require("torchvision")
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = torchvision.models.get_model("mvit_v1_b", weights=None).eval()
    maps = gradcam_cli.cam(model, seeded(9, 1, 3, 16, 224, 224))  # blocks.-1.norm1: 1 class token + 8x7x7
    assert maps.shape == (1, 16, 224, 224) and torch.isfinite(maps).all() and float(maps.amax()) == 1.0


def test_channels_last_and_first_are_recognised() -> None:
    clip = (16, 64, 64)
    last = detect_layout_3d((2, 8, 16, 16, 96), clip, LayoutHints3d())  # Swin3D's stage: N×T×H×W×C
    assert last.kind is LayoutKind.NTHWC and last.grid == (8, 16, 16)
    first = detect_layout_3d((2, 96, 8, 16, 16), clip, LayoutHints3d())
    assert first.kind is LayoutKind.NCTHW and first.grid == (8, 16, 16)
    t = torch.arange(2 * 8 * 16 * 16 * 96, dtype=torch.float32).reshape(2, 8, 16, 16, 96)
    assert torch.equal(last.to_nchw(t), t.permute(0, 4, 1, 2, 3))
    # a cube: the shape cannot tell, the module type does
    cube = (1, 8, 8, 8, 8)
    assert detect_layout_3d(cube, clip, LayoutHints3d(channels_dim=-1)).kind is LayoutKind.NTHWC
    assert detect_layout_3d(cube, clip, LayoutHints3d(channels_dim=1)).kind is LayoutKind.NCTHW
    assert channels_dim_hint_3d(nn.Conv3d(1, 1, 1)) == channels_dim_hint_3d(nn.BatchNorm3d(1)) == 1
    assert channels_dim_hint_3d(nn.LayerNorm(4)) == channels_dim_hint_3d(nn.Linear(4, 4)) == -1
    tokens = detect_layout_3d((1, 1 + 8 * 7 * 7, 768), (16, 224, 224), LayoutHints3d(token_grid=(8, 7, 7)))
    assert tokens.kind is LayoutKind.NLC and tokens.prefix_tokens == 1 and tokens.grid == (8, 7, 7)


def _one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text and "Traceback" not in text
    return text


def test_what_cannot_be_laid_out_is_one_line_naming_a_layer_that_works() -> None:
    hints = LayoutHints3d(map_layer="conv_proj")
    with pytest.raises(LayoutError) as tokens:
        detect_layout_3d((1, 393, 768), (16, 224, 224), hints, "blocks.3.attn")
    assert "'conv_proj'" in _one_line(tokens.value) and "token sequence" in str(tokens.value)
    with pytest.raises(LayoutError) as flat:
        detect_layout_3d((1, 400), (16, 224, 224), hints, "head")
    assert "'conv_proj'" in _one_line(flat.value)


def test_a_video_classifiers_pooled_layer_is_refused_naming_its_default(r3d: nn.Module) -> None:
    x = seeded(1, 1, 3, 8, 64, 64)
    for layer in ("avgpool", "fc"):  # one cell; no grid at all
        with pytest.raises(LayoutError) as refused:
            gradcam_cli.cam(r3d, x, layer)
        assert "'layer4'" in _one_line(refused.value)


def test_gradcam_layers_lists_a_video_classifier_at_its_clip_size(run_cli) -> None:
    result = run_cli("layers", "torchvision:r3d_18", "--depth", "1")
    assert result.code == 0, result.stderr
    assert "* layer4  Sequential  1x512x2x7x7  [NCTHW 2x7x7]" in result.stdout
    assert "# input 16x112x112; default target: layer4 (marked *)" in result.stderr


@pytest.mark.parametrize("method", ["scorecam", "ablationcam", "fullgrad", "guided-gradcam"])
def test_methods_that_cannot_map_a_clip_are_refused_in_one_line(tiny: nn.Module, method: str) -> None:
    with pytest.raises(UsageError) as refused:
        gradcam_cli.cam(tiny, seeded(1, 1, 1, 8, 16, 16), "features.6", method=method)
    assert method in _one_line(refused.value) and "clip or a volume" in str(refused.value)


def test_aug_smooth_is_refused_for_a_clip(tiny: nn.Module) -> None:
    with pytest.raises(UsageError) as refused:
        gradcam_cli.cam(tiny, seeded(1, 1, 1, 8, 16, 16), "features.6", aug_smooth=True)
    assert "aug_smooth" in _one_line(refused.value)


@pytest.fixture
def trained_volume_net() -> Iterator[nn.Module]:
    with torch.random.fork_rng():
        torch.manual_seed(3)
        model = seeded_model(TinyVolumeNet(), 3)
    model.train()
    model.features[0].weight.requires_grad_(False)
    yield model


def test_the_model_is_left_as_found_also_under_no_grad(trained_volume_net: nn.Module) -> None:
    model = trained_volume_net
    before = {name: (p.requires_grad, p.detach().clone()) for name, p in model.named_parameters()}
    stats = model.features[3].running_mean.clone()
    with torch.no_grad():
        maps = gradcam_cli.cam(model, seeded(2, 2, 1, 8, 16, 16), "features.6")
    assert maps.shape == (2, 8, 16, 16) and torch.isfinite(maps).all()
    assert model.training and all(m.training for m in model.modules())
    assert all(not m._forward_hooks and not m._backward_hooks and not m._forward_pre_hooks for m in model.modules())
    for name, p in model.named_parameters():
        assert p.requires_grad == before[name][0] and torch.equal(p.detach(), before[name][1])
    assert torch.equal(model.features[3].running_mean, stats)  # the maps' forward ran in eval mode


def test_a_nan_clip_is_flagged(tiny: nn.Module) -> None:
    x = seeded(2, 2, 1, 8, 16, 16)
    x[1, 0, 3, 4, 5] = float("nan")
    batch = compute_cams(tiny, x, [resolve_layer(tiny, "features.6")], get_method("gradcam"), TargetChoice())
    assert batch.finite.tolist() == [True, False]
    assert torch.isfinite(batch.maps).all()  # the flag says it; the maps hold no NaN


def test_a_volume_cnn_gets_its_last_map_by_default(tiny: nn.Module) -> None:
    x = seeded(5, 1, 1, 8, 16, 16)
    assert torch.equal(gradcam_cli.cam(tiny, x), gradcam_cli.cam(tiny, x, "features"))


def test_trilinear_resize_keeps_a_constant_and_2d_is_untouched() -> None:
    small = torch.full((2, 2, 3, 4), 0.25)
    assert torch.equal(resize(small, (8, 12, 16)), torch.full((2, 8, 12, 16), 0.25))
    image = seeded(1, 2, 3, 5)
    expected = torch.nn.functional.interpolate(image[:, None], size=(10, 15), mode="bilinear", align_corners=False)[:, 0]
    assert torch.equal(resize(image, (10, 15)), expected)
    maps, blank = normalise(torch.stack([seeded(2, 3, 4, 5), torch.zeros(3, 4, 5)]), 3)
    assert blank.tolist() == [False, True] and float(maps[0].amax()) == 1.0 and float(maps[0].amin()) == 0.0


def test_torchvision_video_classifiers_by_name() -> None:
    """Random weights (nothing downloaded): the clip length and size the pipeline reads, the weights' statistics."""
    ready = gradcam_cli.load_model("torchvision:r3d_18", pretrained=False, device="cpu")
    config = ready.data_config
    assert config.clip_length == 16 and config.input_size == (16, 112, 112)
    assert config.mean == (0.43216, 0.394666, 0.37645) and config.std == (0.22803, 0.22145, 0.216989)  # Kinetics-400's
    assert ready.num_classes == 400
    x = seeded(1, 1, 3, *config.input_size)
    assert gradcam_cli.cam(ready.model, x).shape == (1, *config.input_size)  # layer4, found from the class alone
    from gradcam_cli.model.torchvision_hub import TORCHVISION

    defaults = {arch: TORCHVISION.default_layer(nn.Identity(), arch) for arch in ("mc3_18", "r2plus1d_18", "s3d", "swin3d_t", "mvit_v1_b")}
    assert defaults == {
        "mc3_18": "layer4", "r2plus1d_18": "layer4", "s3d": "features.-1", "swin3d_t": "norm", "mvit_v1_b": "blocks.-1.norm1",
    }  # fmt: skip
    with pytest.raises(UsageError) as unknown:
        gradcam_cli.load_model("torchvision:r3d_81", pretrained=False, device="cpu")
    assert "r3d_18" in _one_line(unknown.value)
