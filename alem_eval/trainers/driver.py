"""The training driver: cells that differ only by seed, trained side by side in one vmapped
program, in four named steps (:func:`train_cells` strings them together):

1. :func:`plan_group`: the shared settings, the seeds' keys, the device layout and the
   compiled ``(init, update_n)`` of the group;
2. :func:`restore_or_init`: the saved state (rules in ``alem_eval/trainers/resume.py``) or a fresh one;
3. :func:`run_chunks`: ``n`` updates per compiled call (``n`` adapts to about
   ``chunk_seconds`` per call), a :class:`~alem_eval.trainers.planning.Progress` report and one JSON
   line per cell (``<cell>/train_log.jsonl``) after each call, resume saves on a clock, and
   on SIGTERM or Ctrl-C: the call in flight finishes, the state is saved, and
   :class:`~alem_eval.trainers.planning.TrainingStopped` is raised (a second Ctrl-C stops at once,
   keeping the last save);
4. :func:`finish_cells`: each cell's released layout (``alem_eval.hub.released``) and
   ``config.json``, then its resume state is removed.

The group and its training state (:class:`~alem_eval.trainers.run_state.Group`,
:class:`~alem_eval.trainers.run_state.RunState`) are :mod:`alem_eval.trainers.run_state`'; the
metrics it records on the way (the progress reports, the JSONL log)
:mod:`alem_eval.trainers.train_metrics`'.
"""

from __future__ import annotations

import dataclasses
import math
import signal
import threading
import time
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from alem_eval.algorithms.registry import get_algorithm
from alem_eval.algorithms.config import RunConfig
from alem_eval.algorithms.train_config import TrainConfig
from alem_eval.core.errors import ConfigError
from alem_eval.hub.released import write_released_cell
from alem_eval.trainers.common import Trainer
from alem_eval.trainers.contract import (
    CellResult,
    Progress,
    TrainingStopped,
    config_identity,
    partner_identity,
    training_settings,
)

from alem_eval.trainers.devices import device_owned, device_shardings, seed_key
from alem_eval.trainers.resume import ResumeStore
from alem_eval.trainers.run_state import Clock, Group, RunState, Window
from alem_eval.trainers.train_metrics import MetricsLog, Reporter

FINAL_WINDOW = 0.05  # "final" metrics: episodes finished in the last 5% of updates


def train_cells(
    trainer: Trainer,
    runs: Sequence[RunConfig],
    tcfgs: Sequence[TrainConfig],
    cell_dirs: Sequence[Path],
    *,
    cell_ids: Sequence[str] | None = None,
    fresh: bool = False,
    save_every_updates: int | None = None,
    save_every_seconds: float = 600.0,
    chunk_seconds: float = 5.0,
    chunk_updates: int | None = None,
    max_updates: int | None = None,
    history: list | None = None,
    on_progress: Callable[[Progress], None] | None = None,
) -> list[CellResult] | None:
    """Train several cells that differ only by seed (one vmapped program) to the end.

    Resumes from ``<cell>/_resume/`` (``fresh`` ignores it); saves resume state every
    ``save_every_updates`` updates or ``save_every_seconds`` seconds and when SIGTERM or
    Ctrl-C stops it. ``max_updates`` stops early after that many updates in this call
    (resume state saved, nothing released; returns None) — for tests and time-boxed jobs.
    ``chunk_updates`` fixes the updates per compiled call (default: adaptive);
    ``history`` collects ``(updates_done, totals)`` per call (per-seed sums over its updates).
    Returns one :class:`CellResult` per cell once all are released.
    """
    group = plan_group(trainer, runs, tcfgs, cell_dirs, cell_ids)
    report = Reporter(group, on_progress)
    with StopSignals() as stop:
        run = restore_or_init(group, fresh=fresh, report=report)
        stop_at = (
            group.num_updates
            if max_updates is None
            else min(group.num_updates, run.updates + max_updates)
        )
        with MetricsLog(group, run) as log:
            run_chunks(
                group,
                run,
                stop_at=stop_at,
                stop=stop,
                report=report,
                log=log,
                chunk_seconds=chunk_seconds,
                chunk_updates=chunk_updates,
                save_every_updates=save_every_updates,
                save_every_seconds=save_every_seconds,
                history=history,
            )
            if run.updates < group.num_updates:  # stopped early on purpose (max_updates)
                if run.updates > run.saved_at:
                    save(group, run, report, log)
                return None
            return finish_cells(group, run, report, log)


