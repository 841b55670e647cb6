"""``alem-eval leaderboard``: md / csv / LaTeX / JSON (upstream entry schema)."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess

import pytest

from alem_eval.analysis.bootstrap import BootstrapSettings
from alem_eval.cli.app import main
from alem_eval.reporting.leaderboard import (
    LEADERBOARD_ENTRY_SCHEMA,
    build_leaderboard,
    render,
    to_entries,
    validate,
)
from alem_eval.analysis.results import ResultsStore

from .synthetic import fill_store

SETTINGS = BootstrapSettings(reps=500)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = ResultsStore(tmp_path_factory.mktemp("results"))
    fill_store(
        s,
        algorithms=["ippo-rnn", "pqn-vdn-rnn"],
        seeds=range(3),
        num_episodes=3,
        skip=["100M/pqn-vdn-rnn/hard"],
    )
    return s


@pytest.fixture(scope="module")
def lb(store):
    return build_leaderboard(store, settings=SETTINGS)


def test_rows_and_missing_cells(lb):
    assert [(r.entry.budget, r.entry.algorithm) for r in lb.rows] == [
        ("100M", "ippo-rnn"),
        ("100M", "pqn-vdn-rnn"),
        ("1B", "ippo-rnn"),
        ("1B", "pqn-vdn-rnn"),
    ]
    assert lb.difficulties == ("easy", "medium", "hard")
    missing = lb.rows[1]
    assert missing.score("hard", "total") is None and missing.score("easy", "total") is not None
    iv = lb.rows[0].score("easy", "base")
    assert 0.1 < iv.point < 0.9 and iv.lo <= iv.point <= iv.hi  # a fraction, not percent


def test_json_entries_validate_against_the_schema(lb):
    entries = json.loads(render(lb, "json"))
    assert len(entries) == 4
    for e in entries:
        assert validate(e) == [], e["id"]
        assert e["type"] == "open-weight" and e["verified"] is False
    by_id = {e["id"]: e for e in entries}
    assert set(by_id) == {"ippo-rnn-100m", "pqn-vdn-rnn-100m", "ippo-rnn-1b", "pqn-vdn-rnn-1b"}
    assert by_id["pqn-vdn-rnn-100m"]["scores"]["hard"] == {
        "base": None,
        "coord": None,
        "total": None,
    }
    mean, lo, hi = by_id["ippo-rnn-1b"]["scores"]["medium"]["total"]
    assert lo <= mean <= hi
    assert by_id["ippo-rnn-1b"]["params"] == 1234  # recorded at scoring time
    assert "3 seeds x 3 episodes" in by_id["ippo-rnn-1b"]["config"]
    assert by_id["ippo-rnn-1b"]["harness_version"].startswith("alem-eval ")


def test_the_validator_rejects_broken_entries(lb):
    good = to_entries(lb)[0]
    assert validate({k: v for k, v in good.items() if k != "family"}) == ["$: missing 'family'"]
    bad = json.loads(json.dumps(good))
    bad["scores"]["easy"]["base"] = [1.0, 2.0]
    assert any("items" in e for e in validate(bad))
    bad["scores"]["easy"]["base"] = [5.0, 6.0, 7.0]
    assert any("ci_low <= mean" in e for e in validate(bad))
    bad = dict(good, type="closed", extra=1)
    assert len(validate(bad)) == 2
    assert LEADERBOARD_ENTRY_SCHEMA["properties"]["scores"]["required"] == [
        "easy",
        "medium",
        "hard",
    ]


def _tabular(tex: str) -> tuple[str, list[list[str]]]:
    body = re.search(r"\\begin\{tabular\}\{([lcr]+)\}(.*)\\end\{tabular\}", tex, re.S)
    assert body, "no tabular environment"
    spec, inner = body.group(1), body.group(2)
    rows = [r.strip() for r in inner.split("\\\\")]
    cells = []
    for r in rows:
        r = re.sub(r"\\(toprule|midrule|bottomrule|cmidrule\(lr\)\{\d+-\d+\})", "", r).strip()
        if r:
            cells.append([c.strip() for c in re.split(r"(?<!\\)&", r)])
    return spec, cells


def test_latex_is_a_booktabs_tabular_with_best_in_bold(lb):
    tex = render(lb, "latex")
    assert tex.count("{") == tex.count("}")
    for rule in ("\\toprule", "\\midrule", "\\bottomrule", "\\cmidrule(lr){3-5}"):
        assert rule in tex
    spec, rows = _tabular(tex)
    ncol = len(spec)
    assert ncol == 2 + 9
    header, *data = rows
    # The first row uses multicolumns (3 x 3 columns); every other row has ncol cells.
    assert sum(int(m) for m in re.findall(r"\\multicolumn\{(\d+)\}", " & ".join(header))) == 9
    assert all(len(r) == ncol for r in data)
    assert data[0][:2] == ["Budget", "Algorithm"] and "Base\\%" in data[0]
    data = data[1:]
    assert data[1][-1] == "--"  # 100M pqn-vdn-rnn hard total: missing, not 0
    for col in range(2, ncol):
        means = [float(re.search(r"(-?\d+\.\d)", r[col]).group(1)) for r in data if r[col] != "--"]
        bold = [float(m) for r in data for m in re.findall(r"\\textbf\{(-?\d+\.\d)\}", r[col])]
        assert bold and all(b == max(means) for b in bold)


def test_latex_compiles_when_a_tex_engine_is_installed(lb, tmp_path):
    engine = shutil.which("pdflatex") or shutil.which("lualatex") or shutil.which("xelatex")
    if engine is None:
        pytest.skip(
            "no TeX engine (pdflatex/lualatex/xelatex) installed; the tabular is "
            "checked structurally instead"
        )
    doc = (
        "\\documentclass{article}\\usepackage{booktabs}\\usepackage[margin=5mm,landscape]"
        "{geometry}\\begin{document}\\tiny\n" + render(lb, "latex") + "\\end{document}\n"
    )
    (tmp_path / "t.tex").write_text(doc)
    proc = subprocess.run(
        [engine, "-interaction=nonstopmode", "-halt-on-error", "t.tex"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]


def test_markdown_and_csv(lb):
    md = render(lb, "md")
    lines = md.splitlines()
    assert lines[0].startswith("| Budget | Algorithm | easy Base% |")
    assert len({line.count("|") for line in lines[:6]}) == 1
    assert "| 100M | pqn-vdn-rnn |" in md and md.count("| – | – | – |") == 1 and "**" in md
    rows = list(csv.DictReader(io.StringIO(render(lb, "csv"))))
    assert len(rows) == 4
    miss = rows[1]
    assert miss["hard_total"] == "" and miss["hard_seeds"] == "" and float(miss["easy_total"]) > 0
    r = rows[0]
    assert float(r["easy_base_lo"]) <= float(r["easy_base"]) <= float(r["easy_base_hi"])
    assert r["easy_seeds"] == "3"


def run(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    out = capsys.readouterr()
    return exc.value.code or 0, out.out, out.err


def test_leaderboard_command(store, tmp_path, capsys):
    out_file = tmp_path / "lb.json"
    code, out, err = run(
        [
            "leaderboard",
            "1B",
            "--results",
            str(store.root),
            "--format",
            "json",
            "--out",
            str(out_file),
            "--reps",
            "300",
        ],
        capsys,
    )
    assert code == 0, err
    entries = json.loads(out_file.read_text())
    assert [e["id"] for e in entries] == ["ippo-rnn-1b", "pqn-vdn-rnn-1b"]
    code, out, err = run(
        ["leaderboard", "--results", str(store.root), "--format", "latex", "--reps", "300"], capsys
    )
    assert code == 0 and out.startswith("% alem-eval leaderboard")
    code, out, err = run(["leaderboard", "--results", str(store.root), "--format", "xls"], capsys)
    assert code == 2 and "--format must be one of" in err and len(err.strip().splitlines()) == 1


def test_a_group_with_one_seed_is_noted_not_passed_off_as_an_interval(lb, tmp_path, capsys):
    assert not [n for n in lb.notes if "one seed" in n]  # three seeds everywhere
    one = ResultsStore(tmp_path / "one")
    fill_store(one, budgets=["1B"], algorithms=["ippo-rnn"], seeds=[0], num_episodes=3)
    fill_store(one, budgets=["1B"], algorithms=["mappo-rnn"], seeds=[0, 1], num_episodes=3)
    board = build_leaderboard(one, settings=SETTINGS)
    (note,) = [n for n in board.notes if "one seed" in n]
    assert note.startswith("3 of 6 groups have one seed (ippo-rnn (1B) easy, ippo-rnn (1B) ")
    iv = board.rows[0].score("easy", "total")
    assert iv.lo == iv.point == iv.hi  # what the note explains
    code, _, err = run(["leaderboard", "--results", str(one.root), "--reps", "300"], capsys)
    assert code == 0 and "3 of 6 groups have one seed" in err


def test_the_interval_is_expanded_by_default_and_percentile_on_request(store, lb, capsys):
    from alem_eval.analysis.bootstrap import expansion

    plain = build_leaderboard(store, settings=BootstrapSettings(reps=500, method="percentile"))
    assert lb.settings.method == "expanded"
    k = expansion(3, 0.95)  # three seeds per group
    for r, p in zip(lb.rows, plain.rows, strict=True):
        iv, ip = r.score("easy", "total"), p.score("easy", "total")
        assert iv.point == ip.point
        assert iv.lo == pytest.approx(max(0.0, iv.point - k * (ip.point - ip.lo)))
        assert iv.hi == pytest.approx(min(100.0, iv.point + k * (ip.hi - ip.point)))
        assert iv.hi - iv.lo > 2 * (ip.hi - ip.lo)  # k = 2.69 with 3 seeds
    for board, name in [(lb, "expanded percentile"), (plain, "plain percentile (rliable's)")]:
        assert f"95% {name} bootstrap CI" in board.config
        assert "each seed scored on the protocol's fixed worlds" in board.config
        assert name in board.to_markdown() and name in board.to_latex()
    base = ["leaderboard", "--results", str(store.root), "--format", "csv", "--reps", "500"]
    code, out, err = run([*base, "--ci", "percentile"], capsys)
    assert code == 0, err
    assert out == plain.to_csv()
    code, out, err = run([*base, "--ci", "bca"], capsys)
    assert code == 2 and "--ci must be one of expanded, percentile" in err
