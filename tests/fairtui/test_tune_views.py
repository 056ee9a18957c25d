"""A study as fairtui shows it: `fairtui plot study` draws its objective over the trials and a parameter's effect,
and the app opens a study from one of its trials' runs."""

from __future__ import annotations

import pytest

from tests.conftest import fairtui_cmd

optuna = pytest.importorskip("optuna")

from fairtui.tune import study as t  # noqa: E402
from fairtui.tune import space as ts  # noqa: E402


def test_plot_study_draws_the_objective_over_trials_and_a_parameters_effect(tmp_path, tiny_profile):
    """`fairtui plot study STUDY`: a figure of a study's trials (here made directly in its storage: completed,
    pruned and failed), and one line for a parameter the study does not search."""
    pytest.importorskip("matplotlib")
    home = tmp_path / "home"
    _made_study(home, tiny_profile, [f"r{i}" for i in range(4)])
    out = tmp_path / "study.png"
    proc = fairtui_cmd("plot", "study", "fig", "-o", str(out), "--key", "attack.steps", home=home)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = fairtui_cmd("plot", "study", "fig", "-o", str(tmp_path / "b.png"), "--key", "train.momentum", home=home)
    assert bad.returncode == 2 and "--key 'train.momentum' is not one" in bad.stderr
    none = fairtui_cmd("plot", "study", "nope", "-o", str(tmp_path / "c.png"), home=home)
    assert none.returncode == 2 and "no study 'nope'" in none.stderr


def _made_study(home, tiny_profile, run_ids):
    """A study whose four trials are made directly in its storage: completed (0.3, 0.4), pruned, failed."""
    req = t.Request(home=home, study="fig", profile_path=str(tiny_profile()),
                    space=[ts.parse_dimension("train.lr=0.01:0.1:log"), ts.parse_dimension("attack.steps=2,3")],
                    trials=4, objective=ts.Objective("worst"))
    study = t.create(req)
    dists = {"train.lr": optuna.distributions.FloatDistribution(0.01, 0.1, log=True),
             "attack.steps": optuna.distributions.CategoricalDistribution([2, 3])}
    states = optuna.trial.TrialState
    for i, (lr, steps, value, state) in enumerate([(0.02, 2, 0.3, states.COMPLETE), (0.05, 3, 0.4, states.COMPLETE),
                                                   (0.08, 2, None, states.PRUNED), (0.03, 3, None, states.FAIL)]):
        study.add_trial(optuna.trial.create_trial(params={"train.lr": lr, "attack.steps": steps}, distributions=dists,
                                                  value=value, state=state, user_attrs={"run_id": run_ids[i]}))


async def test_the_app_shows_a_study_from_one_of_its_trials(tmp_path, tiny_profile):
    """`y` on a trial's run opens its study: a row per trial with the best marked, the objective and the best so
    far as a plot, and enter on a trial opens its run; `y` on a run of no study says so."""
    from textual.widgets import DataTable

    from fairtui.app import make_app
    from fairtui.app.screens.run import RunScreen
    from fairtui.app.screens.study import StudyScreen
    from fairtui.app.widgets.plot import LinePlot
    from fairtui.runs.synthetic import make_run
    from tests.fairtui.test_app import wait_until

    home = tmp_path / "home"
    ids = [f"20260101-00000{i}-trial{i}" for i in range(4)]
    for i, run_id in enumerate(ids):
        make_run(home, run_id, name=f"fig-t{i}", tags=("study:fig", f"trial:{i}"))
    make_run(home, "20260102-000000-plain0", name="plain")
    _made_study(home, tiny_profile, ids)
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2, queue_worker=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.screen.query_one(DataTable).row_count == 5)
        await pilot.press("y")  # the newest run, first: the plain one
        await wait_until(pilot, lambda: any("not a trial" in str(n.message) for n in app._notifications))
        await pilot.press("down", "y")
        await wait_until(pilot, lambda: isinstance(app.screen, StudyScreen)
                         and app.screen.query_one(DataTable).row_count == 4)
        table = app.screen.query_one(DataTable)
        rows = [table.get_row_at(r) for r in range(4)]
        assert [r[0] for r in rows] == ["", "*", "", ""]  # the best so far: trial 1
        assert [r[2] for r in rows] == ["complete", "complete", "pruned", "fail"]
        assert [r[3] for r in rows] == ["30.0", "40.0", "-", "-"]
        plot = app.screen.query_one(LinePlot)
        assert plot.series == [[30.0, 40.0, None, None], [30.0, 40.0, 40.0, 40.0]]
        assert "best: trial 1 (40.0)" in str(app.screen.query_one("#study-title").render())
        await pilot.press("down", "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen))
        assert app.screen.run_id == ids[1]
