"""Interruptions and faults: signals mid-batch and --skip-existing, out of memory, unwritable or full output folders."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from conftest import cli_command, cli_env, is_run_file, pictures_in, write_image

ROOT = Path(__file__).resolve().parent.parent


def _folder(tmp_path: Path, count: int) -> Path:
    folder = tmp_path / "in"
    for i in range(count):
        write_image(folder / f"img_{i:03d}.png", 160, 120, seed=i)
    return folder


def _explain(folder: Path, out: Path, *extra: str) -> subprocess.Popen:
    command = cli_command(
        "explain", folder, "--model", "test_resnet", "--no-pretrained", "-b", 2, "--workers", 2, "-o", out, "--json", *extra
    )
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())


@contextmanager
def _watched(process: subprocess.Popen, timeout: float) -> Iterator[Callable[[], str]]:
    """While the body reads the process's stdout: its stderr drained beside (neither pipe fills and blocks it), and
    the process killed after `timeout` seconds (a hung run ends the body's reads instead of outliving the test).
    Yields a function that gives all of stderr once the body is done."""
    pipe = process.stderr
    assert pipe is not None
    stderr: list[str] = []
    drain = threading.Thread(target=lambda: stderr.append(pipe.read()), daemon=True)
    watchdog = threading.Timer(timeout, process.kill)
    drain.start()
    watchdog.start()
    try:
        yield lambda: stderr[0]
    finally:
        watchdog.cancel()
        process.kill()  # no-op once it has ended
        drain.join()


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file below the folder (outputs mirror the inputs' sub-folders) by its path there."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and not is_run_file(p)}


@pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
@pytest.mark.slow
def test_a_signal_mid_batch_leaves_whole_files_and_skip_existing_does_the_rest(tmp_path, signum, code) -> None:
    count = 120
    folder, out = _folder(tmp_path, count), tmp_path / "out"
    inputs = _snapshot(folder)
    process = _explain(folder, out)
    first: list[dict] = []
    with _watched(process, timeout=120) as stderr_of:
        assert process.stdout is not None
        for line in process.stdout:  # wait until the run is really under way
            first.append(json.loads(line))
            if len(first) == 2:
                process.send_signal(signum)
                break
        # the same reader to the end: communicate() would read the pipe itself and lose the lines this wrapper
        # had already read ahead, so its first "line" could start mid-record
        first += [json.loads(line) for line in process.stdout if line.strip()]
        process.wait()
    stderr = stderr_of()
    assert process.returncode == code, stderr
    assert "interrupted" in stderr and "--skip-existing" in stderr and "Traceback" not in stderr
    assert len(first) < count, "the run stopped before the end"

    written = sorted(out.rglob("*.png"))
    assert not [p for p in out.rglob(".*")], "no temporary or partial file is left"
    from PIL import Image

    for path in written:  # every file there is whole
        with Image.open(path) as image:
            image.load()
    assert {Path(r["outputs"][0]).name for r in first if r["ok"]} <= {p.name for p in written}

    again = _explain(folder, out, "--skip-existing")
    stdout, stderr = again.communicate(timeout=120)
    assert again.returncode == 0, stderr
    records = [json.loads(line) for line in stdout.splitlines()]
    assert len(records) == count
    skipped = {r["input"] for r in records if r["skipped"]}
    redone = {r["input"] for r in records if not r["skipped"]}
    assert len(skipped) == len(written) and len(redone) == count - len(written)
    assert f"{len(skipped)} skipped" in stderr
    assert len(list(out.rglob("*.png"))) == count, "together the two runs explained every input once"
    assert _snapshot(folder) == inputs


@pytest.mark.slow
def test_out_of_memory_splits_the_batch_and_gives_the_same_files(run_cli, tmp_path, monkeypatch) -> None:
    from gradcam_cli.run.pipeline import Explainer

    folder = _folder(tmp_path, 7)
    plain = run_cli("explain", folder, "--model", "test_resnet", "--no-pretrained", "-b", "8", "-o", tmp_path / "a", "--json")
    assert plain.code == 0, plain.stderr

    compute = Explainer.compute
    sizes = []

    def small_device(self, x, *items):
        sizes.append(int(x.shape[0]))
        if x.shape[0] > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return compute(self, x, *items)

    monkeypatch.setattr(Explainer, "compute", small_device)
    result = run_cli("explain", folder, "--model", "test_resnet", "--no-pretrained", "-b", "8", "-o", tmp_path / "b", "--json")
    assert result.code == 0, result.stderr
    assert "out of memory" in result.stderr and "retrying" in result.stderr
    assert sizes[0] == 7 and sum(s for s in sizes if s <= 2) == 7, sizes  # halved until it fits, every image once
    assert all(r["ok"] for r in result.records()) and len(result.records()) == 7
    assert _snapshot(tmp_path / "a") == _snapshot(tmp_path / "b")


@pytest.mark.slow
def test_an_image_that_never_fits_gets_an_error_record(run_cli, tmp_path, monkeypatch) -> None:
    from gradcam_cli.run.pipeline import Explainer

    def no_memory(self, x, *items):
        raise RuntimeError("CUDA error: out of memory")

    monkeypatch.setattr(Explainer, "compute", no_memory)
    folder = _folder(tmp_path, 3)
    result = run_cli("explain", folder, "--model", "test_resnet", "--no-pretrained", "-o", tmp_path / "o", "--json")
    assert result.code == 1 and "Traceback" not in result.stderr
    records = result.records()
    assert len(records) == 3 and not any(r["ok"] for r in records)
    assert all("out of memory" in r["error"] for r in records)


def test_an_output_folder_that_cannot_be_written_is_one_message(run_cli, tmp_path) -> None:
    folder = _folder(tmp_path, 2)
    inputs = _snapshot(folder)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = run_cli("explain", folder, "--model", "test_resnet", "--no-pretrained", "-o", blocker / "out")
    assert result.code == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "cannot write to the output folder" in lines[0] and "--output-dir" in lines[0]
    assert _snapshot(folder) == inputs


def test_a_full_disk_stops_the_run_with_one_message(run_cli, tmp_path, monkeypatch) -> None:
    from gradcam_cli.outputs import writer

    real = writer.write_atomic
    writes = []

    def filling_up(path, data):
        if len(writes) >= 3:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        writes.append(path)
        real(path, data)

    monkeypatch.setattr(writer, "write_atomic", filling_up)
    folder = _folder(tmp_path, 12)
    inputs = _snapshot(folder)
    out = tmp_path / "out"
    result = run_cli("explain", folder, "--model", "test_resnet", "--no-pretrained", "-b", "2", "--workers", "1", "-o", out, "--json")
    assert result.code == 1
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "No space left on device" in errors[0] and "--skip-existing" in errors[0]
    assert "Traceback" not in result.stderr
    records = result.records()
    assert len(records) == 3 and all(r["ok"] for r in records), "the images written before are reported"
    assert sorted(p.name for p in pictures_in(out)) == sorted(Path(p).name for p in writes)
    assert _snapshot(folder) == inputs


def test_a_stop_request_waits_for_a_checkpoint_and_a_second_signal_does_not():
    """While images stream a signal only asks; the engine stops at its next checkpoint (no lock left held)."""
    from gradcam_cli.errors import Interrupted
    from gradcam_cli.cli.signals import StopRequests

    with StopRequests() as stops:
        with pytest.raises(Interrupted) as first:
            with stops.deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)  # the handler has run by now: it did not raise
                reached = True
                stops.checkpoint()
        assert reached and first.value.exit_code == 143


@pytest.mark.slow
def test_a_second_signal_ends_the_process_at_once(tmp_path) -> None:
    """Asked twice while the run streams: the process ends at once (no exception that could leave a lock held)."""
    script = (
        "import os, signal, time\n"
        "from gradcam_cli.cli.signals import StopRequests\n"
        "with StopRequests() as stops, stops.deferred():\n"
        "    os.kill(os.getpid(), signal.SIGINT); time.sleep(0.05)\n"
        "    print('still running', flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGINT); time.sleep(5)\n"
        "    print('not reached', flush=True)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30, env=env)
    assert done.returncode == 130 and done.stdout == "still running\n", (done.stdout, done.stderr)
    assert "interrupted by Ctrl-C" in done.stderr and "asked twice" in done.stderr


def _blocked_reading_a_pipe(pid: int, polls: int = 6000) -> bool:
    """Whether the process comes to sleep in a pipe read (/proc/PID/wchan: `pipe_read`, `anon_pipe_read`), polled
    every 10 ms; `polls` bounds only a run that never gets there."""
    for _ in range(polls):
        try:
            if "pipe_read" in Path(f"/proc/{pid}/wchan").read_text():
                return True
        except OSError:
            return False
        time.sleep(0.01)
    return False


@pytest.mark.slow
def test_ctrl_c_stops_a_run_waiting_for_paths_on_stdin(tmp_path) -> None:
    """`producer | gradcam explain -` with a producer that stays quiet: Ctrl-C still stops it at once."""
    process = subprocess.Popen(
        cli_command("explain", "-", "--model", "test_resnet", "--no-pretrained", "-o", tmp_path / "out", "--json"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    assert process.stderr is not None and process.stdin is not None
    # the run reads stdin's first path before it loads the model: wait until the kernel says it is blocked in that
    # read (stdin left open, empty), so the signal stops a run that waits, not one still starting
    assert _blocked_reading_a_pipe(process.pid), "the run never waited on stdin"
    process.send_signal(signal.SIGINT)
    try:
        # stdin stays open while it ends (communicate() would close it, and end of input also ends the run);
        # 30 s only bounds a hang: nothing else would end a run that the signal did not stop
        process.wait(timeout=30)
        stderr = process.stderr.read()
    finally:
        process.kill()
        process.stdin.close()
    assert process.returncode == 130, stderr
    assert "interrupted by Ctrl-C" in stderr and "Traceback" not in stderr
