"""The bottom layer: errors, files, paths, JSON, tables for people (Markdown, LaTeX), the JAX runtime (cache, host devices), versions and provenance stamps. Imports nothing else of alem_eval."""
