"""Where runs live and how they are read: the home and its index, a run's folder, its live state and digest,
which runs are one configuration, the per-run report, and the inert rendering of user text.

The bottom layer: it imports engine.contract and nothing else of fairtui."""
