"""``alem-eval render``: one greedy episode of a cell (or a mixed team) as a GIF or MP4.

Parses, makes one call to :func:`alem_eval.api.render.render` (``alem_eval.render``) and
prints what it drew.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from alem_eval.cli.app import app
from alem_eval.core.errors import UsageError
from alem_eval.cli.console import OutputFormat, emit_records, err_console, play_or_plan
from alem_eval.cli.options import (
    QuietOpt,
    quiet_option,
    CacheDirOpt,
    DifficultyFilterOpt,
    DryRunOpt,
    EnvMismatch,
    EnvMismatchOpt,
    EvalDifficultyOpt,
    FocalArgOpt,
    FocalOpt,
    FormatOpt,
    MaxStepsOpt,
    OutFileOpt,
    RepoOpt,
    RevisionOpt,
    SourceOpt,
    override,
    source_keywords,
    Difficulty,
    EVAL_DIFFICULTY_SHARED_HELP,
)
from alem_eval.rendering.frames import DEFAULT_SCALE, MAX_SCALE
from alem_eval.rendering.writers import DEFAULT_FPS


@app.command("render")
@quiet_option
def render(
    team: Annotated[
        str,
        typer.Argument(
            metavar="CELL_OR_TEAM",
            help="One cell (self-play), or one cell per agent slot joined by '+' "
            "(a mixed team, any algorithms); each part must name exactly one cell.",
        ),
    ],
    focal: Annotated[
        str | None,
        override(
            FocalOpt,
            help="Draw a scenario team: this agent (as 'scenario --focal' takes it: "
            "package.module:factory, path/to/file.py:factory, a reference agent such as "
            "random-legal or scripted, or a cell directory) drives the --slots beside the "
            "cells.",
        ),
    ] = None,
    focal_arg: FocalArgOpt = None,
    slots: Annotated[
        str | None,
        typer.Option(
            "--slots",
            help="The agent slots the --focal agent drives, comma-separated (default 0: "
            "a visitor in slot 0); the cells drive the others.",
            metavar="S[,S...]",
        ),
    ] = None,
    source: SourceOpt = "hub",
    repo: RepoOpt = None,
    revision: RevisionOpt = None,
    cache_dir: CacheDirOpt = None,
    difficulty: DifficultyFilterOpt = None,
    eval_difficulty: Annotated[
        Difficulty | None, override(EvalDifficultyOpt, help=EVAL_DIFFICULTY_SHARED_HELP)
    ] = None,
    episode: Annotated[
        int,
        typer.Option(
            "--episode",
            help="Episode index i of the fast protocol: world PRNGKey(9999 + i), the same "
            "episode 'score' plays as episode i.",
        ),
    ] = 0,
    max_steps: MaxStepsOpt = None,
    out: Annotated[
        Path | None,
        override(
            OutFileOpt,
            help="Output file, .gif or .mp4 (mp4 needs ffmpeg on PATH or the video extra). "
            "Default: a .gif in the current directory named after the cells, the difficulty "
            "and the episode.",
        ),
    ] = None,
    fps: Annotated[float, typer.Option("--fps", help="Frames per second.")] = DEFAULT_FPS,
    scale: Annotated[
        int,
        typer.Option("--scale", help=f"Integer zoom of the renderer's pixels (1-{MAX_SCALE})."),
    ] = DEFAULT_SCALE,
    on_env_mismatch: EnvMismatchOpt = EnvMismatch.error,
    dry_run: DryRunOpt = False,
    fmt: FormatOpt = OutputFormat.table,
    quiet: QuietOpt = False,
) -> None:
    """Draw one greedy episode with the environment's own pixel renderer.

    Each frame shows every agent's view (alem's render_alem_pixels) side by side over a
    caption: the step, the team's distinct achievements so far, and each agent's cell,
    action and comm signal. Frame 0 is the reset world, frame t the state after step t
    (an episode of T steps gives T + 1 frames). Frames are written as they are drawn, so
    a 10,000-step episode needs no more memory than a short one. The team plays on its
    cells' shared training difficulty's worlds unless --eval-difficulty names others.

    Examples:

      alem-eval render demo/ippo/easy/0 --source demo --max-steps 200 \\
          --out ippo.gif
      alem-eval render 'demo/ippo/easy/0+demo/pqn/easy/0+demo/mappo/easy/0' \\
          --source demo --episode 3
      alem-eval render demo/ippo/easy/0 --source demo --focal scripted \\
          --slots 1 --max-steps 100
    """
    import functools

    from alem_eval.api.render import render as draw
    from alem_eval.evaluate.agent_spec import parse_focal_args

    focal_kwargs: dict[str, Any] = {} if focal is None else {"focal": focal}
    if focal_arg:
        focal_kwargs["focal_args"] = parse_focal_args(focal_arg)
    if slots is not None:
        focal_kwargs["slots"] = _slots(slots)
    result = play_or_plan(  # --dry-run: the plan; else the compilation cache on, then play
        functools.partial(
            draw,
            team,
            out=out,
            eval_difficulty=eval_difficulty.value if eval_difficulty else None,
            episode=episode,
            max_steps=max_steps,
            fps=fps,
            scale=scale,
            on_env_mismatch=on_env_mismatch.value,
            **source_keywords(source, repo, revision, cache_dir, difficulty),
            **focal_kwargs,
            progress=True,
        ),
        dry_run,
        fmt,
    )
    if result is None:
        return
    record = result.as_json()
    if fmt == OutputFormat.table:
        ending = "the env ended it" if result.terminated else "step cap"
        err_console.print(
            f"wrote {result.path}: {result.frames} frames ({result.steps} "
            f"step{'' if result.steps == 1 else 's'}, {ending}), "
            f"return {result.episode_return:.3f}, {len(result.achievements)} team achievements"
            + (f": {', '.join(result.achievements)}" if result.achievements else ""),
            highlight=False,
        )
        print(result.path)
    elif fmt == OutputFormat.csv:
        team_text, unlocked = "+".join(result.team), " ".join(result.achievements)
        emit_records([{**record, "team": team_text, "achievements": unlocked}], fmt)
    else:
        emit_records([record], fmt)


def _slots(text: str) -> tuple[int, ...]:
    """``--slots 0,2`` -> ``(0, 2)`` (the library checks them against the env's agents)."""
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(
            f"--slots must be agent slots joined by ',' (e.g. 0 or 0,2), got {text!r}"
        ) from None
