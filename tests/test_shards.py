"""Shards: N processes, each explaining its share of the inputs, together every input exactly once.

The share comes from `--shard I/N` or from torchrun's and SLURM's variables;
each process keeps its own records file; the report merges them; a resumed
shard skips what it wrote. One test starts a real `torchrun` with two
processes on this CPU and compares its files with one process's, byte for byte.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path, PurePath

import pytest

from conftest import png_bytes, write_photo_tree

MODEL = ("--model", "test_resnet", "--no-pretrained")
COUNT = 12


@pytest.fixture
def photos(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder of photos and a subfolder; the current folder is their parent."""
    folder = write_photo_tree(tmp_path / "photos", COUNT, every=3)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return folder


def _records(folder: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(folder.glob("records*.jsonl")) for line in path.read_text().splitlines()]


def test_three_shards_explain_every_input_once_and_write_what_one_process_writes(run_cli, photos: Path) -> None:
    whole = run_cli("explain", "photos", "-r", *MODEL, "-o", "one", "--json")
    assert whole.code == 0, whole.stderr
    for index in range(3):
        part = run_cli("explain", "photos", "-r", *MODEL, "--shard", f"{index}/3", "-o", "three", "--json")
        assert part.code == 0, part.stderr
        assert f"in shard {index} of 3" in part.stderr
        assert (Path("three") / f"records.shard-{index}-of-3.jsonl").is_file()
        assert (Path("three") / f"runs.shard-{index}-of-3.jsonl").is_file()
    inputs = [record["input"] for record in _records(Path("three"))]
    assert sorted(inputs) == sorted(record["input"] for record in whole.records()) and len(set(inputs)) == COUNT
    assert not (Path("three") / "records.jsonl").exists(), "a shard keeps its own records file"
    assert png_bytes(Path("three")) == png_bytes(Path("one")), "the same files, byte for byte"
    runs = [json.loads(line) for line in (Path("three") / "runs.shard-1-of-3.jsonl").read_text().splitlines()]
    mine = (Path("three") / "records.shard-1-of-3.jsonl").read_text().splitlines()
    assert runs[0]["shard"] == "1/3" and runs[1]["counts"]["total"] == len(mine) > 0


def test_the_share_depends_on_the_name_only_and_is_even(photos: Path) -> None:
    from gradcam_cli.inputs.shards import Shard
    from gradcam_cli.inputs.sources import Source

    names = [f"folder{n % 7}/image_{n}.jpg" for n in range(3000)]
    sources = [Source(Path(name), PurePath(name)) for name in names]
    shards = [Shard(i, 3) for i in range(3)]
    owners = {s.relative: [i for i, shard in enumerate(shards) if shard.owns(s)] for s in sources}
    assert all(len(found) == 1 for found in owners.values()), "every input has exactly one owner"
    shuffled = sources[:]
    random.Random(0).shuffle(shuffled)
    assert {s.relative: [i for i, shard in enumerate(shards) if shard.owns(s)] for s in shuffled} == owners
    sizes = [sum(found == [i] for found in owners.values()) for i in range(3)]
    assert all(900 <= size <= 1100 for size in sizes), sizes  # 1000 expected; 100 is over 5 standard deviations


