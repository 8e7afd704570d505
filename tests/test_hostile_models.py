"""Hostile presets, checkpoints and networks: each fails fast, in one line, with exit 2 — never a traceback.

- a YAML preset with nested aliases ("billion laughs") or other parser traps;
- a `.pth` zip bomb, a lying safetensors header, a classifier weight that
  cannot be one (1-D, absurd class counts, stride-0 views);
- a hub that cannot be reached: no 52 s of retries, no library noise, and
  cached weights still load.

No traffic leaves 127.0.0.1: endpoints and proxies point at a closed local port
or at a local socket that never answers.
"""

from __future__ import annotations

import collections
import contextlib
import io
import json
import os
import pickle
import socket
import struct
import subprocess
import sys
import time
import tracemalloc
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT, write_image

CLOSED = "http://127.0.0.1:9"  # the discard port: nothing listens there
PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


@pytest.fixture
def image(tmp_path: Path) -> Path:
    return write_image(tmp_path / "in.png", 64, 48, seed=40)


# `python -m gradcam_cli ARGS` that also records what it did, as JSON in the file named first: its peak memory
# (VmHWM, KiB: the kernel's count for this program alone; a child's ru_maxrss would include the pytest it was
# forked from) and every TCP connection it tried (host, port): what a run did, where seconds depend on the machine
RECORDING_PROBE = """
import atexit, json, runpy, socket, sys

tried = []
connect = socket.socket.connect

def counted(self, address):
    tried.append(address)
    return connect(self, address)

def record(path=sys.argv[1]):
    with open("/proc/self/status") as status:
        peak = int(next(line.split()[1] for line in status if line.startswith("VmHWM:")))
    with open(path, "w") as out:
        json.dump({"peak_kib": peak, "connections": tried}, out)

socket.socket.connect = counted
atexit.register(record)
sys.argv = ["gradcam", *sys.argv[2:]]
runpy.run_module("gradcam_cli", run_name="__main__", alter_sys=True)
"""


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    peak_mb: float
    connections: list[tuple[str, int]]


