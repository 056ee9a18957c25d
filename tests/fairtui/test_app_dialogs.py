"""The app's dialogs, driven with Pilot: launch errors, notes and tags, evaluate, export, help."""

import json
from pathlib import Path

import pytest

from fairtui.app import make_app
from fairtui.runs.synthetic import make_run
from tests.fairtui.app_helpers import FAKE_GPUS, engine_on_path, profiles, wait_until  # noqa: F401 (fixtures)


async def test_launch_dialog_errors_are_visible_at_80x24(tmp_path, profiles):
    home = tmp_path / "home"
    app = make_app(home=home, profiles_dir=profiles, gpu_inventory=lambda: FAKE_GPUS, poll_interval=0.2,
                   queue_worker=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("n")
        await pilot.pause()
        await pilot.press("enter", *"train.epoch=3", "enter")  # a misspelt key
        await pilot.pause()
        error = app.screen.query_one("#launch-error")
        assert "train.epoch" in str(error.render()) and "did you mean" in str(error.render())
        region, screen = error.region, app.screen.region
        assert region.height >= 1 and screen.contains_region(region)  # on screen, not below it
        assert not (home / "runs").exists() or not list((home / "runs").iterdir())  # nothing launched


async def test_notes_tags_export_and_evaluate_from_the_runs_screen(tmp_path, monkeypatch):
    home = tmp_path / "home"
    make_run(home, "20260101-000000-aaaaaa", name="base", tags=("sweep:abc123", "method.eta=0.1", "old"))
    make_run(home, "20260101-000001-bbbbbb", name="fair", method="wat")  # another method: its own export row
    started = []
    import fairtui.launch.launcher

    monkeypatch.setattr(fairtui.launch.launcher, "start_engine", lambda run_dir, gpus=None, command=None: started.append(
        (run_dir, command)))
    monkeypatch.chdir(tmp_path)
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2, queue_worker=False)
    meta = lambda run_id: json.loads((home / "runs" / run_id / "meta.json").read_text())  # noqa: E731
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: app.screen.query_one("DataTable").row_count == 2)
        table = app.screen.query_one("DataTable")
        row_of = lambda run_id: [d["run_id"] for d in app.screen.visible()].index(run_id)  # noqa: E731
        table.move_cursor(row=row_of("20260101-000000-aaaaaa"))
        await pilot.pause()
        first = app.screen.selected_id()
        assert first == "20260101-000000-aaaaaa"
        # notes: several lines, saved to meta.json as `fairtui note` saves them
        await pilot.press("a")
        await pilot.pause()
        await pilot.press(*"first line", "enter", *"second", "ctrl+s")
        await pilot.pause(0.3)
        assert meta(first)["notes"] == "first line\nsecond"
        # tags: the sweep's own tags are kept whatever is typed
        await pilot.press("t")
        await pilot.pause()
        assert app.screen.query_one("Input").value == "old"
        await pilot.press("ctrl+u", *"paper", "enter")
        await pilot.pause(0.3)
        assert meta(first)["tags"] == ["sweep:abc123", "method.eta=0.1", "paper"]
        # export the two marked runs to a file
        table.move_cursor(row=0)
        await pilot.pause()
        await pilot.press("space", "space")  # space marks and moves down
        await pilot.pause()
        assert len(app.screen.marked) == 2, app.screen.marked
        await pilot.press("x")
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause(0.3)
        written = list(tmp_path.glob("fairtui-export-*.md"))
        assert len(written) == 1 and "| base" in written[0].read_text() and "| fair" in written[0].read_text()
        # evaluate: the dialog's request goes to the engine as `fairtui eval` sends it
        await pilot.press("e")
        await pilot.pause()
        await pilot.press("ctrl+u", *"pgd20 aa", "tab", "tab", "tab", *"5", "enter")
        await pilot.pause(0.3)
    assert len(started) == 1
    command = started[0][1]
    assert command[1:4] == ["-m", "engine", "eval"]
    request = json.loads(command[command.index("--request") + 1])
    assert request["attacks"] == ["pgd20", "aa"] and request["n_per_class"] == 5 and request["checkpoint"] == "best"


