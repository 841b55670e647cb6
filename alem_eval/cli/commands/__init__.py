"""One module per CLI command; each registers itself on :data:`alem_eval.cli.app.app`."""
