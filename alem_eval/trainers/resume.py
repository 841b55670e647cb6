"""The resume store: each cell's slice of the training state under ``<cell>/_resume/``.

Per cell: ``_resume/state_<updates:08d>_<identity>/`` (orbax; the state's leaves flat,
``{"00000": leaf, ...}``, this seed's slice, after that many updates with the settings whose
hash is ``identity``) and ``_resume/resume.json`` (the update count, the settings the state
was trained with, the clocks, which state directory is current).

A save is committed for the whole group in three passes over its cells: every cell's new
state directory is written (older ones stay), then every ``resume.json`` is pointed at it,
then the older directories are removed. A kill at any moment therefore leaves, in every
cell, the state of the last save every cell committed; and once any ``resume.json`` points
at the new state, every cell holds it.

The rule (:meth:`ResumeStore.check`): a group resumes at the newest update a cell's
``resume.json`` names when every cell holds that state (its own ``resume.json`` names it, or
the kill came before its pointer moved); a group where no cell has any starts from scratch;
anything else (cells saved apart, at different updates or with other settings) is a one-line
:class:`~alem_eval.core.errors.ConfigError` that says what differs, and nothing is deleted.
``--fresh`` skips the check (the first save then replaces the old state).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence

import jax
import numpy as np

from alem_eval.core.errors import CheckpointError, ConfigError
from alem_eval.hub.released import write_json_atomic
from alem_eval.trainers.contract import settings_diff

RESUME_DIR = "_resume"
META_FILE = "resume.json"


@dataclass(frozen=True)
class Saved:
    """One cell's resume state as ``resume.json`` describes it."""

    cell_id: str
    cell_dir: Path
    meta: dict

    @property
    def updates(self) -> int:
        return int(self.meta["updates"])

    @property
    def state_dir(self) -> Path:
        return self.cell_dir / RESUME_DIR / self.meta["state"]


