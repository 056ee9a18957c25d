"""Limits on what the command line and the app draw, shared by both (no imports: the CLI loads it at start)."""

SHOW_EXPLORATORY = 8  # exploratory tables drawn by default: a run evaluated many ways prints pages otherwise
