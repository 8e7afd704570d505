"""Faithfulness metrics equal their references on the same model and maps, and tell a real map from a random one.

torchcam 0.5 (`DeletionInsertionMetric`, `ClassificationMetric`) and
pytorch-grad-cam (`CamMultImageConfidenceChange` and its drop/increase) are
test-only references, given our maps through their own interfaces. The model
is the shipped shapes example (trained, so the probabilities move), on its
scenes at 96x96. Tolerance 1e-4: the same float32 forwards in another batch
composition differ by a few ulps of a probability, far below it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import numpy as np
import pytest
import torch

from conftest import example_batch, require


@pytest.fixture(scope="module")
def shapes():
    """The example model (eval mode) and its 8 scenes as one normalised batch."""
    return example_batch()


@pytest.fixture(scope="module")
def gradcam_maps(shapes):
    """Grad-CAM at layer4 at 3x3: a coarse map, so the upsampling matters as much as the ranking."""
    from gradcam_cli import cam

    model, x, classes = shapes
    return cam(model, x, "layer4", classes=classes.tolist())


class FixedMaps:
    """torchcam's CAM-extractor interface, answering with our maps: its metrics then measure exactly these."""

    def __init__(self, model: torch.nn.Module, maps: torch.Tensor) -> None:
        self.model, self.maps = model, maps

    def __call__(self, class_idx=None, scores=None, normalized=True, **_kwargs):
        return [self.maps]

    def fuse_cams(self, cams):
        return cams[0]

    @contextmanager
    def _hooks_off(self) -> Iterator[None]:
        yield


@pytest.mark.parametrize("steps,baseline", [(20, "zero"), (7, "blur")])
def test_deletion_and_insertion_equal_torchcam(shapes, gradcam_maps, steps, baseline):
    metrics = require("torchcam.metrics", python=(3, 11))
    from gradcam_cli.evaluate.faithfulness import deletion_insertion

    model, x, classes = shapes
    small = torch.nn.functional.interpolate(gradcam_maps[:, None], (12, 12), mode="bilinear", align_corners=False)[:, 0]
    base = None if baseline == "zero" else torch.nn.functional.avg_pool2d(x, 9, stride=1, padding=4)
    reference = metrics.DeletionInsertionMetric(FixedMaps(model, small), partial(torch.softmax, dim=-1), steps=steps, baseline=base)
    reference.update(x, class_idx=classes.tolist())
    curves = deletion_insertion(model, x, small, classes, steps=steps, baseline=base, batch_size=5)
    assert curves.fractions[0] == 0 and curves.fractions[-1] == 1 and len(curves.fractions) == steps + 1
    assert float(curves.deletion_auc().mean()) == pytest.approx(reference.summary()["deletion_auc"], abs=1e-4)
    assert float(curves.insertion_auc().mean()) == pytest.approx(reference.summary()["insertion_auc"], abs=1e-4)
    assert float(curves.deletion.std()) > 0.05, "the curves move: the comparison is not between two constants"
    first_base = None if base is None else base[:1]
    per_image = metrics.DeletionInsertionMetric(
        FixedMaps(model, small[:1]), partial(torch.softmax, dim=-1), steps=steps, baseline=first_base
    )
    per_image.update(x[:1], class_idx=classes[:1].tolist())
    assert float(curves.deletion_auc()[0]) == pytest.approx(per_image.summary()["deletion_auc"], abs=1e-4)


def test_the_curves_do_not_depend_on_the_chunk_size(shapes, gradcam_maps):
    from gradcam_cli.evaluate.faithfulness import deletion_insertion

    model, x, classes = shapes
    one = deletion_insertion(model, x[:3], gradcam_maps[:3], classes[:3], steps=5, batch_size=1)
    many = deletion_insertion(model, x[:3], gradcam_maps[:3], classes[:3], steps=5, batch_size=64)
    torch.testing.assert_close(one.deletion, many.deletion, atol=1e-5, rtol=0)
    torch.testing.assert_close(one.insertion, many.insertion, atol=1e-5, rtol=0)
    assert one.deletion[:, -1].tolist() == pytest.approx(one.insertion[:, 0].tolist()), "the all-baseline input is both ends"


