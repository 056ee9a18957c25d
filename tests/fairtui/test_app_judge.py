"""The judge screen (Pilot): a judgement started from the launch dialog's "judge against" field trains both sides,
shows each seed's runs and the forest of paired differences as they land, ends with the verdict, and reopens from
the runs screen (j) without training anything again."""

from engine.contract.profile_io import read_toml
from fairtui.app import make_app
from tests.conftest import HANG_S, ROOT, TINY
from tests.fairtui.app_helpers import engine_on_path, wait_until  # noqa: F401,F811 (fixtures)


async def test_judge_from_the_launch_dialog_and_reopen_it_with_j(tmp_path, engine_on_path):  # noqa: F811
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    method = TINY.replace('name = "tiny"', 'name = "tinytrades"').replace('name = "pgd_at"', 'name = "trades"')
    (profiles / "tinytrades.toml").write_text(method)
    (tmp_path / "base.toml").write_text(TINY.replace('name = "tiny"', 'name = "tinybase"'))
    home = tmp_path / "home"
    app = make_app(home=home, profiles_dir=profiles, gpu_inventory=lambda: [], poll_interval=0.2, queue_worker=False)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("n")
        await pilot.pause()
        await pilot.press("enter", "tab", "tab", "tab", "tab", "2", "tab", *str(tmp_path / "base.toml"))
        await pilot.press("ctrl+l")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "JudgeScreen", timeout=HANG_S)
        title = app.screen.query_one("#judge-title")
        await wait_until(pilot, lambda: "verdict" in str(title.render()), timeout=HANG_S)
        assert "tinytrades against tinybase (fixed seeds): verdict" in str(title.render())
        forest = str(app.screen.query_one("#judge-forest").render())
        assert "seed 0" in forest and "seed 1" in forest and "mean" in forest and "verdict: " in forest
        # drawn as rows (#83 item 8): never a literal backslash-n between them
        assert "\\n" not in forest and forest.index("seed 1") > forest.index("\n") > forest.index("seed 0")
        table = app.screen.query_one("#judge-runs")
        assert table.row_count == 2 and all(table.get_row_at(i)[1] == "completed" for i in range(2))
        runs = sorted((home / "runs").iterdir())
        assert len(runs) == 4  # two seeds of each side, each one thread
        assert {read_toml(r / "profile.toml")["train"]["threads"] for r in runs} == {1}
        await pilot.press("escape")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "RunsScreen", timeout=HANG_S)
        await wait_until(pilot, lambda: app.screen.query_one("DataTable").row_count == 4, timeout=HANG_S)
        await pilot.press("j")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "JudgeScreen", timeout=HANG_S)
        title = app.screen.query_one("#judge-title")
        await wait_until(pilot, lambda: "verdict" in str(title.render()), timeout=HANG_S)
    assert sorted((home / "runs").iterdir()) == runs  # reopened: nothing trained again


async def test_the_committed_baselines_open_in_the_app_read_only(tmp_path):
    """#73 item 4: `fairtui --results DIR` lists the committed runs beside the home's, opens them, and refuses to
    stop, resume, tag or delete them; `compare --results ... --by profile --tui` opens the groups view."""
    import hashlib

    from fairtui.runs.synthetic import make_run

    results = ROOT / "experiments" / "results" / "judge-digits-dafa"
    before = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(results.rglob("*")) if p.is_file())).hexdigest()
    home = tmp_path / "home"
    make_run(home, "20260101-000000-mine01", name="mine")
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2, queue_worker=False,
                   results=[str(results)])
    async with app.run_test(size=(100, 40)) as pilot:
        table = app.screen.query_one("DataTable")
        await wait_until(pilot, lambda: table.row_count == 16, timeout=HANG_S)  # 15 committed runs and the home's
        screen = app.screen
        committed = next(d["run_id"] for d in screen.visible() if "committed" in d.get("tags", []))
        table.move_cursor(row=[d["run_id"] for d in screen.visible()].index(committed))
        await pilot.pause()
        await pilot.press("d", "t", "s")
        await pilot.pause(0.3)
        assert type(app.screen).__name__ == "RunsScreen"  # no dialog opened for a committed run
        await pilot.press("enter")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "RunScreen", timeout=HANG_S)
        # its screen offers nothing that writes: no `s stop`, no `e eval` in the footer, and the keys do nothing
        footer = lambda: {k.action for k in app.screen.query("FooterKey")}  # noqa: E731
        await wait_until(pilot, lambda: "app.pop_screen" in footer(), timeout=HANG_S)
        assert {"stop", "evaluate"}.isdisjoint(footer()) and "results" in footer()
        said = len(app._notifications)  # the runs screen's "read only" for d, t and s
        await pilot.press("s", "e", "r", "a")
        await pilot.pause(0.3)
        assert type(app.screen).__name__ == "RunScreen" and len(app._notifications) == said
    after = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(results.rglob("*")) if p.is_file())).hexdigest()
    assert after == before
    ids = [p.name for side in ("digits-dafa", "digits-trades") for p in sorted((results / side).iterdir())[:2]]
    grouped = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2,
                       queue_worker=False, results=[str(results)], compare=ids, compare_groups=True)
    async with grouped.run_test(size=(100, 40)) as pilot:
        await wait_until(pilot, lambda: type(grouped.screen).__name__ == "CompareScreen", timeout=HANG_S)
        await wait_until(pilot, lambda: grouped.screen.group_comparison is not None, timeout=HANG_S)
        labels = [g.label for g in grouped.screen.group_comparison.groups]
        assert sorted(labels) == ["digits-dafa", "digits-trades"]  # the groups view, drawn from the committed runs


