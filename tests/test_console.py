"""Data output: tables piped or redirected are never truncated."""

from alem_eval.console import OutputFormat, emit_records


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