# ========================================================================================
# 1. The group
# ========================================================================================
def plan_group(
    trainer: Trainer,
    runs: Sequence[RunConfig],
    tcfgs: Sequence[TrainConfig],
    cell_dirs: Sequence[Path],
    cell_ids: Sequence[str] | None = None,
) -> Group:
    tcfgs = list(tcfgs)
    base = tcfgs[0]
    if len(tcfgs) != len(runs) or len(cell_dirs) != len(runs):
        raise ValueError("train_cells: runs, tcfgs and cell_dirs must have equal lengths")
    if any(dataclasses.replace(t, seed=base.seed) != base for t in tcfgs[1:]):
        raise ConfigError("cells trained together must share every setting but the seed")
    cell_dirs = [Path(d) for d in cell_dirs]
    ids = tuple(cell_ids or [str(d) for d in cell_dirs])
    store = ResumeStore(
        cell_dirs,
        ids,
        identity=config_identity(runs[0], base, partner_identity(trainer)),
        settings=training_settings(runs[0], base, partner_identity(trainer)),
    )
    keys = jnp.stack([seed_key(t.seed) for t in tcfgs])
    plan = {k: np.full((len(runs),), v) for k, v in trainer.plan(base).items()}
    shape = jax.eval_shape(jax.vmap(trainer.init), keys, plan)
    shardings, note = device_shardings(shape, len(runs), base.num_envs)
    init, update_n = trainer.compiled(shardings, None if shardings is None else note)
    return Group(
        trainer,
        list(runs),
        tcfgs,
        cell_dirs,
        ids,
        store,
        keys,
        plan,
        shape,
        shardings,
        note,
        init,
        update_n,
    )


# ========================================================================================
# 2. Restore or init
# ========================================================================================
def restore_or_init(group: Group, *, fresh: bool, report: Reporter) -> RunState:
    clock = Clock(time.perf_counter())
    window = Window(math.ceil(group.num_updates * FINAL_WINDOW))
    saved = None if fresh else group.store.check()
    report("compiling", 0, window)
    if saved is not None:
        host = group.store.load(group.shape, saved)
        state = device_owned(host, group.shardings)
        meta = saved[0].meta
        clock.prior_wall = float(meta.get("wall_s", 0.0))
        clock.prior_timed = int(meta.get("timed_updates", 0))
        clock.prior_elapsed = float(meta.get("elapsed_s", 0.0))
        at = saved[0].updates
        return RunState(state, at, at, at, clock, window)
    state = group.init(group.keys, group.plan)
    if group.trainer.warmup:  # compiles the update program too
        state, _ = group.update_n(state, np.int32(1), np.bool_(True))
    return RunState(state, 0, 0, 0, clock, window)


# ========================================================================================
# 3. Run chunks
# ========================================================================================
def run_chunks(
    group: Group,
    run: RunState,
    *,
    stop_at: int,
    stop: StopSignals,
    report: Reporter,
    log: MetricsLog,
    chunk_seconds: float,
    chunk_updates: int | None,
    save_every_updates: int | None,
    save_every_seconds: float,
    history: list | None,
) -> None:
    """Train until ``run.updates == stop_at``; raises TrainingStopped on a signal."""
    n = chunk_updates or 1
    last_save_t = time.perf_counter()
    spu = group.steps_per_update
    while run.updates < stop_at:
        if stop.signum is not None:
            if run.updates > run.saved_at:
                save(group, run, report, log)
            log.event("stopped", run, signal=signal.Signals(stop.signum).name)
            raise TrainingStopped(stop.signum, run.updates, group.cell_dirs)
        n = max(1, min(n, stop_at - run.updates))
        t0 = time.perf_counter()
        run.state, totals = group.update_n(run.state, np.int32(n), np.bool_(False))
        totals = jax.device_get(totals)  # waits for the call
        dt = time.perf_counter() - t0
        first_call = run.clock.compile_s is None
        if first_call:
            run.clock.compile_s = time.perf_counter() - run.clock.started
        else:
            run.clock.train_wall += dt
            run.clock.timed_updates += n
        run.updates += n
        run.window.add(n, totals)
        if history is not None:
            history.append((run.updates, totals))
        log.chunk(run, n, dt, totals, compiling=first_call)
        report(
            "training",
            run.updates,
            run.window,
            group.num_seeds * n * spu / dt,
            None if first_call else (stop_at - run.updates) * dt / n,
        )
        if run.updates >= stop_at:
            break
        if chunk_updates is None and not first_call:  # about chunk_seconds per call
            n = max(1, int(n * min(4.0, chunk_seconds / max(dt, 1e-3))))
        due = save_every_updates is not None and run.updates - run.saved_at >= save_every_updates
        if due or time.perf_counter() - last_save_t >= save_every_seconds:
            save(group, run, report, log)
            last_save_t = time.perf_counter()
        if save_every_updates is not None:
            n = min(n, max(1, save_every_updates - (run.updates - run.saved_at)))


