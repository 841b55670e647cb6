"""Metrics, the seeded bootstrap, the results store (``results``; its keys, columns and rows: ``result_keys``), aggregation and exports for other tools."""
