"""The gradient-free methods (eigencam, scorecam, ablationcam).

Parity with pytorch-grad-cam on the two cases of test_methods (a CNN stage and
a class-token ViT norm layer with the reference's hand-written reshape), one
different class per image; hand computations where we deliberately differ
from the reference (Ablation-CAM on signed and token layers); the flat-memory
promise of the chunked forwards (perturb.py); and the model left as found.

The first principal component (eigencam, --eigen-smooth) is defined only up to
sign; the reference keeps whatever LAPACK returns while ours fixes the sign
(methods/projection.py). As in test_methods, each image must then match either
our map or the map of the negated component, computed through the same pipeline.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import gradcam_cli
from conftest import ROOT, left_as_found, require, seeded, shared_timm_model, timm_model
from gradcam_cli.cams import engine as cams
from gradcam_cli.cams.methods.projection import first_component

timm = require("timm")
require("pytorch_grad_cam")
from pytorch_grad_cam import AblationCAM, EigenCAM, ScoreCAM  # noqa: E402
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget  # noqa: E402
from test_methods import ATOL, CASES, per_image_classes  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

SEED = 21


def case_inputs(case: str) -> tuple[nn.Module, torch.Tensor, list[int]]:
    model_name, shape, *_ = CASES[case]
    model = shared_timm_model(model_name)
    x = seeded(SEED, *shape)
    return model, x, per_image_classes(model, x)


def ours(case: str, method: str, x: torch.Tensor, classes: list[int], *, negated: bool = False, **options) -> np.ndarray:
    """Our maps for a case; `negated`: with the first principal component's sign flipped."""
    model_name, _, path, _, _ = CASES[case]
    with pytest.MonkeyPatch.context() as patch:
        if negated:
            patch.setattr(cams, "first_component", lambda weighted: -first_component(weighted))
        maps = gradcam_cli.cam(shared_timm_model(model_name), x, path, method=method, classes=classes, **options)
    assert torch.isfinite(maps).all()
    return maps.numpy()


def reference(
    case: str, explainer_class: type, x: torch.Tensor, classes: list[int], *, eigen_smooth: bool = False, **attributes
) -> np.ndarray:
    model_name, _, _, module, reshape = CASES[case]
    model = shared_timm_model(model_name)
    with explainer_class(model=model, target_layers=[module(model)], reshape_transform=reshape) as explainer:
        for name, value in attributes.items():
            setattr(explainer, name, value)
        return explainer(input_tensor=x, targets=[ClassifierOutputTarget(c) for c in classes], eigen_smooth=eigen_smooth)


def assert_real_maps(*maps: np.ndarray) -> None:
    """A real map per image on each side, not two blank ones that agree trivially."""
    for m in maps:
        assert (m.reshape(m.shape[0], -1).max(axis=1) > 0.99).all()


def assert_matches(mine: np.ndarray, ref: np.ndarray, flipped: np.ndarray | None = None) -> list[float]:
    """Equal within ATOL; with `flipped`, each image may match either sign. Returns the max diff per image."""
    assert mine.shape == ref.shape
    assert_real_maps(mine, ref)
    if flipped is None:
        np.testing.assert_allclose(mine, ref, atol=ATOL, rtol=0)
        return [float(np.abs(mine[i] - ref[i]).max()) for i in range(len(ref))]
    diffs = []
    for i in range(len(ref)):
        diff = min(float(np.abs(mine[i] - ref[i]).max()), float(np.abs(flipped[i] - ref[i]).max()))
        assert diff <= ATOL, f"image {i}: max diff {diff:.3g} with either sign"
        diffs.append(diff)
    return diffs


@pytest.mark.parametrize("case", list(CASES))
def test_eigencam_matches_reference(case: str) -> None:
    _, x, classes = case_inputs(case)
    ref = reference(case, EigenCAM, x, classes)
    mine = ours(case, "eigencam", x, classes)
    assert mine.shape == (x.shape[0], *x.shape[2:])
    print(case, "eigencam max diff", assert_matches(mine, ref, ours(case, "eigencam", x, classes, negated=True)))


