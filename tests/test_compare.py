"""``alem_eval.scoring.compare``: two sources scored on the same worlds, P(A > B) with a CI (the
evaluator is a stub whose scores depend on the source: no Alem compile)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from alem_eval.evaluate import rollout
from tests.eval_support import as_run_teams
from alem_eval.evaluate.rollout import RolloutProgress, StackResult
from alem_eval.evaluate.settings import CHUNK, FAST_MAX_STEPS
from alem_eval.scoring.compare import compare_paired, compare_scores, compare_sources
from alem_eval.core.errors import UsageError


def test_compare_scores_statement():
    better = compare_scores(
        np.full(10, 0.5) + np.arange(10) * 0.01, np.arange(10) * 0.01, reps=2000
    )
    assert better["p_improvement"] == 1.0 and better["verdict"] == "A better"
    same = compare_scores(np.arange(10.0), np.arange(10.0), reps=2000)
    assert same["p_improvement"] == pytest.approx(0.5) and same["verdict"] == "no clear difference"
    assert same["p_lo"] < 0.5 < same["p_hi"]
    worse = compare_scores(np.zeros(5), np.ones(5), reps=500)
    assert worse["verdict"] == "B better" and worse["diff"] == -1.0
    with pytest.raises(UsageError, match="at least one run"):
        compare_scores(np.zeros(0), np.ones(3))


def _correlated(rng, worlds=20, gap=0.02):
    """One cell per side on the same worlds: a world's difficulty (sd 0.2) moves both sides
    together; each side's own noise is small (sd 0.02); A is ``gap`` better on average."""
    w = rng.normal(0.0, 0.2, worlds)
    return (
        0.5 + gap + w + rng.normal(0, 0.02, (1, worlds)),
        0.5 + w + rng.normal(0, 0.02, (1, worlds)),
    )


def test_the_paired_comparison_resamples_worlds_jointly_and_is_narrower():
    a, b = _correlated(np.random.default_rng(0))
    paired = compare_paired(a, b, reps=2000)
    apart = compare_scores(a[0], b[0], reps=2000)  # the sides resampled independently
    assert paired["diff"] == pytest.approx(apart["diff"]) == pytest.approx(np.mean(a - b))
    assert paired["p_improvement"] == apart["p_improvement"]
    assert paired["diff_hi"] - paired["diff_lo"] < 0.25 * (apart["diff_hi"] - apart["diff_lo"])
    assert paired["diff_lo"] > 0 > apart["diff_lo"]
    # Missing values: an episode without a value drops out of its side only.
    a[0, 3] = np.nan
    one_less = compare_paired(a, b, reps=2000)
    assert one_less["diff"] == pytest.approx(np.nanmean(a) - np.mean(b))
    from alem_eval.core.errors import EvaluationError

    with pytest.raises(EvaluationError, match="need the same number"):
        compare_paired(a[:, :5], b, reps=10)


def test_the_paired_difference_interval_holds_its_level():
    rng = np.random.default_rng(1)
    hits = 0
    for i in range(1000):
        a, b = _correlated(rng)
        r = compare_paired(a, b, reps=1000, stream=(i,))
        hits += r["diff_lo"] <= 0.02 <= r["diff_hi"]
    assert hits / 1000 >= 0.93


