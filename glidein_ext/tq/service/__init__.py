"""The Task Queue service: what `glidein-ext tq serve` runs (API, store, matcher, loops)."""