async def test_the_compare_screen_opens_the_quick_protocol_at_its_headline_checkpoint_and_baseline(tmp_path):
    """#88 item 1: the quick protocol's runs are evaluated at `last` only, and the compare screen read them at best
    ("no run of any group has a robust result at best"); it now reads each run at its headline checkpoint, keeps
    --baseline from the command line, and c moves to the next checkpoint at hand."""
    results = ROOT / "experiments" / "results" / "cifar10-cpu-quick"
    ids = [p.name for side in ("cifar10-cpu-quick-at", "cifar10-cpu-quick-trades") for p in
           sorted((results / side).iterdir())[:3]]
    app = make_app(home=tmp_path / "home", profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2,
                   queue_worker=False, results=[str(results)], compare=ids, compare_groups=True,
                   compare_options={"baseline_label": "cifar10-cpu-quick-trades", "checkpoint": None})
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_until(pilot, lambda: type(app.screen).__name__ == "CompareScreen", timeout=HANG_S)
        await wait_until(pilot, lambda: app.screen.group_comparison is not None, timeout=HANG_S)
        cmp = app.screen.group_comparison
        assert cmp.checkpoint == "last" and cmp.baseline == "cifar10-cpu-quick-trades"
        title = str(app.screen.query_one("#compare-title").render())
        assert "at last; baseline cifar10-cpu-quick-trades" in title and "c: checkpoint" in title
        await pilot.press("c")  # the only checkpoint at hand: it stays, and the screen is drawn again
        await pilot.pause(0.3)
        assert app.screen.checkpoint == "last" and app.screen.group_comparison.checkpoint == "last"


async def test_a_table_of_methods_reopens_as_its_family_from_a_method_run_or_the_shared_baseline(tmp_path):
    """#87 item 3: j on any run of a family judgement (a method's, or the baseline's it shares) opens the family:
    a column a method, the shared baseline, and the family's table; reopening trains nothing."""
    import json

    from tests.conftest import fairtui_cmd
    from tests.fairtui.test_family import write_profiles

    methods, base = write_profiles(tmp_path)
    home = tmp_path / "home"
    out = fairtui_cmd("judge", str(methods[0]), str(methods[2]), "--baseline", str(base), "--seeds", "0-1", home=home)
    assert out.returncode == 0, out.stderr
    runs = sorted((home / "runs").iterdir())
    assert len(runs) == 6  # two methods and the shared baseline, two seeds each
    roles = {json.loads((r / "meta.json").read_text())["judge"]["role"]: r.name for r in runs}
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2, queue_worker=False)
    async with app.run_test(size=(120, 40)) as pilot:
        for role in ("method", "baseline"):
            screen = app.screen
            await wait_until(pilot, lambda: screen.query_one("DataTable").row_count == 6, timeout=HANG_S)
            screen.query_one("DataTable").move_cursor(row=[d["run_id"] for d in screen.visible()].index(roles[role]))
            await pilot.pause()
            await pilot.press("j")
            await wait_until(pilot, lambda: type(app.screen).__name__ == "JudgeScreen", timeout=HANG_S)
            title = app.screen.query_one("#judge-title")
            await wait_until(pilot, lambda: "verdict" in str(title.render()), timeout=HANG_S)
            assert "judge family" in str(title.render()) and "2 methods against tinybase" in str(title.render())
            table = app.screen.query_one("#judge-runs")
            assert [str(c.label) for c in table.columns.values()] == ["seed", "tinytrades", "tinytrades3", "baseline"]
            assert table.row_count == 2 and all(c == "completed" for i in range(2) for c in table.get_row_at(i)[1:])
            forest = str(app.screen.query_one("#judge-forest").render())
            assert "| tinytrades3 |" in forest and "Holm" in forest
            await pilot.press("escape")
            await wait_until(pilot, lambda: type(app.screen).__name__ == "RunsScreen", timeout=HANG_S)
    assert sorted((home / "runs").iterdir()) == runs  # reopened: nothing trained again
