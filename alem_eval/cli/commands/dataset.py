"""``alem-eval dataset export`` / ``alem-eval dataset info``: recorded episodes as
offline-MARL datasets.

Each parses, calls one :mod:`alem_eval.datasets` function and renders its result.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from alem_eval.cli.app import app
from alem_eval.cli.console import OutputFormat, emit_json, emit_records, err_console
from alem_eval.core.progress import Reporter
from alem_eval.cli.options import (
    QuietOpt,
    quiet_option,
    DatasetFormat,
    DatasetFormatOpt,
    FormatOpt,
    OutDirOpt,
    choice,
    override,
)

dataset_app = typer.Typer(
    name="dataset",
    help="Recorded evaluation episodes (score --record) as offline-MARL datasets.",
    no_args_is_help=True,
)
app.add_typer(dataset_app, name="dataset")


class Per(StrEnum):
    """``alem_eval.datasets.vault.VAULT_PER``."""

    cell = "cell"
    group = "group"


@dataset_app.command("export")
@quiet_option
def export(
    recording: Annotated[Path, typer.Argument(help="A recording directory (score --record).")],
    fmt: DatasetFormatOpt = DatasetFormat.vault,
    out: Annotated[
        Path,
        override(
            OutDirOpt,
            help="Where the vaults go, one per team (e.g. OUT/fast/hard.vlt/TEAM/); "
            "flashbax's default directory, ./vaults.",
        ),
    ] = Path("vaults"),
    per: Annotated[
        Per,
        typer.Option(
            "--per",
            help="cell: one vault per cell (self-play team); group: one per (budget, "
            "algorithm, difficulty), pooling the seeds. A mixed team is its own vault.",
            **choice(Per, "--per", "grouping"),
        ),
    ] = Per.cell,
    state: Annotated[
        bool,
        typer.Option(
            "--state/--no-state",
            help="Add infos.state, the agents' observations concatenated (the global state "
            "OG-MARL's centralised systems read); --no-state halves the vault.",
        ),
    ] = True,
    obs_float32: Annotated[
        bool,
        typer.Option(
            "--obs-float32/--obs-narrow",
            help="Observations and state as float32, as OG-MARL's offline systems read them "
            "(default), or in the narrowest dtype holding every recorded value exactly "
            "(smaller, for readers that cast to float32 themselves).",
        ),
    ] = True,
    quiet: QuietOpt = False,
) -> None:
    """Write the complete episodes of a recording as Flashbax Vaults, each with a dataset
    card (card.json, card.md) in its directory; prints the vault directories.

    Example:

      alem-eval score demo --source demo --episodes 2 --max-steps 300 \\
          --record out/
      alem-eval dataset export out/ --format vault --out vaults/
    """
    from alem_eval.datasets.vault import export_vault

    with Reporter(last_line=False) as progress:
        result = export_vault(
            recording,
            out,
            per=per.value,
            state=state,
            obs_dtype="float32" if obs_float32 else None,
            on_progress=progress.steps(
                "vaults",
                "[bold]dataset export[/] vaults",
                lambda done, total, s: f"dataset export: {done}/{total} vaults, {s:.0f}s",
            ),
        )
    for path in result.vaults:
        print(path)
    err_console.print(f"wrote {len(result.vaults)} vault(s) under {out}", highlight=False)
    if result.incomplete:
        err_console.print(
            f"left out {len(result.incomplete)} incomplete episode(s) (see "
            f"'alem-eval dataset info {recording}'; rerun the score to finish them)",
            highlight=False,
        )


@dataset_app.command("info")
def info(
    path: Annotated[Path, typer.Argument(help="A recording directory, a vault, or vaults.")],
    fmt: FormatOpt = OutputFormat.table,
) -> None:
    """Describe a recording (episodes per team, complete and incomplete, shapes, dtypes,
    sizes) or exported vaults (card, structure, sizes). --format json prints the library's
    result (alem_eval.datasets.info.dataset_info) as is.

    Example:

      alem-eval dataset info out/
      alem-eval dataset info vaults/ --format json
    """
    from alem_eval.datasets.info import dataset_info

    result = dataset_info(path)
    if fmt == OutputFormat.json:
        emit_json(result)
        return
    if result["kind"] == "recording":
        _recording_table(result, fmt)
    else:
        vaults = result["vaults"] if result["kind"] == "vaults" else [result]
        _vaults_table(vaults, fmt)


def _mb(n: int) -> str:
    return f"{n / 2**20:.2f}"


def _recording_table(result: dict[str, Any], fmt: OutputFormat) -> None:
    rows = [
        {
            "protocol": g["protocol"],
            "eval_difficulty": g["eval_difficulty"],
            "team": g["team"],
            "episodes": g["episodes"],
            "incomplete": g["incomplete"],
            "steps": g["steps"],
            "MB": _mb(g["bytes"]),
            "observations": ", ".join(f"{k} x{v}" for k, v in g["observation_dtypes"].items()),
            "return_mean": g["episode_return"] and g["episode_return"]["mean"],
        }
        for g in result["teams"]
    ]
    emit_records(rows, fmt, title=f"recording {result['path']}")
    if fmt != OutputFormat.table:
        return
    shapes = ", ".join(
        f"{k} {a['shape']} {a['dtype']}".replace("'", "") for k, a in result["arrays"].items()
    )
    err_console.print(
        f"{result['complete_episodes']} complete episode(s), {result['incomplete_episodes']} "
        f"incomplete, {result['steps']} steps, {_mb(result['bytes'])} MB on disk",
        highlight=False,
    )
    if shapes:
        err_console.print(f"arrays per episode: {shapes}", highlight=False)
    for inc in result["incomplete"]:
        err_console.print(f"incomplete: {inc['path']}: {inc['reason']}", highlight=False)


def _vaults_table(vaults: list[dict[str, Any]], fmt: OutputFormat) -> None:
    rows = []
    for v in vaults:
        card = v["card"] or {}
        ret = card.get("episode_return") or {}
        rows.append(
            {
                "vault": v["path"],
                "cells": ", ".join(card.get("source_cells", [])),
                "episodes": card.get("episodes"),
                "steps": v["steps"],
                "observations": v["structure"].get("observations", {}).get("dtype"),
                "MB": _mb(v["bytes"]),
                "return_mean": ret.get("mean"),
            }
        )
    emit_records(rows, fmt, title="vault" if len(vaults) == 1 else "vaults")
    if fmt == OutputFormat.table and len(vaults) == 1:
        for key, spec in vaults[0]["structure"].items():
            err_console.print(f"{key}: {spec['shape']} {spec['dtype']}", highlight=False)
