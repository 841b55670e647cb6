"""The scoring library up to the evaluator call (no Alem compile): option checks, the
env-version policy, the checkpoint it hashes, the rows and table it renders."""

from __future__ import annotations

import dataclasses
import shutil
import warnings

import pytest

from alem_eval.model import checkpoint as ckpt
from alem_eval.evaluate import rollout
from alem_eval.evaluate.rollout import StackResult
from alem_eval.evaluate.settings import (
    CHUNK,
    EnvVersionWarning,
    check_env_version,
    validate_request,
)
from alem_eval.model import loader
from alem_eval.core.errors import EvaluationError, UsageError
from alem_eval.hub.manifest import Cell
from alem_eval.analysis.metrics import SUMMARY_METRICS, metric_info
from alem_eval.scoring.score import CellScore, ScoreOptions, env_steps, episode_rows, score_cells
from alem_eval.hub.sources import open_source
from tests.eval_support import as_run_teams

CELL = "tiny/ippo-rnn/easy/seed0"


class _Calls(list):
    kill_after: int | None = None
    paddings: list[list[int]]


@pytest.fixture
def fake_evaluator(monkeypatch):
    """``evaluate.rollout.run_stack`` without the compile: it checks the env version of every
    config under the policy it is given, as the real one does before compiling anything.
    Checkpoint k's episodes end k-th (``on_team``); ``calls.kill_after = k`` kills the
    call right after that. Episodes last ``max_steps`` (synthetic steps when recording);
    padding checkpoints are neither reported nor recorded, as in the real one."""
    from tests.test_datasets import make_steps, meta_for

    calls = _Calls()
    calls.paddings = []
    calls.structures = []  # per call: each checkpoint's (algorithm, network key)

    def run_stack(
        cfgs,
        weights,
        *,
        protocol,
        eval_difficulty,
        num_episodes,
        max_steps,
        on_env_mismatch,
        batch=None,
        on_progress=None,
        record=None,
        on_team=None,
        padding=(),
        first_episode=0,
    ):
        for i, cfg in enumerate(cfgs):
            check_env_version(cfg, on_mismatch=on_env_mismatch, where=f"checkpoint {i}")
        calls.append(dict(n=len(cfgs), protocol=protocol, eval_difficulty=eval_difficulty))
        calls.paddings.append(sorted(padding))
        calls.structures.append([(c.algorithm, c.network_key) for c in cfgs])
        records = [
            []
            if k in padding
            else [
                {"Team/achievement_pct": 0.25, "episode_length": float(max_steps)}
                for _ in range(num_episodes)
            ]
            for k in range(len(cfgs))
        ]
        for k, recs in enumerate(records):  # checkpoint 0's episodes end first, and so on
            if record is not None and k not in padding:
                team = (record.names[k],) * cfgs[k].env.num_agents
                for e in range(num_episodes):
                    steps = make_steps(max_steps, e)
                    record.recorder.add_steps(team, e, 0, steps)
                    record.recorder.finish_episode(team, e, meta_for(steps, e))
            if on_team is not None and k not in padding:
                on_team(k, recs)
            if calls.kill_after == k:
                raise KeyboardInterrupt  # the run is killed while the next ones still run
        return StackResult(
            records=records,
            starts=[],
            protocol=protocol,
            eval_difficulty=eval_difficulty,
            chunk=CHUNK,
        )

    monkeypatch.setattr(rollout, "run_teams", as_run_teams(run_stack))
    return calls


@pytest.fixture
def other_env_version(monkeypatch):
    """Every resolved config claims an env version that is not the installed one."""
    real = loader.resolve_cell

    def resolve_cell(*args, **kwargs):
        cfg, spec = real(*args, **kwargs)
        return dataclasses.replace(cfg, env_version="v-other"), spec

    monkeypatch.setattr(loader, "resolve_cell", resolve_cell)


def _source(cell_copy):
    d = cell_copy(CELL)
    return open_source(d.parents[3]), d


def test_env_mismatch_warn_scores_with_one_warning(cell_copy, fake_evaluator, other_env_version):
    src, _ = _source(cell_copy)
    cells = src.select([CELL])
    options = ScoreOptions(num_episodes=2, max_steps=4, on_env_mismatch="warn")
    with pytest.warns(EnvVersionWarning) as caught:
        scores = score_cells(src, cells, options=options)
    assert [str(w.message).split(":")[0] for w in caught] == [CELL]  # once, named by the cell
    assert "'v-other'" in str(caught[0].message)
    assert fake_evaluator == [dict(n=1, protocol="fast", eval_difficulty="easy")]
    assert [len(s.episodes) for s in scores] == [2]