@pytest.fixture
def two_sources(tmp_path, fixtures_root, monkeypatch):
    """Sources A and B holding the same cells; the stub gives A higher scores."""

    def make(*cells):
        for side in ("A", "B"):
            for cell in cells:
                shutil.copytree(fixtures_root / cell, tmp_path / side / cell)
        return str(tmp_path / "A"), str(tmp_path / "B")

    calls = []

    def run_stack(
        cfgs,
        weights,
        *,
        protocol,
        eval_difficulty,
        num_episodes,
        max_steps,
        on_progress=None,
        on_team=None,
        padding=(),
        **_,
    ):
        """The evaluator ``score_cells`` calls, without the compile: each checkpoint that
        is not padding handed to ``on_team`` as ``run_stack`` does."""
        real = [k for k in range(len(cfgs)) if k not in set(padding)]
        calls.append((len(real), eval_difficulty, num_episodes, max_steps))
        if on_progress is not None:
            done = num_episodes * len(real)
            on_progress(RolloutProgress(done, done, 10, 1.0))
        base = 0.5 if len(calls) <= make.groups_per_source else 0.1
        # the first episode's return is not finite: its record has no such column
        records = [
            [
                {"Team/achievement_pct": base + 0.01 * i}
                | ({"episode_return": base + 0.02 * i} if i else {})
                for i in range(num_episodes)
            ]
            for _ in cfgs
        ]
        for k in real:
            if on_team is not None:
                on_team(k, records[k])
        return StackResult(records, [None] * len(cfgs), protocol, eval_difficulty, CHUNK)

    monkeypatch.setattr(rollout, "run_teams", as_run_teams(run_stack))
    make.calls = calls
    make.groups_per_source = 1
    return make


def test_compare_sources_by_episodes_favours_the_better_source(two_sources):
    a, b = two_sources("tiny/ippo-rnn/easy/seed0")
    [row] = compare_sources([a, b], ["tiny/ippo-rnn/easy/seed0"], episodes=6, reps=500)
    assert two_sources.calls == [(1, "easy", 6, FAST_MAX_STEPS)] * 2  # same worlds for both sides
    assert row["runs"] == "episodes" and row["n_A"] == row["n_B"] == 6
    assert row["A"] == a and row["B"] == b and row["eval_difficulty"] == "easy"
    assert row["p_improvement"] == 1.0 and row["verdict"] == "A better"
    assert row["mean_A"] - row["mean_B"] == pytest.approx(0.4) == row["diff"]


def test_compare_sources_by_seeds_when_both_sides_have_two_cells(two_sources):
    a, b = two_sources("tiny/ippo-rnn/hard/seed2", "tiny/hypermarl-rnn/hard/seed0")
    # two network shapes, one evaluator call per source (any algorithms in one program)
    [row] = compare_sources(
        [a, b], ["tiny/*/hard"], episodes=3, reps=500, metric="Team/achievement_pct"
    )
    assert row["runs"] == "seeds" and row["n_A"] == row["n_B"] == 2
    assert row["verdict"] == "A better"


def test_compare_sources_input_errors(two_sources):
    a, b = two_sources("tiny/ippo-rnn/easy/seed0")
    with pytest.raises(UsageError, match="exactly two --source options"):
        compare_sources([a], ["tiny"])
    with pytest.raises(UsageError, match="unknown metric 'Team/achievment_pct'"):
        compare_sources([a, b], ["tiny"], metric="Team/achievment_pct", episodes=2, reps=10)
    # A name that is no registered metric is checked against the columns the records
    # will carry, before anything is scored: a typo fails at once, a column is taken.
    with pytest.raises(UsageError, match=r"unknown metric 'Agent2/xpp'; did you mean Agent2/xp"):
        compare_sources([a, b], ["tiny"], metric="Agent2/xpp", episodes=2, reps=10)
    assert two_sources.calls == []


def test_difficulty_selects_the_cells_and_eval_difficulty_the_worlds(two_sources):
    a, b = two_sources("tiny/ippo-rnn/easy/seed0", "tiny/ippo-rnn/hard/seed2")
    rows = compare_sources(
        [a, b], ["tiny/ippo-rnn"], difficulties=["hard"], eval_difficulty="easy", reps=10
    )
    assert [r["eval_difficulty"] for r in rows] == ["easy"]
    assert [(n, d) for n, d, *_ in two_sources.calls] == [(1, "easy"), (1, "easy")]
    with pytest.raises(UsageError, match="unknown eval difficulty 'extreme'"):
        compare_sources([a, b], ["tiny"], eval_difficulty="extreme")