class ResumeStore:
    """The resume state of a group of cells trained side by side (one slice per cell)."""

    def __init__(
        self,
        cell_dirs: Sequence[Path],
        cell_ids: Sequence[str],
        *,
        identity: str,
        settings: Mapping[str, Any],
    ):
        self.cell_dirs = [Path(d) for d in cell_dirs]
        self.cell_ids = list(cell_ids)
        self.identity = identity
        self.settings = dict(settings)

    # -- reading ---------------------------------------------------------------------------
    def read(self) -> list[Saved | None]:
        """Each cell's saved state, None where there is none. A ``_resume/`` without
        ``resume.json`` is an interrupted first save (nothing to resume); one whose
        ``resume.json`` names a missing state is damaged: :class:`CheckpointError`."""
        out: list[Saved | None] = []
        for cid, d in zip(self.cell_ids, self.cell_dirs, strict=True):
            path = d / RESUME_DIR / META_FILE
            if not path.exists():
                out.append(None)
                continue
            try:
                meta = json.loads(path.read_text())
                saved = Saved(cid, d, meta)
                ok = saved.updates >= 0 and saved.state_dir.is_dir()
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise CheckpointError(
                    f"{path}: unreadable resume state ({exc}); move it away to "
                    "start over, or pass --fresh"
                ) from None
            if not ok:
                raise CheckpointError(
                    f"{path}: names {meta.get('state')!r}, which is missing; "
                    "move the resume state away to start over, or pass --fresh"
                )
            out.append(saved)
        return out

    def check(self) -> list[Saved] | None:
        """The saved states to resume from (all at one update), or None to start from
        scratch (no cell has any). Every other case raises a one-line ConfigError."""
        saved = self.read()
        if all(s is None for s in saved):
            return None
        ours = [s for s in saved if s is not None and s.meta.get("identity") == self.identity]
        if ours:  # a kill between a save's passes: cells behind may hold the newest state
            lead = max(ours, key=lambda s: s.updates)
            for i, (cid, d, s) in enumerate(
                zip(self.cell_ids, self.cell_dirs, list(saved), strict=True)
            ):
                behind = s is None or s.meta.get("state") != lead.meta["state"]
                if behind and (d / RESUME_DIR / lead.meta["state"]).is_dir():
                    saved[i] = Saved(cid, d, {**lead.meta, "seed_index": i})
        have = [s for s in saved if s is not None]
        for s in have:
            if s.meta.get("identity") != self.identity:
                diff = settings_diff(s.meta.get("settings"), self.settings)
                raise ConfigError(
                    f"{s.cell_id}: resume state at update {s.updates} in {s.cell_dir / RESUME_DIR} "
                    f"was trained with other settings ({diff or 'details not recorded'}); rerun "
                    "with those settings, or pass --fresh to discard it"
                )
        missing = [cid for cid, s in zip(self.cell_ids, saved, strict=True) if s is None]
        if missing:
            verb = lambda names: f"{', '.join(names)} {'has' if len(names) == 1 else 'have'}"
            raise ConfigError(
                f"{verb([s.cell_id for s in have])} resume state (update {have[0].updates}) but "
                f"{verb(missing)} none, and one program would train them together; train them "
                "separately (select the seeds apart, or --group-size), or pass --fresh to "
                "start all from scratch"
            )
        at = {s.updates for s in have}
        if len(at) > 1:
            where = ", ".join(f"{s.cell_id} at {s.updates}" for s in have)
            raise ConfigError(
                f"resume states at different updates ({where}) cannot continue in "
                "one program; train them separately (select the seeds apart, or "
                "--group-size 1), or pass --fresh"
            )
        return have

    def load(self, state_shape: Any, saved: Sequence[Saved]) -> Any:
        """Host arrays of the stacked state (leading axis: the cells, in order)."""
        import orbax.checkpoint as ocp

        leaves_shape, treedef = jax.tree_util.tree_flatten(state_shape)
        per_cell = []
        ckptr = ocp.PyTreeCheckpointer()
        for s in saved:
            path = s.state_dir.absolute()
            args = jax.tree_util.tree_map(
                lambda _: ocp.RestoreArgs(restore_type=np.ndarray), ckptr.metadata(path)
            )
            tree = ckptr.restore(path, restore_args=args)
            leaves = [tree.get(f"{j:05d}") for j in range(len(leaves_shape))]
            if len(tree) != len(leaves_shape) or any(
                x is None or np.shape(x) != sh.shape[1:]
                for x, sh in zip(leaves, leaves_shape, strict=True)
            ):
                raise CheckpointError(
                    f"{path}: resume state does not match this trainer's "
                    "state (another version?); move it away or pass --fresh"
                )
            per_cell.append(leaves)
        stacked = [
            np.stack([c[j] for c in per_cell]).astype(sh.dtype) for j, sh in enumerate(leaves_shape)
        ]
        return jax.tree_util.tree_unflatten(treedef, stacked)

    # -- writing ---------------------------------------------------------------------------
    def save(self, state: Any, meta: Mapping[str, Any]) -> None:
        """Each cell's slice of ``state`` (device or host arrays) at ``meta["updates"]``."""
        import orbax.checkpoint as ocp

        leaves = jax.tree_util.tree_leaves(jax.device_get(state))
        ckptr = ocp.PyTreeCheckpointer()
        name = f"state_{int(meta['updates']):08d}_{self.identity}"
        roots = [cell_dir / RESUME_DIR for cell_dir in self.cell_dirs]
        for i, root in enumerate(roots):  # 1. every cell's new state (older ones stay)
            root.mkdir(parents=True, exist_ok=True)
            tree = {f"{j:05d}": np.asarray(leaf[i]) for j, leaf in enumerate(leaves)}
            if (root / name).exists():
                shutil.rmtree(root / name)
            ckptr.save((root / name).absolute(), tree)
        for i, root in enumerate(roots):  # 2. commit: every pointer moves to it
            write_json_atomic(
                root / META_FILE,
                {
                    **meta,
                    "identity": self.identity,
                    "settings": self.settings,
                    "state": name,
                    "seed_index": i,
                    "cells": self.cell_ids,
                },
            )
        for root in roots:  # 3. only then the older states go
            for old in root.glob("state_*"):
                if old.name != name:
                    shutil.rmtree(old, ignore_errors=True)

    def remove(self, cell_dir: Path) -> None:
        """Drop one cell's resume state (after its released checkpoint is written)."""
        shutil.rmtree(Path(cell_dir) / RESUME_DIR, ignore_errors=True)