def test_env_mismatch_error_stops_before_the_evaluator(
    cell_copy, fake_evaluator, other_env_version
):
    src, _ = _source(cell_copy)
    with pytest.raises(EvaluationError, match=f"{CELL}: .*'v-other'"):
        score_cells(src, src.select([CELL]), options=ScoreOptions(num_episodes=2, max_steps=4))
    assert fake_evaluator == []


def test_matching_env_version_scores_without_a_warning(cell_copy, fake_evaluator):
    src, _ = _source(cell_copy)
    with warnings.catch_warnings():
        warnings.simplefilter("error", EnvVersionWarning)
        scores = score_cells(src, src.select([CELL]), options=ScoreOptions(num_episodes=1))
    assert len(scores) == 1 and fake_evaluator[0]["n"] == 1


def test_scoring_hashes_the_checkpoint_it_restores(cell_copy, fake_evaluator):
    src, d = _source(cell_copy)
    shutil.copytree(d / "checkpoint", d / "checkpoint_v3")
    (d / "checkpoint" / "extra").write_text("makes checkpoint/ hash differently")
    [score] = score_cells(src, src.select([CELL]), options=ScoreOptions(num_episodes=1))
    assert score.provenance["checkpoint_hash"] == ckpt.checkpoint_hash(d / "checkpoint_v3")
    assert score.provenance["checkpoint_hash"] != ckpt.checkpoint_hash(d / "checkpoint")


def _recorded_meta(rec_dir) -> dict[int, dict]:
    from alem_eval.datasets.reader import open_recording

    recording = open_recording(rec_dir)
    assert recording.incomplete == ()
    return {ep.episode: dict(ep.meta) for ep in recording.complete}


def test_a_recording_of_another_checkpoint_is_recorded_again_with_a_warning(
    cell_copy, fake_evaluator, tmp_path
):
    """Retrained in place (``train --force``), or another source's cell under the same id:
    another checkpoint hash. Its recorded episodes are recorded again (a warning names
    the change); with the same checkpoint they are reused."""
    from alem_eval.analysis.results import ResultsStore
    from alem_eval.scoring.score import RecordingWarning

    src, d = _source(cell_copy)
    run = dict(
        options=ScoreOptions(num_episodes=2, max_steps=4),
        store=ResultsStore(tmp_path / "res"),
        record_dir=tmp_path / "rec",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecordingWarning)
        score_cells(src, src.select([CELL]), **run)
        [again] = score_cells(src, src.select([CELL]), **run)
    assert again.reused and len(fake_evaluator) == 1
    first = _recorded_meta(tmp_path / "rec")
    old_hash = first[0]["checkpoint_hash"]
    assert old_hash == again.provenance["checkpoint_hash"]
    assert {m["config_hash"] for m in first.values()} == {again.provenance["config_hash"]}
    assert {m["max_steps"] for m in first.values()} == {4}

    (d / "checkpoint" / "retrained").write_text("another checkpoint, the same cell id")
    new_hash = ckpt.checkpoint_hash(d / "checkpoint")
    with pytest.warns(RecordingWarning) as caught:
        score_cells(src, src.select([CELL]), **run)
    assert [str(w.message) for w in caught] == [
        f"{CELL} (easy): 2 episodes recorded in {tmp_path / 'rec'} differ: checkpoint_hash "
        f"{old_hash[:12]} (now {new_hash[:12]}); recording 2 of them again"
    ]
    assert len(fake_evaluator) == 2
    assert {m["checkpoint_hash"] for m in _recorded_meta(tmp_path / "rec").values()} == {new_hash}


def test_a_recording_with_another_step_cap_is_recorded_again_and_the_rest_named(
    cell_copy, fake_evaluator, tmp_path
):
    """Cap 4 over 3 episodes, then cap 8 over 2: episodes 0 and 1 are recorded again at
    cap 8; episode 2, which this run does not play, stays (the warning says so)."""
    from alem_eval.scoring.score import RecordingWarning

    src, _ = _source(cell_copy)
    rec_dir = tmp_path / "rec"
    score_cells(
        src,
        src.select([CELL]),
        options=ScoreOptions(num_episodes=3, max_steps=4),
        record_dir=rec_dir,
    )
    with pytest.warns(RecordingWarning) as caught:
        score_cells(
            src,
            src.select([CELL]),
            options=ScoreOptions(num_episodes=2, max_steps=8),
            record_dir=rec_dir,
        )
    assert [str(w.message) for w in caught] == [
        f"{CELL} (easy): 3 episodes recorded in {rec_dir} differ: max_steps 4 (now 8); "
        "recording 2 of them again; 1 beyond this run's 2 episodes stay as they are"
    ]
    metas = _recorded_meta(rec_dir)
    assert {e: (m["max_steps"], m["length"]) for e, m in metas.items()} == {
        0: (8, 8),
        1: (8, 8),
        2: (4, 4),
    }