def gradcam(tmp_path: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> Run:
    """`python -m gradcam_cli ARGS` in a real process, and what it did (RECORDING_PROBE)."""
    env = dict(env if env is not None else os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("OMP_NUM_THREADS", "1")
    recorded = (tmp_path / "what-it-did.json").resolve()
    done = subprocess.run(
        [sys.executable, "-c", RECORDING_PROBE, recorded, *map(str, args)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    did = json.loads(recorded.read_text())
    return Run(done.returncode, done.stdout, done.stderr, did["peak_kib"] / 1024, [tuple(a[:2]) for a in did["connections"]])


def one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


# ---------------------------------------------------------------- presets (item 5)


def billion_laughs(path: Path, levels: int = 9) -> Path:
    """Under 1 KB of YAML whose `layers` value stands for 9**9 (387 million) strings: its repr is 2 GB."""
    lines = ["layers:", "  - &a [x, x, x, x, x, x, x, x, x]"]
    names = "abcdefghijklmnop"
    for previous, name in zip(names, names[1:levels]):
        lines.append(f"  - &{name} [{', '.join([f'*{previous}'] * 9)}]")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert path.stat().st_size < 1024
    return path


@pytest.mark.slow
def test_alias_bomb_preset_fails_fast_in_a_real_process(tmp_path, image):
    bomb = billion_laughs(tmp_path / "bomb.yaml")
    run = gradcam(tmp_path, "explain", image, "--config", bomb, timeout=60)
    assert run.code == 2 and run.stdout == ""
    line = one_error_line(run.stderr)
    assert str(bomb) in line and "alias" in line and len(line) < 300
    # refused before anything was built: Python and the CLI peak at ~35 MB here, importing torch alone at ~600 MB,
    # and the aliases expanded would take gigabytes
    assert run.peak_mb < 200, f"{run.peak_mb:.0f} MB"


@contextlib.contextmanager
def python_memory(limit_mb: float) -> Iterator[None]:
    """The body's peak of Python allocations (PyYAML is pure Python here) stays under `limit_mb`."""
    tracemalloc.start()
    try:
        yield
        peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()
    assert peak_mb < limit_mb, f"the parse held {peak_mb:.1f} MB"


# a preset is at most ~100 KB of text: parsing one holds a few MB, while anything that expands it holds gigabytes
PRESET_PEAK_MB = 20


def test_alias_bomb_is_refused_at_the_first_alias(tmp_path):
    from gradcam_cli.cli.presets import load_preset
    from gradcam_cli.errors import UsageError

    bomb = billion_laughs(tmp_path / "bomb.yaml")
    with python_memory(PRESET_PEAK_MB), pytest.raises(UsageError, match=r"line 3 uses the YAML alias \*a"):
        load_preset(bomb)  # line 3 holds the first alias: the parse stopped there, with nothing expanded


def test_a_single_alias_is_refused_too(tmp_path):
    from gradcam_cli.cli.presets import load_preset
    from gradcam_cli.errors import UsageError

    preset = tmp_path / "alias.yaml"
    preset.write_text("base: &m test_resnet\nmodel: *m\n", encoding="utf-8")
    with pytest.raises(UsageError, match="may not use aliases"):
        load_preset(preset)
    preset.write_text("model: &m test_resnet\n", encoding="utf-8")  # an anchor alone is harmless
    assert load_preset(preset)["model"] == "test_resnet"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("model: test_resnet\ntopk: [" + ", ".join(["a" * 50] * 1000) + "]\n", "'topk'"),
        ("model: test_resnet\nmethod: [" + "x" * 5000 + "]\n", "'method'"),
        ("model: test_resnet\n? " + "k" * 20000 + "\n: 1\n", "unknown key"),  # explicit: no 1024-char limit
        ("[" * 5000 + "\n", "nests values over 10 deep"),
        ("model:\n" + "".join("  " * i + "- \n" for i in range(200)), "nests values over 10 deep"),
        ("topk: " + "9" * 5000 + "\n", "not valid YAML"),
        ("model: 2024-13-45\n", "not valid YAML"),
        ("model: [" + "x, " * 3000 + "\n", "not valid YAML"),
        ("# padding\n" * 8000, "too big for a preset"),
    ],
    ids=["long-list", "long-string", "long-key", "deep", "deep-block", "huge-int", "bad-date", "unclosed", "too-big"],
)
def test_hostile_preset_values_give_one_short_line(tmp_path, text, expected):
    from gradcam_cli.cli.presets import MAX_SHOWN_CHARS, load_preset
    from gradcam_cli.errors import UsageError

    preset = tmp_path / "hostile.yaml"
    preset.write_text(text, encoding="utf-8")
    with python_memory(PRESET_PEAK_MB), pytest.raises(UsageError) as raised:
        load_preset(preset)
    message = str(raised.value)
    assert expected in message and "\n" not in message
    assert len(message) < 2 * MAX_SHOWN_CHARS + 400 + len(str(preset)), message  # the key list is ~300


def test_preset_with_a_byte_order_mark_loads(tmp_path):
    from gradcam_cli.cli.presets import load_preset

    preset = tmp_path / "bom.yaml"
    preset.write_bytes(b"\xef\xbb\xbfmodel: test_resnet\ntopk: 2\n")
    assert load_preset(preset) == {"model": "test_resnet", "topk": 2}


# ---------------------------------------------------------------- checkpoints (item 6)


def torch_pickle(shapes: dict[str, tuple[int, ...]]) -> bytes:
    """data.pkl of a torch zip checkpoint: {key: float32 tensor of shape}, written without any tensor data."""
    import torch

    class Storage:
        def __init__(self, key: str, numel: int) -> None:
            self.key, self.numel = key, numel

    class Tensor:
        def __init__(self, storage: Storage, shape: tuple[int, ...]) -> None:
            self.storage, self.shape = storage, shape

        def __reduce__(self):
            stride = tuple(int(torch.Size(self.shape[i + 1 :]).numel()) for i in range(len(self.shape)))
            return torch._utils._rebuild_tensor_v2, (self.storage, 0, self.shape, stride, False, collections.OrderedDict())

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            return ("storage", torch.FloatStorage, obj.key, "cpu", obj.numel) if isinstance(obj, Storage) else None

    state = {key: Tensor(Storage(str(i), torch.Size(shape).numel()), shape) for i, (key, shape) in enumerate(shapes.items())}
    buffer = io.BytesIO()
    Pickler(buffer, protocol=2).dump(state)
    return buffer.getvalue()


def write_zip(path: Path, entries: list[tuple[str, bytes, int, int, int]]) -> Path:
    """(name, payload, method, crc, size) entries, written by hand: zipfile cannot take deflated bytes."""
    body, directory = bytearray(), bytearray()
    for name, payload, method, crc, size in entries:
        encoded = name.encode()
        offset = len(body)
        body += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc, len(payload), size, len(encoded), 0)
        body += encoded + payload
        directory += (
            struct.pack(
                "<IHHHHHHIIIHHHHHII",
                0x02014B50,
                20,
                20,
                0,
                method,
                0,
                0x21,
                crc,
                len(payload),
                size,
                len(encoded),
                0,
                0,
                0,
                0,
                0,
                offset,
            )
            + encoded
        )
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(directory), len(body), 0)
    path.write_bytes(bytes(body + directory + end))
    return path