def save(group: Group, run: RunState, report: Reporter, log: MetricsLog) -> None:
    report("saving", run.updates, run.window)
    group.store.save(
        run.state, {"updates": run.updates, "num_updates": group.num_updates, **run.clock.meta()}
    )
    run.saved_at = run.updates
    log.event("saved", run)


class StopSignals:
    """While training: the first SIGTERM or SIGINT (Ctrl-C) only sets :attr:`signum`, which
    the loop checks between compiled calls (it then saves and stops); a second SIGINT raises
    KeyboardInterrupt at once. Installed only in the main thread; the previous handlers
    come back on exit."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        if self.signum is None:
            self.signum = signum

    def __exit__(self, *exc: Any) -> None:
        for s, previous in self._previous.items():
            signal.signal(s, previous)


# ========================================================================================
# 4. Finish cells
# ========================================================================================
def finish_cells(
    group: Group, run: RunState, report: Reporter, log: MetricsLog
) -> list[CellResult]:
    report("saving", run.updates, run.window)
    host = jax.device_get(run.state)
    clock, spu = run.clock, group.steps_per_update
    results = []
    for i, (r, cell_dir) in enumerate(zip(group.runs, group.cell_dirs, strict=True)):
        one = jax.tree_util.tree_map(lambda x, i=i: x[i], host)
        summary = {
            "complete": True,
            "identity": group.store.identity,
            "total_timesteps": group.num_updates * spu,
            "num_updates": group.num_updates,
            "wall_time_s": round(clock.elapsed, 3),
            "compile_time_s": round(clock.compile_s or 0.0, 3),
            # throughput after compilation (the first, compiling call is not timed)
            "steps_per_second": (
                round(group.num_seeds * clock.timed * spu / clock.wall, 1)
                if clock.wall > 0
                else None
            ),
            "steps_per_second_per_cell": (
                round(clock.timed * spu / clock.wall, 1) if clock.wall > 0 else None
            ),
            "cells_trained_together": list(group.ids),
            "resumed_from_update": run.resumed_from or None,
            "devices": group.device_note,
            "platform": jax.devices()[0].platform,
            "final_metrics": run.window.means(i),
        }
        write_released_cell(
            cell_dir, group.trainer.released(one), config_json(group.trainer, r, summary)
        )
        group.store.remove(cell_dir)
        results.append(CellResult(cell_dir, summary))
    log.event("done", run)
    report("done", run.updates, run.window)
    return results


def _plain(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


def config_json(trainer: Trainer, run: RunConfig, summary: dict) -> dict:
    """The cell's ``config.json``: algorithm, env_config, reload_overrides, wandb_summary,
    config (the full resolved config, with env_version and coord_* like upstream's W&B
    config) and training_summary."""
    values = {k: _plain(v) for k, v in run.values}
    algo = get_algorithm(run.algorithm)
    tenv = trainer.tenv
    env = run.env
    full = {
        "ALG_NAME": run.algorithm,
        **{k: v for k, v in values.items() if k not in algo.not_logged_keys},
        "env_version": tenv.env_version,
    }
    full["coord_alpha"] = {"easy": 0.3, "medium": 0.6, "hard": 0.9}.get(env.training_difficulty)
    for k, v in tenv.coord_params.items():
        full[f"coord_{k}"] = _plain(v)
    final = summary.get("final_metrics") or {}
    wandb = {
        "num_params": trainer.spec.num_params(),
        "env_step": summary["total_timesteps"],
        "sps": summary.get("steps_per_second_per_cell"),
    }
    for k in ("mean_episode_return", "mean_episode_length", "achievement_pct"):
        if final.get(k) is not None:
            wandb[k] = final[k]
    out = {
        "algorithm": run.algorithm,
        "env_config": {
            "env_name": env.env_name,
            "env_version": tenv.env_version,
            "num_agents": tenv.num_agents,
            "num_comm_channels": env.num_comm_channels,
            "coordination_difficulty": env.training_difficulty,
            "shared_reward": bool(env.shared_reward),
            "soft_specialization": bool(
                tenv.coord_params.get("soft_specialization", env.soft_specialization)
            ),
            "action_masking": bool(env.action_masking),
        },
        "reload_overrides": {k: values[k] for k in algo.reload_keys},
        "wandb_summary": wandb,
        "config": full,
        "training_summary": {
            "trainer": f"alem-eval {algo.trainer_module.replace('.', '/')}.py",
            "jax_version": jax.__version__,
            **summary,
        },
    }
    if trainer.partners is not None:  # trained with frozen partners: which, and how
        out["partners"] = trainer.partners.record.as_json()
    return out
