"""Data output: tables piped or redirected are never truncated."""

from alem_eval.cli.console import OutputFormat, emit_records


def test_table_into_a_pipe_keeps_every_character(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")  # a narrow terminal must not matter off-TTY
    rows = [
        {
            "cell": f"1B/hypermarl-rnn/medium/seed{i}",
            "algorithm": "hypermarl-rnn",
            "difficulty": "medium",
            "expected_params": 25_614_013,
            "state": "remote",
        }
        for i in range(3)
    ]
    emit_records(rows, OutputFormat.table, title="cells")
    out = capsys.readouterr().out
    for r in rows:
        assert r["cell"] in out
    assert "hypermarl-rnn" in out and "25614013" in out and "…" not in out


def test_episode_bar_in_a_batch_log_prints_throttled_lines_with_rates_after_the_compile():
    """Off a terminal the bar prints a line at most every ``every_s`` seconds and the
    final state once; env-steps/s and the ETA count from the first report (whose call
    also compiled), not from the start."""
    from alem_eval.cli.console import EpisodeBar, err_console
    from alem_eval.evaluate.rollout import RolloutProgress

    reports = [
        RolloutProgress(0, 10, 100, 60.0),  # first call: 60 s of compile
        RolloutProgress(2, 10, 1100, 70.0),  # +1000 steps, +2 episodes in 10 s
        RolloutProgress(4, 10, 2100, 75.0),  # within every_s: no line
        RolloutProgress(10, 10, 5100, 100.0),
    ]
    with err_console.capture() as cap, EpisodeBar("score", every_s=10.0, live=False) as bar:
        for p in reports:
            bar.update(p)
    lines = cap.get().splitlines()
    assert lines == [
        "episodes 0/10, 100 env steps, 60s",  # no rate yet (the call that compiled)
        "episodes 2/10, 1,100 env steps (100/s), 70s, ETA 40s",
        "episodes 10/10, 5,100 env steps (125/s), 100s",
    ]


def _strict_loads(text: str):
    """``json.loads`` that refuses NaN / Infinity (what jq and JavaScript do)."""
    import json

    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def test_json_output_is_strict_with_non_finite_values_as_null(capsys):
    """``score --format json`` printed a bare NaN for a metric with no finite value;
    every ``--format json`` output goes through emit_records / emit_json."""
    import numpy as np

    from alem_eval.cli.console import emit_json

    rows = [
        {
            "cell": "1B/ippo-rnn/hard/seed0",
            "mean": float("nan"),
            "se": np.float32("inf"),
            "n": np.int64(3),
            "ok": np.bool_(True),
            "episodes": [{"Team/achievement_pct": np.float64("-inf"), "len": 7.5}],
            "values": np.array([1.0, np.nan]),
            "pair": (1, float("inf")),
        }
    ]
    emit_records(rows, OutputFormat.json)
    emit_json({"gaps": [{"gap": np.nan, "lo": -0.25}]})
    first, second = capsys.readouterr().out.split("\n]\n")
    assert _strict_loads(first + "\n]") == [
        {
            "cell": "1B/ippo-rnn/hard/seed0",
            "mean": None,
            "se": None,
            "n": 3,
            "ok": True,
            "episodes": [{"Team/achievement_pct": None, "len": 7.5}],
            "values": [1.0, None],
            "pair": [1, None],
        }
    ]
    assert _strict_loads(second) == {"gaps": [{"gap": None, "lo": -0.25}]}


def test_commands_print_json_only_through_the_console():
    """One place emits JSON on stdout (strict); a command's own json.dumps would not be."""
    from tests.conftest import REPO

    offenders = [
        p.name
        for p in sorted((REPO / "alem_eval" / "commands").glob("*.py"))
        if "json.dump" in p.read_text()
    ]
    assert offenders == []


def test_reporter_in_a_batch_log_throttles_each_task_and_ends_with_its_last_state():
    """Off a terminal a task's line prints at most every ``every_s`` seconds of its clock
    (``force``: always, without resetting the throttle), the newest unprinted one at the
    end; notes print at once."""
    from alem_eval.core.progress import Reporter, err_console

    with err_console.capture() as cap, Reporter(every_s=10.0, live=False) as r:
        for t, force in [(0.0, False), (4.0, False), (5.0, True), (11.0, False), (12.0, False)]:
            r.update(
                "a", description="a", completed=t, total=20, line=f"a {t}", clock=t, force=force
            )
        r.update("b", description="b", completed=1, total=2, line="b 1", clock=12.0)
        r.note("a note")
    assert cap.get().splitlines() == ["a 0.0", "a 5.0", "a 11.0", "b 1", "a note", "a 12.0"]


def test_reporter_steps_callback_waits_every_s_before_its_first_batch_line(monkeypatch):
    """``steps`` makes the ``on_progress(done, total)`` render and dataset export take: a
    line every ``every_s`` seconds from the start (none for a short run)."""
    from alem_eval.core import progress
    from alem_eval.core.progress import Reporter, err_console

    clock = iter([0.0, 1.0, 31.0, 40.0])  # made, then each report
    monkeypatch.setattr(progress.Reporter, "elapsed", lambda self: next(clock))
    with err_console.capture() as cap, Reporter(every_s=30.0, live=False, last_line=False) as r:
        on_progress = r.steps("render", "render steps", lambda d, t, s: f"{d}/{t} at {s:.0f}s")
        for done in (1, 2, 3):
            on_progress(done, 10)
    assert cap.get().splitlines() == ["2/10 at 31s"]


def test_reporter_live_draws_rich_bars_on_the_one_console():
    """Live (a terminal, or Jupyter where rich renders the same Progress as a widget) the
    tasks are rich bars on the stderr console, the batch lines not printed."""
    from alem_eval.core.progress import EpisodeBar, Reporter, err_console
    from alem_eval.evaluate.rollout import RolloutProgress

    with err_console.capture() as cap:
        with Reporter(live=True) as r:
            r.steps("render", "render steps", lambda d, t, s: "a batch line")(3, 10)
        with EpisodeBar("crossplay", live=True) as bar:
            bar.update(RolloutProgress(4, 8, 100, 1.0))
    text = cap.get()
    assert "render steps" in text and "3/10" in text and "a batch line" not in text
    assert "crossplay episodes" in text and "4/8" in text


def test_only_core_progress_draws_progress():
    """Library code and commands report progress through callbacks; the rich bars live in
    alem_eval/core/progress.py, the Hub download bar included."""
    from tests.conftest import REPO

    drawing = sorted(
        str(p.relative_to(REPO))
        for p in (REPO / "alem_eval").rglob("*.py")
        if "rich.progress" in p.read_text()
    )
    assert drawing == ["alem_eval/core/progress.py"]


def test_render_progress_in_a_batch_log_ends_with_the_steps_the_episode_took(monkeypatch):
    """The first step waits for the compile (its line prints after 30 s); the log still
    ends with the whole episode, not at "1 step of at most 40"."""
    from alem_eval.core import progress
    from alem_eval.core.progress import err_console, steps_progress

    clock = iter([0.0, 0.5, 45.0] + [46.0] * 39)  # steps() made, then each report
    monkeypatch.setattr(progress.Reporter, "elapsed", lambda self: next(clock))
    monkeypatch.setattr(progress, "live_display", lambda: False)
    with err_console.capture() as cap, steps_progress("render") as on_progress:
        for done in range(41):
            on_progress(done, 40)
    assert cap.get().splitlines() == [
        "render: 1 step of at most 40, 45s",
        "render: 40 steps of at most 40, 46s",
    ]