def test_a_cell_is_stored_when_its_episodes_end_so_a_kill_mid_stack_keeps_it(
    cell_copy, fake_evaluator, tmp_path
):
    """Two cells in one stack; the run is killed after the first cell's last episode ended
    but while the second still runs: the first is in the store, and a rerun evaluates only
    the second."""
    from alem_eval.analysis.results import ResultsStore

    cell_copy("tiny/pqn-vdn-rnn/easy/seed0")
    src, _ = _source(cell_copy)
    cells = src.select(["tiny/ippo-rnn/easy/seed0", "tiny/pqn-vdn-rnn/easy/seed0"])
    store = ResultsStore(tmp_path / "res")
    options = ScoreOptions(num_episodes=2, max_steps=4, max_stack=2)
    seen: list[str] = []
    fake_evaluator.kill_after = 0
    with pytest.raises(KeyboardInterrupt):
        score_cells(
            src, cells, options=options, store=store, on_progress=lambda m, *_: seen.append(m)
        )
    assert [c["n"] for c in fake_evaluator] == [2]  # one stack of both cells
    assert len(store.entries()) == 1 and seen[-1].startswith("scored tiny/")
    first = seen[-1].removeprefix("scored ")

    fake_evaluator.kill_after = None
    seen.clear()
    scores = score_cells(
        src, cells, options=options, store=store, on_progress=lambda m, *_: seen.append(m)
    )
    assert [c["n"] for c in fake_evaluator] == [2, 1]  # only the missing cell ran
    assert seen[0] == "reused from the results store"
    assert [m for m in seen if m.startswith("scored")] == [
        f"scored {c.id}" for c in cells if c.id != first
    ]
    assert len(store.entries()) == 2 and [s.cell.id for s in scores] == [c.id for c in cells]


def test_stacks_are_padded_to_one_structure_and_the_padding_is_never_scored(
    cell_copy, fake_evaluator
):
    """Three IPPO cells and one PQN, two of each shape per stack: IPPO, IPPO, PQN and a
    PQN copy; then IPPO, an IPPO copy and two copies of the PQN cell of the first stack
    (loaded again: it is in no job of the second). The evaluator is told which are
    copies; each cell is scored once."""
    _, d = _source(cell_copy)
    for seed in (1, 2):
        shutil.copytree(d, d.parent / f"seed{seed}")
    cell_copy("tiny/pqn-vdn-rnn/easy/seed0")
    src = open_source(d.parents[3])
    cells = src.select(["tiny/*"])
    assert [c.algorithm for c in cells].count("ippo-rnn") == 3 and len(cells) == 4
    seen: list[str] = []
    scores = score_cells(
        src,
        cells,
        options=ScoreOptions(num_episodes=2, max_steps=4),
        on_progress=lambda m, *_: seen.append(m),
    )
    assert [c["n"] for c in fake_evaluator] == [4, 4]
    assert fake_evaluator.paddings == [[3], [1, 2, 3]]
    assert sorted(m for m in seen if m.startswith("scored")) == sorted(
        f"scored {c.id}" for c in cells
    )
    assert [s.cell.id for s in scores] == [c.id for c in cells]


def test_stacks_of_every_difficulty_share_one_structure(cell_copy, fake_evaluator):
    """The five tiny cells (4 algorithms) on their own three difficulties: one call per
    difficulty, each padded to the networks of the whole selection in one order (one
    compiled program for all), a network a difficulty lacks filled with another
    difficulty's cell; every cell scored once, on its own difficulty."""
    from tests.conftest import TINY_CELLS

    root = cell_copy(TINY_CELLS[0]).parents[3]
    for cell_id in TINY_CELLS[1:]:
        cell_copy(cell_id)
    src = open_source(root)
    cells = src.select(["tiny"])
    scores = score_cells(src, cells, options=ScoreOptions(num_episodes=2, max_steps=4))
    calls = list(fake_evaluator)
    assert sorted(c["eval_difficulty"] for c in calls) == ["easy", "hard", "medium"]
    assert len({tuple(s) for s in fake_evaluator.structures}) == 1
    [structure] = {tuple(s) for s in fake_evaluator.structures}
    assert sorted({a for a, _ in structure}) == sorted({c.algorithm for c in cells})
    # easy: IPPO and PQN real; medium: MAPPO; hard: IPPO and HyperMARL
    assert sorted(len(structure) - len(p) for p in fake_evaluator.paddings) == [1, 2, 2]
    assert {s.cell.id: s.eval_difficulty for s in scores} == {c.id: c.difficulty for c in cells}


