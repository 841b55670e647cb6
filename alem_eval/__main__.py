"""``python -m alem_eval`` runs the CLI."""

from alem_eval.cli import main

main()
