"""Leaderboards and reports (tables, figures, markdown and LaTeX) from the results store.

* :mod:`alem_eval.reporting.leaderboard`: ``build_leaderboard`` and its Markdown / CSV /
  LaTeX / JSON renderings.
* :mod:`alem_eval.reporting.report`: ``build_report`` (``report.md``, ``stats.json``,
  ``figures/``, optional episode clips), ``ReportResult``, ``ClipRequest``.
* :mod:`alem_eval.reporting.figures`: the report's figures (``FIGURE_KINDS``), drawn in
  worker processes (``render_figures``).
* :mod:`alem_eval.reporting.markdown`: the text of ``report.md`` (its tables:
  :mod:`alem_eval.core.tables`, shared with the leaderboard, scenario and cross-play).
"""
