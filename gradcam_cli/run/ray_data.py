"""The same engine inside a Ray Data pipeline: paths as rows, a pool of actors that each hold the model once.

Ray's offline batch inference pattern: `map_batches` with a callable class
(`ExplainActor`: an Explainer built once per actor, as one CLI process builds
it), `compute=ActorPoolStrategy(size=...)` sized to the cluster's GPUs
(`num_gpus=1` each) or its CPUs, integer batch sizes. Each actor writes the
overlays itself, into the output folder, which must be storage every node
sees at the same path (the actors work in the driver's folder, so relative
paths mean what they meant on the command line); its rows are the images'
records as JSON, which the driver writes to `records.jsonl` and stdout as a
plain run does, in input order (Ray Data's `preserve_order`). Resume is
`--skip-existing`, judged by the files as in one process: Ray Data's own
checkpointing would keep a second account of what is done, one that
disagrees with the folder as soon as a file is deleted; it is also what
follows a lost actor, as actors are not restarted. The driver runs on a node
of the cluster (Ray Data does not run through Ray Client) and dials the
cluster's port before ray.init, whose retries against a dead address last
minutes. `ray` is an optional extra, imported only here.
"""

from __future__ import annotations

import inspect
import json
import os
import socket
import sys
import warnings
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from gradcam_cli.errors import ExitCode, GradcamError, UsageError
from gradcam_cli.inputs.sources import Source, output_relative
from gradcam_cli.outputs.records import ImageRecord
from gradcam_cli.run.summary import Summary

if TYPE_CHECKING:
    import ray.data

    from gradcam_cli.run.pipeline import Explainer
    from gradcam_cli.settings import ExplainSettings

RAY_MISSING = "⟨ray⟩ needs Ray Data: pip install 'gradcam-cli[ray]'"
BATCHES_PER_ACTOR_CALL = 4  # images per actor call, in model batches: decoding and writing overlap the model within a call
PROBE_SECONDS = 3.0  # to connect to a cluster's port, then again for its first answer
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # the preface, then empty SETTINGS
HTTP2_SETTINGS = 4  # the frame type an HTTP/2 server opens with


def import_ray() -> Any:
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise UsageError(RAY_MISSING) from None
    return ray


def connect(address: str) -> None:
    """`local`: a new cluster on this machine; `auto`: the one this node belongs to (RAY_ADDRESS or `ray start`'s);
    else the head's address. Connected once per process: a caller's own `ray.init` stands.

    A cluster's address is dialled first, bounded (`PROBE_SECONDS`): ray.init
    against a port where no Ray answers retries for many minutes.
    """
    import logging

    global _connected_here
    ray = import_ray()
    # its INFO lines on every dataset, and its failures' tracebacks: they reach the driver as exceptions, said in one
    # line (and are kept in the session's ray-data log)
    logging.getLogger("ray.data").setLevel(logging.CRITICAL)
    if ray.is_initialized():
        return
    dialled = _dialled(address)
    if dialled is not None:
        _probe(address, dialled)
    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True, "logging_level": "ERROR"}
    try:
        ray.init(address=address, **options)  # "local" as such: None would join RAY_ADDRESS's cluster
    except (ConnectionError, ValueError, RuntimeError) as error:
        raise _unreachable(address, error) from None
    _connected_here = True
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False  # the driver's own progress line says how far the run is


_connected_here = False  # connect() called ray.init: the run's end disconnects (or stops the local cluster)


def disconnect() -> None:
    """The end of a run that connect() connected: Ray shut down while the interpreter is whole, not in its exit hooks."""
    global _connected_here
    if _connected_here:
        import ray

        ray.shutdown()
        _connected_here = False


def _unreachable(address: str, why: object) -> UsageError:
    return UsageError(
        f"⟨ray={address}⟩: cannot reach a Ray cluster ({_first_line(why)}); start one (`ray start --head`) or use ⟨ray=local⟩"
    )


def _first_line(why: object) -> str:
    """Ray's errors run to many lines (an actor's pid, its namespace, advice): their first says what happened."""
    text = str(why).strip()
    return text.splitlines()[0].rstrip(".") if text else type(why).__name__


def _dialled(address: str) -> str | None:
    """The address ray.init will dial for `address` (`auto` read as Ray reads it), None for a new local cluster."""
    dialled: str | None = address
    if address == "local":
        return None
    if address == "auto":
        dialled = os.environ.get("RAY_ADDRESS") or _recorded_cluster(address)
    if dialled is not None and "://" in dialled:
        via = "" if dialled == address else f" (RAY_ADDRESS={dialled})"
        raise UsageError(
            f"⟨ray={address}⟩{via}: Ray Data does not run through Ray Client; run gradcam on a node of the cluster "
            "(there ⟨ray=auto⟩ finds it), e.g. `ray job submit -- gradcam explain ... ⟨ray=auto⟩`"
        )
    return dialled


