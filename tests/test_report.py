"""``alem-eval report``: the Markdown report, its figures and the command."""

from __future__ import annotations

import json

import pytest

from alem_eval.analysis.bootstrap import BootstrapSettings
from alem_eval.cli.app import main
from alem_eval.reporting.figures import FIGURE_FORMATS, FIGURE_KINDS, default_jobs
from alem_eval.reporting.report import build_report
from alem_eval.analysis.results import ResultsStore

from .synthetic import fill_store

SMALL = dict(algorithms=["ippo-rnn", "mappo-rnn"], seeds=range(3), num_episodes=3)


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """A small scored run: 2 budgets x 2 algorithms x 3 difficulties x 3 seeds, one cell missing."""
    store = ResultsStore(tmp_path_factory.mktemp("results"))
    fill_store(store, skip=["100M/mappo-rnn/hard"], **SMALL)
    return store


def run(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    out = capsys.readouterr()
    return exc.value.code or 0, out.out, out.err


@pytest.mark.slow
def test_report_contains_every_expected_figure(scored, tmp_path):
    res = build_report(
        scored, tmp_path / "rep", settings=BootstrapSettings(reps=300), formats=FIGURE_FORMATS
    )
    names = {p.name for p in (tmp_path / "rep" / "figures").iterdir()}
    expected = {f"team_reward_pct_of_max_{k}.{f}" for k in FIGURE_KINDS for f in FIGURE_FORMATS}
    assert names == expected and set(p.name for p in res.figures) == expected
    for p in res.figures:
        head = p.read_bytes()[:8]
        assert head.startswith(b"\x89PNG") if p.suffix == ".png" else head.startswith(b"%PDF")
    md = res.markdown.read_text()
    for kind in FIGURE_KINDS:  # every figure is embedded by a relative link
        assert f"](figures/team_reward_pct_of_max_{kind}.png)" in md
    for heading in (
        "## Headline scores",
        "### Interval estimates",
        "### Probability of improvement",
        "### Performance profiles",
        "### Budget comparison",
        "## Provenance",
    ):
        assert heading in md
    assert "Runs: seeds" in md and "300 replicates" in md
    assert "mappo-rnn (100M) on hard" in md  # the missing cell is named as missing
    hard = md.split("### hard", 1)[1].split("###", 1)[0]
    assert "| 100M | mappo-rnn | – | – |" in hard  # ... and shown as missing, not as zero
    stats = json.loads(res.stats_json.read_text())
    assert stats["settings"]["reps"] == 300
    assert {"budget": "100M", "algorithm": "mappo-rnn", "difficulty": "hard"} in stats["metrics"][
        0
    ]["missing"]


@pytest.mark.slow
def test_figures_drawn_in_worker_processes_equal_those_drawn_in_process(scored, tmp_path):
    """PNG only by default; forked workers write byte-identical files, the same report."""
    assert default_jobs(8) >= 1
    kw = dict(selectors=["*/*/easy,hard"], settings=BootstrapSettings(reps=200))
    serial = build_report(scored, tmp_path / "serial", jobs=1, **kw)
    forked = build_report(scored, tmp_path / "forked", jobs=2, **kw)
    names = [p.name for p in serial.figures]
    assert names == [p.name for p in forked.figures]
    assert names == [f"team_reward_pct_of_max_{k}.png" for k in FIGURE_KINDS]
    for a, b in zip(serial.figures, forked.figures, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name
    undated = [r.markdown.read_text().split("\n", 3)[3] for r in (serial, forked)]
    assert undated[0] == undated[1]  # the report but its "Generated <time>" line
    assert serial.stats_json.read_text() == forked.stats_json.read_text()


def test_single_budget_report_has_no_budget_figure_and_says_so(scored, tmp_path):
    res = build_report(
        scored,
        tmp_path / "rep",
        selectors=["1B/*/hard,easy"],
        metrics=["coord", "Team/achievement_pct"],
        settings=BootstrapSettings(reps=200, runs="episodes"),
        formats=["png"],
    )
    names = {p.name for p in res.figures}
    assert not any("budget_comparison" in n for n in names)
    assert len(names) == 2 * 3
    md = res.markdown.read_text()
    assert "Only one budget (1B)" in md and "Runs: episodes" in md and "### medium" not in md
    # The intervals are named: the method, and that the worlds are the protocol's fixed ones.
    assert "95% expanded percentile CIs" in md and "fixed worlds" in md
    assert "expanded percentile bootstrap over the runs" in md  # the score table's caption
    assert json.loads(res.stats_json.read_text())["settings"]["method"] == "expanded"
    assert res.metrics == ("Team/coord_reward_pct_of_max", "Team/achievement_pct")


@pytest.mark.slow
def test_report_command(scored, tmp_path, capsys):
    code, out, err = run(
        [
            "report",
            "1B/ippo-rnn",
            "100M/ippo-rnn/easy",
            "--results",
            str(scored.root),
            "--out",
            str(tmp_path / "r"),
            "--reps",
            "200",
            "--seed",
            "3",
            "--metric",
            "achievement",
        ],
        capsys,
    )
    assert code == 0, err
    assert out.strip() == str(tmp_path / "r" / "report.md")
    figures = tmp_path / "r" / "figures"
    assert (figures / "team_achievement_pct_interval_estimates.png").is_file()
    assert not list(figures.glob("*.pdf"))  # PDF only with --pdf
    code, out, err = run(
        ["report", "1B/ippo-rnn", "--results", str(scored.root), "--out", str(tmp_path / "p")]
        + ["--reps", "100", "--pdf", "--jobs", "1"],
        capsys,
    )
    assert code == 0, err
    pdf = tmp_path / "p" / "figures" / "team_reward_pct_of_max_interval_estimates.pdf"
    assert pdf.read_bytes().startswith(b"%PDF")


@pytest.mark.parametrize(
    "args, code, msg",
    [
        (["--reps", "0"], 2, "--reps must be"),
        (["--runs", "cells"], 2, "--runs must be"),
        (["--metric", "Team/achievment_pct"], 2, "did you mean Team/achievement_pct"),
        (["nosuchbudget"], 2, "matches no cell"),
    ],
)
def test_report_bad_input_is_one_line(scored, tmp_path, capsys, args, code, msg):
    got, out, err = run(
        ["report", "--results", str(scored.root), "--out", str(tmp_path / "r"), *args], capsys
    )
    assert got == code and msg in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_report_on_an_empty_results_dir(tmp_path, capsys):
    code, out, err = run(
        ["report", "--results", str(tmp_path / "none"), "--out", str(tmp_path / "r")], capsys
    )
    assert code == 1 and "no scored results" in err and len(err.strip().splitlines()) == 1


def test_mixed_protocols_need_a_choice(tmp_path, capsys):
    store = ResultsStore(tmp_path / "res")
    kw = dict(
        budgets=["1B"],
        algorithms=["ippo-rnn"],
        difficulties=["hard"],
        seeds=range(2),
        num_episodes=2,
    )
    fill_store(store, protocol="fast", **kw)
    fill_store(store, protocol="reference", **kw)
    code, _, err = run(
        ["report", "--results", str(store.root), "--out", str(tmp_path / "r")], capsys
    )
    assert code == 2 and "--protocol" in err
    code, out, err = run(
        [
            "report",
            "--results",
            str(store.root),
            "--out",
            str(tmp_path / "r"),
            "--protocol",
            "reference",
            "--reps",
            "100",
        ],
        capsys,
    )
    assert code == 0, err
    assert "protocol `reference`" in (tmp_path / "r" / "report.md").read_text()


def test_report_clips_embed_one_gif_per_algorithm(scored, tmp_path, capsys, monkeypatch):
    """``report --clips``: the first scored cell of each algorithm is drawn (by
    render.algorithm_clips, which tests/test_render.py covers) and embedded in report.md
    after the figures; the cells come from --source."""
    import numpy as np

    from alem_eval.rendering import episode as R

    seen = {}

    def fake_clips(source, cells, out_dir, *, max_steps, on_env_mismatch, **kw):
        seen.update(source=source, cells=sorted(c.id for c in cells), max_steps=max_steps)
        out_dir.mkdir(parents=True)
        clips = {}
        for algorithm in ("ippo-rnn", "mappo-rnn"):
            path = out_dir / f"{algorithm}.gif"
            path.write_bytes(b"GIF89a")
            cell = f"1B/{algorithm}/easy/seed0"
            actions = np.zeros((7, 3), np.int32)
            clips[algorithm] = R.RenderResult(
                path, (cell,) * 3, "easy", 0, 8, 7, True, 1.5, ("COLLECT_WOOD",), actions
            )
        return clips

    monkeypatch.setattr(R, "algorithm_clips", fake_clips)
    out = tmp_path / "rep"
    code, stdout, err = run(
        ["report", "1B", "--results", str(scored.root), "--out", str(out), "--reps", "200"]
        + ["--clips", "--clip-steps", "40"],
        capsys,
    )
    assert code == 0, err
    assert seen["max_steps"] == 40 and type(seen["source"]).__name__ == "HubSource"
    assert seen["cells"] and all(c.startswith("1B/") for c in seen["cells"])
    md = (out / "report.md").read_text()
    episodes = md.split("## Episodes", 1)[1]
    assert "![ippo-rnn](clips/ippo-rnn.gif)" in episodes
    assert "![mappo-rnn](clips/mappo-rnn.gif)" in episodes
    assert "`1B/ippo-rnn/easy/seed0`, easy): 7 steps, 1 team achievements" in episodes
    assert "2 clips in" in " ".join(err.split())


def test_a_markdown_column_with_nothing_scored_is_aligned_as_a_number_column():
    from alem_eval.reporting.markdown import MISSING, md_table

    table = md_table(["cell", "easy", "hard"], [["a", "1.0", MISSING], ["b", "2.0", MISSING]])
    assert table.splitlines()[1] == "| :--- | ---: | ---: |"