@pytest.mark.parametrize(
    ("env", "args", "shard", "local"),
    [
        ({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}, (), (1, 4), 1),
        ({"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1"}, (), (5, 8), 1),
        ({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}, ("--shard", "0/2"), (0, 2), 1),
        ({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}, (), None, None),
        ({}, ("--shard", "2/3"), (2, 3), None),
    ],
)
def test_the_share_and_the_device_come_from_the_launcher(env, args, shard, local) -> None:
    from gradcam_cli.inputs.shards import with_launcher
    from gradcam_cli.model.device import resolve_device
    from gradcam_cli.settings import build_settings

    given = {"model": "test_resnet", "shard": args[1] if args else None}
    settings = with_launcher(build_settings(given), env)
    assert settings.run.shard == shard and settings.run.local_rank == local
    assert settings.run.launcher == (None if args or shard is None else ("torchrun" if "RANK" in env else "SLURM"))
    assert resolve_device("auto", local).type == ("cuda" if __import__("torch").cuda.is_available() else resolve_device("auto").type)


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (("--shard", "2/2"), {}, "--shard '2/2' is not I/N with 0 <= I < N"),
        (("--shard", "one/two"), {}, "--shard 'one/two' is not I/N"),
        ((), {"RANK": "x", "WORLD_SIZE": "2"}, "torchrun's RANK='x' is not a number"),
        ((), {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "abc"}, "torchrun's LOCAL_RANK='abc' is not a number"),
        ((), {"SLURM_PROCID": "0", "SLURM_NTASKS": "²"}, "SLURM's SLURM_NTASKS='²': '²' is not written in the digits 0-9"),
        (("--shard", "²/4"), {}, "--shard '²/4': '²' is not written in the digits 0-9"),
        (("--shard", "0/" + "9" * 5000), {}, "a number of 5,000 digits is more than any makes sense"),
        ((), {"SLURM_PROCID": "3", "SLURM_NTASKS": "2"}, "SLURM's SLURM_PROCID=3 is not below SLURM_NTASKS=2"),
    ],
)
def test_a_bad_share_is_one_line(run_cli, photos: Path, monkeypatch: pytest.MonkeyPatch, args, env, says) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = run_cli("explain", "photos", *MODEL, *args, "-o", "bad")
    assert result.code == 2 and says in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not Path("bad").exists()


def test_a_shard_resumes_and_the_report_merges_every_shard(run_cli, photos: Path) -> None:
    for index in range(2):
        assert run_cli("explain", "photos", "-r", *MODEL, "--shard", f"{index}/2", "-o", "out", "--json").code == 0
    first = json.loads((Path("out") / "records.shard-0-of-2.jsonl").read_text().splitlines()[0])
    lost = Path(first["outputs"][0])
    lost.unlink()  # as if shard 0 had died before writing this image
    again = run_cli("explain", "photos", "-r", *MODEL, "--shard", "0/2", "-o", "out", "--json", "--skip-existing")
    assert again.code == 0, again.stderr
    assert [r["input"] for r in again.records() if not r["skipped"]] == [first["input"]] and lost.is_file()
    report = run_cli("report", "out")
    assert report.code == 0, report.stderr
    data = (Path("out") / "report" / "data.js").read_text()
    page = json.loads(json.loads(data[data.index("JSON.parse(") + len("JSON.parse(") : data.rindex(")")]))
    assert sorted({card["input"] for card in page["cards"]}) == sorted({r["input"] for r in _records(Path("out"))})
    assert len({card["input"] for card in page["cards"]}) == COUNT
    assert sorted(run.get("shard") for run in page["header"]["runs"]) == ["0/2", "0/2", "1/2"], "both shards' runs, the resumed one too"


def test_a_shard_that_gets_no_input_has_done_its_part(run_cli, photos: Path) -> None:
    from gradcam_cli.inputs.shards import Shard
    from gradcam_cli.inputs.sources import Source

    one = "photos/img01.png"
    empty = next(i for i in range(2) if not Shard(i, 2).owns(Source(Path(one), PurePath(one))))
    result = run_cli("explain", one, *MODEL, "--shard", f"{empty}/2", "-o", "out")
    assert result.code == 0 and f"no input falls to shard {empty} of 2" in result.stderr, result.stderr


@pytest.mark.skipif(shutil.which("torchrun", path=str(Path(sys.executable).parent)) is None, reason="torchrun not installed")
@pytest.mark.slow
def test_torchrun_with_two_processes_writes_what_one_process_writes(run_cli, photos: Path) -> None:
    """`torchrun --nproc-per-node 2 -m gradcam_cli explain ...` on this CPU: no process group, two shares, one result."""
    torchrun = str(Path(sys.executable).parent / "torchrun")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    command = [torchrun, "--nproc-per-node", "2", "-m", "gradcam_cli", "explain", "photos", "-r", *MODEL, "-o", "ranks", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "in shard 0 of 2 (from torchrun)" in done.stderr and "in shard 1 of 2 (from torchrun)" in done.stderr
    stdout = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert sorted(r["input"] for r in stdout) == sorted(r["input"] for r in _records(Path("ranks"))) and len(stdout) == COUNT
    assert run_cli("explain", "photos", "-r", *MODEL, "-o", "one", "--json").code == 0
    assert png_bytes(Path("ranks")) == png_bytes(Path("one"))
