"""Metrics, the seeded bootstrap, the results store, aggregation and exports for other tools."""
