"""The algorithm registry (one record per algorithm), the config key tables and the typed run config read from a cell's config.json."""
