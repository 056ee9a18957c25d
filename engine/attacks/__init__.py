"""The attacks: each one object or function, settings at construction, perturb(x, y) -> x_adv (PGD with per-sample
eps, the TRADES attack, AutoAttack's adapter, the random starts); picked from the registry in engine.contract.attacks.

May import data, models, runtime and contract; never methods, evaluation, training or the entry points.
"""