def stored(name: str, data: bytes) -> tuple[str, bytes, int, int, int]:
    return name, data, zipfile.ZIP_STORED, zlib.crc32(data), len(data)


def deflated_zeros(mib: int) -> tuple[bytes, int]:
    """A raw deflate stream of `mib` MiB of zeros (~1 KB per MiB) and its CRC, made in well under a second."""
    chunk = bytes(1 << 20)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = compressor.compress(chunk) + compressor.flush(zlib.Z_FULL_FLUSH)  # history reset: the block repeats
    tail = compressor.flush()
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(chunk, crc)
    return block * mib + tail, crc


def torch_zip(path: Path, shapes: dict[str, tuple[int, ...]], data: bytes, crc: int, declared: int) -> Path:
    """A torch zip checkpoint whose one storage is `data` (deflated) declared as `declared` bytes."""
    root = path.stem
    return write_zip(
        path,
        [
            stored(f"{root}/data.pkl", torch_pickle(shapes)),
            stored(f"{root}/byteorder", b"little"),
            stored(f"{root}/version", b"3\n"),
            (f"{root}/data/0", data, zipfile.ZIP_DEFLATED, crc, declared),
        ],
    )


@pytest.fixture(scope="module")
def zip_bomb(tmp_path_factory) -> Path:
    """~1 MB on disk, 1 GiB inflated: one 1-D float tensor of 2**28 elements under the classifier's name."""
    data, crc = deflated_zeros(1024)
    return torch_zip(tmp_path_factory.mktemp("bomb") / "bomb.pth", {"fc.weight": (1 << 28,)}, data, crc, 1 << 30)


def test_the_zip_bomb_is_real(zip_bomb):
    assert zip_bomb.stat().st_size < 2 << 20
    with zipfile.ZipFile(zip_bomb) as archive:
        (member,) = [i for i in archive.infolist() if i.filename.endswith("data/0")]
        assert member.file_size == 1 << 30
        with archive.open(member) as stream:
            assert stream.read(8 << 20) == bytes(8 << 20)  # it does inflate (only 8 MiB read here)


@pytest.fixture
def calls(monkeypatch):
    """`calls(owner, "name")`: the real function, each call's arguments recorded (what a run did, not how long it took)."""

    def record(owner, name: str) -> list[tuple[tuple, dict]]:
        real, seen = getattr(owner, name), []

        def recorded(*args, **kwargs):
            seen.append((args, kwargs))
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, recorded)
        return seen

    return record


def test_zip_bomb_weights_are_refused_before_inflating(zip_bomb, calls):
    import torch

    from gradcam_cli.errors import ModelError
    from gradcam_cli.model.checkpoint import read_state_dict

    loads = calls(torch, "load")
    with pytest.raises(ModelError, match=r"declares 1\.0 GiB of data in a 1\.0 MiB file \(a compression bomb\?\)"):
        read_state_dict(zip_bomb)
    assert loads == [], "refused from the zip's directory: torch.load never started (it inflates this to 1.7 GB in ~5 s)"


