"""ROAD equals pytorch-grad-cam's on the same model and maps, repeats with its seed, and tells Grad-CAM from a random map.

pytorch-grad-cam 1.5 (metrics/road.py) is the test-only reference, given our maps upsampled to the
input's size as numpy and `ClassifierOutputSoftmaxTarget` targets, as its users call it. Its imputer
draws its noise from torch's global generator, one tensor per image in the order its loops run, which
our per-job generators cannot follow; so the curves are compared noiseless (its `NoisyLinearImputer`
default noise patched to 0), and the noise itself on one image, where the two draw alike. Our
percentile p removes p % of the pixels, the reference's `percentile=q` keeps q %: p pairs with 100 - p.

Tolerance 1e-4 for the probabilities: the imputed images agree to float32 rounding (the two solve
the same system in another order; float64 residues far below a float32 ulp), and the same float32
forwards in another batch composition differ by a few ulps of a probability, far below it. 1e-5 for
the imputed pixels themselves, values of order 1.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

import test_faithfulness
from conftest import require
from gradcam_cli.errors import UsageError

# its fixtures: the example model in eval mode with its 8 scenes at 96x96, and their Grad-CAM at layer4
shapes, gradcam_maps = test_faithfulness.shapes, test_faithfulness.gradcam_maps

require("scipy.sparse.linalg")
# the reference's np.argwhere on torch tensors warns under numpy 2, once per solve
pytestmark = pytest.mark.filterwarnings("ignore:__array_wrap__ must accept context:DeprecationWarning")

REFERENCE_IMAGES = 2  # the reference solves at a third to a quarter of our speed; image 1 has 17 % zeros, so its MoRF 90 removes all


@pytest.fixture
def noiseless_reference(monkeypatch):
    """pytorch-grad-cam's ROAD module with its imputer's default noise 0, and each (image, mask)'s solve done once.

    The cache keeps the reference's own results (noise 0: a solve is a function of its image and mask)
    and lets its averages and the single percentiles share them, so the test takes seconds, not a minute.
    """
    from pytorch_grad_cam.metrics import road as reference

    monkeypatch.setattr(reference.NoisyLinearImputer.__init__, "__defaults__", (0.0, reference.neighbors_weights))
    solve, solved = reference.NoisyLinearImputer.__call__, {}

    def cached(self, img, mask):
        key = (img.numpy().tobytes(), mask.numpy().tobytes())
        if key not in solved:
            solved[key] = solve(self, img, mask)
        return solved[key].clone()

    monkeypatch.setattr(reference.NoisyLinearImputer, "__call__", cached)
    return reference


@pytest.fixture(scope="module")
def gradcam_road(shapes, gradcam_maps):
    """ROAD of Grad-CAM on the 8 scenes, default percentiles, noise and seed."""
    from gradcam_cli.evaluate.road import road

    model, x, classes = shapes
    return road(model, x, gradcam_maps, classes)


@pytest.mark.slow
def test_road_equals_pytorch_grad_cam(shapes, gradcam_maps, noiseless_reference):
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputSoftmaxTarget

    from gradcam_cli.evaluate.faithfulness import upsampled
    from gradcam_cli.evaluate.road import ROAD_PERCENTILES, removed_pixels, road

    model, x, classes = shapes
    x, classes = x[:REFERENCE_IMAGES], classes[:REFERENCE_IMAGES]
    maps = gradcam_maps[:REFERENCE_IMAGES]
    cams = upsampled(maps, (96, 96)).numpy()
    targets = [ClassifierOutputSoftmaxTarget(int(c)) for c in classes]
    curves = road(model, x, maps, classes, noise=0)
    assert curves.percentiles == ROAD_PERCENTILES and removed_pixels(cams[1], 90).all(), "the all-removed case is among them"
    for k, p in enumerate(ROAD_PERCENTILES):
        morf = noiseless_reference.ROADMostRelevantFirst(percentile=100 - p)(x, cams, targets, model)
        lerf = noiseless_reference.ROADLeastRelevantFirst(percentile=100 - p)(x, cams, targets, model)
        np.testing.assert_allclose((curves.most_relevant_first[:, k] - curves.original).numpy(), morf, atol=1e-4, err_msg=f"MoRF {p}")
        np.testing.assert_allclose((curves.least_relevant_first[:, k] - curves.original).numpy(), lerf, atol=1e-4, err_msg=f"LeRF {p}")
    reference = noiseless_reference
    np.testing.assert_allclose(curves.morf().numpy(), reference.ROADMostRelevantFirstAverage()(x, cams, targets, model), atol=1e-4)
    np.testing.assert_allclose(curves.lerf().numpy(), reference.ROADLeastRelevantFirstAverage()(x, cams, targets, model), atol=1e-4)
    np.testing.assert_allclose(curves.combined().numpy(), reference.ROADCombined()(x, cams, targets, model), atol=1e-4)
    assert float(curves.most_relevant_first.std()) > 0.1, "the curves move: the comparison is not between two constants"


def test_the_imputation_equals_the_reference_imputer(shapes, gradcam_maps):
    from pytorch_grad_cam.metrics.road import NoisyLinearImputer

    from gradcam_cli.evaluate.road import noisy_linear_imputation, removed_pixels

    _, x, _ = shapes
    removed = torch.from_numpy(removed_pixels(gradcam_maps[0].numpy(), 30))
    removed[:20, :25] = True  # a block on the corner: border pixels weigh only the neighbours they have
    keep = (~removed).float()  # the reference's mask: 1 kept, 0 imputed
    clean = noisy_linear_imputation(x[0], removed, noise=0)
    torch.testing.assert_close(clean, NoisyLinearImputer(noise=0)(x[0], keep), atol=1e-5, rtol=0)
    assert torch.equal(clean[:, ~removed], x[0][:, ~removed]), "kept pixels are kept"
    noisy = noisy_linear_imputation(x[0], removed, noise=0.05, generator=torch.Generator().manual_seed(7))
    with torch.random.fork_rng():
        torch.manual_seed(7)
        torch.testing.assert_close(noisy, NoisyLinearImputer(noise=0.05)(x[0], keep), atol=1e-5, rtol=0)
    assert float((noisy - clean)[:, removed].std()) == pytest.approx(0.05, rel=0.03)
    assert torch.equal(noisy[:, ~removed], x[0][:, ~removed])


@pytest.mark.slow
def test_the_noise_repeats_with_the_seed_whatever_the_chunks(shapes, gradcam_maps, gradcam_road):
    """Each imputed image has its own generator: the same seed gives the same curves in any batch, chunk size or percentile set."""
    from gradcam_cli.evaluate.road import road

    model, x, classes = shapes
    x, maps, classes = x[:2], gradcam_maps[:2], classes[:2]
    rng_before, chunks = torch.get_rng_state(), []
    few = road(model, x, maps, classes, percentiles=(20, 70), batch_size=3, after_chunk=lambda: chunks.append(1))
    assert torch.equal(torch.get_rng_state(), rng_before), "torch's global generator is left alone"
    assert len(chunks) == 3, "8 imputed images in chunks of 3, a stop point after each"
    again = road(model, x, maps, classes, percentiles=(20, 70), batch_size=3)
    assert torch.equal(few.most_relevant_first, again.most_relevant_first)
    assert torch.equal(few.least_relevant_first, again.least_relevant_first)
    columns = [gradcam_road.percentiles.index(p) for p in (20, 70)]
    for curves in (few, road(model, x, maps, classes, percentiles=(20, 70), channels_last=True)):
        torch.testing.assert_close(curves.most_relevant_first, gradcam_road.most_relevant_first[:2, columns], atol=1e-5, rtol=0)
        torch.testing.assert_close(curves.least_relevant_first, gradcam_road.least_relevant_first[:2, columns], atol=1e-5, rtol=0)
    other = road(model, x, maps, classes, percentiles=(20, 70), seed=1, batch_size=3)
    assert float((other.least_relevant_first - few.least_relevant_first).abs().max()) > 1e-4, "another seed, other noise"


@pytest.mark.slow
def test_grad_cam_beats_the_random_map_on_the_example_model(shapes, gradcam_road):
    """Grad-CAM's combined ROAD well above the random map's (measured: 0.35 and 0.01): the metric sees the difference."""
    from gradcam_cli.evaluate.baselines import random_maps
    from gradcam_cli.evaluate.road import road

    model, x, classes = shapes
    noise = road(model, x, random_maps(len(x), 96, 96, seed=3), classes)
    assert float(gradcam_road.combined().mean()) > float(noise.combined().mean()) + 0.1
    assert float(gradcam_road.morf().mean()) < float(noise.morf().mean()), "removing Grad-CAM's pixels first costs more"
    assert float(gradcam_road.lerf().mean()) > float(noise.lerf().mean()), "removing its least relevant first costs less"


def test_without_scipy_a_usage_error_says_how_to_install_it(shapes, gradcam_maps, monkeypatch):
    from gradcam_cli.evaluate.road import noisy_linear_imputation, road

    for name in ("scipy", "scipy.sparse", "scipy.sparse.linalg"):
        monkeypatch.setitem(sys.modules, name, None)  # None in sys.modules: `import scipy` raises ImportError
    model, x, classes = shapes
    with pytest.raises(UsageError, match="scipy, which is not installed") as caught:
        road(model, x[:1], gradcam_maps[:1], classes[:1])
    assert caught.value.hint == "pip install scipy (or pip install 'gradcam-cli[eval]')"
    with pytest.raises(UsageError, match="scipy"):
        noisy_linear_imputation(x[0], torch.ones(96, 96, dtype=torch.bool))


@pytest.mark.parametrize(
    "arguments,words",
    [
        ({"percentiles": ()}, "percentiles"),
        ({"percentiles": (0, 50)}, "percentiles"),
        ({"percentiles": (100,)}, "percentiles"),
        ({"percentiles": (12.5,)}, "whole numbers"),
        ({"noise": -0.1}, "noise"),
        ({"batch_size": 0}, "batch_size"),
    ],
)
def test_bad_arguments_are_refused_before_any_forward(arguments, words):
    from gradcam_cli.evaluate.road import road

    def no_forward(_x):
        raise AssertionError("the model ran")

    x = torch.zeros(1, 3, 8, 8)
    with pytest.raises(UsageError, match=words):
        road(no_forward, x, torch.rand(1, 4, 4), torch.zeros(1, dtype=torch.long), **arguments)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="same N"):
        road(no_forward, x, torch.rand(2, 4, 4), torch.zeros(1, dtype=torch.long))  # type: ignore[arg-type]


def test_nothing_left_to_interpolate_from_is_zero_plus_noise():
    from gradcam_cli.evaluate.road import noisy_linear_imputation

    image = torch.randn(3, 6, 7)
    assert torch.equal(noisy_linear_imputation(image, torch.ones(6, 7, dtype=torch.bool), noise=0), torch.zeros(3, 6, 7))
    assert torch.equal(noisy_linear_imputation(image, torch.zeros(6, 7, dtype=torch.bool)), image), "nothing removed, nothing changed"
