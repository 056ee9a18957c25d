"""The engine's process entry points: `python -m engine train|eval|import RUN_DIR` (run), a training run from
its first start to its final evaluation (train_run), an evaluation of a finished run (eval_run), an imported model
(imported), and the supervisor that starts a run's ranks and says what happens when one dies (supervisor).

May import everything of the engine below it: training, evaluation, methods, attacks, data, models, runtime and
contract. Nothing imports it but ``engine.__main__``.
"""
