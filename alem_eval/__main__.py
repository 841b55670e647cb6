"""``python -m alem_eval`` runs the CLI."""

from alem_eval.cli.app import run

run()