@pytest.mark.parametrize(
    "kw, request_args",
    [
        (dict(protocol="slow"), ("slow", "easy", None, None)),
        (dict(num_episodes=0), ("fast", "easy", 0, None)),
        (dict(num_episodes=2.5), ("fast", "easy", 2.5, None)),
        (dict(max_steps=-1), ("fast", "easy", None, -1)),
    ],
)
def test_score_options_fail_with_the_evaluators_words(kw, request_args):
    with pytest.raises(UsageError) as ours:
        ScoreOptions(**kw)
    with pytest.raises(UsageError) as theirs:
        validate_request(*request_args)
    assert str(ours.value) == str(theirs.value)


def test_score_options_other_checks():
    with pytest.raises(UsageError, match="--stack must be at least 1"):
        ScoreOptions(max_stack=0)
    with pytest.raises(UsageError, match="unknown env-version policy 'maybe'"):
        ScoreOptions(on_env_mismatch="maybe")
    assert ScoreOptions(protocol="reference", on_env_mismatch="ignore").protocol == "reference"


def _scores():
    eps = (
        {"Team/reward_pct_of_max": 0.5, "Team/achievement_pct": 0.25, "episode_length": 10.0},
        {"Team/reward_pct_of_max": 0.7, "Team/achievement_pct": 0.75, "episode_length": 20.0},
    )
    return [
        CellScore(Cell("1B", "ippo-rnn", "hard", 0), "hard", "fast", eps),
        CellScore(Cell("1B", "ippo-rnn", "hard", 1), "hard", "fast", eps[:1], reused=True),
    ]


def test_episode_rows_flatten_scores_one_row_per_episode():
    rows = episode_rows(_scores())
    assert [(r["cell"], r["episode"]) for r in rows] == [
        ("1B/ippo-rnn/hard/seed0", 0),
        ("1B/ippo-rnn/hard/seed0", 1),
        ("1B/ippo-rnn/hard/seed1", 0),
    ]
    assert rows[1] == {
        "cell": "1B/ippo-rnn/hard/seed0",
        "eval_difficulty": "hard",
        "protocol": "fast",
        "episode": 1,
        "Team/reward_pct_of_max": 0.7,
        "Team/achievement_pct": 0.75,
        "episode_length": 20.0,
    }
    assert env_steps(_scores()) == 30.0  # the reused cell ran nothing


def test_score_table_uses_the_registry_labels_and_scale():
    row = _scores()[0].summary_row()
    assert list(row) == [
        "cell",
        "eval",
        "n",
        *(metric_info(k).label for k in SUMMARY_METRICS),
        "len",
        "reused",
    ]
    assert row["Total%"] == "60.00 ± 7.07" and row["Ach%"] == "50.00 ± 17.68"
    assert row["Base%"] is None and row["len"] == 15.0


