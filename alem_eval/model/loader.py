"""Load a cell directory: resolve its config, validate shapes, restore its weights.

A cell directory holds ``config.json`` and ``checkpoint/`` (the released layout); like
upstream's ``restore_baseline_checkpoint``, a ``checkpoint_v<N>/`` beside it wins, the
highest ``N`` first (:func:`cell_checkpoint_dir`). This is the single entry point the
commands, the evaluator and the trainers' round trips use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alem_eval.model import checkpoint as ckpt
from alem_eval.algorithms.config import RunConfig, load_config_file
from alem_eval.hub.layout import config_path
from alem_eval.core.errors import AlemEvalError, CheckpointError
from alem_eval.model.networks import NetworkSpec, build_network


@dataclass(frozen=True)
class LoadedCell:
    """A restored checkpoint with the typed config and network that describe it."""

    cell_dir: Path
    cfg: RunConfig
    spec: NetworkSpec
    weights: Any = field(repr=False)  # host numpy arrays in the released disk layout
    num_params: int
    checkpoint_dir: Path | None = None  # the orbax directory the weights came from


def cell_checkpoint_dir(cell_dir: str | Path) -> Path:
    """The orbax directory of a cell: ``checkpoint/``, or the ``checkpoint_v<N>/`` with the
    highest ``N`` when there is one (see :func:`alem_eval.model.checkpoint.resolve_checkpoint_dir`).
    Raises :class:`CheckpointError` when the cell holds none."""
    return ckpt.resolve_checkpoint_dir(cell_dir)


def resolve_cell(
    cell_dir: str | Path,
    *,
    algorithm: str | None = None,
    difficulty: str | None = None,
    seed: int | None = None,
) -> tuple[RunConfig, NetworkSpec]:
    """The typed config and network of a cell directory (reads ``config.json`` only)."""
    d = Path(cell_dir)
    cfg = load_config_file(config_path(d), algorithm=algorithm, difficulty=difficulty, seed=seed)
    return cfg, build_network(cfg)


def load_cell(
    cell_dir: str | Path,
    *,
    algorithm: str | None = None,
    difficulty: str | None = None,
    seed: int | None = None,
    policy_only: bool = False,
    where: str | None = None,
) -> LoadedCell:
    """Resolve config -> validate shapes against the metadata -> restore the weights.

    Raises :class:`~alem_eval.core.errors.ConfigError`, :class:`ShapeMismatchError` or
    :class:`CheckpointError`, each with a one-line message naming ``where``.
    """
    d = Path(cell_dir)
    where = where or str(d)
    cfg, spec = resolve_cell(d, algorithm=algorithm, difficulty=difficulty, seed=seed)
    ckpt_dir = cell_checkpoint_dir(d)
    weights = ckpt.restore_weights(cfg, spec, ckpt_dir, policy_only=policy_only, where=where)
    n = ckpt.count_params(weights)
    if not policy_only and cfg.logged_num_params is not None and n != cfg.logged_num_params:
        raise CheckpointError(
            f"{where}: restored {n:,} parameters but config.json logged "
            f"num_params={cfg.logged_num_params:,}"
        )
    return LoadedCell(d, cfg, spec, weights, n, ckpt_dir)


def load_policy_cell(source: Any, cell: Any, where: str | None = None) -> LoadedCell:
    """:func:`load_cell` of a manifest ``cell`` of ``source`` (its directory fetched there),
    the policy's weights only: what every way of playing loads; errors name the cell."""
    return load_cell(
        source.local_dir(cell),
        algorithm=cell.algorithm,
        difficulty=cell.difficulty,
        seed=cell.seed,
        policy_only=True,
        where=where or cell.id,
    )


@dataclass(frozen=True)
class VerifyResult:
    cell: str
    ok: bool
    num_params: int | None
    message: str
    warnings: tuple[str, ...] = ()
    # How the source checked the files (``alem_eval.core.integrity.FileCheck``): "hash", "size"
    # (some had no hash to check) or None (a local directory); the files fetched again; what
    # to tell about both (``FileCheck.notes``).
    checked: str | None = None
    repaired: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @classmethod
    def failed(cls, cell_id: str, err: AlemEvalError) -> VerifyResult:
        """The result names the cell: its message need not repeat it."""
        return cls(cell_id, False, None, str(err).removeprefix(f"{cell_id}: "))

    def detail(self, text: str) -> str:
        """``text`` followed by the notes on the files, if any."""
        return "; ".join([text, *self.notes])

    def as_record(self) -> dict[str, Any]:
        return {
            "cell": self.cell,
            "status": "OK" if self.ok else "FAIL",
            "checked": self.checked,
            "num_params": self.num_params,
            "repaired": list(self.repaired),
            "message": self.detail(self.message),
            "warnings": list(self.warnings),
        }


def verify_cell(
    cell_dir: str | Path,
    *,
    cell_id: str,
    algorithm: str | None = None,
    difficulty: str | None = None,
    seed: int | None = None,
) -> VerifyResult:
    """Load a cell fully; any user-facing failure becomes a FAIL result, not an exception."""
    try:
        loaded = load_cell(
            cell_dir, algorithm=algorithm, difficulty=difficulty, seed=seed, where=cell_id
        )
    except AlemEvalError as err:
        return VerifyResult.failed(cell_id, err)
    warnings = list(loaded.cfg.warnings)
    from alem_eval.algorithms.config import PAPER_ENV_VERSION

    if loaded.cfg.env_version and loaded.cfg.env_version != PAPER_ENV_VERSION:
        warnings.append(
            f"trained on env version {loaded.cfg.env_version}, not the paper's {PAPER_ENV_VERSION}"
        )
    return VerifyResult(
        cell_id,
        True,
        loaded.num_params,
        f"{loaded.cfg.algorithm}, {loaded.num_params:,} params",
        tuple(warnings),
    )
