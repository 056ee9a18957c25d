"""fairtui: a terminal experiment manager for fairness-aware adversarial training."""

__version__ = "0.1.0"