def _recorded_cluster(address: str) -> str | None:
    """The cluster `ray start` recorded on this node, as ray.init finds it for `auto` (None: leave it to ray.init)."""
    try:
        from ray._private.services import canonicalize_bootstrap_address  # private, so optional
    except ImportError:
        return None
    try:
        return canonicalize_bootstrap_address("auto")
    except ConnectionError:  # Ray's words name its own flag, not ours
        raise UsageError(
            f"⟨ray={address}⟩: no Ray cluster on this node (none started by `ray start`, RAY_ADDRESS unset); "
            "start one (`ray start --head`), give its address, or use ⟨ray=local⟩"
        ) from None


def _probe(address: str, dialled: str) -> None:
    """One bounded look at the port: something must accept the connection and speak HTTP/2 as Ray's GCS (gRPC) does;
    under RAY_USE_TLS only the connection, since a TLS server answers nothing to a plain HTTP/2 preface."""
    parts = urlsplit(f"//{dialled}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:  # a port that is not a number: ray.init says what it expects
        return
    if not host or port is None:
        return
    where = f"{host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=PROBE_SECONDS) as connection:
            if os.environ.get("RAY_USE_TLS", "0").lower() in ("0", "false", ""):
                connection.sendall(HTTP2_PREFACE)
                head = connection.recv(9)
                if len(head) < 4 or head[3] != HTTP2_SETTINGS:
                    raise _unreachable(address, f"what answers at {where} is not Ray")
    except TimeoutError:
        raise _unreachable(address, f"no answer from {where} in {PROBE_SECONDS:g} s") from None
    except OSError as error:
        raise _unreachable(address, f"{where}: {error.strerror or type(error).__name__}") from None


class ExplainActor:
    """One Ray actor: the model built once, then each batch of rows explained as a plain run explains its inputs."""

    def __init__(self, settings: ExplainSettings, cwd: str, stops_as_rows: bool = False) -> None:
        from gradcam_cli.run.pipeline import Explainer

        self.stops_as_rows = stops_as_rows  # the CLI's driver says a stop in one line; Python callers get Ray's error

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
        stop = ""
        try:
            self.explainer.run(sources, records.append)
        except GradcamError as error:  # another run's output in the way, a full disk: the whole run stops
            if not self.stops_as_rows:
                raise
            stop = json.dumps({"message": error.message, "hint": error.hint, "exit_code": int(error.exit_code)})
        rows = {"input": [record.input for record in records], "record": [record.to_json() for record in records]}
        if self.stops_as_rows:  # every batch has the column; the records done before the stop come first
            rows = {"input": [*rows["input"], *([""] if stop else [])], "record": [*rows["record"], *([""] if stop else [])]}
            rows["stop"] = [""] * len(records) + ([stop] if stop else [])
        return rows


def _say_once(message: str, said: set[str]) -> None:
    """What an actor has to say (out of memory, a smaller batch) reaches the driver's log once per actor, not per batch."""
    if message not in said:
        said.add(message)
        print(f"gradcam: {message}", file=sys.stderr, flush=True)


def rows(sources: Iterable[Source]) -> list[dict[str, str]]:
    """The inputs as the dataset's rows: the path as given, the name its outputs get, why it cannot be read."""
    return [{"path": str(s.path), "relative": s.relative.as_posix(), "error": s.error or ""} for s in sources]


def explain_rows(
    dataset: ray.data.Dataset, settings: ExplainSettings, *, actors: int | None = None, stops_as_rows: bool = False
) -> ray.data.Dataset:
    """The dataset of paths (column path; relative and error optional) mapped to records (input, record: its JSON), lazily.

    With `stops_as_rows`, an actor that stops on a GradcamError ends its rows with one whose `stop` holds it as JSON
    (Ray's own error would carry only its text, wrapped in Ray's).
    """
    ray = import_ray()
    gpus = _gpus(settings)
    size = actors or _pool_size(settings)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`ray_remote_args` is deprecated")  # max_restarts has no named form yet
        return dataset.map_batches(
            ExplainActor,
            fn_constructor_kwargs={
                "settings": replace(settings, run=replace(settings.run, ray=None)),
                "cwd": os.getcwd(),
                "stops_as_rows": stops_as_rows,
            },
            batch_size=settings.run.batch_size * BATCHES_PER_ACTOR_CALL,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=size),
            num_gpus=1 if gpus else None,
            num_cpus=None if gpus else 1,
            **_no_restarts(dataset.map_batches),
        )


