"""Leaderboards and reports (tables, figures, markdown and LaTeX) from the results store."""