async def test_the_evaluate_dialog_says_when_a_stored_result_is_reused(tmp_path, monkeypatch):
    """The engine reuses a result already stored at the requested setting; the app says so instead of
    announcing an evaluation that will measure nothing."""
    home = tmp_path / "home"
    make_run(home, "20260101-000000-aaaaaa", name="base")  # holds pgd20 @ best on the whole test split
    started = []
    import fairtui.launch.launcher

    monkeypatch.setattr(fairtui.launch.launcher, "start_engine", lambda run_dir, gpus=None, command=None: started.append(
        command))
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2, queue_worker=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: app.screen.query_one("DataTable").row_count == 1)
        await pilot.press("e")
        await pilot.pause()
        await pilot.press("ctrl+u", *"pgd20 cw20", "enter")
        await wait_until(pilot, lambda: any("is reused" in str(n.message) for n in app._notifications))
        said = [str(n.message) for n in app._notifications]
    assert any(m.startswith("pgd20 @ best: the stored result (measured ") and "is reused, not measured again" in m
               for m in said), said
    assert any("evaluating base: cw20 @ best" in m for m in said), said  # only cw20 is measured
    assert len(started) == 1


async def test_the_export_dialog_writes_figures_and_tensorboard_off_the_event_loop(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    pytest.importorskip("tensorboard")
    from textual.widgets import Input, Select

    home = tmp_path / "home"
    make_run(home, "20260101-000000-aaaaaa", name="base")
    make_run(home, "20260101-000001-bbbbbb", name="fair", method="wat")
    monkeypatch.chdir(tmp_path)
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2, queue_worker=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: app.screen.query_one("DataTable").row_count == 2)
        await pilot.press("space", "space")  # space marks and moves down
        for fmt, found in (("figure:classes", lambda: list(tmp_path.glob("fairtui-export-*.pdf"))),
                           ("tensorboard", lambda: [p for p in tmp_path.glob("fairtui-export-*") if p.is_dir()
                                                    and len([c for c in p.iterdir() if not c.name.startswith(".")]) == 2
                                                    and not any(c.name.startswith(".") for c in p.iterdir())])):
            # (the export's folder exists from its first run on: wait for both runs, none half-written)
            await pilot.press("x")
            await pilot.pause()
            app.screen.query_one("#export-format", Select).value = fmt
            await pilot.pause()
            path = app.screen.query_one("#export-path", Input).value
            assert path.endswith(".pdf") if fmt.startswith("figure") else not Path(path).suffix
            await pilot.press("enter")
            await wait_until(pilot, lambda: bool(found()))
        pdf = list(tmp_path.glob("fairtui-export-*.pdf"))
        assert len(pdf) == 1 and pdf[0].read_bytes().startswith(b"%PDF")
        (folder,) = [p for p in tmp_path.glob("fairtui-export-*") if p.is_dir()]
        assert sorted(p.name.split("-2026")[0] for p in folder.iterdir()) == ["base", "fair"]
        # a figure that cannot be drawn is a notification, and the app goes on
        await pilot.press("x")
        await pilot.pause()
        app.screen.query_one("#export-format", Select).value = "figure:confusion"
        await pilot.pause()
        await pilot.press("enter")
        await wait_until(pilot, lambda: any("one result" in str(n.message) for n in app._notifications))
    assert len(list(tmp_path.glob("fairtui-export-*.pdf"))) == 1


def test_help_fits_a_76_column_dialog():
    from fairtui.app.dialogs import HELP_TEXT

    assert max(len(line) for line in HELP_TEXT.splitlines()) <= 72
    for key in ("b ", "ctrl+l", "a ", "e ", "x "):
        assert key in HELP_TEXT


def _profile_folder(tmp_path):
    from tests.conftest import TINY

    folder = tmp_path / "profiles"
    folder.mkdir()
    whole = TINY.replace('dataset = "digits"', 'dataset = "cifar10"').replace("train_per_class = 30\n", "")
    (folder / "at.toml").write_text(whole.replace('name = "tiny"', 'name = "at"\ndescription = "PGD-AT, 200 epochs"'))
    subset = TINY.replace('dataset = "digits"', 'dataset = "cifar10"')
    (folder / "cifar10-cpu-dafa.toml").write_text(subset.replace('name = "tiny"', 'name = "c"\ndescription = "DAFA on TRADES"'))
    (folder / "digits-at.toml").write_text(TINY)
    (folder / "digits-dafa.toml").write_text(TINY.replace('name = "tiny"', 'name = "d"\ndescription = "TRADES + DAFA"'))
    (folder / "quickstart.toml").write_text(TINY)
    return folder


