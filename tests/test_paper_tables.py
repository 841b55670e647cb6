"""Tables a paper can take as they are: the leaderboard's, the scenario's and the cross-play
ones in Markdown and LaTeX (columns chosen, strict-best bold, never ``-0.0``, a note on
zero-width intervals, caption / label / decimals / ci), ``leaderboard(runs="episodes")``
and ``--format md|latex`` on ``scenario`` and ``crossplay`` (no JAX: synthetic results)."""

from __future__ import annotations

import re

import pytest

import alem_eval
from alem_eval.analysis.bootstrap import BootstrapSettings
from alem_eval.analysis.metrics import BASE, COORD, TOTAL
from alem_eval.analysis.result_keys import build_rows
from alem_eval.analysis.results import ResultsStore, ResultsWarning
from alem_eval.api.crossplay import CrossPlay
from alem_eval.api.scenario import Scenario
from alem_eval.cli.app import main
from alem_eval.core.errors import UsageError
from alem_eval.core.tables import Estimate, PaperTable, fmt_number
from alem_eval.reporting.leaderboard import build_leaderboard

from .synthetic import fill_store, key_for, synthetic_crossplay, synthetic_scenario

SETTINGS = BootstrapSettings(reps=300)
NEG_ZERO = re.compile(r"(?<![\d.])-0\.0+(?!\d*[1-9])")  # -0.0, -0.00, never -0.01


def _table(values, **kw) -> PaperTable:
    return PaperTable(
        columns=("name", "x"),
        rows=tuple((f"r{i}", v) for i, v in enumerate(values)),
        best="max",
        **kw,
    )


# ----------------------------------------------------------------------------------------
# The one renderer
# ----------------------------------------------------------------------------------------
def test_numbers_never_print_negative_zero():
    assert fmt_number(-0.04, 1) == "0.0" and fmt_number(-0.0, 2) == "0.00"
    assert fmt_number(-0.06, 1) == "-0.1" and fmt_number(0.0449, 2) == "0.04"
    t = _table([Estimate(-0.01, -0.04, 0.02), Estimate(1.0, 0.5, 1.5)])
    for text in (t.to_markdown(), t.to_latex()):
        assert not NEG_ZERO.search(text), text
        assert "0.0" in text


def test_only_a_strict_best_is_bold_never_a_tie_or_a_column_of_one_value():
    strict = _table([Estimate(1.0, 0.5, 1.5), Estimate(2.0, 1.5, 2.5)])
    assert "| r1 | **2.0** [1.5, 2.5] |" in strict.to_markdown()
    assert "\\textbf{2.0}" in strict.to_latex() and strict.to_latex().count("\\textbf") == 1
    tie = _table([Estimate(2.0, 1.5, 2.5), Estimate(2.04, 1.5, 2.5), Estimate(1.0, 0.5, 1.5)])
    zeros = _table([Estimate(0.0, 0.0, 0.0), Estimate(0.0, 0.0, 0.0)])
    alone = _table([Estimate(3.0, 2.0, 4.0), None])
    for t in (tie, zeros, alone):
        assert "**" not in t.to_markdown() and "\\textbf" not in t.to_latex()


def test_a_zero_width_or_missing_interval_is_marked_and_explained_in_the_footer():
    flat = _table([Estimate(3.0, 3.0, 3.0), Estimate(2.0, 1.0, 2.5)], notes=("In percent.",))
    md = flat.to_markdown()
    assert "| r0 | **3.0**† [3.0, 3.0] |" in md and "| r1 | 2.0 [1.0, 2.5] |" in md
    assert md.rstrip().endswith(flat.zero_width_note) and "In percent." in md
    tex = flat.to_latex()
    assert "3.0}\\textsuperscript{\\dag}" in tex and "\\footnotesize In percent." in tex
    none = _table([Estimate(3.0), Estimate(2.0, 1.0, 2.5)])  # NaN bounds: no interval
    assert "| r0 | **3.0**† |" in none.to_markdown()
    clean = _table([Estimate(3.0, 2.0, 4.0), Estimate(2.0, 1.0, 2.5)])
    assert "†" not in clean.to_markdown() and "\\dag" not in clean.to_latex()


