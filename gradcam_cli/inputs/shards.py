"""A process's share of the inputs: `--shard I/N`, or what torchrun or SLURM put in the environment.

Inference shares nothing between processes, so no process group is needed:
each process keeps the inputs whose name hashes to its index. The hash is of
the name an input's outputs get below the output folder (its path relative to
the current folder), so the share is the same whatever order a folder lists
in, and N processes started alike do every input exactly once. A hash rather
than every N-th input: it needs no full listing first, so paths on stdin
stream as they do in one process.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from gradcam_cli.errors import UsageError, cut, printable
from gradcam_cli.values import numeral

if TYPE_CHECKING:
    from gradcam_cli.inputs.sources import Source
    from gradcam_cli.settings import ExplainSettings

# (launcher, its rank variable, its count variable, its node-local rank variable)
LAUNCHERS = (
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
    ("SLURM", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
)


@dataclass(frozen=True)
class Shard:
    """Share `index` of `count`; `launcher` says where it came from (None: ⟨shard⟩ on the command line)."""

    index: int
    count: int
    launcher: str | None = None

    def owns(self, source: Source) -> bool:
        """Whether this share explains the input: its output name's hash, modulo the count."""
        key = source.relative.as_posix().encode("utf-8", "surrogateescape")
        return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") % self.count == self.index

    @property
    def suffix(self) -> str:
        """What this share's own files are called by: `records.shard-0-of-4.jsonl`."""
        return f"shard-{self.index}-of-{self.count}"

    def describe(self) -> str:
        via = f" (from {self.launcher})" if self.launcher else ""
        return f"shard {self.index} of {self.count}{via}"


def launched(env: Mapping[str, str]) -> tuple[str, int, int, int | None] | None:
    """(launcher, rank, world size, local rank) from torchrun's or SLURM's variables; None outside them or for one process."""
    for name, rank_key, count_key, local_key in LAUNCHERS:
        if rank_key not in env or count_key not in env:
            continue
        rank, count = _number(name, rank_key, env), _number(name, count_key, env)
        local = _number(name, local_key, env) if env.get(local_key, "").strip() else None
        if not 0 <= rank < count:
            raise UsageError(f"{name}'s {rank_key}={rank} is not below {count_key}={count}")
        return (name, rank, count, local) if count > 1 else None
    return None


def _number(launcher: str, key: str, env: Mapping[str, str]) -> int:
    """One of the launcher's variables as a number, or one line naming the variable that is not one."""
    accepted = f"{launcher} sets it to a process number (0, 1, 2 ...); unset it or give one"
    where = f"{launcher}'s {key}='{cut(printable(env[key]), 40)}'"
    found = numeral(env[key], where, accepted)
    if found is None:
        raise UsageError(f"{where} is not a number; {accepted}")
    return found


def with_launcher(settings: ExplainSettings, env: Mapping[str, str]) -> ExplainSettings:
    """The settings with the share and local rank a launcher gave; ⟨shard⟩ on the command line wins for the share."""
    found = launched(env)
    if found is None:
        return settings
    name, rank, count, local = found
    run = settings.run
    shard = run.shard or (rank, count)
    return replace(settings, run=replace(run, shard=shard, launcher=name if run.shard is None else None, local_rank=local))


def shard_of(settings: ExplainSettings) -> Shard | None:
    """This process's share, when it has one (N > 1)."""
    run = settings.run
    if run.shard is None or run.shard[1] == 1:
        return None
    return Shard(run.shard[0], run.shard[1], run.launcher)
