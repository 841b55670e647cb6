"""``alem-eval train`` as a library: selectors -> cells -> groups -> trained cells.

The command (``alem_eval/cli/commands/train.py``) parses its options into :class:`TrainOptions`,
calls :func:`train` and renders the :class:`TrainEvents` it receives. This module plans
(which cells, which hyperparameters, which cells share one compiled program), skips finished
cells, and hands each group to its algorithm's trainer, which it reaches only through the
registry (``Algorithm.trainer()``: ``make_train(run, tcfg) -> Trainer``), to the driver
(:func:`alem_eval.trainers.driver.train_cells`, imported when a group trains). Importing it
imports no JAX.

Hyperparameters of a regenerated cell (:func:`cell_run_config`): when the cell's released
``config.json`` is at hand (``--from-config FILE``, or ``--source`` holding the cell), every
hyperparameter comes from it (its ``config``, then its ``reload_overrides``); otherwise the
upstream yaml defaults apply (plus ``train_config.REGENERATION_DEFAULTS``). ``--set`` and
``--total-timesteps`` win over both. The difference matters for PQN: the yaml fixes
TOTAL_TIMESTEPS_DECAY at 1e9 whatever the budget, so a 100M cell regenerated without its
config.json reaches its epsilon floor after EPS_DECAY x 1e9 = 1e8 env steps (the end of its
run) and decays the LR over 1e9 (ending at 90% of LR), as the yaml says.

With frozen partners (``TrainOptions.partners`` / ``split`` / ``splits_file`` /
``focal_slots``, ``alem-eval train CELL --partners SELECTOR``): every cell's algorithm must
train with partners (the registry's ``trains_with_partners``), and the partners are
selected from ``--source`` (the Hub without one), verified, checked against the cells' env
and loaded while planning (:mod:`alem_eval.trainers.partners`), before anything is written;
their identity enters the cells' resume identity and ``is_complete``.

The contract between the library and the driver (:class:`~alem_eval.trainers.contract.Progress`,
:class:`~alem_eval.trainers.contract.CellResult`, ...) is :mod:`alem_eval.trainers.contract`.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence

from alem_eval.algorithms.registry import algorithm_names
from alem_eval.algorithms.config import DIFFICULTIES, RunConfig
from alem_eval.algorithms.train_config import TrainConfig, build_train_config, training_run_config
from alem_eval.hub.layout import checkpoint_path, config_path
from alem_eval.hub.selectors import shard_cells
from alem_eval.core.errors import ConfigError, UsageError
from alem_eval.hub.manifest import Cell, sort_cells
from alem_eval.trainers.contract import CellResult, Progress, config_identity

DEFAULT_BUDGETS = ("100M", "1B")
DEFAULT_SEEDS = tuple(range(5))


def is_complete(
    cell_dir: Path, run: RunConfig, tcfg: TrainConfig, partners: Mapping[str, Any] | None = None
) -> bool | None:
    """True: a released checkpoint written by these trainers with these settings exists
    (``partners``: and these frozen partners, ``PartnerRecord.identity()``);
    False: another checkpoint is there (other settings, or another tool's, e.g. a download);
    None: none, or training is in progress (``_resume/``: the resume rules decide)."""
    cell_dir = Path(cell_dir)
    if not checkpoint_path(cell_dir).is_dir():
        return None
    try:
        summ = json.loads(config_path(cell_dir).read_text()).get("training_summary") or {}
    except (OSError, ValueError, AttributeError):
        summ = {}
    if summ.get("complete") and summ.get("identity") == config_identity(run, tcfg, partners):
        return True
    return None if (cell_dir / "_resume").is_dir() else False


# ----------------------------------------------------------------------------------------
# Planning: selectors -> cells -> runs -> groups
# ----------------------------------------------------------------------------------------
def budget_timesteps(budget: str) -> int | None:
    """'1B' -> 1e9, '100M' -> 1e8; None for labels that are not a step count ('tiny')."""
    from alem_eval.analysis.aggregate import budget_steps

    return budget_steps(budget)


def _canonical_budget(label: str) -> str:
    """'1b' -> '1B', '100m' -> '100M' (the released spelling); other labels unchanged."""
    return label.upper() if budget_timesteps(label) is not None else label


def expand_cells(selectors: Sequence[str]) -> list[Cell]:
    """The cells a training selector names. Concrete ids (``tiny/ippo-rnn/easy/seed0``)
    are taken as given; patterns expand over the released grid (budgets 100M and 1B
    unless named, every registered algorithm, three difficulties, seeds 0-4 unless named)."""
    from alem_eval.hub.selectors import Selector, select_cells

    out: list[Cell] = []
    for text in selectors:
        sel = Selector.parse(text)
        raw = [p.strip() for p in str(text).strip().strip("/").split("/")]
        budgets = (
            [_canonical_budget(b) for b in raw[0].split(",")]
            if not any(c in raw[0] for c in "*?[")
            else list(DEFAULT_BUDGETS)
        )
        seeds = set(DEFAULT_SEEDS)
        if sel.levels[3] is not None:
            for item in sel.levels[3]:
                if item.startswith("seed") and item[4:].isdigit():
                    seeds.add(int(item[4:]))
        universe = [
            Cell(b, a, d, s)
            for b, a, d, s in itertools.product(
                budgets, algorithm_names(), DIFFICULTIES, sorted(seeds)
            )
        ]
        out += select_cells(universe, [text])
    return sort_cells(dict.fromkeys(out))


def parse_sets(items: Sequence[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set {item!r}: expected KEY=VALUE")
        out[key.strip().upper()] = value.strip()
    return out


def read_released_config(path: Path, *, where: str | None = None) -> dict[str, Any]:
    """A released ``config.json`` as a dict (one-line :class:`ConfigError` if unreadable)."""
    where = where or str(path)
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise ConfigError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a JSON object at the top level")
    return data


def cell_run_config(
    cell: Cell,
    *,
    total_timesteps: int | None = None,
    overrides: Mapping[str, Any] | None = None,
    released: Mapping[str, Any] | None = None,
) -> RunConfig:
    """The run config that regenerates ``cell`` (see the module docstring for the rule).

    TOTAL_TIMESTEPS: ``total_timesteps`` if given, else the released config's, else the
    budget label's (``1B`` = 1e9); a released config that contradicts the label is an error.
    """
    overrides = dict(overrides or {})
    label_steps = budget_timesteps(cell.budget)
    full = (released or {}).get("config") if released else None
    released_steps = None
    if isinstance(full, Mapping) and full.get("TOTAL_TIMESTEPS") is not None:
        released_steps = int(float(full["TOTAL_TIMESTEPS"]))
    steps = total_timesteps
    if steps is None and "TOTAL_TIMESTEPS" not in overrides:
        if released_steps is not None:
            if label_steps is not None and released_steps != label_steps:
                raise ConfigError(
                    f"{cell.id}: its config.json says TOTAL_TIMESTEPS={released_steps:,} but the "
                    f"budget label {cell.budget} means {label_steps:,}; pass --total-timesteps"
                )
            steps = released_steps
        elif label_steps is not None:
            steps = label_steps
        else:
            raise UsageError(
                f"{cell.id}: budget label {cell.budget!r} is not a step count; "
                "pass --total-timesteps"
            )
    return training_run_config(
        cell.algorithm,
        difficulty=cell.difficulty,
        seed=cell.seed,
        total_timesteps=steps,
        overrides=overrides,
        released=released,
        where=cell.id,
    )


@dataclass(frozen=True)
class TrainItem:
    cell: Cell
    run: RunConfig
    tcfg: TrainConfig
    from_config: str | None = None  # where its hyperparameters came from (None: the yaml)


@dataclass(frozen=True)
class TrainGroup:
    """Cells that differ only by seed, trained side by side in one vmapped program."""

    items: tuple[TrainItem, ...]

    @property
    def cells(self) -> list[Cell]:
        return [m.cell for m in self.items]

    @property
    def label(self) -> str:
        c = self.items[0].cell
        seeds = ",".join(str(m.cell.seed) for m in self.items)
        return f"{c.budget}/{c.algorithm}/{c.difficulty} seed{seeds}"

    def describe(self) -> str:
        t = self.items[0].tcfg
        src = {m.from_config for m in self.items}
        origin = (
            "hyperparameters from the yaml defaults"
            if src == {None}
            else "hyperparameters from " + ", ".join(sorted(s or "the yaml" for s in src))
        )
        return (
            f"{self.label}: {t.total_timesteps:,} steps = {t.num_updates:,} updates of "
            f"{t.num_envs} envs x {t.num_steps} steps; {origin}"
        )


def plan_groups(items: Sequence[TrainItem], group_size: int | None = None) -> list[TrainGroup]:
    """Cells with equal settings but the seed share a group (one program), at most
    ``group_size`` seeds each (memory grows with the group: ~11 GB per seed for IPPO)."""
    if group_size is not None and group_size < 1:
        raise UsageError("--group-size must be at least 1")
    by_key: dict[tuple, list[TrainItem]] = {}
    for m in items:
        key = (m.cell.budget, m.cell.algorithm, m.cell.difficulty, config_identity(m.run, m.tcfg))
        by_key.setdefault(key, []).append(m)
    groups = []
    for members in by_key.values():
        n = group_size or len(members)
        groups += [TrainGroup(tuple(members[i : i + n])) for i in range(0, len(members), n)]
    return groups


def plan_items(
    cells: Sequence[Cell],
    *,
    total_timesteps: int | None = None,
    overrides: Mapping[str, Any] | None = None,
    configs: Mapping[Cell, tuple[str, Mapping[str, Any]]] | None = None,
) -> list[TrainItem]:
    """Each cell's run and training config (``configs``: cell -> (where, its released
    config.json), see :func:`released_configs`)."""
    items = []
    for cell in cells:
        where, released = (configs or {}).get(cell, (None, None))
        run = cell_run_config(
            cell, total_timesteps=total_timesteps, overrides=overrides, released=released
        )
        items.append(TrainItem(cell, run, build_train_config(run, where=cell.id), where))
    return items


def released_configs(
    cells: Sequence[Cell], *, from_config: Path | None = None, source: str | None = None
) -> dict[Cell, tuple[str, dict]]:
    """Each cell's released config.json: ``from_config`` (one file for every cell) or the
    cell's own from ``source`` (a directory in the released layout, or ``hub``, which
    fetches the cell). A named source that lacks a selected cell is an error."""
    if from_config is not None and source is not None:
        raise UsageError("--from-config and --source both name a config.json; pass one")
    if from_config is not None:
        path = Path(from_config)
        if path.is_dir():
            path = config_path(path)
        data = read_released_config(path)
        return {c: (str(path), data) for c in cells}
    if source is None:
        return {}
    from alem_eval.core.progress import download_bar
    from alem_eval.hub.sources import open_source

    src = open_source(source, on_download=download_bar())  # a Hub cell's config is fetched
    out = {}
    for c in cells:
        src.select([c.id])  # SelectorError (one line) if the source lacks the cell
        path = config_path(src.local_dir(c))
        out[c] = (f"{source}:{c.id}/config.json", read_released_config(path))
    return out


# ----------------------------------------------------------------------------------------
# Running
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrainOptions:
    """``alem-eval train``'s options (see the command's help)."""

    out: Path = Path("runs")
    total_timesteps: int | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)  # --set, --num-envs, ...
    shard: tuple[int, int] | None = None
    group_size: int | None = None
    from_config: Path | None = None
    source: str | None = None
    checkpoint_every: float = 600.0
    max_updates: int | None = None
    fresh: bool = False
    force: bool = False
    dry_run: bool = False
    # Frozen partners (alem_eval.trainers.partners): selectors of --source's cells (the Hub
    # without one), their split, and how many of the 3 slots the trained (focal) policy takes.
    partners: tuple[str, ...] = ()
    split: str | None = None
    splits_file: Path | None = None
    focal_slots: int | None = None


@dataclass
class TrainPlan:
    selected: int  # cells the selectors named (before --shard)
    chosen: list[Cell]  # this shard's
    skipped: list[tuple[Cell, Path]]  # already trained with these settings
    groups: list[TrainGroup]  # left to train
    # with --partners: the loaded partners per env configuration of the cells
    partners: dict[Any, Any] = field(default_factory=dict)

    def partners_of(self, group: TrainGroup) -> Any:
        return self.partners.get(group.items[0].run.env)


@dataclass
class GroupOutcome:
    group: TrainGroup
    results: list[CellResult] | None  # None: stopped by --max-updates (resume state saved)


class TrainEvents:
    """What :func:`train` tells its caller; the command renders these (default: nothing)."""

    def planned(self, plan: TrainPlan) -> None: ...

    def progress(self, group: TrainGroup, p: Progress) -> None: ...

    def finished(self, outcome: GroupOutcome) -> None: ...


def plan_training(selectors: Sequence[str], options: TrainOptions) -> TrainPlan:
    """Selectors -> this shard's cells -> groups, minus the cells already trained."""
    if options.total_timesteps is not None and options.total_timesteps < 1:
        raise UsageError("--total-timesteps must be positive")
    check_partner_options(options)
    selected = expand_cells(selectors)
    chosen = shard_cells(selected, options.shard)
    if options.partners:
        from alem_eval.trainers.partners import check_supported

        for c in chosen:
            check_supported(c.algorithm, c.id)
    configs = released_configs(chosen, from_config=options.from_config, source=options.source)
    skipped, todo = [], []
    items = plan_items(
        chosen,
        total_timesteps=options.total_timesteps,
        overrides=options.overrides,
        configs=configs,
    )
    partners = load_item_partners(items, options)
    for m in items:
        where = options.out / m.cell.id
        p = partners.get(m.run.env)
        ident = None if p is None else p.record.identity()
        done = None if options.force else is_complete(where, m.run, m.tcfg, ident)
        if done:
            skipped.append((m.cell, where))
        elif done is False:
            raise ConfigError(
                f"{m.cell.id}: {where} already holds a checkpoint trained with "
                "other settings (or not by alem-eval train); --force overwrites "
                "it, or choose another --out"
            )
        else:
            todo.append(m)
    return TrainPlan(
        len(selected), chosen, skipped, plan_groups(todo, options.group_size), partners
    )