def test_caption_label_decimals_and_ci():
    t = _table([Estimate(1.234, 1.0, 1.5)], caption="Scores", label="tab:s", decimals=2, ci=False)
    md, tex = t.to_markdown(), t.to_latex()
    assert md.startswith("Table: Scores {#tab:s}\n") and "| r0 | 1.23 |" in md
    assert "\\caption{Scores}" in tex and "\\label{tab:s}" in tex and "r0 & 1.23 \\\\" in tex
    with pytest.raises(UsageError, match="decimals"):
        _table([Estimate(1.0)], decimals=-1)


# ----------------------------------------------------------------------------------------
# The leaderboard
# ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def easy_store(tmp_path_factory):
    """Two algorithms scored on easy only (3 seeds), Coord forced to 0 everywhere."""
    store = ResultsStore(tmp_path_factory.mktemp("easy"))
    fill_store(
        store,
        budgets=["1B"],
        algorithms=["ippo-rnn", "mappo-rnn"],
        difficulties=["easy"],
        seeds=range(3),
        num_episodes=3,
    )
    for seed in range(3):  # a third entry whose Coord is 0 (as the released agents' often is)
        key = key_for("1B", "pqn-vdn-rnn", "easy", seed, num_episodes=3)
        recs = [{BASE: 0.3 + 0.01 * seed, COORD: 0.0, TOTAL: 0.17 + 0.01 * seed}] * 3
        store.write(build_rows(key, recs, jax_version="0.4.38"), key)
    return store


@pytest.fixture(scope="module")
def board(easy_store):
    return build_leaderboard(easy_store, settings=SETTINGS)


def _header_and_rows(tex: str) -> tuple[str, list[list[str]]]:
    spec, inner = re.search(r"\\begin\{tabular\}\{(\w+)\}(.*)\\end\{tabular\}", tex, re.S).groups()
    rows = []
    for r in inner.split("\\\\"):
        r = re.sub(r"\\(toprule|midrule|bottomrule|cmidrule\(lr\)\{\d+-\d+\})", "", r).strip()
        if r:
            rows.append([c.strip() for c in re.split(r"(?<!\\)&", r)])
    return spec, rows


def test_unscored_difficulties_are_left_out_unless_named(board):
    spec, rows = _header_and_rows(board.to_latex())
    assert spec == "ll" + "c" * 3 and "\\multicolumn{3}{c}{easy}" in rows[0][2]
    assert "medium" not in board.to_markdown() and "hard" not in board.to_latex()
    named = board.to_markdown(difficulties=["easy", "hard"])
    assert "| hard Total% |" in named and named.count("| – | – | – |") == 3
    with pytest.raises(UsageError, match="difficulty must be among"):
        board.to_latex(difficulties=["expert"])


def test_metrics_decimals_caption_label_and_ci(board):
    tex = board.to_latex(metrics=["total"], decimals=2, caption="RL baselines", label="tab:rl")
    spec, rows = _header_and_rows(tex)
    assert spec == "llc" and rows[1] == ["Budget", "Algorithm", "Total\\%"]
    assert "\\caption{RL baselines}" in tex and "\\label{tab:rl}" in tex
    assert all(re.match(r"^(\\textbf\{)?\d+\.\d\d\b", r[2]) for r in rows[2:])
    plain = board.to_markdown(metrics=["Base%", "coord"], ci=False)
    assert plain.splitlines()[0] == "| Budget | Algorithm | easy Base% | easy Coord% |"
    assert "[" not in plain.split("\n\n")[0]
    with pytest.raises(UsageError, match="choose among base, coord, total"):
        board.to_markdown(metrics=["achievement"])


def test_a_column_of_zeros_is_never_bold_and_never_negative_zero(board):
    md = board.to_markdown(metrics=["coord", "total"])
    coord = [line.split("|")[3].strip() for line in md.splitlines()[2:5]]
    assert coord[2] == "0.0† [0.0, 0.0]" and "**" not in coord[2]
    assert sum("**" in line.split("|")[4] for line in md.splitlines()[2:5]) == 1  # Total
    assert not NEG_ZERO.search(md) and not NEG_ZERO.search(board.to_latex())
    assert "† zero-width interval" in md and "\\dag{} zero-width" not in board.to_latex()
    assert "\\textsuperscript{\\dag} zero-width interval" in board.to_latex()


