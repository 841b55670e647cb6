"""The export of a recording as Flashbax Vaults, in OG-MARL's experience structure.

:func:`export_vault` groups the complete episodes (:func:`vault_groups`: one vault per
cell, or per group of seeds), writes each with flashbax's own writer at
:func:`vault_location`, its dataset card (:mod:`alem_eval.datasets.card`) inside, in a
staging directory first and then renamed into place. flashbax (hence JAX, the
``datasets`` extra) is imported only when a vault is written.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from alem_eval.core.errors import DatasetError
from alem_eval.core.extras import require
from alem_eval.core.fsutil import write_text_atomic
from alem_eval.datasets.card import card_markdown, dataset_card
from alem_eval.datasets.format import guard_write, team_path
from alem_eval.datasets.reader import (
    EpisodeRecord,
    IncompleteEpisode,
    Recording,
    open_recording,
)

VAULT_PER: tuple[str, ...] = ("cell", "group")
VAULT_FORMATS: tuple[str, ...] = ("vault",)
STAGING_DIR = ".staging"  # out/<protocol>/.staging: vaults being written or replaced


def vault_groups(
    recording: Recording, per: str = "cell"
) -> dict[tuple[str, str, str], list[EpisodeRecord]]:
    """``(protocol, eval_difficulty, vault uid) -> episodes``: ``per="cell"`` one vault per
    self-play cell; ``per="group"`` one per (budget, algorithm, difficulty), pooling the
    seeds (the cell id without its last level); a mixed team is its own vault either way."""
    if per not in VAULT_PER:
        raise DatasetError(f"unknown grouping {per!r}: per must be one of {', '.join(VAULT_PER)}")
    groups: dict[tuple[str, str, str], list[EpisodeRecord]] = {}
    for ep in recording.complete:
        path = team_path(ep.team)
        if len(set(ep.team)) == 1 and per == "group" and "/" in path:
            path = path.rsplit("/", 1)[0]
        uid = path.replace("/", "_")
        groups.setdefault((ep.protocol, ep.eval_difficulty, uid), []).append(ep)
    return groups


def vault_location(out: Path, protocol: str, eval_difficulty: str, uid: str) -> Path:
    """``out/<protocol>/<eval_difficulty>.vlt/<uid>``: open it with flashbax as
    ``Vault(vault_name="<eval_difficulty>.vlt", vault_uid=uid, rel_dir="out/<protocol>")``."""
    return out / protocol / f"{eval_difficulty}.vlt" / uid


@dataclass(frozen=True)
class VaultExport:
    vaults: tuple[Path, ...]  # the vault directories written
    incomplete: tuple[IncompleteEpisode, ...]  # left out: not finished on disk


def export_vault(
    recording_dir: str | os.PathLike,
    out: str | os.PathLike,
    *,
    per: str = "cell",
    state: bool = True,
    obs_dtype: str | None = "float32",
    on_progress: Callable[[int, int], None] | None = None,
) -> VaultExport:
    """Write the complete episodes of a recording as Flashbax Vaults (flashbax's own
    writer) under ``out`` (:func:`vault_location`), each with ``card.json`` and
    ``card.md`` inside its directory. Returns the vault directories and the recording's
    incomplete episodes, which no vault holds.

    The experience structure is OG-MARL's (``og_marl/replay_buffers.py``
    ``FlashbaxReplayBuffer.add``: per-agent values stacked on axis 0; read by
    ``og_marl/baselines/tf2_systems/offline/*.py``): ``observations [1, T, P, D]``,
    ``actions [1, T, P]`` int32, ``rewards [1, T, P]``, ``terminals [1, T, P]``,
    ``truncations [1, T, P]`` float32, ``infos.legals [1, T, P, A]`` float32 and, with
    ``state``, ``infos.state [1, T, P * D]`` (the agents' observations concatenated: what
    Alem's MAPPO critic sees). Observations and state are float32, as OG-MARL's offline
    systems read them without a cast; ``obs_dtype=None`` keeps the narrowest dtype exact
    for every part instead (smaller, for readers that cast). A vault is written in a
    staging directory beside the ``.vlt`` directories (``out/<protocol>/.staging``, so a
    killed export never leaves a half-written vault where OG-MARL's ``get_available_uids``
    or :func:`dataset_info` look) and renamed into place, replacing an older export of
    the same name. ``on_progress(vaults written, vaults)`` is called before the first
    and after each vault.
    """
    require("flashbax", "writing Flashbax vaults")  # the datasets extra, before any work
    if obs_dtype not in (None, "float32"):
        raise DatasetError(f"obs_dtype must be float32 or None, not {obs_dtype!r}")
    recording = open_recording(recording_dir)
    groups = vault_groups(recording, per)
    if not groups:
        raise DatasetError(
            f"{recording.root} holds no complete episode "
            f"({len(recording.incomplete)} incomplete): nothing to export"
        )
    out = Path(out)
    written: list[Path] = []
    for (protocol, difficulty, uid), episodes in groups.items():
        if on_progress is not None:
            on_progress(len(written), len(groups))
        written.append(
            _write_vault(
                episodes,
                vault_location(out, protocol, difficulty, uid),
                rel_dir=str(out / protocol),
                state=state,
                obs_dtype=obs_dtype,
            )
        )
    if on_progress is not None:
        on_progress(len(written), len(groups))
    return VaultExport(tuple(written), recording.incomplete)


def _write_vault(
    episodes: Sequence[EpisodeRecord],
    where: Path,
    *,
    rel_dir: str,
    state: bool,
    obs_dtype: str | None,
) -> Path:
    from flashbax.buffers.trajectory_buffer import TrajectoryBufferState
    from flashbax.vault import Vault

    card = dataset_card(episodes, name=where.name)
    dtype = card["observation_dtype"] = obs_dtype or card["observation_dtype"]  # as stored
    p, d, a = card["num_agents"], card["obs_dim"], card["num_actions"]
    structure = _vault_structure(p, d, a, dtype, state)
    parent = where.parent
    staging = parent.parent / STAGING_DIR  # same file system, outside every .vlt
    tmp_uid = f"{where.name}-{secrets.token_hex(4)}"
    tmp = staging / tmp_uid
    guard_write(parent, lambda: parent.mkdir(parents=True, exist_ok=True))
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # flashbax prints as it goes
            vault = Vault(
                vault_name=STAGING_DIR,
                experience_structure=_zeros(structure),
                rel_dir=str(parent.parent.resolve()),
                vault_uid=tmp_uid,
                metadata={"source": "alem-eval", "card": "card.json"},
            )
            for ep in episodes:
                for t0, arrays in ep.parts():
                    exp = _vault_steps(ep, t0, arrays, dtype, state)
                    steps = len(arrays["actions"])
                    vault.write(
                        TrajectoryBufferState(
                            experience=exp,
                            current_index=np.asarray(steps),
                            is_full=np.asarray(False),
                        ),
                        source_interval=(0, steps),
                    )
        total = card["steps"]
        if vault.vault_index != total:
            raise DatasetError(f"{where}: vault holds {vault.vault_index} steps, wrote {total}")
        card["vault"] = {
            "vault_name": parent.name,
            "vault_uid": where.name,
            "rel_dir": rel_dir,
            "structure": {
                key: {"shape": [1, total, *shape], "dtype": t}
                for key, (shape, t) in flat_items(structure)
            },
        }
        guard_write(tmp, lambda: write_text_atomic(tmp / "card.json", json.dumps(card, indent=1)))
        guard_write(tmp, lambda: write_text_atomic(tmp / "card.md", card_markdown(card)))
        _replace_dir(tmp, where, staging)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        with contextlib.suppress(OSError):
            staging.rmdir()  # only once empty: a concurrent export may still use it
    return where


def _vault_structure(p: int, d: int, a: int, obs_dtype: str, state: bool) -> dict[str, Any]:
    """key -> (per-step shape, dtype); ``infos`` nested as OG-MARL has it."""
    infos: dict[str, Any] = {"legals": ((p, a), "float32")}
    if state:
        infos["state"] = ((p * d,), obs_dtype)
    return {
        "observations": ((p, d), obs_dtype),
        "actions": ((p,), "int32"),
        "rewards": ((p,), "float32"),
        "terminals": ((p,), "float32"),
        "truncations": ((p,), "float32"),
        "infos": infos,
    }


def flat_items(structure: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """``(dotted key, leaf)`` per leaf of a nested structure (``infos.legals``)."""
    out = []
    for k, v in structure.items():
        if isinstance(v, Mapping):
            out += flat_items(v, f"{prefix}{k}.")
        else:
            out.append((f"{prefix}{k}", v))
    return out


def _zeros(structure: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: _zeros(v) if isinstance(v, Mapping) else np.zeros((1, 1, *v[0]), v[1])
        for k, v in structure.items()
    }


def _vault_steps(
    ep: EpisodeRecord, t0: int, arrays: Mapping[str, np.ndarray], dtype: str, state: bool
) -> dict[str, Any]:
    """One part of an episode in the vault's structure, with a leading batch axis of 1."""
    obs = arrays["observations"].astype(dtype)
    steps = len(arrays["actions"])
    terminals = arrays["dones"].astype(np.float32)
    truncations = np.zeros_like(terminals)
    if t0 + steps == ep.length:
        (terminals if ep.meta["terminated"] else truncations)[-1, :] = 1.0
    infos: dict[str, Any] = {"legals": arrays["legal_actions"].astype(np.float32)[None]}
    if state:
        infos["state"] = obs.reshape(steps, -1)[None]
    return {
        "observations": obs[None],
        "actions": arrays["actions"].astype(np.int32)[None],
        "rewards": arrays["rewards"].astype(np.float32)[None],
        "terminals": terminals[None],
        "truncations": truncations[None],
        "infos": infos,
    }


def _replace_dir(tmp: Path, where: Path, staging: Path) -> None:
    """Move ``tmp`` to ``where``; an older ``where`` is moved to ``staging`` first and
    removed once the new one is there."""
    old = None
    if where.exists():
        old = staging / f"old-{where.name}-{secrets.token_hex(4)}"
        guard_write(where, lambda: where.rename(old))
    guard_write(where, lambda: tmp.rename(where))
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