@pytest.mark.parametrize("which", ["gradcam", "random"])
def test_relative_drop_and_increase_equal_torchcam(shapes, gradcam_maps, which):
    metrics = require("torchcam.metrics", python=(3, 11))
    from gradcam_cli.evaluate.baselines import random_maps
    from gradcam_cli.evaluate.faithfulness import confidence_change

    model, x, classes = shapes
    maps = gradcam_maps if which == "gradcam" else random_maps(len(x), 96, 96, seed=5)
    reference = metrics.ClassificationMetric(FixedMaps(model, maps), partial(torch.softmax, dim=-1))
    reference.update(x, class_idx=classes.tolist())
    change = confidence_change(model, x, maps, classes)
    assert float(change.drop_relative().mean()) == pytest.approx(reference.summary()["avg_drop"], abs=1e-4)
    assert float(change.increase().mean()) == pytest.approx(reference.summary()["conf_increase"], abs=1e-4)
    if which == "random":
        assert float(change.drop_relative().max()) > 0.01, "noise costs confidence: the comparison is not of zeros"


def test_absolute_change_drop_and_increase_equal_pytorch_grad_cam(shapes, gradcam_maps):
    from pytorch_grad_cam.metrics.cam_mult_image import CamMultImageConfidenceChange, DropInConfidence, IncreaseInConfidence
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputSoftmaxTarget

    from gradcam_cli.evaluate.faithfulness import confidence_change

    model, x, classes = shapes
    maps = gradcam_maps.numpy()  # pytorch-grad-cam takes maps at the input's size, as cam() gives them
    targets = [ClassifierOutputSoftmaxTarget(int(c)) for c in classes]
    change = confidence_change(model, x, gradcam_maps, classes)
    signed = change.masked - change.original  # CamMultImageConfidenceChange itself
    np.testing.assert_allclose(signed.numpy(), CamMultImageConfidenceChange()(x, maps, targets, model), atol=1e-4)
    np.testing.assert_allclose(change.drop_absolute().numpy(), DropInConfidence()(x, maps, targets, model), atol=1e-4)
    np.testing.assert_allclose(change.increase().numpy(), IncreaseInConfidence()(x, maps, targets, model), atol=1e-4)


def test_grad_cam_beats_the_random_map_on_the_example_model(shapes, gradcam_maps):
    """The issue's check: Grad-CAM's deletion AUC below the random map's, its insertion AUC above."""
    from gradcam_cli.evaluate.baselines import random_maps
    from gradcam_cli.evaluate.faithfulness import deletion_insertion

    model, x, classes = shapes
    ours = deletion_insertion(model, x, gradcam_maps, classes)
    noise = deletion_insertion(model, x, random_maps(len(x), 96, 96, seed=3), classes)
    assert float(ours.deletion_auc().mean()) < float(noise.deletion_auc().mean())
    assert float(ours.insertion_auc().mean()) > float(noise.insertion_auc().mean())


def test_baseline_maps():
    from gradcam_cli.evaluate.baselines import centre_gaussian, random_maps, sobel_edges

    noise = random_maps(2, 8, 10, seed=1)
    assert noise.shape == (2, 8, 10) and torch.equal(noise, random_maps(2, 8, 10, seed=1)) and not torch.equal(noise, random_maps(2, 8, 10))
    blob = centre_gaussian(1, 9, 9)
    assert blob[0, 4, 4] == blob.max() and blob[0, 0, 0] < 0.05 and torch.allclose(blob[0], blob[0].T)
    step = torch.zeros(1, 3, 8, 8)
    step[..., 4:] = 1.0
    edges = sobel_edges(step)
    assert edges.shape == (1, 8, 8) and edges.max() == 1 and edges[0, :, 0].abs().max() == 0
    assert edges[0, :, 3:5].min() > 0.5, "the edge between columns 3 and 4 is found"


def test_a_step_count_below_one_is_refused():
    from gradcam_cli.errors import UsageError
    from gradcam_cli.evaluate.faithfulness import step_counts

    assert step_counts(10, 3) == [0, 4, 8, 10] and step_counts(4, 20) == [0, 1, 2, 3, 4]
    with pytest.raises(UsageError, match="steps"):
        step_counts(10, 0)