def test_profiles_that_fit_the_machine_come_first_and_the_filter_matches_every_word(tmp_path):
    from fairtui.app.screens.launch import ordered_choices

    paths = sorted(_profile_folder(tmp_path).glob("*.toml"))
    cpu = ordered_choices(paths, have_gpus=False)
    assert [c.path.name for c in cpu] == ["quickstart.toml", "cifar10-cpu-dafa.toml", "digits-at.toml",
                                          "digits-dafa.toml", "at.toml"]
    assert [c.fits for c in cpu] == [True, True, True, True, False]  # a whole CIFAR-10 schedule: a GPU's
    assert str(cpu[-1].prompt) == "at.toml GPU"
    gpu = ordered_choices(paths, have_gpus=True)
    assert all(c.fits for c in gpu) and [c.path.name for c in gpu][:2] == ["quickstart.toml", "at.toml"]
    assert [c.path.name for c in cpu if c.matches("DAFA")] == ["cifar10-cpu-dafa.toml", "digits-dafa.toml"]
    assert [c.path.name for c in cpu if c.matches("dafa trades digits")] == ["digits-dafa.toml"]
    assert [c.path.name for c in cpu if c.matches("")] == [c.path.name for c in cpu]


async def test_the_launch_dialog_filters_as_one_types_selects_the_new_run_and_remembers_the_profile(tmp_path,
                                                                                                   monkeypatch):
    import fairtui.launch.launcher

    monkeypatch.setattr(fairtui.launch.launcher, "start_engine", lambda run_dir, gpus=None, command=None: None)
    home = tmp_path / "home"
    make_run(home, "20260101-000000-aaaaaa", name="older")
    folder = _profile_folder(tmp_path)
    app = make_app(home=home, profiles_dir=folder, gpu_inventory=lambda: [], poll_interval=0.2, queue_worker=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: app.screen.query_one("DataTable").row_count == 1)
        await pilot.press("n")
        await pilot.pause()
        options = app.screen.query_one("#profile")
        assert app.screen.focused.id == "profile-filter"
        assert str(options.get_option_at_index(options.highlighted).prompt) == "quickstart.toml"  # nothing remembered
        await pilot.press(*"dafa")
        await pilot.pause()
        assert [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)] == \
            ["cifar10-cpu-dafa.toml", "digits-dafa.toml"]
        await pilot.press("down", "enter")  # down in the filter moves in the list; enter: on to the overrides
        await pilot.pause()
        assert app.screen.focused.id == "overrides"
        await pilot.press("ctrl+l")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "RunsScreen" and
                         app.screen.query_one("DataTable").row_count == 2)
        new = next(p.name for p in (home / "runs").iterdir() if p.name != "20260101-000000-aaaaaa")
        assert 'name = "d"' in (home / "runs" / new / "profile.toml").read_text()  # digits-dafa.toml's
        await wait_until(pilot, lambda: app.screen.selected_id() == new)  # enter now opens the new run
        assert json.loads((home / "app-state.json").read_text()) == {"launch_profile": "digits-dafa.toml"}
        await pilot.press("n")
        await pilot.pause()
        options = app.screen.query_one("#profile")
        assert str(options.get_option_at_index(options.highlighted).prompt) == "digits-dafa.toml"