def test_zip_bomb_through_the_cli_is_one_line_and_exit_2(run_cli, tmp_path, image, zip_bomb, calls):
    import torch

    from gradcam_cli.model import load

    loads, builds = calls(torch, "load"), calls(load, "build_model")
    result = run_cli("explain", "-m", "test_resnet", "--weights", zip_bomb, "-o", tmp_path / "out", image)
    assert result.code == 2
    line = one_error_line(result.stderr)
    assert str(zip_bomb) in line and "compression bomb" in line
    assert loads == [] and builds == [], "refused before anything was inflated or built"
    assert not (tmp_path / "out").exists()


def test_a_zip_that_understates_its_sizes_only_yields_what_it_declares(tmp_path):
    """Why the directory is enough: torch allocates and inflates the declared size, never more."""
    import torch

    data, crc = deflated_zeros(64)
    liar = torch_zip(tmp_path / "liar.pth", {"fc.weight": (4,)}, data, crc, 16)
    assert torch.equal(torch.load(liar, weights_only=True)["fc.weight"], torch.zeros(4))


def test_real_pth_checkpoints_pass_the_size_check(tmp_path):
    """torch.save stores tensors uncompressed: even all-zero weights declare about the file's size."""
    import torch

    from gradcam_cli.model.checkpoint import MAX_INFLATION, read_state_dict

    path = tmp_path / "zeros.pth"
    torch.save({"w": torch.zeros(1 << 20), "b": torch.zeros(3)}, path)
    with zipfile.ZipFile(path) as archive:
        declared = sum(i.file_size for i in archive.infolist())
    assert declared <= path.stat().st_size < MAX_INFLATION * declared
    assert read_state_dict(path)["w"].shape == (1 << 20,)


def safetensors_file(path: Path, header: dict, data: bytes = b"", header_length: int | None = None) -> Path:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if header_length is None else header_length) + raw + data)
    return path


@pytest.mark.parametrize(
    "header, length",
    [
        ({"fc.weight": {"dtype": "F32", "shape": [1 << 28], "data_offsets": [0, 1 << 30]}}, None),
        ({"fc.weight": {"dtype": "F32", "shape": [1 << 28], "data_offsets": [0, 16]}}, None),
        (
            {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}, "b": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}},
            None,
        ),
        ({}, 1 << 40),
    ],
    ids=["offsets-past-the-end", "shape-bigger-than-offsets", "overlapping", "header-length"],
)
def test_safetensors_headers_that_lie_about_sizes_are_refused(tmp_path, header, length):
    """safetensors checks every declared size against the file (verified here, not repeated in gradcam)."""
    from gradcam_cli.errors import ModelError
    from gradcam_cli.model.checkpoint import read_state_dict

    path = safetensors_file(tmp_path / "lie.safetensors", header, bytes(16), length)
    # refused while its header was read, so before any tensor (1 GiB for the first two) was allocated
    with pytest.raises(ModelError, match=r"not a loadable tensor checkpoint \(Error while deserializing header: "):
        read_state_dict(path)


@pytest.fixture(scope="module")
def fc_state():
    import timm

    model = timm.create_model("test_resnet", pretrained=False, num_classes=3)
    return {k: v.clone() for k, v in model.state_dict().items()}


def classifier_case(state: dict, case: str):
    import torch

    features = state["fc.weight"].shape[1]
    return {
        "one-d": torch.zeros(1 << 16),
        "three-d": torch.zeros(3, features, 2),
        "too-many-classes": torch.zeros(1, features).expand(2_000_000, features),
        "stride-0": torch.zeros(1, features).expand(5000, features),
    }[case]


