"""Every CAM method beyond Grad-CAM: parity with pytorch-grad-cam, registry conventions, CLI.

Parity: same model, layer, input and one different class per image on both
sides; the reference gets the hand-written ViT reshape, we get only the layer's
name. Random weights (never pretrained), seeded inputs, eval mode.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pytest
import torch

import gradcam_cli
from conftest import seeded, write_image
from gradcam_cli.methods import METHODS, CamMethod

timm = pytest.importorskip("timm")
pytest.importorskip("pytorch_grad_cam")
from pytorch_grad_cam import (  # noqa: E402
    EigenGradCAM,
    GradCAM,
    GradCAMElementWise,
    GradCAMPlusPlus,
    HiResCAM,
    LayerCAM,
    XGradCAM,
)
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget  # noqa: E402

ATOL = 1e-4

pytestmark = pytest.mark.usefixtures("one_thread")

REFERENCES = {
    "gradcam": GradCAM,
    "hirescam": HiResCAM,
    "gradcam-elementwise": GradCAMElementWise,
    "gradcam++": GradCAMPlusPlus,
    "xgradcam": XGradCAM,
    "layercam": LayerCAM,
    "eigengradcam": EigenGradCAM,
}


def token_reshape(prefix: int, h: int, w: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """The hand-written ViT reshape: drop prefix tokens, tokens → grid, NHWC → NCHW."""

    def reshape(tokens: torch.Tensor) -> torch.Tensor:
        grid = tokens[:, prefix:, :].reshape(tokens.size(0), h, w, tokens.size(2))
        return grid.permute(0, 3, 1, 2)

    return reshape


# model name, input shape, our layer path, the reference's module, the reference's reshape
CASES = {
    "resnet-layer4": ("test_resnet", (3, 3, 96, 128), "layer4", lambda m: m.layer4, None),
    # 16-pixel patches: a 10x10 grid after 1 class token
    "vit-last-norm1": ("test_vit", (2, 3, 160, 160), "blocks.-1.norm1", lambda m: m.blocks[-1].norm1,
                       token_reshape(1, 10, 10)),
}

_MODELS: dict[str, torch.nn.Module] = {}


def timm_model(name: str) -> torch.nn.Module:
    if name not in _MODELS:
        torch.manual_seed(0)
        _MODELS[name] = timm.create_model(name, pretrained=False).eval()
    return _MODELS[name]


def per_image_classes(model: torch.nn.Module, x: torch.Tensor) -> list[int]:
    """A high-ranked class per image, never its top class, and no two images alike.

    (Random-weight models tend to rank the same classes first for every image.)
    """
    with torch.no_grad():
        ranked = model(x).topk(2 * x.shape[0] + 1, dim=1).indices
    classes: list[int] = []
    for i in range(x.shape[0]):
        classes.append(next(int(c) for c in ranked[i, 1:] if int(c) not in classes))
    return classes


@pytest.mark.parametrize("eigen_smooth", [False, True], ids=["sum", "eigen-smooth"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("method", list(REFERENCES))
def test_method_matches_reference(method: str, case: str, eigen_smooth: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    model_name, shape, path, module, reshape = CASES[case]
    model = timm_model(model_name)
    x = seeded(11, *shape)
    classes = per_image_classes(model, x)

    ours = gradcam_cli.cam(model, x, path, method=method, classes=classes, eigen_smooth=eigen_smooth)
    targets = [ClassifierOutputTarget(c) for c in classes]
    with REFERENCES[method](model=model, target_layers=[module(model)], reshape_transform=reshape) as explainer:
        ref = explainer(input_tensor=x, targets=targets, eigen_smooth=eigen_smooth)

    assert ours.shape == ref.shape == (shape[0], *shape[2:])
    assert torch.isfinite(ours).all()
    # a real map on both sides, not two blank ones that agree trivially
    assert (ours.flatten(1).amax(dim=1) > 0.99).all()
    assert (ref.reshape(ref.shape[0], -1).max(axis=1) > 0.99).all()

    if method != "eigengradcam" and not eigen_smooth:
        np.testing.assert_allclose(ours.numpy(), ref, atol=ATOL, rtol=0)
        return

    # Eigen-Grad-CAM and --eigen-smooth: the first singular vector is defined only up to sign, and
    # the reference keeps whatever numpy's LAPACK returns (no convention we can
    # reproduce), while ours fixes the sign (see the module). The ReLU after the
    # projection makes the two signs give entirely different maps, so each image
    # must match, at the same atol, either our map or the one from the negated
    # component, computed through the same pipeline.
    from gradcam_cli import cams
    from gradcam_cli.methods.projection import first_component

    monkeypatch.setattr(cams, "first_component", lambda weighted: -first_component(weighted))
    negated = gradcam_cli.cam(model, x, path, method=method, classes=classes, eigen_smooth=eigen_smooth)
    for i in range(shape[0]):
        same = np.allclose(ours[i].numpy(), ref[i], atol=ATOL, rtol=0)
        flipped = np.allclose(negated[i].numpy(), ref[i], atol=ATOL, rtol=0)
        assert same or flipped, f"image {i}: max diff {np.abs(ours[i].numpy() - ref[i]).max():.3g} " \
                                f"(negated: {np.abs(negated[i].numpy() - ref[i]).max():.3g})"


def test_methods_differ_from_each_other() -> None:
    """Each method computes something of its own (no copy-paste registrations).

    On a ViT norm layer, whose activations take both signs: after a ReLU (a ResNet
    stage) ReLU(g x A) = ReLU(g) x A, so gradcam-elementwise and layercam coincide.
    """
    model = timm_model("test_vit")
    x = seeded(12, 2, 3, 160, 160)
    maps = {name: gradcam_cli.cam(model, x, "blocks.-1.norm1", method=name) for name in METHODS}
    names = list(maps)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not torch.allclose(maps[a], maps[b], atol=1e-3), (a, b)


def test_every_registered_method_follows_the_conventions(run_cli) -> None:
    assert set(REFERENCES) <= set(METHODS)
    assert len(METHODS) == 12
    result = run_cli("methods")
    assert result.code == 0, result.stderr
    listed = {line.split()[0] for line in result.stdout.splitlines() if line.strip()}
    for name, method in METHODS.items():
        assert method.name == name
        assert name == name.lower() and name.strip() == name and " " not in name
        assert method.summary.strip(), name
        assert method.passes.strip(), name
        assert callable(method.compute), name
        assert name in listed, name


def test_cli_explains_with_gradcam_plus_plus(run_cli, tmp_path) -> None:
    src = write_image(tmp_path / "cat.png", 96, 64, seed=5)
    out = tmp_path / "out"
    result = run_cli("explain", src, "--model", "test_resnet", "--no-pretrained", "--method", "gradcam++",
                     "-o", out, "--json")
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert record.get("method", "gradcam++") == "gradcam++"
    outputs = [p for p in record["outputs"]]
    assert outputs and all(tmp_path.joinpath(p).is_file() for p in outputs)
    assert any("gradcam++" in str(p) for p in outputs)
