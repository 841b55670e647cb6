"""``alem-eval train``: (re)generate cells in the released format with the trainers.

``alem-eval train 1B/ippo-rnn/hard/seed3`` trains that cell with the upstream defaults
(NUM_COMM_CHANNELS 4, like the released cells) into ``<out>/1B/ippo-rnn/hard/seed3/``:
``checkpoint/`` (orbax, the released pytree) and ``config.json``. The budget label sets
TOTAL_TIMESTEPS ("1B" = 1e9, "100M" = 1e8) unless ``--total-timesteps`` is given; other
labels (e.g. ``tiny``) need ``--total-timesteps``.

Selectors (``1B/*/hard``, ``100M/ippo-rnn/easy/seed[0-2]``, ``.../seed0,seed7``) expand
over the released grid (budgets 100M and 1B unless named, seeds 0-4 unless named); cells
that differ only by seed train side by side in one program (vmapped). ``--shard i/N`` (0-based) trains
the i-th of N contiguous shares of the selected cells (SLURM: ``--shard
$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT``).

Resumable: state is saved under ``<cell>/_resume/`` every ``--checkpoint-every`` seconds
and on Ctrl-C; rerunning the same command continues from it. Finished cells are skipped
(``--force`` retrains them, ``--fresh`` ignores resume state).
"""
from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any, List, Optional, Sequence

import typer

from ..cli import app
from ..algorithms import ALGORITHMS
from ..config import DIFFICULTIES
from ..console import err_console
from ..errors import UsageError
from ..manifest import Cell, sort_cells

DEFAULT_BUDGETS = ("100M", "1B")
DEFAULT_SEEDS = tuple(range(5))


# ----------------------------------------------------------------------------------------
# Planning: selectors -> cells -> groups
# ----------------------------------------------------------------------------------------
def budget_timesteps(budget: str) -> int | None:
    """'1B' -> 1e9, '100M' -> 1e8; None for labels that are not a step count ('tiny')."""
    from ..stats import budget_steps

    return budget_steps(budget)


def _canonical_budget(label: str) -> str:
    """'1b' -> '1B', '100m' -> '100M' (the released spelling); other labels unchanged."""
    return label.upper() if budget_timesteps(label) is not None else label


def expand_cells(selectors: Sequence[str]) -> list[Cell]:
    """The cells a training selector names. Concrete ids (``tiny/ippo-rnn/easy/seed0``)
    are taken as given; patterns expand over the released grid (budgets 100M and 1B
    unless named, the four algorithms, three difficulties, seeds 0-4 unless named)."""
    from ..selectors import Selector, select_cells

    out: list[Cell] = []
    for text in selectors:
        sel = Selector.parse(text)
        raw = [p.strip() for p in str(text).strip().strip("/").split("/")]
        budgets = [_canonical_budget(b) for b in raw[0].split(",")] if not any(
            c in raw[0] for c in "*?[") else list(DEFAULT_BUDGETS)
        seeds = set(DEFAULT_SEEDS)
        if sel.levels[3] is not None:
            for item in sel.levels[3]:
                if item.startswith("seed") and item[4:].isdigit():
                    seeds.add(int(item[4:]))
        universe = [Cell(b, a, d, s) for b, a, d, s in
                    itertools.product(budgets, ALGORITHMS, DIFFICULTIES, sorted(seeds))]
        out += select_cells(universe, [text])
    return sort_cells(dict.fromkeys(out))


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise UsageError(f"--shard {text!r}: expected i/N, e.g. 0/8") from None
    if n < 1 or not 0 <= i < n:
        raise UsageError(f"--shard {text!r}: need 0 <= i < N")
    return i, n


