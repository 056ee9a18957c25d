"""What users see: every screen and dialog as an SVG snapshot at 80x24 and 120x40 (pytest-textual-snapshot).

A layout change fails here; `pytest tests/fairtui/test_snapshots.py --snapshot-update` records the new
look after a reviewer has seen it (the report shows old and new side by side). The runs are synthetic,
with fixed times, in UTC, so a snapshot depends on the layout only.
"""

import time

import pytest

pytest.importorskip("pytest_textual_snapshot")

from fairtui.app import make_app  # noqa: E402
from fairtui.launch.gpus import GpuInfo  # noqa: E402
from fairtui.runs.synthetic import make_run  # noqa: E402
from tests.conftest import TINY  # noqa: E402

SIZES = [(80, 24), (120, 40)]
T0 = 1767225600.0  # 2026-01-01 00:00 UTC
GPUS = [GpuInfo(0, "Fake GPU", 1024.0, 81920.0, 3.0)]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "tiny.toml").write_text(TINY)
    home = tmp_path / "home"
    make_run(home, "20260101-000000-aaaaaa", name="cfa-trades-wrn34-10-lambda1-0.3-seed0", method="cfa",
             attacks=("clean", "pgd20"), t0=T0, tags=("paper",))
    make_run(home, "20260101-000100-bbbbbb", name="wat-eta0.1", method="wat", robust_centre=0.6, t0=T0 + 60)
    make_run(home, "20260101-000200-cccccc", name="pgd-at-baseline", method="pgd_at", robust_centre=0.4,
             t0=T0 + 120)
    yield home
    time.tzset()


def app_for(home, **kw):
    # one load of the runs at start and no reloads after: a reload between two frames could be caught
    # half-laid-out (a screenshot of the table with its columns not yet widened)
    return make_app(home=home, profiles_dir=home.parent / "profiles", gpu_inventory=lambda: GPUS,
                    poll_interval=3600, queue_worker=False, **kw)


async def settle(pilot):
    from textual.widgets import DataTable

    for _ in range(1200):  # the runs table filled (its first load) before anything else; up to 120 s on a busy machine
        tables = [t for screen in pilot.app.screen_stack for t in screen.query(DataTable)]
        if tables and tables[0].row_count == 3:
            break
        await pilot.pause(0.1)
    for _ in range(8):  # the run screen's curves redraw 0.5 s after its events
        for widget in pilot.app.screen.query("Input, TextArea"):
            widget.cursor_blink = False  # at once: a blinking cursor would make every snapshot a coin toss
        await pilot.pause(0.1)


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "120x40"])
def test_runs_screen(snap_compare, home, size):
    assert snap_compare(app_for(home), terminal_size=size, run_before=settle)


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "120x40"])
def test_run_screen(snap_compare, home, size):
    assert snap_compare(app_for(home, open_run="20260101-000000-aaaaaa"), terminal_size=size, run_before=settle)


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "120x40"])
def test_compare_screen(snap_compare, home, size):
    app = app_for(home, compare=["20260101-000200-cccccc", "20260101-000100-bbbbbb"])
    assert snap_compare(app, terminal_size=size, run_before=settle)


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "120x40"])
@pytest.mark.parametrize("keys", [["n"], ["question_mark"], ["e"], ["a"]], ids=["launch", "help", "eval", "notes"])
def test_dialogs(snap_compare, home, size, keys):
    async def run_before(pilot):
        await settle(pilot)
        await pilot.press(*keys)
        await settle(pilot)

    assert snap_compare(app_for(home), terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "120x40"])
def test_per_class_results_screen(snap_compare, home, size):
    async def run_before(pilot):
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot)

    assert snap_compare(app_for(home, open_run="20260101-000000-aaaaaa"), terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "120x40"])
def test_study_screen(snap_compare, home, size, tiny_profile):
    """A tuning study (`y` on one of its trials): four trials made directly in its storage."""
    pytest.importorskip("optuna")
    from fairtui.app.screens.study import StudyScreen
    from tests.fairtui.test_tune_views import _made_study

    _made_study(home, tiny_profile, ["20260101-000000-aaaaaa", "20260101-000100-bbbbbb", None, None])

    async def run_before(pilot):
        from textual.widgets import DataTable

        await settle(pilot)
        await pilot.app.push_screen(StudyScreen("fig"))
        for _ in range(1200):  # the journal is read on a worker thread (up to 120 s on a busy machine)
            if isinstance(pilot.app.screen, StudyScreen) and pilot.app.screen.query_one(DataTable).row_count == 4:
                break
            await pilot.pause(0.1)
        await settle(pilot)

    assert snap_compare(app_for(home), terminal_size=size, run_before=run_before)