def check_partner_options(options: TrainOptions) -> None:
    """--split and --focal-slots belong to --partners; --focal-slots is 1 or 2."""
    if not options.partners:
        for flag, value in (
            ("--split", options.split),
            ("--splits", options.splits_file),
            ("--focal-slots", options.focal_slots),
        ):
            if value is not None:
                raise UsageError(f"{flag} applies to training with --partners; name them")
        return
    from alem_eval.hub.splits import check_split
    from alem_eval.trainers.partners import check_focal_slots

    check_split(options.split)
    check_focal_slots(1 if options.focal_slots is None else options.focal_slots)


def load_item_partners(items: Sequence[TrainItem], options: TrainOptions) -> dict[Any, Any]:
    """With --partners: each cell's algorithm must train with partners, and the partners
    are loaded (verified, checked against the cells' env) once per env configuration."""
    if not options.partners:
        return {}
    from alem_eval.trainers.partners import load_partners

    out: dict[Any, Any] = {}
    for m in items:
        if m.run.env not in out:
            out[m.run.env] = load_partners(
                options.partners,
                m.run,
                source=options.source or "hub",
                split=options.split,
                splits=options.splits_file,
                focal_slots=1 if options.focal_slots is None else options.focal_slots,
            )
    return out


def train_group(
    group: TrainGroup, options: TrainOptions, on_progress=None, partners: Any = None
) -> list[CellResult] | None:
    """Train one group with its algorithm's trainer (reached through the registry);
    ``partners``: its frozen partners (:mod:`alem_eval.trainers.partners`)."""
    first = group.items[0]
    from alem_eval.trainers.common import trainer_for
    from alem_eval.trainers.driver import train_cells

    trainer = trainer_for(first.run, first.tcfg, partners)
    return train_cells(
        trainer,
        [m.run for m in group.items],
        [m.tcfg for m in group.items],
        [options.out / m.cell.id for m in group.items],
        cell_ids=[m.cell.id for m in group.items],
        fresh=options.fresh,
        save_every_seconds=options.checkpoint_every,
        max_updates=options.max_updates,
        on_progress=on_progress,
    )


def train(
    selectors: Sequence[str], options: TrainOptions, events: TrainEvents | None = None
) -> list[GroupOutcome]:
    """Plan, then train every group in turn (nothing is trained with ``dry_run``).

    Raises :class:`TrainingStopped` when a signal stopped a group (its state is saved)."""
    events = events or TrainEvents()
    plan = plan_training(selectors, options)
    events.planned(plan)
    if options.dry_run:
        return []
    outcomes = []
    for group in plan.groups:
        results = train_group(
            group,
            options,
            on_progress=lambda p, g=group: events.progress(g, p),
            partners=plan.partners_of(group),
        )
        outcome = GroupOutcome(group, results)
        events.finished(outcome)
        outcomes.append(outcome)
    return outcomes