def _gpus(settings: ExplainSettings) -> int:
    """The cluster's GPUs the actors may hold (none when the run asks for the CPU)."""
    import ray

    return 0 if settings.run.device.startswith(("cpu", "mps")) else int(ray.cluster_resources().get("GPU", 0))


def _pool_size(settings: ExplainSettings) -> int:
    """An actor per GPU, else per CPU."""
    import ray

    return max(1, _gpus(settings) or int(ray.cluster_resources().get("CPU", 1)))


def _no_restarts(map_batches: Callable[..., Any]) -> dict[str, Any]:
    """Actors that are not restarted, where this Ray takes `max_restarts`.

    Ray Data restarts a lost actor by default (-1), from arguments it keeps in
    the object store, which Ray says may then fail (ray-project/ray#53727) and
    logs as an error line on every run. Without restarts a lost actor (its
    node gone, killed for memory) fails the run; --skip-existing resumes it.
    """
    parameters = inspect.signature(map_batches).parameters.values()
    takes = any(p.name == "max_restarts" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    return {"max_restarts": 0} if takes else {}


class StoppedOnActor(GradcamError):
    """The GradcamError an actor stopped on, said by the driver as one process says it (message, hint, exit code)."""

    def __init__(self, message: str, hint: str | None, exit_code: int) -> None:
        super().__init__(message, hint=hint)
        self.exit_code = ExitCode(exit_code)


class ActorLost(GradcamError):
    """An actor's process or node went away mid-run: the run stops, every file written is complete."""

    exit_code = ExitCode.SOME_INPUTS_FAILED


class RayRunner:
    """The driver's side: the prepared Explainer checked the options and the model here; actors do the images.

    It stands in for the Explainer in the CLI's stream (`run(sources, emit)`,
    `settings`, `summary`, `writer`, `namer`), so records, the runs file and
    the report are made as for one process.
    """

    def __init__(self, explainer: Explainer, settings: ExplainSettings, warn: Callable[[str], None]) -> None:
        import copy

        from gradcam_cli.option_words import in_flags

        address = str(settings.run.ray)
        connect(address)
        self.explainer, self.settings, self.namer = explainer, settings, explainer.namer
        self.warn = lambda message: warn(in_flags(message))
        self.writer = copy.copy(explainer.writer)  # what the runs file says: the actors' device, not the driver's check
        self.writer.context = {**explainer.writer.context, "device": f"ray {address}"}
        self.summary = Summary()

    def run(self, sources: Iterable[Source], emit: Callable[[ImageRecord], None]) -> Summary:
        """The records in input order, as one process gives them, each emitted as soon as those before it are."""
        summary = self.summary = Summary()
        try:
            for notice in self.explainer.prepared.notices:
                self.warn(notice)
            found = rows(sources)
            if found:
                self._explain(found, emit, summary)
        finally:
            disconnect()
        return summary

    def _explain(self, found: list[dict[str, str]], emit: Callable[[ImageRecord], None], summary: Summary) -> None:
        ray = import_ray()
        dataset = ray.data.from_items(found)
        # Ray Data's own ordering: a batch done early waits for those before it (the few batches in flight),
        # the rest still streams
        dataset.context.execution_options.preserve_order = True
        try:
            pool = -(-len(found) // (self.settings.run.batch_size * BATCHES_PER_ACTOR_CALL))  # no more actors than calls
            for row in explain_rows(dataset, self.settings, actors=min(pool, _pool_size(self.settings)), stops_as_rows=True).iter_rows():
                self.explainer.checkpoint()  # Ctrl-C stops the driver at the next record, the actors with it
                if row["stop"]:
                    raise StoppedOnActor(**json.loads(str(row["stop"])))
                record = ImageRecord.from_json(str(row["record"]))
                summary.count(record)
                emit(record)
        except ray.exceptions.RayActorError as error:  # not restarted (_no_restarts)
            raise ActorLost(
                f"a Ray actor was lost ({_first_line(error)}); {summary.total} of {len(found)} inputs have their records; "
                "rerun with ⟨skip_existing⟩ to do the rest"
            ) from None


def explain_dataset(dataset: ray.data.Dataset, model: str, *, actors: int | None = None, **options: Any) -> ray.data.Dataset:
    """Explain the images of a Ray dataset with a `path` column: each row's overlays written by an actor, a dataset
    of records back (`input`, `record`: the JSON line `gradcam explain` prints), lazily, for `.write_json()` or to iterate.

    `options` are explain's (output_dir, method, layers, classes, ...; README), checked as the CLI checks them.
    """
    from gradcam_cli.settings import build_settings

    import_ray()
    return explain_rows(dataset, build_settings({**options, "model": model}), actors=actors)
