"""The Ray Data runner: the same files and records as one process, in input order; reaching a cluster is one line.

Needs the `[ray]` extra (`.ci/run` installs it): skipped without it, except
under CI=true where a missing Ray fails. The tests that only need a cluster
share one local cluster (the module's `cluster`); those about how the CLI
connects run the CLI in its own process, where no `ray.init` of ours has
connected first. Both start real processes: slow.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import cli_command, cli_env, png_bytes, require, write_image, write_photo_tree

ray = require("ray")
require("ray.data")
pytestmark = pytest.mark.slow  # a local Ray cluster for the module: its daemons and actors are processes

MODEL = ("--model", "test_resnet", "--no-pretrained")
COUNT = 10
HANG_GUARD_S = 600  # only a hang reaches it: the CLI ends long before, a cluster's start included


@pytest.fixture(scope="module")
def cluster():
    """One local Ray cluster for the module: it starts in seconds, its actors in a few more."""
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR")  # never another process's cluster
    yield
    ray.shutdown()


@pytest.fixture
def photos(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder of photos and a subfolder; the current folder is their parent."""
    folder = write_photo_tree(tmp_path / "photos", COUNT, every=4)
    (folder / "broken.png").write_bytes(b"not a png")
    monkeypatch.chdir(tmp_path)
    return folder


def cli_process(*args: str, env: dict[str, str] | None = None, timeout: float = HANG_GUARD_S) -> subprocess.CompletedProcess:
    """`gradcam explain ARGS` in its own process: its own connection to Ray, its real stderr (Ray's C++ lines too)."""
    environment = {key: value for key, value in cli_env().items() if key != "RAY_ADDRESS"} | (env or {})
    return subprocess.run(cli_command("explain", *args), capture_output=True, text=True, timeout=timeout, env=environment)


@pytest.mark.slow
def test_the_ray_runner_writes_what_one_process_writes(run_cli, cluster, photos: Path) -> None:
    on_ray = run_cli("explain", "photos", "-r", *MODEL, "--ray", "local", "-o", "ray", "--json")
    assert on_ray.code == 1, on_ray.stderr  # the broken file: one error record, the others explained
    plain = run_cli("explain", "photos", "-r", *MODEL, "-o", "one", "--json")
    records = on_ray.records()
    assert [r["input"] for r in records] == [r["input"] for r in plain.records()], "the records of one process, in its order"
    assert len({r["input"] for r in records}) == COUNT + 1 and sum(not r["ok"] for r in records) == 1
    kept = [json.loads(line) for line in (Path("ray") / "records.jsonl").read_text().splitlines()]
    assert [r["input"] for r in kept] == [r["input"] for r in records]
    assert png_bytes(Path("ray")) == png_bytes(Path("one")), "the same overlays, byte for byte"
    assert f"explained {COUNT} of {COUNT + 1} images, 1 failed" in on_ray.stderr
    run = [json.loads(line) for line in (Path("ray") / "runs.jsonl").read_text().splitlines()]
    assert run[0]["device"] == "ray local" and run[1]["counts"]["done"] == COUNT


@pytest.mark.slow
def test_explain_dataset_from_python(cluster, photos: Path) -> None:
    import ray.data

    from gradcam_cli.run.ray_data import explain_dataset

    paths = sorted(str(p.relative_to(photos.parent)) for p in photos.rglob("img*.png"))
    records = explain_dataset(ray.data.from_items([{"path": p} for p in paths]), "test_resnet", actors=1, pretrained=False, output_dir="py")
    rows = [json.loads(row["record"]) for row in records.iter_rows()]
    assert sorted(r["input"] for r in rows) == paths and all(r["ok"] for r in rows)
    assert all(Path(r["outputs"][0]).is_file() and r["outputs"][0].startswith("py/photos/") for r in rows)


