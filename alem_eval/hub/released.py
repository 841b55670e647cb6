"""The released checkpoint format, written in one place (spec §1: saved pytrees).

A :class:`SavedLayout` says what an algorithm's orbax tree holds: which parameter groups
are trained (each with its own optimiser state) and how the saved state is assembled.
The registry's ``saved_layout`` field names one layout per algorithm; the trainers pack
their learners with it and the demo packs fresh weights with it, and both write through
:func:`write_released_cell`.

* :data:`TRAIN_STATE` (IPPO, HyperMARL): a flax ``TrainState`` whose ``params`` is the
  whole variables dict -> ``step``, ``params/params/...``, ``opt_state``.
* :data:`ACTOR_CRITIC` (MAPPO): ``{"actor": TrainState, "critic": TrainState}``.
* :data:`PQN_TRAIN_STATE` (PQN-VDN): upstream's ``CustomTrainState``: a ``TrainState`` of
  the inner params plus ``batch_stats``, ``timesteps``, ``n_updates``, ``grad_steps``.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable, Mapping

from flax.training.train_state import TrainState

from alem_eval.hub.layout import CHECKPOINT_DIR, CONFIG_FILE


class PQNTrainState(TrainState):
    """Upstream's ``CustomTrainState``: TrainState plus batch_stats and counters."""

    batch_stats: Any = None
    timesteps: Any = 0
    n_updates: Any = 0
    grad_steps: Any = 0


def train_state(learner: Any) -> Any:
    """A flax ``TrainState`` with the learner's ``step``, ``params`` and ``opt_state``
    (no apply_fn, no tx: it saves exactly like upstream's)."""
    # apply_fn / tx None: a saved state, never applied (flax types them as callables).
    return TrainState(
        step=learner.step,
        apply_fn=None,  # type: ignore[arg-type]
        params=learner.params,
        tx=None,
        opt_state=learner.opt_state,
    )


def _single(weights: Mapping[str, Any]) -> dict[str, Any]:
    return {"": weights["params"]}


def _actor_critic(weights: Mapping[str, Any]) -> dict[str, Any]:
    return {"actor": weights["actor"]["params"], "critic": weights["critic"]["params"]}


def _pack_single(learners: Mapping[str, Any], extras: Mapping[str, Any]) -> Any:
    return train_state(learners[""])


def _pack_actor_critic(learners: Mapping[str, Any], extras: Mapping[str, Any]) -> Any:
    return {"actor": train_state(learners["actor"]), "critic": train_state(learners["critic"])}


def _pack_pqn(learners: Mapping[str, Any], extras: Mapping[str, Any]) -> Any:
    ln = learners[""]
    return PQNTrainState(
        step=ln.step,
        apply_fn=None,  # type: ignore[arg-type]
        params=ln.params,
        tx=None,
        opt_state=ln.opt_state,
        batch_stats=extras["batch_stats"],
        timesteps=extras["timesteps"],
        n_updates=extras["n_updates"],
        grad_steps=extras["grad_steps"],
    )


@dataclass(frozen=True)
class FreshLearner:
    """A learner before its first update (what the demo cells save)."""

    step: Any
    params: Any
    opt_state: Any


@dataclass(frozen=True)
class SavedLayout:
    """What one algorithm's checkpoint tree holds (see the module docstring).

    ``groups(weights)`` -> the trained parameter trees by group name ("" for a single
    network; "actor"/"critic"), from weights in the released disk layout;
    ``pack(learners, extras)`` -> the saved pytree, from one learner per group (anything
    with ``step``, ``params``, ``opt_state``) and the layout's extra leaves.
    """

    name: str
    groups: Callable[[Mapping[str, Any]], dict[str, Any]]
    pack: Callable[[Mapping[str, Any], Mapping[str, Any]], Any]
    extra_keys: tuple[str, ...] = ()  # leaves beside the learners (PQN's batch_stats, counters)

    def fresh(self, weights: Mapping[str, Any], tx: Any) -> Any:
        """The saved tree of weights that were never trained: step 0, ``tx.init`` state,
        zero counters (int32 arrays, like upstream's)."""
        import jax.numpy as jnp

        zero = jnp.int32(0)
        learners = {g: FreshLearner(zero, p, tx.init(p)) for g, p in self.groups(weights).items()}
        extras = {k: weights.get(k, zero) for k in self.extra_keys}
        return self.pack(learners, extras)


TRAIN_STATE = SavedLayout("train_state", _single, _pack_single)
ACTOR_CRITIC = SavedLayout("actor_critic", _actor_critic, _pack_actor_critic)
PQN_TRAIN_STATE = SavedLayout(
    "pqn_train_state",
    _single,
    _pack_pqn,
    extra_keys=("batch_stats", "timesteps", "n_updates", "grad_steps"),
)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON (indent 1, trailing newline) atomically (:func:`alem_eval.core.fsutil.atomic_write`)."""
    from alem_eval.core.fsutil import atomic_write

    def write(fh) -> None:
        json.dump(data, fh, indent=1, default=_json_default)
        fh.write("\n")

    atomic_write(path, write, binary=False)


def _json_default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (tuple, set)):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def write_released_cell(cell_dir: Path, pytree: Any, config: Mapping[str, Any]) -> None:
    """``<cell>/checkpoint/`` (orbax PyTreeCheckpointer, OCDBT) and ``<cell>/config.json``.

    The checkpoint is written beside the cell and renamed into place, so an interrupted
    write never leaves a half-written ``checkpoint/`` that looks complete.
    """
    import orbax.checkpoint as ocp

    cell_dir = Path(cell_dir)
    cell_dir.mkdir(parents=True, exist_ok=True)
    tmp = (cell_dir / f".{CHECKPOINT_DIR}.tmp-{os.getpid()}").absolute()
    if tmp.exists():
        shutil.rmtree(tmp)
    ocp.PyTreeCheckpointer().save(tmp, pytree)
    final = cell_dir / CHECKPOINT_DIR
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    write_json_atomic(cell_dir / CONFIG_FILE, dict(config))