def test_the_footer_names_the_method_and_the_unit(board):
    md = board.to_markdown()
    foot = md.split("\n\n")[1]
    assert foot.startswith("Mean over seeds [95% CI], in percent;")
    assert "expanded percentile bootstrap CI (300 reps, seed 0)" in foot
    assert "over the training seeds, each seed scored on the protocol's fixed worlds" in foot
    assert board.footer_notes()[0] in md  # one list of lines, shared by both renderers
    assert latex_note(board.footer_notes()[0]) in board.to_latex()


def latex_note(text: str) -> str:
    return text.replace("%", "\\%")


def test_leaderboard_runs_episodes_gives_single_seed_cells_an_interval(tmp_path, capsys):
    one = ResultsStore(tmp_path / "one")
    fill_store(
        one,
        budgets=["1B"],
        algorithms=["ippo-rnn", "mappo-rnn"],
        difficulties=["easy"],
        seeds=[0],
        num_episodes=5,
    )
    seeds = alem_eval.leaderboard(store=one.root, reps=300)
    episodes = alem_eval.leaderboard(store=one.root, reps=300, runs="episodes")
    iv = seeds.rows[0].score("easy", "total")
    assert iv.lo == iv.hi and "†" in seeds.to_markdown()
    iv = episodes.rows[0].score("easy", "total")
    assert iv.lo < iv.point < iv.hi and "†" not in episodes.to_markdown()
    assert "Mean over episodes (every episode a run)" in episodes.to_markdown()
    assert not [n for n in episodes.notes if "one seed" in n]
    with pytest.raises(SystemExit) as exc:
        main(["leaderboard", "--results", str(one.root), "--reps", "300", "--runs", "episodes"])
    out = capsys.readouterr()
    assert exc.value.code in (0, None) and "mean over episodes" in out.out
    assert "†" not in out.out and "one seed" not in out.err


# ----------------------------------------------------------------------------------------
# Scenario and cross-play
# ----------------------------------------------------------------------------------------
def test_scenario_tables_in_percent_with_the_worlds_interval():
    s = synthetic_scenario(4)
    md = s.to_markdown()
    assert md.splitlines()[0] == (
        "| Population | Mode | Metric | Focal | Self-play | Cross-play | Focal - self |"
    )
    row = s.rows[0]
    first = md.splitlines()[2]
    assert first.startswith(
        f"| 1B/ippo-rnn/hard | visitor | Total% | {row.focal.point * 100:.1f} ["
    )
    assert "in percent" in md and "4 worlds" in md and "†" not in md and "**" not in md
    tex = s.to_latex(metrics=["total"], decimals=2, caption="With the baselines", label="tab:s")
    spec, rows = _header_and_rows(tex)
    assert spec == "lllcccc" and len(rows) == 1 + 4  # header + 2 populations x 2 modes
    assert "\\caption{With the baselines}" in tex and "\\label{tab:s}" in tex
    assert all(r[2] == "Total\\%" for r in rows[1:])
    assert "[" not in s.to_markdown(ci=False).split("\n\n")[0]
    assert not NEG_ZERO.search(md + tex)
    api = Scenario(s)  # what alem_eval.scenario returns
    assert api.to_latex(metrics=["total"]) == s.to_latex(metrics=["total"])
    assert api.to_markdown(decimals=2) == s.to_markdown(decimals=2)


def test_one_world_gives_no_interval_and_the_note_says_so():
    s = synthetic_scenario(1)
    md = s.to_markdown(metrics=["coord"])
    assert "[" not in md.split("\n\n")[0] and md.count("†") == 4 * 4 + 1
    assert "fewer than 2 worlds" in md and "1 world " in md
    with pytest.warns(ResultsWarning, match="no interval from 1 episode"):
        c = synthetic_crossplay(1)
    assert "fewer than 2 worlds" in c.to_markdown() and "\\dag" in c.to_latex()


