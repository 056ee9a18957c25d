"""Toasts sit above the runs screen's status line, never over it (#88 item 3)."""

from __future__ import annotations

from fairtui.app import make_app
from fairtui.runs.synthetic import make_run
from tests.fairtui.app_helpers import wait_until


async def test_a_toast_leaves_the_status_line_and_the_footer_readable(tmp_path):
    from textual.widgets import Footer, Static
    from textual.widgets._toast import Toast

    home = tmp_path / "home"
    make_run(home, "20260101-000000-aaaaaa", name="base")
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2, queue_worker=False)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await wait_until(pilot, lambda: app.screen.query_one("DataTable").row_count == 1)
        app.notify("a line long enough to be a real toast of the app", timeout=30)
        await wait_until(pilot, lambda: bool(app.screen.query(Toast)))
        await pilot.pause(0.3)
        toast = app.screen.query(Toast).first().region
        status = app.screen.query_one("#status-line", Static).region
        footer = app.screen.query_one(Footer).region
        assert toast.height > 0 and status.height == 1
        assert toast.bottom <= status.y, (toast, status)  # above the status line, so above the footer too
        assert status.bottom <= footer.y
