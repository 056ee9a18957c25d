"""Comparing runs and judging methods: groups of seeds and their pairing, the statistics, the comparison tables
and group reports, and the exports (Markdown, CSV, LaTeX, JSON, TensorBoard).

Imports fairtui.runs and engine.contract; never the launching, tuning, command-line or app packages."""