@pytest.mark.parametrize("eigen_smooth", [False, True], ids=["sum", "eigen-smooth"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.slow
def test_scorecam_matches_reference(case: str, eigen_smooth: bool) -> None:
    _, x, classes = case_inputs(case)
    # the reference runs its masked forwards 16 at a time unless told otherwise
    ref = reference(case, ScoreCAM, x, classes, eigen_smooth=eigen_smooth, batch_size=64)
    mine = ours(case, "scorecam", x, classes, eigen_smooth=eigen_smooth)
    flipped = ours(case, "scorecam", x, classes, eigen_smooth=True, negated=True) if eigen_smooth else None
    print(case, "scorecam", eigen_smooth, "max diff", assert_matches(mine, ref, flipped))


@pytest.mark.parametrize(
    "case, method",
    [("resnet-layer4", "scorecam"), ("vit-last-norm1", "scorecam"), ("resnet-layer4", "ablationcam")],
)
@pytest.mark.slow
def test_chunk_size_does_not_change_the_map(case: str, method: str) -> None:
    """(image, channel) pairs are flattened across the batch and cut into chunks: one pair
    per forward (1), chunks straddling two images (7 divides neither 96 nor 64 channels),
    whole images per chunk (64 on the ViT's 64 channels); against the default 32.
    Two images are enough for a chunk to straddle them, and keep the 1-pair runs short."""
    _, x, classes = case_inputs(case)
    x, classes = x[:2], classes[:2]
    default = ours(case, method, x, classes)
    for size in (1, 7, 64):
        chunked = ours(case, method, x, classes, cam_batch_size=size)
        np.testing.assert_allclose(chunked, default, atol=ATOL, rtol=0, err_msg=f"cam_batch_size={size}")
        print(case, method, size, "max diff", float(np.abs(chunked - default).max()))


@pytest.mark.parametrize("eigen_smooth", [False, True], ids=["sum", "eigen-smooth"])
@pytest.mark.slow
def test_ablationcam_matches_reference_on_post_relu_layer(eigen_smooth: bool) -> None:
    case = "resnet-layer4"
    model, x, classes = case_inputs(case)
    # precondition: the layer's minimum is exactly 0 for every image, so the
    # reference's ablation layer zeroes the channel, as we do
    recorded = {}
    handle = model.layer4.register_forward_hook(lambda _m, _i, out: recorded.update(out=out))
    with torch.no_grad():
        model(x)
    handle.remove()
    assert (recorded["out"].flatten(1).amin(dim=1) == 0).all()

    ref = reference(case, AblationCAM, x, classes, eigen_smooth=eigen_smooth)
    mine = ours(case, "ablationcam", x, classes, eigen_smooth=eigen_smooth)
    flipped = ours(case, "ablationcam", x, classes, eigen_smooth=True, negated=True) if eigen_smooth else None
    print(case, "ablationcam", eigen_smooth, "max diff", assert_matches(mine, ref, flipped))


def minmax(maps: torch.Tensor) -> torch.Tensor:
    """(N, H, W) each scaled to [0, 1] (the hand computations' own, not gradcam_cli's)."""
    low = maps.amin(dim=(1, 2), keepdim=True)
    high = maps.amax(dim=(1, 2), keepdim=True)
    return (maps - low) / (high - low)


class SignedNet(nn.Module):
    """1x1 conv to 3 channels of both signs → global mean → linear, all weights set by hand."""

    W_CONV = (1.0, -2.0, 0.5)
    B_CONV = (0.0, 1.0, -0.25)
    W_FC = ((1.0, 0.5, -1.0), (-0.5, 1.0, 2.0))
    B_FC = (3.0, 2.0)

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 3, kernel_size=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flat = nn.Flatten()
        self.fc = nn.Linear(3, 2)
        with torch.no_grad():
            self.conv.weight.copy_(torch.tensor(self.W_CONV).reshape(3, 1, 1, 1))
            self.conv.bias.copy_(torch.tensor(self.B_CONV))
            self.fc.weight.copy_(torch.tensor(self.W_FC))
            self.fc.bias.copy_(torch.tensor(self.B_FC))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.flat(self.pool(self.conv(x))))


def test_ablationcam_zeroes_channels_of_a_signed_layer() -> None:
    """Where the reference writes (min - 1e7) instead of 0 (see methods/ablationcam.py), a hand computation.

    The conv output is 6x6 like the input, so no upsampling enters the map.
    """
    x = seeded(SEED, 2, 1, 6, 6)
    classes = [0, 1]
    w_conv, b_conv = torch.tensor(SignedNet.W_CONV), torch.tensor(SignedNet.B_CONV)
    w_fc, b_fc = torch.tensor(SignedNet.W_FC), torch.tensor(SignedNet.B_FC)

    a = w_conv[None, :, None, None] * x + b_conv[None, :, None, None]  # (2, 3, 6, 6) the layer's output
    assert a.min() < 0 < a.max()  # a signed layer: the case where the reference deviates from the paper

    def score(activations: torch.Tensor, image: int) -> torch.Tensor:
        return activations.mean(dim=(1, 2)) @ w_fc[classes[image]] + b_fc[classes[image]]

    weights = torch.empty(2, 3)
    for i in range(2):
        s = score(a[i], i)
        assert s.abs() > 0.5  # the relative drop is well defined
        for c in range(3):
            ablated = a[i].clone()
            ablated[c] = 0
            weights[i, c] = (s - score(ablated, i)) / s
    expected = minmax((weights[:, :, None, None] * a).sum(dim=1).clamp(min=0))

    mine = gradcam_cli.cam(SignedNet().eval(), x, "conv", method="ablationcam", classes=classes)
    assert_real_maps(expected.numpy())
    np.testing.assert_allclose(mine.numpy(), expected.numpy(), atol=ATOL, rtol=0)


def test_ablationcam_on_tokens_zeroes_the_channel_in_every_token() -> None:
    """test_vit's last norm1 outputs (N, 1 + 10x10, 64): a hand computation of the zeroing
    rule, one forward per (image, channel) with the output replaced by a plain forward hook."""
    case = "vit-last-norm1"
    model, x, classes = case_inputs(case)
    layer = model.blocks[-1].norm1
    recorded: dict[str, torch.Tensor] = {}
    handle = layer.register_forward_hook(lambda _m, _i, out: recorded.update(out=out))
    with torch.no_grad():
        logits = model(x)
    handle.remove()
    tokens = recorded["out"]
    n, length, channels = tokens.shape
    assert tokens.min() < 0  # signed: the reference would not zero here

    keep = 1 - torch.eye(channels)[:, None, :]  # row c: channel c zeroed in every token, class token included
    weights = torch.empty(n, channels)
    for i in range(n):
        handle = layer.register_forward_hook(lambda _m, _i, _out, i=i: tokens[i][None] * keep)
        try:
            with torch.no_grad():
                ablated = model(x[i].expand(channels, -1, -1, -1))[:, classes[i]]
        finally:
            handle.remove()
        s = logits[i, classes[i]]
        weights[i] = (s - ablated) / s
    grid = tokens[:, 1:].reshape(n, 10, 10, channels).permute(0, 3, 1, 2)
    low_res = minmax((weights[:, :, None, None] * grid).sum(dim=1).clamp(min=0))
    # bilinear with half-pixel centres (cv2.resize, as the reference), then scaled again
    expected = minmax(F.interpolate(low_res[:, None], size=x.shape[-2:], mode="bilinear", align_corners=False)[:, 0])

    mine = ours(case, "ablationcam", x, classes)
    assert_real_maps(expected.numpy())
    np.testing.assert_allclose(mine, expected.numpy(), atol=ATOL, rtol=0)


# Peak memory of one explanation, in its own process. The toy model pools the
# 128x128 input 16x16 before its C-channel 1x1 conv, so the model itself stays
# small at any C (a full-resolution C=2048 conv would output 134 MB per image,
# 2 GB per chunk of 16, and take teraflops): what grows with C is only what the
# method builds, which is the point. Stacking every masked input at once, as the
# reference's Score-CAM does, would take 2048 x 3 x 128 x 128 x 4 B = 403 MB
# (plus 134 MB of upsampled masks); one chunk of 16 takes 3 MB. What does grow
# with C is one chunk's activations at the layer, 16 x C x 8 x 8 x 4 B = 8 MB a
# copy at C=2048 (the conv's output, the ReLU's, Ablation-CAM's edited copy):
# measured, the peak grew about 17 MB (scorecam) and 32 MB (ablationcam) from
# C=64 to C=2048, against about 2 GB for the reference's Score-CAM.
#
# The peak is VmHWM, not getrusage's ru_maxrss: Linux carries the maxrss of the
# forking process over into the child across exec, so a child of a 1 GB pytest
# reports >= 1 GB whatever it does. VmHWM belongs to the child's own address
# space, which exec makes fresh.
MEMORY_SCRIPT = """
import sys
import torch
from torch import nn
import gradcam_cli

torch.set_num_threads(1)
method, channels = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
model = nn.Sequential(
    nn.AvgPool2d(16), nn.Conv2d(3, channels, 1), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 10),
).eval()
x = torch.randn(1, 3, 128, 128, generator=torch.Generator().manual_seed(0))
maps = gradcam_cli.cam(model, x, "2", method=method, cam_batch_size=16)
assert maps.shape == (1, 128, 128) and bool(torch.isfinite(maps).all())
with open("/proc/self/status") as status:  # this process's peak resident size, in kB
    print(next(line.split()[1] for line in status if line.startswith("VmHWM:")))
"""
MEMORY_BOUND_MB = 80


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="VmHWM is read from Linux's /proc")
@pytest.mark.slow
def test_perturbation_memory_stays_flat_as_channels_grow() -> None:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    runs = {
        (method, channels): subprocess.Popen(
            [sys.executable, "-c", MEMORY_SCRIPT, method, str(channels)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for method in ("scorecam", "ablationcam")
        for channels in (64, 2048)
    }
    peaks_mb = {}
    for key, proc in runs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        peaks_mb[key] = int(out.split()[-1]) / 1024
    for method in ("scorecam", "ablationcam"):
        growth = peaks_mb[method, 2048] - peaks_mb[method, 64]
        print(method, f"peak RSS C=64 {peaks_mb[method, 64]:.0f} MB, C=2048 {peaks_mb[method, 2048]:.0f} MB")
        assert growth < MEMORY_BOUND_MB, f"{method}: peak grew {growth:.0f} MB from 64 to 2048 channels"


@pytest.mark.parametrize("mode", ["eval", "train", "train-frozen-bn"])
@pytest.mark.parametrize("method", ["scorecam", "ablationcam"])
def test_model_is_left_as_found(method: str, mode: str) -> None:
    """No hook left, no module swapped, every train/eval flag and every buffer (BatchNorm
    statistics) as before; and the map is the eval-mode one whatever the mode."""
    model = timm_model("test_resnet")
    x = seeded(SEED, 1, 3, 64, 64)
    expected = gradcam_cli.cam(model, x, "layer4", method=method, classes=[3])
    if mode != "eval":
        model.train()
    if mode == "train-frozen-bn":
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.eval()
    with left_as_found(model):
        maps = gradcam_cli.cam(model, x, "layer4", method=method, classes=[3])
    torch.testing.assert_close(maps, expected, atol=ATOL, rtol=0)