def test_a_wrong_second_source_fails_before_the_first_is_scored(two_sources, tmp_path):
    from alem_eval.core.errors import AlemEvalError

    a, _ = two_sources("tiny/ippo-rnn/easy/seed0")
    with pytest.raises(AlemEvalError, match="does not exist"):
        compare_sources([a, str(tmp_path / "nowhere")], ["tiny/ippo-rnn/easy/seed0"], episodes=2)
    with pytest.raises(UsageError, match="matches no cell"):
        compare_sources([a, a], ["tiny/ippo-rnn/easy/seed0", "tiny/mappo-rnn/hard"], episodes=2)
    assert two_sources.calls == []  # nothing was evaluated


def test_compare_takes_any_record_column_and_skips_episodes_without_its_value(two_sources):
    a, b = two_sources("tiny/ippo-rnn/easy/seed0")
    [row] = compare_sources(
        [a, b], ["tiny/ippo-rnn/easy/seed0"], metric="episode_return", episodes=6, reps=500
    )
    assert row["metric"] == "episode_return" and row["n_A"] == row["n_B"] == 5
    assert row["mean_A"] - row["mean_B"] == pytest.approx(0.4) and row["verdict"] == "A better"
    # A cell with no finite value at all (one episode, the one without it): a one-line error.
    from alem_eval.core.errors import EvaluationError

    with pytest.raises(EvaluationError, match=r"seed0: no episode has a finite episode_return"):
        compare_sources([a, b], ["tiny/ippo-rnn/easy/seed0"], metric="episode_return", episodes=1)


def test_compare_takes_a_metric_by_label_or_alias_as_its_help_shows(two_sources):
    a, b = two_sources("tiny/ippo-rnn/easy/seed0")
    for name in ("achievement", "Ach%", "Team/achievement_pct"):
        two_sources.calls.clear()  # the stub scores the first source's call higher
        [row] = compare_sources([a, b], ["tiny/ippo-rnn/easy/seed0"], metric=name, episodes=3)
        assert row["metric"] == "Team/achievement_pct" and row["verdict"] == "A better"


def test_a_rerun_reads_both_sources_back_from_the_store(two_sources, tmp_path):
    """Scores are kept per (cell, checkpoint, config, protocol, episodes, cap): a rerun
    evaluates nothing and states the same; other settings evaluate again. The two sources
    hold the same cell id with different checkpoints: both versions are kept."""
    from alem_eval.analysis.results import ResultsStore

    cell = "tiny/ippo-rnn/easy/seed0"
    a, b = two_sources(cell)
    (tmp_path / "B" / cell / "checkpoint" / "RETRAINED").write_text("another checkpoint")
    store = ResultsStore(tmp_path / "store")
    first = compare_sources([a, b], [cell], episodes=6, reps=500, store=store)
    assert len(two_sources.calls) == 2 and len(store.entries()) == 2
    assert first[0]["verdict"] == "A better"
    again = compare_sources([a, b], [cell], episodes=6, reps=500, store=store)
    assert len(two_sources.calls) == 2 and again == first  # read back, the same statement
    compare_sources([a, b], [cell], episodes=5, reps=500, store=store)
    assert len(two_sources.calls) == 4  # another key: evaluated, stored beside
    assert len(store.entries()) == 4


def test_an_interrupted_compare_keeps_what_it_scored(two_sources, tmp_path, monkeypatch):
    from alem_eval.analysis.results import ResultsStore

    cell = "tiny/ippo-rnn/easy/seed0"
    a, b = two_sources(cell)
    (tmp_path / "B" / cell / "checkpoint" / "RETRAINED").write_text("another checkpoint")
    store = ResultsStore(tmp_path / "store")
    stub = rollout.run_teams

    def interrupted(*args, **kw):
        if len(two_sources.calls) == 1:  # source B's evaluation: Ctrl-C
            raise KeyboardInterrupt
        return stub(*args, **kw)

    monkeypatch.setattr(rollout, "run_teams", interrupted)
    with pytest.raises(KeyboardInterrupt):
        compare_sources([a, b], [cell], episodes=6, reps=500, store=store)
    assert [e.key.cell for e in store.entries()] == [cell]  # source A's scores are kept
    monkeypatch.setattr(rollout, "run_teams", stub)
    [row] = compare_sources([a, b], [cell], episodes=6, reps=500, store=store)
    assert len(two_sources.calls) == 2  # only B was evaluated again
    assert row["verdict"] == "A better"


