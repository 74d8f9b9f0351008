"""From result rows to what people read. ``aggregate`` is the pipeline, one module per job:
``frame`` (rows read, normalised, flagged, split by mode), ``gate`` (the reference rule and the
equal-quality gate), ``pricing`` (package hour, $/Mtok, quality classes, cheapest passing),
``pareto``, ``effects``; then ``energy``, ``regressions`` (error analysis), ``compare`` (two
runs), ``site`` (many runs), ``publish`` (files). Modes' own tables: their `price` and `report`
parts, reached through ``harness.modes``."""
