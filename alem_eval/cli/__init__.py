"""The alem-eval command line: thin typer commands over the library API."""
