"""The metric registry is the one table of names, labels and scales: score, report,
leaderboard and export all show what it says."""

from __future__ import annotations

import json

import pytest

from alem_eval.analysis import metrics
from alem_eval.analysis.bootstrap import BootstrapSettings
from alem_eval.analysis.interop import export_marl_eval, marl_eval_metric_name
from alem_eval.reporting.leaderboard import SCORE_LABELS, build_leaderboard, render
from alem_eval.analysis.metrics import HEADLINE_METRICS, LEADERBOARD_METRICS, metric_info
from alem_eval.reporting.report import build_report
from alem_eval.analysis.results import ResultsStore

from .synthetic import fill_store

SMALL = dict(
    budgets=["1B"], algorithms=["ippo-rnn"], difficulties=["easy"], seeds=range(2), num_episodes=2
)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    store = ResultsStore(tmp_path_factory.mktemp("results"))
    fill_store(store, **SMALL)
    return store


def test_labels_are_unique_and_fractions_are_shown_in_percent():
    labels = [m.label for m in metrics.METRICS]
    assert len(set(labels)) == len(labels)
    for m in metrics.METRICS:
        assert m.fraction and m.scale == 100.0 and m.label.endswith("%")
    assert metric_info("Team/achievement_pct").label == "Ach%"
    assert metric_info("Team/achievement_pct").format_mean_se(0.1234, 0.01) == "12.34 ± 1.00"


def test_leaderboard_columns_are_the_registry_labels(store):
    lb = build_leaderboard(store, settings=BootstrapSettings(reps=50))
    header = render(lb, "md").splitlines()[0]
    for name, key in LEADERBOARD_METRICS.items():
        assert SCORE_LABELS[name] == metric_info(key).label
        assert f"easy {metric_info(key).label} |" in header


def test_report_headline_table_uses_the_registry_labels(store, tmp_path):
    res = build_report(store, tmp_path / "r", settings=BootstrapSettings(reps=50), formats=["png"])
    md = res.markdown.read_text()
    header = next(ln for ln in md.splitlines() if ln.startswith("| Budget | Algorithm | Seeds"))
    assert [c.strip() for c in header.strip("|").split("|")][3:] == [
        m.label for m in HEADLINE_METRICS
    ]


def test_export_defaults_to_the_headline_metrics_named_by_their_slug(store):
    text, _ = export_marl_eval(store, None)
    run = json.loads(text)["alem"]["easy"]["ippo-rnn_1b"]["seed_0"]["absolute_metrics"]
    assert list(run) == [m.slug for m in HEADLINE_METRICS]
    assert all(marl_eval_metric_name(m.key) == m.slug for m in HEADLINE_METRICS)
