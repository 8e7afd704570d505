"""The numbers `gradcam eval` reports: each metric's measures, which way is better, and what one costs.

One table, torch-free, read by the command line (names, the table's columns),
the summaries (eval.json, eval.csv, the charts) and the README's section. A
metric gives one headline measure (the terminal table's column) and maybe
others beside it (in the files): the relative and the absolute drop, ROAD's
two orders, the sanity check's SSIM.
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

    def better(self, a: float, b: float) -> bool:
        """a is strictly better than b."""
        return a > b if self.higher_is_better else a < b


MEASURES = (
    Measure("deletion", Metric.deletion, "deletion AUC", higher_is_better=False, headline=True),
    Measure("insertion", Metric.insertion, "insertion AUC", higher_is_better=True, headline=True),
    Measure("drop", Metric.drop, "average drop", higher_is_better=False, headline=True),
    Measure("drop_absolute", Metric.drop, "average drop (absolute)", higher_is_better=False),
    Measure("increase", Metric.increase, "increase in confidence", higher_is_better=True, headline=True),
    Measure("road", Metric.road, "ROAD (LeRF - MoRF) / 2", higher_is_better=True, headline=True),
    Measure("road_morf", Metric.road, "ROAD most relevant first", higher_is_better=False),
    Measure("road_lerf", Metric.road, "ROAD least relevant first", higher_is_better=True),
    Measure("pointing", Metric.pointing, "pointing game", higher_is_better=True, headline=True),
    Measure("sanity", Metric.sanity, "sanity: rank correlation", higher_is_better=False, headline=True),
    Measure("sanity_ssim", Metric.sanity, "sanity: SSIM", higher_is_better=False),
)
BY_NAME = {measure.name: measure for measure in MEASURES}

# what each metric asks, in one sentence, and its forwards per image and map (S: --steps, P: ROAD's 9 percentiles,
# T: the stages of the cascade); the README's table says the same
MEANING = {
    Metric.deletion: "the class probability as the map's most relevant pixels are removed first: a faithful map makes it fall fast",
    Metric.insertion: "the class probability as those pixels are restored onto a blank image: a faithful map makes it rise fast",
    Metric.drop: "how much less sure the model is when shown only the map's part of the image (the image times the map)",
    Metric.increase: "how often the model is surer when shown only the map's part of the image",
    Metric.road: "deletion that fills removed pixels from their neighbours (no tell-tale holes), most and least relevant first",
    Metric.pointing: "whether the map's hottest point lies on the object (within 15 px of a box or mask you give)",
    Metric.sanity: "whether the map changes when the model's weights are randomised, stage by stage from the head down",
}
COST = {
    Metric.deletion: "S forwards",
    Metric.insertion: "S forwards",
    Metric.drop: "1 forward",
    Metric.increase: "1 forward (shared with drop)",
    Metric.road: "2P forwards and 2P sparse solves",
    Metric.pointing: "none",
    Metric.sanity: "one map per stage of the cascade (T maps)",
}
# a method whose maps keep a mean rank correlation this high with the trained model's once the whole network is
# randomised is flagged: Adebayo et al. found edge-like methods (guided backpropagation) far above it, Grad-CAM near 0
SURVIVAL_THRESHOLD = 0.5
DEFAULT_METRICS = (Metric.deletion, Metric.insertion, Metric.drop, Metric.increase, Metric.sanity)


def measures_of(metrics: tuple[Metric, ...] | list[Metric]) -> list[Measure]:
    """The measures the chosen metrics give, in the table's order."""
    return [measure for measure in MEASURES if measure.metric in metrics]