def test_every_stack_of_a_selection_has_one_structure_so_one_program_scores_them_all():
    """Stacks mix network shapes round-robin, the same count of each in every stack
    (padded with repeats), in the same order: the evaluator's program key is the same."""
    from types import SimpleNamespace

    from alem_eval.scoring.orchestration import stacks

    def job(key, name):
        return SimpleNamespace(key=key, name=name)

    def shape(m):
        return m.key

    jobs = [
        job("a", "a1"),
        job("a", "a2"),
        job("a", "a3"),
        job("b", "b1"),
        job("c", "c1"),
        job("c", "c2"),
    ]
    got = stacks([jobs], 5, shape)
    assert [[j.name for j in s] for s, _ in got] == [["a1", "b1", "c1"], ["a2", "c2"], ["a3"]]
    shapes = {tuple(j.key for j in padded) for _, padded in got}
    assert shapes == {("a", "b", "c")}  # one structure, one order
    assert sorted(j.name for s, _ in got for j in s) == sorted(j.name for j in jobs)
    # Groups (one per eval difficulty) share the structure of them all: a shape a group
    # lacks is another group's job (the padding plays, unreported).
    split = stacks([jobs[:3], jobs[3:]], 5, shape)
    assert [[j.name for j in s] for s, _ in split] == [["a1"], ["a2"], ["a3"], ["b1", "c1"], ["c2"]]
    assert {tuple(j.key for j in p) for _, p in split} == {("a", "b", "c")}
    assert [j.name for j in split[0][1]] == ["a1", "b1", "c2"]
    # Two per shape when the stack has room for it; a single shape fills the stack.
    assert [len(p) for _, p in stacks([jobs], 6, shape)] == [6, 6]
    assert [len(p) for _, p in stacks([jobs[:3]], 2, shape)] == [2, 2]
    assert [len(p) for _, p in stacks([jobs[:1]], 5, shape)] == [1]  # never padded alone
    # No cap (cross-play, scenarios): each group in one call, never padded.
    assert [[j.name for j in p] for _, p in stacks([jobs[:3], jobs[3:]], None, shape)] == [
        ["a1", "a2", "a3"],
        ["b1", "c1", "c2"],
    ]


def test_reference_warns_and_records_what_it_assumed_without_a_full_config(
    cell_copy, fake_evaluator, tmp_path
):
    """Without the full training config, SEED / VISUALIZE / EVAL_DIFFICULTIES come from
    defaults, and every key chain with them: 'reference' says so and stores it."""
    import json

    from alem_eval.analysis.results import ResultsStore
    from alem_eval.scoring.score import ReferenceAssumptionWarning

    src, d = _source(cell_copy)
    config = json.loads((d / "config.json").read_text())
    config.pop("config", None)
    (d / "config.json").write_text(json.dumps(config))
    store = ResultsStore(tmp_path / "res")
    options = ScoreOptions(protocol="reference", num_episodes=2, max_steps=4)
    with pytest.warns(ReferenceAssumptionWarning, match=rf"^{CELL}: .*assumes SEED=0, VISUALIZE"):
        score_cells(src, src.select([CELL]), options=options, store=store)
    (entry,) = store.entries()
    assert entry.extra["reference_assumed"] == {
        "SEED": 0,
        "VISUALIZE": True,
        "EVAL_DIFFICULTIES": ["easy"],
    }
    # With the full training config nothing is assumed: no warning.
    from tests.conftest import FIXTURES

    src2 = open_source(FIXTURES)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReferenceAssumptionWarning)
        score_cells(src2, src2.select([CELL]), options=options)


# ----------------------------------------------------------------------------------------
# --difficulty selects cells, --eval-difficulty sets the worlds
# ----------------------------------------------------------------------------------------
HARD = "tiny/ippo-rnn/hard/seed2"


def test_a_cell_played_on_another_difficulty_is_stored_apart_from_its_own(
    cell_copy, fake_evaluator, tmp_path
):
    """The hard cell on easy worlds, then on its own: two keys, two files, both read back
    under their eval difficulty; an analysis (leaderboard, report) sees only its own."""
    from alem_eval.analysis.aggregate import prepare
    from alem_eval.analysis.results import ResultsStore

    d = cell_copy(HARD)
    src = open_source(d.parents[3])
    cells = src.select([HARD])
    store = ResultsStore(tmp_path / "res")
    other = ScoreOptions(num_episodes=2, max_steps=4, eval_difficulty="easy")
    [on_easy] = score_cells(src, cells, options=other, store=store)
    [own] = score_cells(src, cells, options=ScoreOptions(num_episodes=2, max_steps=4), store=store)
    assert [c["eval_difficulty"] for c in fake_evaluator] == ["easy", "hard"]
    assert (on_easy.eval_difficulty, own.eval_difficulty) == ("easy", "hard")
    assert on_easy.provenance["eval_difficulty"] == "easy"
    entries = sorted(store.entries(), key=lambda e: e.key.eval_difficulty)
    assert [e.key.eval_difficulty for e in entries] == ["easy", "hard"]
    assert [e.path.parent.name for e in entries] == ["easy", "hard"]
    assert len({e.key.slot for e in entries}) == 2  # neither replaces the other
    frame = store.load([HARD])
    assert sorted(frame["eval_difficulty"].unique()) == ["easy", "hard"]
    assert (frame["difficulty"] == "hard").all()
    # Read back again (no evaluation) under the same eval difficulty it was played on.
    [again] = score_cells(src, cells, options=other, store=store)
    assert again.reused and again.eval_difficulty == "easy" and len(fake_evaluator) == 2
    prepared = prepare(store, [HARD])
    assert set(prepared.frame["eval_difficulty"]) == {"hard"}
    assert any("training difficulty" in n for n in prepared.notes)