async def test_tab_from_the_launch_dialogs_filter_goes_to_the_overrides_and_keeps_what_is_typed(tmp_path,
                                                                                               monkeypatch):
    import fairtui.launch.launcher

    monkeypatch.setattr(fairtui.launch.launcher, "start_engine", lambda run_dir, gpus=None, command=None: None)
    home = tmp_path / "home"
    app = make_app(home=home, profiles_dir=_profile_folder(tmp_path), gpu_inventory=lambda: FAKE_GPUS,
                   poll_interval=0.2, queue_worker=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("n")
        await pilot.pause()
        await pilot.press(*"digits-da", "tab")
        await pilot.pause()
        assert app.screen.focused.id == "overrides"
        await pilot.press(*"train.epochs=3", "ctrl+l")
        await wait_until(pilot, lambda: (home / "runs").is_dir() and any((home / "runs").iterdir()))
        text = (next((home / "runs").iterdir()) / "profile.toml").read_text()
        assert 'name = "d"' in text and "epochs = 3" in text


async def test_the_launch_dialog_keeps_the_quotes_of_typed_toml_values(tmp_path, monkeypatch):
    """Found on a lent GPU: `eval.attacks=["clean"]`, typed as the docs write it, was split the shell's way, lost
    its quotes and was refused ("expected a list, got '[clean]'"), so the run never started."""
    import fairtui.launch.launcher

    monkeypatch.setattr(fairtui.launch.launcher, "start_engine", lambda run_dir, gpus=None, command=None: None)
    home = tmp_path / "home"
    folder = _profile_folder(tmp_path)
    app = make_app(home=home, profiles_dir=folder, gpu_inventory=lambda: [], poll_interval=0.2, queue_worker=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("n")
        await pilot.pause()
        await pilot.press("enter", *'eval.attacks=["clean"] eval.checkpoints=["last", "best"]', "ctrl+l")
        await wait_until(pilot, lambda: (home / "runs").is_dir() and any((home / "runs").iterdir()))
        run = next((home / "runs").iterdir())
        text = (run / "profile.toml").read_text()
        assert 'attacks = [\n    "clean",\n]' in text or 'attacks = ["clean"]' in text, text
        assert '"last"' in text and '"best"' in text


async def test_launch_dialog_says_cpu_only_in_full_at_80x24(tmp_path, profiles):
    """Found driving the app in tmux at 80x24: the note beside the profiles, when no GPU is found, was cut off."""
    app = make_app(home=tmp_path / "home", profiles_dir=profiles, gpu_inventory=lambda: [], poll_interval=0.2,
                   queue_worker=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("n")
        await pilot.pause()
        column = app.screen.query_one("#launch-gpus")
        note = column.query_one("Label")
        text = str(note.render())
        assert "CPU only" in text
        shown = note.region.intersection(column.region)  # what of the note the column leaves on screen
        assert shown.width >= len(text), (text, note.region, column.region)


async def test_delete_from_the_runs_screen_asks_first_and_unmarks_the_run(tmp_path):
    home = tmp_path / "home"
    make_run(home, "20260101-000000-aaaaaa", name="keep")
    make_run(home, "20260101-000001-bbbbbb", name="drop")
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2, queue_worker=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: app.screen.query_one("DataTable").row_count == 2)
        screen, table = app.screen, app.screen.query_one("DataTable")
        to_drop = lambda: table.move_cursor(  # noqa: E731
            row=[d["run_id"] for d in screen.visible()].index("20260101-000001-bbbbbb"))
        to_drop()
        await pilot.pause()
        await pilot.press("space")  # marked (the cursor moves on), then back to it and asked to delete
        to_drop()
        await pilot.pause()
        await pilot.press("d")
        await pilot.pause()
        assert "20260101-000001-bbbbbb" in screen.marked
        await pilot.press("n")  # declined: nothing goes
        await pilot.pause(0.3)
        assert (home / "runs" / "20260101-000001-bbbbbb").is_dir()
        to_drop()
        await pilot.pause()
        await pilot.press("d")
        await pilot.pause()
        await pilot.press("y")
        await wait_until(pilot, lambda: table.row_count == 1)
        assert not (home / "runs" / "20260101-000001-bbbbbb").exists()
        assert (home / "runs" / "20260101-000000-aaaaaa").is_dir()
        assert "20260101-000001-bbbbbb" not in screen.marked


async def test_r_on_a_stopped_runs_screen_queues_its_resume(tmp_path):
    """#73 item 8: `r` did nothing on the run screen (it resumed only from the runs table)."""
    from fairtui.launch.queue import LocalQueue

    home = tmp_path / "home"
    make_run(home, "20260101-000000-stop01", name="halted", status="stopped")
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2, queue_worker=False,
                   open_run="20260101-000000-stop01")
    app.tick_queue = lambda: None  # the queue is read, not run: the run stays queued for the check
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: type(app.screen).__name__ == "RunScreen")
        await pilot.press("r")
        await wait_until(pilot, lambda: LocalQueue(home).holds("20260101-000000-stop01"))


async def test_space_marks_and_moves_on_so_three_presses_compare_three_runs(tmp_path):
    """#88: space marked the highlighted run and stayed there, so pressing it again unmarked it; it moves on now."""
    home = tmp_path / "home"
    for i in range(4):
        make_run(home, f"20260101-00000{i}-aaaaa{i}", name=f"r{i}")
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2, queue_worker=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: app.screen.query_one("DataTable").row_count == 4)
        screen = app.screen
        await pilot.press("space", "space", "space")
        await pilot.pause()
        assert len(screen.marked) == 3 and screen.query_one("DataTable").cursor_row == 3
        await pilot.press("c")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "CompareScreen")
        assert len(app.screen.run_ids) == 3
