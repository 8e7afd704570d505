"""Reaching the hubs: plan a download, probe its host, keep the libraries quiet.

Offline, huggingface_hub retries each file 5 times with backoff (1+2+4+8+8 s)
and timm asks for two files: ~52 s and 24 log lines before its error. Its own
offline mode answers from the cache at once, so a quick TCP probe decides
which mode the build runs in; torch.hub (torchvision, timm's plain URLs)
reads its cache without any request, so only an uncached download is probed.
The hubs say where their weights live (ModelSource.weights_location); this
module knows nothing of any one hub.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from gradcam_cli.errors import ModelError
from gradcam_cli.model.messages import short

import torch.hub

OFFLINE_HINT = (
    "use ⟨weights=FILE⟩ for a local checkpoint, run once on a connected machine to fill the cache "
    "(~/.cache/huggingface, ~/.cache/torch) and then set HF_HUB_OFFLINE=1 to use it without the network, "
    "or ⟨pretrained=False⟩ for random weights"
)
HUB_PROBE_TIMEOUT_S = 3.0  # a TCP handshake, DNS included; far more than any working link needs
NOISY_LOGGERS = ("huggingface_hub", "timm", "torch.hub", "urllib3", "httpx", "httpx2", "httpcore", "filelock")
DEFAULT_PORTS = {"http": 80, "https": 443, "socks4": 1080, "socks5": 1080, "socks5h": 1080}


def plan_download(label: str, where: tuple[str, str] | None) -> str | None:
    """Probe the weights' host before the libraries do.

    `where` is ('hf', hub endpoint) or ('url', download URL), as the model's
    hub tells. Returns the Hugging Face host when it does not answer (the
    build then runs in the hub's offline mode: cached weights load, missing
    ones fail at once); a plain download that cannot happen fails here.
    """
    if where is None:
        return None
    kind, url = where
    if (kind == "url" and _torch_hub_cached(url)) or (kind == "hf" and hf_offline()):
        return None
    if _answers(*_first_hop(url)):
        return None
    host = _host(url)
    if kind == "url":
        raise ModelError(
            f"could not get pretrained weights for {label} ({host} cannot be reached and they are not in the local cache); {OFFLINE_HINT}"
        )
    return host


def hf_endpoint() -> str:
    """The Hugging Face hub's address as huggingface_hub will use it (HF_ENDPOINT included)."""
    from huggingface_hub import constants

    return constants.ENDPOINT


def hf_offline() -> bool:
    """Whether the user put huggingface_hub in its offline mode (HF_HUB_OFFLINE)."""
    try:
        from huggingface_hub import constants
    except ImportError:
        return False
    return bool(constants.is_offline_mode())


def _torch_hub_cached(url: str) -> bool:
    """torch.hub keeps a download as <hub dir>/checkpoints/<file name> and then never asks again."""
    from urllib.parse import urlsplit

    name = os.path.basename(urlsplit(url).path)
    return bool(name) and os.path.isfile(os.path.join(torch.hub.get_dir(), "checkpoints", name))


def _host(url: str) -> str:
    from urllib.parse import urlsplit

    return urlsplit(url).hostname or url


def _first_hop(url: str) -> tuple[str, int]:
    """The host and port a request for url connects to first: its proxy when one applies."""
    import urllib.request
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if proxy and not urllib.request.proxy_bypass(parts.hostname or ""):
        parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    return parts.hostname or "", parts.port or DEFAULT_PORTS.get(parts.scheme, 443)


def _answers(host: str, port: int, timeout: float = HUB_PROBE_TIMEOUT_S) -> bool:
    """Whether a TCP connection opens within timeout; in a thread because DNS has no timeout of its own."""
    import socket
    import threading

    if not host:
        return True  # nothing to probe: let the library try
    outcome: list[bool] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            outcome.append(True)
        except OSError:
            outcome.append(False)

    probe = threading.Thread(target=connect, name="gradcam-hub-probe", daemon=True)
    probe.start()
    probe.join(timeout)
    return bool(outcome and outcome[0])


@contextlib.contextmanager
def hub_offline(on: bool) -> Any:
    """huggingface_hub's own offline mode for the build: the cache only, no request, no retry."""
    if not on:
        yield
        return
    from huggingface_hub import constants

    before = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = before


@contextlib.contextmanager
def library_noise_off() -> Any:
    """The hubs' retry warnings and log lines stay off the terminal: our one-line error says it all."""
    import logging
    import warnings

    loggers = [logging.getLogger(name) for name in NOISY_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _is_cache_miss(error: BaseException | None) -> bool:
    """huggingface_hub found neither the hub nor the file in its cache (somewhere in the chain)."""
    try:
        from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled
    except ImportError:
        return False
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, (LocalEntryNotFoundError, OfflineModeIsEnabled)):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def build_error(label: str, downloads: bool, error: BaseException, unreachable: str | None) -> ModelError:
    """One line for a failed build: when weights were wanted, why they did not come and what to do."""
    if not downloads:
        return ModelError(f"could not build {label}: {short(error)}")
    reason = short(error)
    if _is_cache_miss(error) and unreachable:
        reason = f"{unreachable} cannot be reached and they are not in the local cache"
    elif _is_cache_miss(error) and hf_offline():
        reason = "HF_HUB_OFFLINE is set and they are not in the local cache"
    elif _is_cache_miss(error):
        reason = f"the hub did not serve them ({short(_deepest(error), 100)}) and they are not in the local cache"
    return ModelError(f"could not get pretrained weights for {label} ({reason}); {OFFLINE_HINT}")


def _deepest(error: BaseException) -> BaseException:
    """The first failure in an exception's chain: the one that says what actually went wrong."""
    seen = {id(error)}
    while (inner := error.__cause__ or error.__context__) is not None and id(inner) not in seen:
        seen.add(id(inner))
        error = inner
    return error
