"""The same engine inside a Ray Data pipeline: paths as rows, a pool of actors that each hold the model once.

Ray's offline batch inference pattern: `map_batches` with a callable class
(`ExplainActor`: an Explainer built once per actor, as one CLI process builds
it), `compute=ActorPoolStrategy(size=...)` sized to the cluster's GPUs
(`num_gpus=1` each) or its CPUs, integer batch sizes. Each actor writes the
overlays itself, into the output folder, which must be storage every node
sees at the same path (the actors work in the driver's folder, so relative
paths mean what they meant on the command line); its rows are the images'
records as JSON, which the driver writes to `records.jsonl` and stdout as a
plain run does. Resume is `--skip-existing`, judged by the files as in one
process: Ray Data's own checkpointing would keep a second account of what is
done, one that disagrees with the folder as soon as a file is deleted.
`ray` is an optional extra, imported only here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from gradcam_cli.errors import UsageError
from gradcam_cli.inputs.sources import Source, output_relative
from gradcam_cli.outputs.records import ImageRecord
from gradcam_cli.run.summary import Summary

if TYPE_CHECKING:
    import ray.data

    from gradcam_cli.run.pipeline import Explainer
    from gradcam_cli.settings import ExplainSettings

RAY_MISSING = "⟨ray⟩ needs Ray Data: pip install 'gradcam-cli[ray]'"
BATCHES_PER_ACTOR_CALL = 4  # images per actor call, in model batches: decoding and writing overlap the model within a call


def import_ray() -> Any:
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise UsageError(RAY_MISSING) from None
    return ray


def connect(address: str) -> None:
    """`local`: a new cluster on this machine; `auto`: the running one (RAY_ADDRESS or this node's); else its address."""
    import logging

    ray = import_ray()
    logging.getLogger("ray.data").setLevel(logging.ERROR)  # its INFO lines on every dataset, its notice on progress bars
    if ray.is_initialized():
        return
    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True, "logging_level": "ERROR"}
    try:
        ray.init(address=None if address == "local" else address, **options)
    except (ConnectionError, ValueError, RuntimeError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UsageError(
            f"⟨ray={address}⟩: cannot reach a Ray cluster ({first}); start one (`ray start --head`) or use ⟨ray=local⟩"
        ) from None
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False  # the driver's own progress line says how far the run is


class ExplainActor:
    """One Ray actor: the model built once, then each batch of rows explained as a plain run explains its inputs."""

    def __init__(self, settings: ExplainSettings, cwd: str) -> None:
        from gradcam_cli.run.pipeline import Explainer

        if not Path(cwd).is_dir():
            raise UsageError(f"the driver's folder {cwd} is not on this node; put inputs and outputs on storage every node mounts there")
        os.chdir(cwd)
        said: set[str] = set()
        self.explainer = Explainer(settings, warn=lambda message: _say_once(message, said))
        self.explainer.prepared.notices.clear()  # the driver said them once, having prepared the same run

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[str]]:
        """Rows (path; relative and error when the driver scanned the inputs) → their records, files written."""
        paths = [Path(str(path)) for path in batch["path"]]
        relatives = batch.get("relative", [output_relative(path).as_posix() for path in paths])  # here: in the driver's folder
        errors = batch.get("error", [""] * len(paths))
        sources = [Source(path, PurePath(str(relative)), str(error) or None) for path, relative, error in zip(paths, relatives, errors)]
        records: list[ImageRecord] = []
        self.explainer.run(sources, records.append)
        return {"input": [record.input for record in records], "record": [record.to_json() for record in records]}


def _say_once(message: str, said: set[str]) -> None:
    """What an actor has to say (out of memory, a smaller batch) reaches the driver's log once per actor, not per batch."""
    if message not in said:
        said.add(message)
        print(f"gradcam: {message}", file=sys.stderr, flush=True)


def rows(sources: Iterable[Source]) -> list[dict[str, str]]:
    """The inputs as the dataset's rows: the path as given, the name its outputs get, why it cannot be read."""
    return [{"path": str(s.path), "relative": s.relative.as_posix(), "error": s.error or ""} for s in sources]


def explain_rows(dataset: ray.data.Dataset, settings: ExplainSettings, *, actors: int | None = None) -> ray.data.Dataset:
    """The dataset of paths (column path; relative and error optional) mapped to records (input, record: its JSON), lazily."""
    ray = import_ray()
    resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0)) if not settings.run.device.startswith(("cpu", "mps")) else 0
    size = actors or max(1, gpus or int(resources.get("CPU", 1)))
    return dataset.map_batches(
        ExplainActor,
        fn_constructor_kwargs={"settings": replace(settings, run=replace(settings.run, ray=None)), "cwd": os.getcwd()},
        batch_size=settings.run.batch_size * BATCHES_PER_ACTOR_CALL,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=size),
        num_gpus=1 if gpus else None,
        num_cpus=None if gpus else 1,
    )


class RayRunner:
    """The driver's side: the prepared Explainer checked the options and the model here; actors do the images.

    It stands in for the Explainer in the CLI's stream (`run(sources, emit)`,
    `settings`, `summary`, `writer`, `namer`), so records, the runs file and
    the report are made as for one process.
    """

    def __init__(self, explainer: Explainer, settings: ExplainSettings, warn: Callable[[str], None]) -> None:
        import copy

        from gradcam_cli.option_table import in_flags

        address = str(settings.run.ray)
        connect(address)
        self.explainer, self.settings, self.namer = explainer, settings, explainer.namer
        self.warn = lambda message: warn(in_flags(message))
        self.writer = copy.copy(explainer.writer)  # what the runs file says: the actors' device, not the driver's check
        self.writer.context = {**explainer.writer.context, "device": f"ray {address}"}
        self.summary = Summary()

    def run(self, sources: Iterable[Source], emit: Callable[[ImageRecord], None]) -> Summary:
        ray = import_ray()
        summary = self.summary = Summary()
        for notice in self.explainer.prepared.notices:
            self.warn(notice)
        found = rows(sources)
        if not found:
            return summary
        results = explain_rows(ray.data.from_items(found), self.settings)
        for row in results.iter_rows():
            self.explainer.checkpoint()  # Ctrl-C stops the driver at the next record, the actors with it
            record = ImageRecord.from_json(str(row["record"]))
            summary.count(record)
            emit(record)
        return summary


def explain_dataset(dataset: ray.data.Dataset, model: str, *, actors: int | None = None, **options: Any) -> ray.data.Dataset:
    """Explain the images of a Ray dataset with a `path` column: each row's overlays written by an actor, a dataset
    of records back (`input`, `record`: the JSON line `gradcam explain` prints), lazily, for `.write_json()` or to iterate.

    `options` are explain's (output_dir, method, layers, classes, ...; README), checked as the CLI checks them.
    """
    from gradcam_cli.settings import build_settings

    import_ray()
    return explain_rows(dataset, build_settings({**options, "model": model}), actors=actors)
