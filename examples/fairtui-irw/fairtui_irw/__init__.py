"""Inverse-robustness re-weighting on PGD-AT: an example of a fairtui method in its own package.

After every epoch, each class's weight becomes proportional to the inverse of its validation robust
accuracy (floored at ``floor``), normalised to mean 1, and smoothed with ``momentum``:

    w_k <- momentum * w_k + (1 - momentum) * K * (1 / max(a_k, floor)) / sum_j (1 / max(a_j, floor))

and the next epoch trains with the loss (1/B) sum_i w_{y_i} CE(f(x'_i), y_i) on PGD examples x'.
A class without validation samples keeps its weight. (A plain re-weighting baseline, in the family
of FRL's "Baseline Reweight"; it is here to show the interface, not as a recommended method.)

The package's `__init__` imports nothing: fairtui reads the method's params (`fairtui_irw.params`, torch-free)
without importing the method (`fairtui_irw.method`, torch).
"""