def test_crossplay_gap_and_matrix_tables():
    c = synthetic_crossplay(4)
    md = c.to_markdown()
    assert (
        md.splitlines()[0]
        == "| Metric | Self-play | Cross-play | Gap (self - cross) | Teams | Worlds |"
    )
    g = c.gaps[0]
    assert md.splitlines()[2].startswith(f"| Total% | {fmt_number(g.self_score * 100)} |")
    assert "runs = teams" in md and "in percent" in md
    m = c.to_latex("matrix", caption="Pair matrix", label="tab:pm")
    spec, rows = _header_and_rows(m)
    assert spec == "lccc" and rows[0][1:] == [
        "ippo-rnn/hard/seed0",
        "ippo-rnn/hard/seed1",
        "mappo-rnn/hard/seed0",
    ]
    assert rows[1][1] == fmt_number(c.matrix.values[0, 0] * 100) and "Cells 1B/..." in m
    assert c.to_markdown(metrics=["base"]).count("| Base% |") == 1
    with pytest.raises(UsageError, match="table must be one of gap, matrix"):
        c.to_latex("heatmap")
    api = CrossPlay(c)  # what alem_eval.crossplay returns
    assert api.to_markdown("matrix", decimals=2) == c.to_markdown("matrix", decimals=2)
    assert api.to_latex(ci=False) == c.to_latex(ci=False)


def _stub_cli(monkeypatch, module, name, result):
    import alem_eval.core.runtime as runtime
    from alem_eval.cli.app import _register

    monkeypatch.setattr(module, name, lambda *a, **k: result)
    monkeypatch.setattr(runtime, "enable_compilation_cache", lambda *a, **k: None)
    _register()


@pytest.mark.parametrize("fmt", ["md", "latex"])
def test_scenario_and_crossplay_commands_print_the_paper_tables(fmt, monkeypatch, tmp_path):
    from typer.testing import CliRunner

    import alem_eval.scoring.crossplay as crossplay_module
    import alem_eval.scoring.scenario as scenario_module
    from alem_eval.cli.app import app

    s, c = synthetic_scenario(4), synthetic_crossplay(4)
    src = ["--source", "demo", "--format", fmt]
    _stub_cli(monkeypatch, scenario_module, "run_scenario", s)
    out = CliRunner().invoke(app, ["scenario", *src, "--out", str(tmp_path / "s")])
    assert out.exit_code == 0, out.output
    assert (s.to_markdown() if fmt == "md" else s.to_latex()) in out.stdout
    _stub_cli(monkeypatch, crossplay_module, "run_crossplay", c)
    out = CliRunner().invoke(app, ["crossplay", *src, "--out", str(tmp_path / "c")])
    assert out.exit_code == 0, out.output
    for table in ("gap", "matrix"):
        assert (c.to_markdown(table) if fmt == "md" else c.to_latex(table)) in out.stdout


def test_the_terminal_tables_mark_a_missing_interval_and_print_the_note(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    import alem_eval.scoring.crossplay as crossplay_module
    import alem_eval.scoring.scenario as scenario_module
    from alem_eval.cli.app import app

    s = synthetic_scenario(1)
    _stub_cli(monkeypatch, scenario_module, "run_scenario", s)
    out = CliRunner().invoke(app, ["scenario", "--source", "demo", "--out", str(tmp_path / "s")])
    assert out.exit_code == 0, out.output
    assert "[no CI]†" in out.output and "fewer than 2 worlds" in out.output
    with pytest.warns(ResultsWarning):
        c = synthetic_crossplay(1)
    _stub_cli(monkeypatch, crossplay_module, "run_crossplay", c)
    out = CliRunner().invoke(app, ["crossplay", "--source", "demo", "--out", str(tmp_path / "c")])
    assert out.exit_code == 0, out.output
    assert "[no CI]†" in out.output and "fewer than 2 worlds" in out.output
    _stub_cli(monkeypatch, crossplay_module, "run_crossplay", synthetic_crossplay(4))
    out = CliRunner().invoke(app, ["crossplay", "--source", "demo", "--out", str(tmp_path / "d")])
    assert out.exit_code == 0 and "†" not in out.output
