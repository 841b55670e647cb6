"""A released cell as a scenario's focal: its greedy policy joins the background.

``scenario --focal PATH`` (``scenario(focal=PATH)``) takes a cell directory in the
released layout (``checkpoint/`` + ``config.json``: a cell a trainer wrote, a local release
cell) as well as code; ``scenario(focal=alem_eval.load_policy(cell))`` takes a loaded
policy. Either way the focal is the cell's greedy policy, the very
:class:`~alem_eval.evaluate.actors.ReleasedPolicy` the play core runs for a checkpoint in a
cross-play team: a team with the focal in some slots plays exactly as the cross-play team
with that cell in the same slots. Its identity (what the results store keys its teams by)
is its algorithm, checkpoint hash and config hash (:func:`~alem_eval.scoring.play.cell_key`).
A cell trained with frozen partners (``alem-eval train --partners``) records them in its
``config.json`` (``"partners"``); the focal carries their ids (``trained_with``), so a
scenario tells the partners it trained with from the held-out ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from alem_eval.core.errors import AlemEvalError, ConfigError, UsageError
from alem_eval.evaluate.actors import ReleasedPolicy, released_policy


@dataclass(frozen=True)
class _Named:
    id: str  # what scoring.play.cell_key reads of a cell


def focal_of_cell(cell_dir: str | Path, label: str, loaded: Any = None) -> ReleasedPolicy:
    """The greedy policy of the cell in ``cell_dir`` as a focal actor named ``label``
    (``loaded``: its :class:`~alem_eval.model.loader.LoadedCell`, when already loaded).
    Errors are one line naming ``label``."""
    from alem_eval.model.loader import load_cell
    from alem_eval.scoring.play import cell_key

    d = Path(cell_dir).expanduser()
    if loaded is None:
        if not d.is_dir():
            raise UsageError(f"focal {label}: no such cell directory")
        if not (d / "config.json").is_file():
            raise ConfigError(
                f"focal {label}: not a cell directory (no config.json; a cell holds "
                "checkpoint/ and config.json)"
            )
        try:
            loaded = load_cell(d, policy_only=True, where=f"focal {label}")
        except AlemEvalError as exc:
            if str(exc).startswith(f"focal {label}"):
                raise
            raise type(exc)(f"focal {label}: {exc}") from None
    key = cell_key(_Named(label), d, loaded.cfg)
    identity = f"{loaded.cfg.algorithm}@{key.checkpoint_hash[:16]}+{key.config_hash}"
    actor = released_policy(loaded.cfg, loaded.spec, label, loaded.weights)
    trained_with = recorded_partners(Path(loaded.cell_dir), label)
    return replace(actor, identity=identity, cfg=loaded.cfg, trained_with=trained_with)


def recorded_partners(cell_dir: Path, label: str) -> tuple[str, ...] | None:
    """The partner cell ids ``cell_dir/config.json`` records (``"partners": {"cells":
    [...]}``, :class:`~alem_eval.trainers.partners.PartnerRecord`); None when it records
    none (a cell trained in self-play). A malformed record is one line naming ``label``."""
    import json

    try:
        record = json.loads((cell_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # load_cell read it already; a cell without one records no partners
    partners = record.get("partners") if isinstance(record, dict) else None
    if partners is None:
        return None
    cells = partners.get("cells") if isinstance(partners, dict) else None
    if not isinstance(cells, list) or not all(isinstance(c, str) for c in cells):
        raise ConfigError(
            f"focal {label}: config.json's 'partners' has no list of cell ids under 'cells'"
        )
    return tuple(cells)


def is_cell_dir(focal: Any) -> bool:
    """Whether a ``--focal`` value names a cell directory rather than code: a ``Path``, a
    directory that exists, or a path (with a ``/``) that names no ``file.py:factory``."""
    if isinstance(focal, Path):
        return True
    if not isinstance(focal, str):
        return False
    return Path(focal).expanduser().is_dir() or ("/" in focal and ":" not in focal)


def resolve_focal(focal: Any, args: Mapping[str, Any] | None = None) -> Any:
    """A scenario's focal -> the play core's actor: a loaded policy
    (``alem_eval.load_policy``: its ``actor``) or a cell directory (:func:`focal_of_cell`)
    plays as the released cell; anything else is an agent or a SPEC
    (:func:`~alem_eval.evaluate.agent_spec.load_focal`)."""
    from alem_eval.evaluate.agent_spec import load_focal

    actor = focal if isinstance(focal, ReleasedPolicy) else getattr(focal, "actor", None)
    cell = isinstance(actor, ReleasedPolicy) or is_cell_dir(focal)
    if cell and args:
        raise UsageError("focal arguments go with a SPEC string, not a released cell")
    if isinstance(actor, ReleasedPolicy):
        return actor
    if cell:
        return focal_of_cell(focal, str(focal))
    return load_focal(focal, args)


def check_focal_world(actor: Any, worlds: Any, on_env_mismatch: str) -> None:
    """A released focal must play in the env of the background's ``worlds``
    (:class:`~alem_eval.scoring.play.Worlds`: agents, comm channels, reward sharing,
    difficulty scaling) and its env version: one line otherwise. (An agent plays in
    whatever env it is given.)"""
    if not isinstance(actor, ReleasedPolicy) or actor.cfg is None:
        return
    from alem_eval.evaluate.settings import check_env_version, eval_statics

    world = next(iter(worlds.statics.values())).world

    check_env_version(actor.cfg, on_mismatch=on_env_mismatch, where=f"focal {actor.label}")
    own = eval_statics(actor.cfg).world
    if own != world:
        import dataclasses

        diff = ", ".join(
            f"{f.name} {getattr(own, f.name)} vs {getattr(world, f.name)}"
            for f in dataclasses.fields(own)
            if getattr(own, f.name) != getattr(world, f.name)
        )
        raise UsageError(
            f"focal {actor.label}: needs another env configuration than the background cells "
            f"({diff}); they cannot play together"
        )