def test_progress_names_each_scored_cell_and_what_was_read_back(two_sources, tmp_path):
    """``on_progress`` per source: each cell as it is stored, then on a rerun how many
    were read back; ``on_episodes`` hears the evaluator's episode progress."""
    from alem_eval.analysis.results import ResultsStore

    a, b = two_sources("tiny/ippo-rnn/hard/seed2", "tiny/hypermarl-rnn/hard/seed0")
    (Path(b) / "tiny/ippo-rnn/hard/seed2/checkpoint/RETRAINED").write_text("another checkpoint")
    store = ResultsStore(tmp_path / "store")
    notes: list[tuple[str, int, int]] = []
    episodes: list = []

    def run():
        notes.clear()
        compare_sources(
            [a, b],
            ["tiny/*/hard"],
            episodes=3,
            reps=100,
            store=store,
            on_progress=lambda *n: notes.append(n),
            on_episodes=episodes.append,
        )

    run()
    # B's HyperMARL cell is byte for byte A's (same key): read back from what A stored.
    assert notes == [
        (f"{a}: reused from the results store", 0, 2),
        (f"{a}: scored tiny/ippo-rnn/hard/seed2", 1, 2),
        (f"{a}: scored tiny/hypermarl-rnn/hard/seed0", 2, 2),
        (f"{b}: reused from the results store", 1, 2),
        (f"{b}: scored tiny/ippo-rnn/hard/seed2", 2, 2),
    ]
    assert [p.episodes_done for p in episodes] == [6, 3]  # A's two cells, then B's one
    run()  # everything is stored now
    assert notes == [(f"{s}: reused from the results store", 2, 2) for s in (a, b)]


def test_compare_command_wiring(two_sources, tmp_path, monkeypatch):
    """Two local sources holding the same cell; the evaluator is replaced by a stub whose
    scores depend on the source, so the statement must favour A."""
    import json as _json

    from typer.testing import CliRunner

    import alem_eval.core.runtime as runtime
    from alem_eval.cli.app import _register, app

    cell = "tiny/ippo-rnn/easy/seed0"
    a, b = two_sources(cell)
    (Path(b) / cell / "checkpoint" / "RETRAINED").write_text("another checkpoint")
    monkeypatch.setattr(runtime, "enable_compilation_cache", lambda *a, **k: None)
    _register()
    args = [
        "compare",
        cell,
        "--source",
        a,
        "--source",
        b,
        "--episodes",
        "6",
        "--reps",
        "500",
        "--format",
        "json",
        "--store",
        str(tmp_path / "store"),
    ]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert two_sources.calls == [(1, "easy", 6, FAST_MAX_STEPS)] * 2
    assert len(list((tmp_path / "store").rglob("*.parquet"))) == 2  # both sources kept
    rows = _json.loads(result.stdout[result.stdout.index("[") :])
    assert rows[0]["runs"] == "episodes" and rows[0]["n_A"] == 6
    assert rows[0]["p_improvement"] == 1.0 and rows[0]["verdict"] == "A better"

    # Not a terminal: one line per scored cell, then (a rerun) what was read back. The
    # console wraps at 80 columns, within the long temporary paths or between words:
    # compared without any whitespace.
    def unwrapped(text: str) -> str:
        return "".join(text.split())

    for side in (a, b):
        assert unwrapped(f"[1/1] {side}: scored {cell}") in unwrapped(result.stderr)
    again = CliRunner().invoke(app, args, catch_exceptions=False)
    assert again.exit_code == 0 and len(two_sources.calls) == 2
    assert unwrapped(f"[1/1] {b}: reused from the results store") in unwrapped(again.stderr)
    bad = CliRunner().invoke(app, ["compare", cell, "--source", a])
    assert bad.exit_code != 0