@pytest.mark.parametrize(
    "case, expected",
    [
        ("one-d", r"classifier weight 'fc.weight' has shape \(65536,\), not \(classes, \d+\)"),
        ("three-d", r"classifier weight 'fc.weight' has shape \(3, \d+, 2\)"),
        ("too-many-classes", r"claims 2,000,000 classes"),
        ("stride-0", r"repeats a smaller storage \(strides \(0, 1\)\)"),
    ],
)
def test_a_classifier_weight_that_cannot_be_one_is_refused(run_cli, tmp_path, image, fc_state, case, expected, calls):
    import re

    import torch

    from gradcam_cli.model import load

    state = dict(fc_state, **{"fc.weight": classifier_case(fc_state, case)})
    weights = tmp_path / f"{case}.pth"
    torch.save(state, weights)
    builds = calls(load, "build_model")
    result = run_cli("explain", "-m", "test_resnet", "--weights", weights, "-o", tmp_path / "out", image)
    assert result.code == 2
    line = one_error_line(result.stderr)
    assert re.search(expected, line), line
    assert str(weights) in line
    # the model as named was built once; no head was built for the checkpoint's class count (2,000,000 classes: 4 GB)
    assert [kwargs.get("num_classes") for _, kwargs in builds] == [None]


def test_checkpoint_num_classes_believes_a_real_head(fc_state):
    import timm

    from gradcam_cli.model.checkpoint import checkpoint_num_classes

    model = timm.create_model("test_resnet", pretrained=False)
    assert checkpoint_num_classes(model, fc_state) == 3
    assert checkpoint_num_classes(model, {k: v for k, v in fc_state.items() if k != "fc.weight"}) is None


# ---------------------------------------------------------------- unreachable hubs (item 24)


def hub_env(tmp_path: Path, *, proxy: str | None) -> dict[str, str]:
    """An environment with empty caches, the hub at a closed local port and, if given, every proxy at `proxy`."""
    drop = {
        *PROXY_VARS,
        "NO_PROXY",
        "no_proxy",
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "HF_HUB_CACHE",
        "HUGGINGFACE_HUB_CACHE",
        "HF_ASSETS_CACHE",
    }
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(HF_ENDPOINT=CLOSED, HF_HOME=str(tmp_path / "hf"), TORCH_HOME=str(tmp_path / "torch"), XDG_CACHE_HOME=str(tmp_path / "xdg"))
    if proxy:
        env.update({name: proxy for name in PROXY_VARS})
    return env


@pytest.mark.parametrize(
    "model, proxy",
    [("resnet18", None), ("torchvision:resnet18", CLOSED)],
    ids=["timm-hf-hub", "torchvision-download"],
)
@pytest.mark.slow
def test_pretrained_weights_with_the_hub_unreachable_fail_fast_and_quietly(tmp_path, image, model, proxy):
    """Was 52 s and 25 lines for resnet18 (huggingface_hub retrying 5 times per file, twice)."""
    env = hub_env(tmp_path, proxy=proxy)  # torchvision's URL is fixed: the closed proxy stands in for the network
    run = gradcam(tmp_path, "explain", image, "--model", model, "-o", tmp_path / "out", env=env, timeout=60)
    assert run.code in (1, 2) and run.stdout == ""
    assert "Traceback" not in run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert 1 <= len(lines) <= 2, run.stderr
    assert "HF_HUB_OFFLINE=1" in run.stderr and "--no-pretrained" in run.stderr and model in run.stderr
    assert "cannot be reached" in run.stderr
    # one connection tried, the probe's, to the closed port (the hub, or the proxy torchvision's download goes
    # through), refused at once: no library request followed it (huggingface_hub retried 5 times per file, twice)
    assert run.connections == [("127.0.0.1", 9)], run.connections
    assert not (tmp_path / "out").exists()


CACHED_CHECK = """
import atexit, socket, sys, torch
tries = []
connect = socket.socket.connect
def counted(self, address):
    tries.append(address)
    return connect(self, address)
socket.socket.connect = counted
atexit.register(lambda: print("connections tried:", len(tries), file=sys.stderr))
from gradcam_cli.cli.app import main
from gradcam_cli.model.load import load_model
from safetensors.torch import load_file
for name, path in (("test_resnet", sys.argv[1]), ("torchvision:squeezenet1_1", sys.argv[2])):
    expected = load_file(path) if path.endswith(".safetensors") else torch.load(path, weights_only=True)
    own = load_model(name).model.state_dict()
    assert all(torch.equal(own[k], v) for k, v in expected.items()), name
    print("loaded", name, file=sys.stderr)
main(["explain", "-m", "test_resnet", "--json", "-o", "out", sys.argv[3]])
"""