def test_score_options_reject_an_unknown_eval_difficulty_in_the_evaluators_words():
    with pytest.raises(UsageError) as ours:
        ScoreOptions(eval_difficulty="extreme")
    with pytest.raises(UsageError) as theirs:
        validate_request("fast", "extreme", None, None)
    assert str(ours.value) == str(theirs.value)


def _invoke(monkeypatch, args):
    from typer.testing import CliRunner

    import alem_eval.core.runtime as runtime
    from alem_eval.cli.app import _register, app

    monkeypatch.setattr(runtime, "enable_compilation_cache", lambda *a, **k: None)
    _register()
    return CliRunner().invoke(app, args, catch_exceptions=False)


def test_score_difficulty_selects_cells_and_eval_difficulty_sets_the_worlds(
    cell_copy, fake_evaluator, tmp_path, monkeypatch
):
    import json

    cell_copy(CELL)
    root = cell_copy(HARD).parents[3]
    common = ["--source", str(root), "--results", str(tmp_path / "res"), "--format", "json"]
    common += ["--episodes", "2", "--max-steps", "4"]
    result = _invoke(monkeypatch, ["score", "tiny/ippo-rnn", "--difficulty", "hard", *common])
    assert result.exit_code == 0, result.output
    assert [(r["cell"], r["eval_difficulty"]) for r in json.loads(result.stdout)] == [
        (HARD, "hard")
    ]
    args = ["score", "tiny/ippo-rnn", "--difficulty", "hard", "--eval-difficulty", "easy"]
    result = _invoke(monkeypatch, [*args, *common])
    assert result.exit_code == 0, result.output
    assert [(r["cell"], r["eval_difficulty"]) for r in json.loads(result.stdout)] == [
        (HARD, "easy")
    ]
    assert [c["eval_difficulty"] for c in fake_evaluator] == ["hard", "easy"]


def test_reference_difficulty_filter_keeps_every_difficulty_the_run_evaluated(
    cell_copy, fake_evaluator, tmp_path, monkeypatch
):
    """--difficulty hard picks the hard cells; 'reference' then plays each on all its
    EVAL_DIFFICULTIES (it used to play only those named by --difficulty)."""
    import json

    d = cell_copy(HARD)
    config = json.loads((d / "config.json").read_text())
    config["config"]["EVAL_DIFFICULTIES"] = ["hard", "easy"]
    (d / "config.json").write_text(json.dumps(config))
    args = ["score", "tiny", "--difficulty", "hard", "--protocol", "reference"]
    args += ["--source", str(d.parents[3]), "--results", str(tmp_path / "res")]
    result = _invoke(
        monkeypatch, [*args, "--episodes", "2", "--max-steps", "4", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    assert [r["eval_difficulty"] for r in json.loads(result.stdout)] == ["hard", "easy"]


def test_score_json_records_name_their_digests_and_verify(
    cell_copy, fake_evaluator, tmp_path, monkeypatch
):
    """``score --format json``: each cell's record has the ``digests`` of its results file;
    the printed JSON verifies against the store, and an edited episode is named."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from alem_eval.analysis.verify_results import verify_results

    root = cell_copy(CELL).parents[3]
    args = ["score", "tiny/ippo-rnn/easy", "--source", str(root), "--format", "json"]
    args += ["--results", str(tmp_path / "res"), "--episodes", "2", "--max-steps", "4"]
    result = _invoke(monkeypatch, args)
    assert result.exit_code == 0, result.output
    [record] = json.loads(result.stdout)
    digests = record["digests"]
    assert digests["algorithm"] == "sha256-merkle-v1" and len(digests["files"]) == 1
    assert digests["config_document"]["runs"][0]["max_steps"] == 4
    out = tmp_path / "score.json"
    out.write_text(result.stdout)
    assert verify_results(out).ok
    path = tmp_path / "res" / digests["files"][0]["path"]
    table = pq.read_table(path)
    i = table.column_names.index("Team/achievement_pct")
    table = table.set_column(i, "Team/achievement_pct", pa.array([0.25, 0.5]))
    pq.write_table(table, path)
    d = verify_results(out).first_difference
    assert (d.episode, d.column) == (1, "Team/achievement_pct") and CELL in d.where
