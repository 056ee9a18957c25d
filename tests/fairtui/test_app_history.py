"""The runs screen with a long history: it says it is reading instead of "0 of 0 runs", shows the first
screen of rows at once and the rest in chunks, and updates changed cells without refilling the table
(issue #37, item 7; benchmarks/bench_app.py --runs 10000 measures the times)."""

import threading

from fairtui.app import make_app
from fairtui.app.screens import runs as runs_screen
from fairtui.runs.store import RunIndex
from fairtui.runs.synthetic import make_run
from tests.conftest import HANG_S
from tests.fairtui.test_app import wait_until


def status_line(app) -> str:
    return str(app.screen.query_one("#status-line").render())


async def test_the_runs_screen_says_it_is_reading_until_the_index_arrives(tmp_path, monkeypatch):
    home = tmp_path / "home"
    make_run(home, "20260101-000000-aaaaaa", name="first")
    gate = threading.Event()
    real_read = RunIndex.read

    def slow_read(self):  # the index of a long history, still being read
        gate.wait(HANG_S)
        return real_read(self)

    monkeypatch.setattr(RunIndex, "read", slow_read)
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2,
                   queue_worker=False)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(5):  # mounted, resized, polled: still nothing read
            await pilot.pause(0.1)
        assert status_line(app) == "reading the run history..."
        assert "0 of 0" not in status_line(app)
        gate.set()
        await wait_until(pilot, lambda: status_line(app).startswith("1 of 1 run"))


async def test_a_long_history_shows_its_first_screen_at_once_and_the_rest_in_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(runs_screen, "FIRST_ROWS", 5)
    monkeypatch.setattr(runs_screen, "FILL_CHUNK", 7)
    home = tmp_path / "home"
    for i in range(30):
        make_run(home, f"20260101-{i:06d}-aaaaaa", name=f"run{i:02d}", epochs=1)
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=60,
                   queue_worker=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.screen.query_one("DataTable").row_count == 30)
        screen, table = app.screen, app.screen.query_one("DataTable")
        screen.sort_column, screen.sort_reverse = "name", True
        screen.render_rows()
        await wait_until(pilot, lambda: table.row_count == 30)
        table.move_cursor(row=27)  # run02, which the new order puts on the first screen
        screen.sort_reverse = False  # another order: the table is refilled
        screen.render_rows()
        assert screen.selected_id() == "20260101-000002-aaaaaa"
        assert table.row_count == 5  # the first screen, at once
        assert status_line(app).startswith("30 of 30 runs")  # counted whole while the rest arrive
        names = [table.get_row_at(i)[1] for i in range(5)]
        assert names == [f"run{i:02d}" for i in range(5)]
        await wait_until(pilot, lambda: table.row_count == 30)
        assert [table.get_row_at(i)[1] for i in range(30)] == [f"run{i:02d}" for i in range(30)]
        # the cursor on a row beyond the first screen stays on it when the table is refilled
        table.move_cursor(row=20)
        screen.sort_reverse = not screen.sort_reverse
        screen.render_rows()
        assert screen.selected_id() == "20260101-000020-aaaaaa"


async def test_a_changed_run_updates_its_cells_without_refilling_the_table(tmp_path, monkeypatch):
    home = tmp_path / "home"
    for i in range(3):
        make_run(home, f"20260101-{i:06d}-aaaaaa", name=f"run{i}", epochs=1)
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=60,
                   queue_worker=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.screen.query_one("DataTable").row_count == 3)
        screen, table = app.screen, app.screen.query_one("DataTable")
        cleared = []
        monkeypatch.setattr(table, "clear", lambda *a, **k: cleared.append(1))
        docs = [dict(d) for d in screen.docs]
        docs[1]["status"] = "failed"  # as a later read of the index finds it (same width as "completed")
        from fairtui.app.messages import RunsLoaded

        screen.on_runs_loaded(RunsLoaded(docs, {}))
        assert not cleared
        row = table.get_row("20260101-000001-aaaaaa")
        assert row[1:3] == ["run1", "failed"]
        marked_row = table.cursor_row
        screen.action_mark()  # marking is a changed cell too (and the cursor moves on)
        assert not cleared and table.get_row_at(marked_row)[0] == "*"


async def test_names_with_markup_and_wide_characters_are_shown_whole(tmp_path):
    home = tmp_path / "home"
    make_run(home, "20260101-000000-aaaaaa", name="[bold]x[/bold]-猫")
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=60,
                   queue_worker=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.screen.query_one("DataTable").row_count == 1)
        table = app.screen.query_one("DataTable")
        name = table.columns[next(k for k in table.columns if k.value == "name")]
        assert name.width == len("[bold]x[/bold]-") + 2  # the cat is two cells wide
        await pilot.pause(0.2)
        assert "[bold]x[/bold]-猫" in "".join(seg.text for seg in table.render_line(1))


async def test_the_stored_index_is_shown_while_the_folders_are_read(tmp_path, monkeypatch):
    """The first screen comes from the index file alone; reading every folder (the slow part with 10,000
    runs) follows, and its answer replaces it."""
    home = tmp_path / "home"
    make_run(home, "20260101-000000-aaaaaa", name="indexed")
    RunIndex(home).reindex()
    make_run(home, "20260101-000001-aaaaaa", name="not-indexed-yet")
    gate = threading.Event()
    real_read = RunIndex.read

    def slow_read(self):
        gate.wait(HANG_S)
        return real_read(self)

    monkeypatch.setattr(RunIndex, "read", slow_read)
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2,
                   queue_worker=False)
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.screen.query_one("DataTable")
        await wait_until(pilot, lambda: table.row_count == 1)
        assert table.get_row_at(0)[1] == "indexed" and status_line(app).startswith("1 of 1 run")
        gate.set()
        await wait_until(pilot, lambda: table.row_count == 2)
        assert status_line(app).startswith("2 of 2 runs")