@pytest.mark.slow
def test_cached_pretrained_weights_still_load_with_the_hub_unreachable(tmp_path, image):
    """Offline, the weights already in the Hugging Face and torch.hub caches are used, without any wait."""
    import timm
    import torch
    import torchvision
    from safetensors.torch import save_file

    env = hub_env(tmp_path, proxy=CLOSED)
    torch.manual_seed(3)
    timm_state = {
        k: v + 0.25 if v.is_floating_point() else v for k, v in timm.create_model("test_resnet", pretrained=False).state_dict().items()
    }
    snapshot = Path(env["HF_HOME"]) / "hub" / "models--timm--test_resnet.r160_in1k" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
    save_file({k: v.contiguous() for k, v in timm_state.items()}, str(snapshot / "model.safetensors"))
    tv_path = Path(env["TORCH_HOME"]) / "hub" / "checkpoints" / "squeezenet1_1-b8a52dc0.pth"
    tv_path.parent.mkdir(parents=True)
    torch.save(torchvision.models.squeezenet1_1().state_dict(), tv_path)

    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", CACHED_CHECK, str(snapshot / "model.safetensors"), str(tv_path), str(image)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("loaded ") == 2 and "Traceback" not in done.stderr
    (record,) = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert record["error"] is None
    # without any wait: at most one connection per model loaded (3 loads), each refused at once by the closed port;
    # huggingface_hub's own requests would retry (the 52 s this replaced)
    (tried,) = [int(line.split(":")[1]) for line in done.stderr.splitlines() if line.startswith("connections tried:")]
    assert tried <= 3, done.stderr


@pytest.fixture
def black_hole():
    """A local port whose connections never complete: its one-slot accept queue is already full."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port), timeout=1)
    check = socket.socket()
    check.settimeout(0.3)
    try:
        check.connect(("127.0.0.1", port))
        pytest.skip("this system completes connections beyond the accept queue; no black hole to test with")
    except OSError:
        pass
    finally:
        check.close()
    yield f"http://127.0.0.1:{port}"
    filler.close()
    server.close()


def test_probe_answers_within_its_timeout(black_hole):
    from gradcam_cli.model.downloads import _answers

    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen(4)
    try:
        assert _answers("127.0.0.1", listening.getsockname()[1], timeout=2)
    finally:
        listening.close()
    assert not _answers("127.0.0.1", 9, timeout=2)
    start = time.monotonic()
    assert not _answers("127.0.0.1", int(black_hole.rsplit(":", 1)[1]), timeout=0.5)
    waited = time.monotonic() - start
    # it waited for its timeout (the black hole holds the connection: a False before it would be a refusal) and gave
    # up: without a timeout the kernel resends the SYN for about two minutes, so 30 s bounds only a hang, not speed
    assert 0.45 <= waited < 30, f"{waited:.2f} s"


@pytest.mark.slow
def test_a_hub_that_never_answers_costs_the_probe_timeout_only(run_cli, tmp_path, image, black_hole, monkeypatch):
    """A silent network (packets dropped): huggingface_hub would wait 10 s per try; torch.hub has no timeout at all."""
    from huggingface_hub import constants

    from gradcam_cli.model.downloads import HUB_PROBE_TIMEOUT_S

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", black_hole)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    for name in PROXY_VARS:
        monkeypatch.setenv(name, black_hole)  # torchvision's download.pytorch.org goes through the silent proxy
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    port = int(black_hole.rsplit(":", 1)[1])
    tries: list[float] = []
    connect = socket.socket.connect

    def counted(self, address):
        if isinstance(address, tuple) and address[1] == port:
            tries.append(self.gettimeout())
        return connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", counted)
    for model in ("resnet18", "torchvision:resnet18"):
        tries.clear()
        result = run_cli("explain", "-m", model, "-o", tmp_path / "out", image)
        assert result.code == 2, result.stderr
        line = one_error_line(result.stderr)
        assert "cannot be reached" in line and "HF_HUB_OFFLINE=1" in line
        # one connection tried, the probe's, with its timeout: no library request (10 s each, retried) followed it
        assert tries == [HUB_PROBE_TIMEOUT_S], f"{model}: {tries}"