@pytest.mark.slow
def test_ray_local_keeps_input_order_and_says_no_error(tmp_path: Path) -> None:
    """A first batch far slower than the rest: a second actor finishes later batches first, yet the records come in
    the order the inputs were named (not sorted), and a run that succeeds prints no error line on stderr."""
    slow = [write_image(tmp_path / f"slow{i}.png", 2400, 1800, seed=i) for i in range(4)]  # -b 1: one actor call
    quick = [write_image(tmp_path / f"quick{i}.png", 48, 40, seed=10 + i) for i in range(12)]
    named = [str(path) for path in [*slow, *quick[::-1]]]  # reversed: input order is not the names' order
    done = cli_process(*named, *MODEL, "--ray", "local", "-b", "1", "-o", str(tmp_path / "out"), "--json")
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["input"] for line in done.stdout.splitlines()] == named
    kept = (tmp_path / "out" / "records.jsonl").read_text().splitlines()
    assert [json.loads(line)["input"] for line in kept] == named
    lines = done.stderr.splitlines()
    assert lines and all(line.startswith("gradcam: ") for line in lines), done.stderr  # Ray's own lines would not
    assert "error" not in done.stderr.lower(), done.stderr


@pytest.mark.slow
def test_an_actors_refusal_is_the_drivers_one_line(tmp_path: Path) -> None:
    """An actor that meets another run's output (here: another layer's) stops the run as one process stops: one line,
    exit 1, the picture left as it was; not Ray's wrapped traceback as an internal error."""
    photo = str(write_image(tmp_path / "cat.png", 64, 48))
    out = str(tmp_path / "out")
    first = cli_process(photo, *MODEL, "-o", out, "--json")
    assert first.returncode == 0, first.stderr
    picture = next(Path(out).rglob("*.gradcam.png"))
    before = picture.read_bytes()
    again = cli_process(photo, *MODEL, "--layer", "layer3", "--ray", "local", "-o", out, "--json")
    assert again.returncode == 1, again.stderr
    errors = [line for line in again.stderr.splitlines() if line.startswith("gradcam: error:")]
    assert len(errors) == 1 and "was made by another run" in errors[0] and "--replace" in errors[0], again.stderr
    assert "Traceback" not in again.stderr and "internal error" not in again.stderr
    assert picture.read_bytes() == before


