"""The numbers `gradcam eval` reports: each metric's measures and which way is better.

One table, torch-free, read by the command line (names, the table's columns)
and the summaries (eval.json, eval.csv, the charts). A metric gives one
headline measure (the terminal table's column) and maybe others beside it (in
the files): the relative and the absolute drop, ROAD's two orders, the sanity
check's SSIM. What each metric asks and costs is the README's table.
"""

from __future__ import annotations

from dataclasses import dataclass

from gradcam_cli.vocab import Metric


@dataclass(frozen=True)
class Measure:
    name: str  # the key in records, eval.json and eval.csv
    metric: Metric
    label: str  # how tables and charts title it
    higher_is_better: bool
    headline: bool = False  # the metric's column in the terminal table

    @property
    def note(self) -> str:
        return "higher is better" if self.higher_is_better else "lower is better"


MEASURES = (
    Measure("deletion", Metric.deletion, "deletion AUC", higher_is_better=False, headline=True),
    Measure("insertion", Metric.insertion, "insertion AUC", higher_is_better=True, headline=True),
    Measure("drop", Metric.drop, "average drop", higher_is_better=False, headline=True),
    Measure("drop_absolute", Metric.drop, "average drop (absolute)", higher_is_better=False),
    Measure("increase", Metric.increase, "increase in confidence", higher_is_better=True, headline=True),
    Measure("road", Metric.road, "ROAD (LeRF - MoRF) / 2", higher_is_better=True, headline=True),
    Measure("road_morf", Metric.road, "ROAD most relevant first", higher_is_better=False),
    Measure("road_lerf", Metric.road, "ROAD least relevant first", higher_is_better=True),
    Measure("energy_in_box", Metric.energy, "energy in box", higher_is_better=True, headline=True),
    Measure("energy_in_region", Metric.energy, "energy in region", higher_is_better=True, headline=True),
    Measure("pointing", Metric.pointing, "pointing game", higher_is_better=True, headline=True),
    Measure("sanity", Metric.sanity, "sanity: rank correlation", higher_is_better=False, headline=True),
    Measure("sanity_ssim", Metric.sanity, "sanity: SSIM", higher_is_better=False),
)
BY_NAME = {measure.name: measure for measure in MEASURES}

# a method whose maps keep a mean rank correlation this high with the trained model's once the whole network is
# randomised is flagged: Adebayo et al. found edge-like methods (guided backpropagation) far above it, Grad-CAM near 0
SURVIVAL_THRESHOLD = 0.5


TASK_MEASURES = frozenset({"energy_in_box", "energy_in_region"})  # one task's each: a detection's box, a segmenter's region


def measures_of(metrics: tuple[Metric, ...] | list[Metric], own: frozenset[str] = frozenset()) -> list[Measure]:
    """The measures the chosen metrics give, in the table's order; of the measures only one task has, those in `own`."""
    return [measure for measure in MEASURES if measure.metric in metrics and (measure.name not in TASK_MEASURES or measure.name in own)]