def shard_cells(cells: Sequence[Cell], shard: tuple[int, int] | None) -> list[Cell]:
    """The i-th of N contiguous shares (contiguous keeps a group's seeds together)."""
    if shard is None:
        return list(cells)
    i, n = shard
    return list(cells[len(cells) * i // n: len(cells) * (i + 1) // n])


def parse_sets(items: Sequence[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set {item!r}: expected KEY=VALUE")
        out[key.strip().upper()] = value.strip()
    return out


def plan_runs(cells: Sequence[Cell], *, total_timesteps: int | None, overrides: dict[str, Any]):
    """``[(group key, [(cell, RunConfig, TrainConfig)])]``: cells that differ only by seed
    share a group (one vmapped program)."""
    from ..config import build_train_config, training_run_config

    groups: dict[tuple, list] = {}
    for cell in cells:
        steps = total_timesteps if total_timesteps is not None else budget_timesteps(cell.budget)
        if steps is None and "TOTAL_TIMESTEPS" not in overrides:
            raise UsageError(f"{cell.id}: budget label {cell.budget!r} is not a step count; "
                             "pass --total-timesteps")
        run = training_run_config(cell.algorithm, difficulty=cell.difficulty, seed=cell.seed,
                                  total_timesteps=steps, overrides=overrides, where=cell.id)
        tcfg = build_train_config(run, where=cell.id)
        key = (cell.budget, cell.algorithm, cell.difficulty)
        groups.setdefault(key, []).append((cell, run, tcfg))
    return list(groups.items())


# ----------------------------------------------------------------------------------------
# Progress on stderr
# ----------------------------------------------------------------------------------------
def _fmt_steps(n: float) -> str:
    for unit, k in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= k:
            return f"{n / k:.2f}{unit}"
    return f"{n:.0f}"


def _fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class ProgressView:
    """A rich progress bar per group: steps, steps/s, mean return, achievement, ETA."""

    def __init__(self):
        from rich.progress import BarColumn, Progress, TextColumn

        self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                 TextColumn("{task.fields[info]}"), console=err_console,
                                 transient=False)
        self.tasks: dict[tuple, int] = {}
        self.t0 = time.perf_counter()

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc)

    def callback(self, label: str):
        def on_progress(p) -> None:
            key = p.cells
            if key not in self.tasks:
                self.tasks[key] = self.progress.add_task(label, total=p.total_steps, info="")
            task = self.tasks[key]
            if p.phase == "compiling":
                info = "compiling (the Alem step takes minutes to compile on CPU)..."
            elif p.phase == "saving":
                info = f"{_fmt_steps(p.steps)}/{_fmt_steps(p.total_steps)} steps  saving..."
            else:
                ret = "-" if p.mean_return is None else f"{p.mean_return:.2f}"
                ach = "-" if p.achievement_pct is None else f"{100 * p.achievement_pct:.1f}%"
                info = (f"{_fmt_steps(p.steps)}/{_fmt_steps(p.total_steps)} steps  "
                        f"{p.steps_per_s:,.0f} steps/s  return {ret}  ach {ach}  "
                        f"ETA {_fmt_time(p.eta_s)}")
            self.progress.update(task, completed=p.steps, info=info)

        return on_progress


# ----------------------------------------------------------------------------------------
# The command
# ----------------------------------------------------------------------------------------
@app.command("train")
def train(
    cells: List[str] = typer.Argument(..., help="Cell(s) or selector(s), e.g. 1B/ippo-rnn/hard/seed3."),
    total_timesteps: Optional[int] = typer.Option(None, "--total-timesteps", help="Env steps per cell (default: from the budget label)."),
    num_envs: Optional[int] = typer.Option(None, "--num-envs", help="Parallel envs per cell (NUM_ENVS)."),
    num_steps: Optional[int] = typer.Option(None, "--num-steps", help="Rollout length (NUM_STEPS)."),
    sets: Optional[List[str]] = typer.Option(None, "--set", help="Trainer key override KEY=VALUE (repeatable), e.g. --set LR=1e-4."),
    out: Path = typer.Option(Path("runs"), "--out", help="Output root: cells go to <out>/<budget>/<algorithm>/<difficulty>/seed<N>/."),
    shard: Optional[str] = typer.Option(None, "--shard", help="i/N: train only the i-th (0-based) of N shares of the selected cells."),
    checkpoint_every: float = typer.Option(600.0, "--checkpoint-every", help="Seconds between resume checkpoints."),
    max_updates: Optional[int] = typer.Option(None, "--max-updates", help="Stop (resumably) after this many updates in this call."),
    fresh: bool = typer.Option(False, "--fresh", help="Ignore existing resume state."),
    force: bool = typer.Option(False, "--force", help="Retrain cells that are already complete."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the plan and exit."),
) -> None:
    """Train cells with the alem-eval trainers, in the released checkpoint format."""
    overrides = parse_sets(sets)
    if num_envs is not None:
        overrides["NUM_ENVS"] = str(num_envs)
    if num_steps is not None:
        overrides["NUM_STEPS"] = str(num_steps)
    if total_timesteps is not None and total_timesteps < 1:
        raise UsageError("--total-timesteps must be positive")
    selected = expand_cells(cells)
    chosen = shard_cells(selected, parse_shard(shard))
    if not chosen:
        err_console.print(f"shard {shard}: no cells in this share of {len(selected)}")
        return
    groups = plan_runs(chosen, total_timesteps=total_timesteps, overrides=overrides)

    from trainers.common import is_complete

    todo = []
    for key, members in groups:
        left = [m for m in members if force or not is_complete(out / m[0].id, m[1], m[2])]
        for m in members:
            if m not in left:
                err_console.print(f"{m[0].id}: already trained in {out / m[0].id} (--force retrains)")
        if left:
            todo.append((key, left))
    for key, members in todo:
        t = members[0][2]
        err_console.print(
            f"{'/'.join(key)}: seeds {','.join(str(m[0].seed) for m in members)}: "
            f"{t.total_timesteps:,} steps = {t.num_updates:,} updates of {t.num_envs} envs x "
            f"{t.num_steps} steps", highlight=False)
    if dry_run or not todo:
        return

    from ..evaluate import enable_compilation_cache
    from trainers.common import train_cells, trainer_for
    from ..config import build_train_config

    enable_compilation_cache()
    with ProgressView() as view:
        for key, members in todo:
            cells_, runs, tcfgs = zip(*members)
            trainer = trainer_for(runs[0], tcfgs[0])
            label = f"{'/'.join(key)} seed{','.join(str(c.seed) for c in cells_)}"
            results = train_cells(
                trainer, runs, build_train_config, [out / c.id for c in cells_],
                cell_ids=[c.id for c in cells_], fresh=fresh, save_every_seconds=checkpoint_every,
                max_updates=max_updates, on_progress=view.callback(label))
            if results is None:
                err_console.print(f"{label}: stopped after --max-updates; rerun to continue",
                                  highlight=False)
                continue
            for c, r in zip(cells_, results):
                s = r.summary
                fm = s.get("final_metrics") or {}
                ret = fm.get("mean_episode_return")
                err_console.print(
                    f"{c.id}: {s['total_timesteps']:,} steps in {_fmt_time(s['wall_time_s'])} "
                    f"(+{s['compile_time_s']:.0f}s compile), "
                    f"{s['steps_per_second'] or 0:,.0f} steps/s; final return "
                    f"{'-' if ret is None else f'{ret:.2f}'} -> {r.cell_dir}", highlight=False)