def descendants(pid: int) -> list[int]:
    """The processes below `pid` (a local cluster's raylet and its workers are the CLI's children), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) if entry.name.isdigit() else None
        except (OSError, IndexError, ValueError):  # gone meanwhile
            continue
        if parent is not None:
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], list(children.get(pid, []))
    while todo:
        found.append(todo.pop())
        todo.extend(children.get(found[-1], []))
    return found


@pytest.mark.slow
def test_a_lost_actor_stops_the_run_in_one_line_and_skip_existing_finishes_it(tmp_path: Path) -> None:
    """Actors are not restarted (no error line on every run for it): losing them stops the run with one line, its
    records and files whole, and a rerun with --skip-existing (here in one process) does exactly the rest."""
    import select
    import signal

    for index in range(120):
        write_image(tmp_path / "photos" / f"img{index:03d}.png", 48, 40, seed=index)
    command = cli_command("explain", "photos", *MODEL, "-b", "1", "-o", "out", "--json")
    process = subprocess.Popen([*command, "--ray", "local"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
    try:
        ready, _, _ = select.select([process.stdout], [], [], HANG_GUARD_S)
        assert ready and process.stdout.readline(), "a first record"  # the actors are up and at work
        workers = [pid for pid in descendants(process.pid) if b"MapWorker" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert workers, "the actors run below the CLI's local cluster"
        for pid in workers:  # all of them: a lone idle one might just be left out of the pool
            os.kill(pid, signal.SIGKILL)
        out, err = process.communicate(timeout=HANG_GUARD_S)
    finally:
        process.kill()
    assert process.returncode == 1, err
    # ours: one line; Ray's raylet may report the killed worker's sockets in lines of its own (a real fault: kept)
    lines = [line for line in err.splitlines() if line.startswith("gradcam:") and not line.startswith("gradcam: --no-pretrained")]
    assert len(lines) == 1 and lines[0].startswith("gradcam: error: a Ray actor was lost ("), err
    assert all(line.startswith(("gradcam:", "\x1b[33m(raylet)", "(raylet)")) for line in err.splitlines()), err
    assert "rerun with --skip-existing" in lines[0]
    first = [json.loads(line)["input"] for line in (tmp_path / "out" / "records.jsonl").read_text().splitlines()]
    assert 1 <= len(first) < 120
    resumed = subprocess.run(command + ["--skip-existing"], capture_output=True, text=True, timeout=HANG_GUARD_S, env=cli_env())
    assert resumed.returncode == 0, resumed.stderr
    records = [json.loads(line) for line in resumed.stdout.splitlines()]
    assert sorted(r["input"] for r in records) == sorted(f"photos/img{index:03d}.png" for index in range(120))
    assert {r["input"] for r in records if r.get("skipped")} >= set(first), "what the stopped run recorded is done"


@pytest.fixture
def closed_port() -> int:
    """A local port nothing listens on: bound once by the system's choice, then released."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def http_port() -> Iterator[int]:
    """A local port where a web server answers, not Ray (as a dashboard's port would)."""
    import threading
    from http.server import HTTPServer, SimpleHTTPRequestHandler

    server = HTTPServer(("127.0.0.1", 0), SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def one_error_line(done: subprocess.CompletedProcess) -> str:
    """The run failed as a usage error: exit 2, its stderr one line (after the scanner's remarks, none here)."""
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gradcam: error: "), done.stderr
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("answers", ["nothing", "a web server"])
def test_a_port_without_ray_is_one_line(tmp_path: Path, closed_port: int, http_port: int, answers: str) -> None:
    """ray.init itself retries such an address for many minutes; the CLI's connect() says so in one line and ends."""
    port = closed_port if answers == "nothing" else http_port
    write_image(tmp_path / "cat.png")
    done = cli_process(str(tmp_path / "cat.png"), *MODEL, "--ray", f"127.0.0.1:{port}", "-o", str(tmp_path / "out"), timeout=60)
    line = one_error_line(done)
    assert line.startswith(f"gradcam: error: --ray 127.0.0.1:{port}: cannot reach a Ray cluster (") and "ray start --head" in line
    assert not (tmp_path / "out").exists(), "nothing written: it failed before the model loaded"


@pytest.mark.slow
def test_auto_reads_ray_address(tmp_path: Path, closed_port: int) -> None:
    write_image(tmp_path / "cat.png")
    address = {"RAY_ADDRESS": f"127.0.0.1:{closed_port}"}
    done = cli_process(str(tmp_path / "cat.png"), *MODEL, "--ray", "auto", "-o", "out", env=address, timeout=60)
    assert one_error_line(done).startswith(f"gradcam: error: --ray auto: cannot reach a Ray cluster (127.0.0.1:{closed_port}: ")


@pytest.mark.slow
@pytest.mark.parametrize(("address", "env"), [("ray://127.0.0.1:10001", {}), ("auto", {"RAY_ADDRESS": "ray://127.0.0.1:10001"})])
def test_ray_client_is_refused_in_one_line(tmp_path: Path, address: str, env: dict[str, str]) -> None:
    """Ray Data does not run through Ray Client (the driver's executor needs a core worker the client lacks), so a
    ray:// address is refused with what to do instead, whether or not the client's grpcio is installed."""
    write_image(tmp_path / "cat.png")
    done = cli_process(str(tmp_path / "cat.png"), *MODEL, "--ray", address, "-o", "out", env=env, timeout=60)
    line = one_error_line(done)
    assert "Ray Data does not run through Ray Client" in line and "ray job submit" in line and "--ray auto" in line


def test_without_ray_it_is_one_line(run_cli, photos: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    result = run_cli("explain", "photos", "-r", *MODEL, "--ray", "local", "-o", "none")
    assert result.code == 2 and result.stderr.strip() == "gradcam: error: --ray needs Ray Data: pip install 'gradcam-cli[ray]'"
