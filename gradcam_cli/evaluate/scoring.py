"""One batch's maps, each set (a method's or a baseline's) scored by every chosen metric that needs only the model.

The pointing game needs the objects' boxes and the sanity check needs the
methods themselves: the run that has them (run/evaluation.py) adds those.
Every score is a plain float per image, None where it does not exist, so the
records and the summaries never see a tensor.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from gradcam_cli.evaluate.faithfulness import DEFAULT_STEPS, Scorer, confidence_change, deletion_insertion, substrate
from gradcam_cli.vocab import Metric, Substrate


@dataclass(frozen=True, kw_only=True)
class Scoring:
    """What the metrics are run with, the same for every batch."""

    metrics: tuple[Metric, ...]
    steps: int = DEFAULT_STEPS
    substrate: Substrate = Substrate.zero
    chunk: int = 32  # perturbed inputs per forward
    checkpoint: Callable[[], None] = lambda: None  # called between chunks: a stop request is honoured there
    precision: torch.dtype | None = None  # the run's autocast dtype (bf16 on CUDA by default), as the maps' passes use
    channels_last: bool = False  # the model runs channels-last: perturbed inputs follow (oneDNN and cuDNN are faster)


@dataclass
class MapScores:
    """One map set's scores over a batch: per measure a value per image; the curves per image."""

    measures: dict[str, list[float | None]] = field(default_factory=dict)
    curves: dict[str, list[list[float]]] = field(default_factory=dict)  # "deletion", "insertion": a curve per image
    fractions: list[float] = field(default_factory=list)


def _floats(values: torch.Tensor) -> list[float | None]:
    """Per image, rounded; a score that is not a number (a map of NaNs) is None, never NaN in a record."""
    return [round(v, 6) if math.isfinite(v) else None for v in values.detach().float().cpu().tolist()]


def _rows(curves: torch.Tensor) -> list[list[float]]:
    return [[round(v, 6) for v in row] for row in torch.nan_to_num(curves.float()).cpu().tolist()]


def _passes(x: torch.Tensor, scoring: Scoring) -> contextlib.AbstractContextManager[object]:
    """The model's passes in the run's precision: autocast when it has one, else plain fp32."""
    if scoring.precision is None:
        return contextlib.nullcontext()
    return torch.autocast(x.device.type, dtype=scoring.precision)


def score_maps(model: nn.Module, x: torch.Tensor, maps: torch.Tensor, classes: torch.Tensor | Scorer, scoring: Scoring) -> MapScores:
    """Score one set of maps (N, h, w) of the inputs x (N, ...), each for its own class (N,), or for what a Scorer reads
    (a detection's score: evaluate/detection_scoring.py)."""
    with _passes(x, scoring):
        return _scored(model, x, maps, classes, scoring)


def _scored(model: nn.Module, x: torch.Tensor, maps: torch.Tensor, classes: torch.Tensor | Scorer, scoring: Scoring) -> MapScores:
    scores = MapScores()
    metrics = scoring.metrics
    if Metric.deletion in metrics or Metric.insertion in metrics:
        base = substrate(x, scoring.substrate)
        curves = deletion_insertion(
            model,
            x,
            maps,
            classes,
            steps=scoring.steps,
            baseline=base,
            batch_size=scoring.chunk,
            after_chunk=scoring.checkpoint,
            channels_last=scoring.channels_last,
        )
        scores.fractions = [round(float(f), 6) for f in curves.fractions.tolist()]
        if Metric.deletion in metrics:
            scores.measures["deletion"] = _floats(curves.deletion_auc())
            scores.curves["deletion"] = _rows(curves.deletion)
        if Metric.insertion in metrics:
            scores.measures["insertion"] = _floats(curves.insertion_auc())
            scores.curves["insertion"] = _rows(curves.insertion)
    if Metric.drop in metrics or Metric.increase in metrics:
        change = confidence_change(model, x, maps, classes, batch_size=scoring.chunk)
        if Metric.drop in metrics:
            scores.measures["drop"] = _floats(change.drop_relative())
            scores.measures["drop_absolute"] = _floats(change.drop_absolute())
        if Metric.increase in metrics:
            scores.measures["increase"] = _floats(change.increase())
    if Metric.road in metrics:
        from gradcam_cli.evaluate.road import road

        measured = road(
            model, x, maps, classes, batch_size=scoring.chunk, after_chunk=scoring.checkpoint, channels_last=scoring.channels_last
        )
        scores.measures["road"] = _floats(measured.combined())
        scores.measures["road_morf"] = _floats(measured.morf())
        scores.measures["road_lerf"] = _floats(measured.lerf())
    return scores
