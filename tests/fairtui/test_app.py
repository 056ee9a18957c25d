"""The terminal app, driven with Pilot: launch, live bars, replay, compare, quit and re-attach."""

import asyncio
import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from fairtui.app import make_app
from fairtui.app.widgets.bars import ClassBars, GroupedBars
from fairtui.app.widgets.plot import LinePlot
from fairtui.runs.runfolder import engine_alive, engine_process
from fairtui.runs.synthetic import make_run
from tests.conftest import HANG_S, TINY
from tests.fairtui.app_helpers import FAKE_GPUS, engine_on_path, profiles, wait_until  # noqa: F401 (fixtures)

DATA = Path(__file__).resolve().parents[1] / "data"


def last_val(run_dir: Path) -> dict:
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    return [e for e in events if e["type"] == "epoch_end"][-1]["val"]


def replayed_run(home: Path) -> str:
    run_dir = home / "runs" / "20261122-000000-cfa001"
    run_dir.mkdir(parents=True)
    shutil.copy(DATA / "cfa_digits_events.jsonl", run_dir / "events.jsonl")
    shutil.copy(DATA / "cfa_digits_profile.toml", run_dir / "profile.toml")
    (run_dir / "meta.json").write_text(json.dumps({"name": "recorded-cfa"}))
    return run_dir.name


async def test_launch_from_the_dialog_and_watch_it_complete(tmp_path, profiles):
    app = make_app(home=tmp_path / "home", profiles_dir=profiles, gpu_inventory=lambda: FAKE_GPUS,
                   poll_interval=0.2, queue_worker=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("n")
        await pilot.pause()
        await pilot.press("enter")  # the highlighted profile (tiny.toml)
        await pilot.press(*"train.epochs=3")
        await pilot.press("shift+tab", "space")  # the GPUs sit beside the profiles: pick GPU 0
        await pilot.press("ctrl+l")
        await wait_until(pilot, lambda: list((tmp_path / "home" / "runs").glob("*/engine.json")))
        run_dir = next((tmp_path / "home" / "runs").iterdir())
        assert json.loads((run_dir / "meta.json").read_text())["gpus"] == "0"  # the fake GPU was picked
        await wait_until(pilot, lambda: app.screen.query("DataTable") and app.screen.query_one("DataTable").row_count)
        await pilot.press("enter")
        await wait_until(pilot, lambda: getattr(app.screen, "state", None) and app.screen.state.epochs)
        first = len(app.screen.state.epochs)
        await wait_until(pilot, lambda: app.screen.state.status == "completed")
        assert len(app.screen.state.epochs) == 3 and first <= 3
        bars = app.screen.query_one(ClassBars)
        assert bars.robust == last_val(run_dir)["robust_acc_per_class"]
        assert len(bars.names) == 10
        log_text = "\n".join(str(line.text) for line in app.screen.query_one("RichLog").lines)
        assert "epoch   3/3" in log_text and "finished: completed" in log_text


async def test_replay_of_a_recorded_cfa_run(tmp_path):
    home = tmp_path / "home"
    run_id = replayed_run(home)
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2, open_run=run_id, queue_worker=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: getattr(app.screen, "state", None) and app.screen.state.status == "completed")
        screen = app.screen
        expected = last_val(home / "runs" / run_id)
        bars = screen.query_one(ClassBars)
        assert bars.robust == expected["robust_acc_per_class"] and bars.clean == expected["clean_acc_per_class"]
        await wait_until(pilot, lambda: screen.query_one(LinePlot).points() == 4)  # curves redraw on a timer
        plot = screen.query_one(LinePlot)
        # first: per-class validation robust accuracy over epochs, the worst class (at the last epoch) marked
        assert plot.title.startswith("val robust accuracy")
        robust = [e["val"]["robust_acc_per_class"] for e in screen.state.epochs]
        assert plot.series[3] == [row[3] for row in robust]
        assert plot.worst() == min(range(10), key=lambda i: robust[-1][i])
        # at 120x40 CFA's margins are drawn at once, under the accuracies
        plot = screen.query_one("#plot-state", LinePlot)
        assert plot.title.startswith("eps_per_class") and plot.worst() is None
        assert plot.points() == 4  # one point per recorded epoch
        eps = [e["method_state"]["eps_per_class"] for e in screen.state.epochs]
        assert plot.series[0] == [row[0] for row in eps]
        await pilot.press("right")
        assert plot.highlight == 1
        await pilot.press("right_square_bracket")
        assert not plot.title.startswith("eps_per_class")
        drawn = str(plot.render())
        assert any("\u2800" < ch <= "\u28ff" for ch in drawn)  # braille curves, drawn by plotext


async def test_compare_screen_shows_the_right_deltas(tmp_path):
    home = tmp_path / "home"
    make_run(home, "20260101-000000-aaaaaa", name="base", robust_centre=0.4)
    make_run(home, "20260101-000001-bbbbbb", name="fair", robust_centre=0.5)
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2,
                   compare=["20260101-000000-aaaaaa", "20260101-000001-bbbbbb"], queue_worker=False)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        cmp = app.screen.comparison
        base, fair = cmp.columns
        b, f = base.result["robust_acc_per_class"], fair.result["robust_acc_per_class"]
        assert fair.deltas["avg_robust"] == pytest.approx(sum(f) / len(f) - sum(b) / len(b))
        assert fair.deltas["worst_robust"] == pytest.approx(min(f) - min(b))
        bars = app.screen.query_one(GroupedBars)
        assert [values for _, values in bars.runs] == [b, f]
        await pilot.press("b")  # the other run becomes the baseline
        assert app.screen.comparison.columns[0].deltas["avg_robust"] == pytest.approx(-fair.deltas["avg_robust"])


async def test_keyboard_only_at_80x24_with_no_color(tmp_path, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    home = tmp_path / "home"
    make_run(home, "20260101-000000-aaaaaa", name="base")
    make_run(home, "20260101-000001-bbbbbb", name="fair")
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2, queue_worker=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: app.screen.query_one("DataTable").row_count == 2)
        await pilot.press("question_mark")
        assert "fairtui keys" in str(app.screen.query_one("Static").render())
        await pilot.press("escape")
        await pilot.press("slash", *"fair", "enter")  # one enter: the run the filter leaves opens
        await wait_until(pilot, lambda: type(app.screen).__name__ == "RunScreen")
        assert app.screen.run_id == "20260101-000001-bbbbbb"
        await pilot.press("escape")
        assert app.screen.query_one("DataTable").row_count == 1
        await pilot.press("escape")
        assert app.screen.query_one("DataTable").row_count == 2
        await pilot.press("space", "space", "c")  # space marks and moves to the next run
        assert type(app.screen).__name__ == "CompareScreen"
        await pilot.press("escape", "t", *"paper", "enter")
        await pilot.pause(0.5)
        tagged = [json.loads((d / "meta.json").read_text()).get("tags") for d in (home / "runs").iterdir()]
        assert ["paper"] in tagged


async def test_quit_while_training_then_reattach(tmp_path, profiles):
    home = tmp_path / "home"
    slow = profiles / "slow.toml"
    slow.write_text(TINY.replace("epochs = 2", "epochs = 400"))
    app = make_app(home=home, profiles_dir=profiles, gpu_inventory=lambda: [], poll_interval=0.2, queue_worker=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("n")
        await pilot.pause()
        await pilot.press("ctrl+l")  # the first profile: slow.toml
        await wait_until(pilot, lambda: list(home.glob("runs/*/engine.json")))
    run_dir = next((home / "runs").iterdir())
    try:
        events = run_dir / "events.jsonl"
        end = time.time() + HANG_S
        while time.time() < end and not (events.exists() and '"epoch_end"' in events.read_text()):
            await asyncio.sleep(0.2)
        assert json.loads((run_dir / "events.jsonl").read_text().splitlines()[0])["config"]["train"]["epochs"] == 400
        await asyncio.sleep(1.0)
        assert engine_alive(run_dir)  # the app is gone, the engine trains on
        app2 = make_app(home=home, profiles_dir=profiles, gpu_inventory=lambda: [], poll_interval=0.2, queue_worker=False)
        async with app2.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: app2.screen.query_one("DataTable").row_count == 1)
            assert app2.screen.docs[0]["status"] == "running"
            await pilot.press("enter")
            await wait_until(pilot, lambda: getattr(app2.screen, "state", None) and app2.screen.state.epochs)
            seen = len(app2.screen.state.epochs)
            await wait_until(pilot, lambda: len(app2.screen.state.epochs) > seen)  # still streaming
            await pilot.press("s")  # stop from the run screen
            await wait_until(pilot, lambda: app2.screen.state.status == "stopped", timeout=HANG_S)
    finally:
        info = engine_process(run_dir)
        if info and engine_alive(run_dir):
            os.kill(info["pid"], signal.SIGKILL)


async def test_launch_a_sweep_from_the_dialog_and_group_it(tmp_path, profiles):
    home = tmp_path / "home"
    app = make_app(home=home, profiles_dir=profiles, gpu_inventory=lambda: [], poll_interval=0.2, queue_worker=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("n")
        await pilot.pause()
        await pilot.press("enter", *"train.epochs=1", "tab", "tab", "tab", *"attack.eps=0.1,0.2", "tab", "2")
        await pilot.press("ctrl+l")
        await wait_until(pilot, lambda: len(list((home / "runs").glob("*"))) == 4 if (home / "runs").exists() else False)
        await wait_until(pilot, lambda: app.screen.query_one("DataTable").row_count == 4)
        await pilot.press("g")
        names = [app.screen.query_one("DataTable").get_row_at(i)[1] for i in range(4)]
        assert names == sorted(names) and names[0].startswith("tiny-eps=0.1-s0")
        await wait_until(pilot, lambda: all(d.get("status") == "completed" for d in app.screen.docs), timeout=HANG_S)
        tags = {t for d in app.screen.docs for t in d["tags"]}
        assert {"attack.eps=0.1", "attack.eps=0.2"} <= tags


async def test_run_screen_titles_the_run_by_its_own_name_and_labels_a_clean_result(tmp_path):
    from fairtui.runs.runstate import result_lines

    home = tmp_path / "home"
    make_run(home, "20260101-000000-c1a2b3", name="my-named-run", attacks=("clean", "pgd20"))
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2,
                   open_run="20260101-000000-c1a2b3", queue_worker=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: getattr(app.screen, "state", None) and app.screen.state.status == "completed")
        title = str(app.screen.query_one("#run-title").render())
        assert title.startswith("my-named-run [c1a2b3]")  # the run's name, not its profile's ("synthetic")
        lines = result_lines(app.screen.state)
        clean = next(line for line in lines if " clean @" in line)
        assert "robust" not in clean and "worst class" in clean
        assert any("robust" in line for line in lines if "pgd20" in line)
        # the log says the same: a clean evaluation has no robust number
        line = app.screen.state.log_line({"type": "eval_result", "split": "test", "attack": "clean",
                                          "checkpoint": "last", "avg_clean": 0.7, "avg_robust": 0.7,
                                          "clean_acc_per_class": [0.6, 0.8]})
        assert line == "test clean @ last: clean 0.700 worst class 0.600"
        log = "\n".join(str(strip.text) for strip in app.screen.query_one("#log").lines)
        assert "test clean @ last: clean" in log and "robust" not in log.split("test clean @ last")[1].split("\n")[0]


def test_progress_line_and_its_eta():
    from fairtui.runs.runstate import progress_line

    text, fraction = progress_line({"phase": "train", "epoch": 3, "batch": 100, "batches": 400, "started": 1000.0,
                                    "t": 1050.0}, now=1050.0)
    # 100 batches in 50 s: 300 more take 150 s
    assert fraction == 0.25 and text == "train epoch 3: 100/400 batches, 25%, ETA 2 min 30 s"
    assert progress_line({"phase": "done", "batch": 0, "batches": 0}) == ("", None)
    stale, _ = progress_line({"phase": "eval", "attack": "aa", "batch": 1, "batches": 4, "started": 0.0, "t": 10.0},
                             now=1000.0)
    assert "no update for" in stale


@pytest.mark.parametrize("k", [10, 100])
async def test_every_class_is_reachable_at_80x24_and_the_worst_is_always_named(tmp_path, k):
    home = tmp_path / "home"
    make_run(home, "20260101-000000-d4e5f6", name="many", k=k)
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2,
                   open_run="20260101-000000-d4e5f6", queue_worker=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: getattr(app.screen, "state", None) and app.screen.state.status == "completed")
        await pilot.pause()
        bars = app.screen.query_one(ClassBars)
        worst = min(range(k), key=lambda i: bars.robust[i])
        seen = set()
        for _ in range(bars.pages()):
            text = str(bars.render())
            lines = text.splitlines()
            assert any(line.startswith(bars.names[worst]) and line.endswith(" <") for line in lines)  # every page
            assert len(lines) <= bars.size.height  # nothing cut off below the widget
            assert max(len(line) for line in lines) <= bars.size.width  # no line wraps
            if k == 100:  # the page is named whole, before anything a narrow pane cuts
                shown = bars.visible_classes()
                assert lines[0].startswith(f"{shown.start + 1}-{shown.stop}/100 pgup/dn | ")
            seen |= set(bars.visible_classes())
            await pilot.press("pagedown")
        assert seen == set(range(k))  # every class on some page
        assert bars.pages() == 1 if k == 10 else bars.pages() > 1  # 10 fit at 80x24; 100 are paged


async def test_per_class_test_tables_from_the_run_screen(tmp_path):
    home = tmp_path / "home"
    make_run(home, "20260101-000000-e1e2e3", name="tabled", attacks=("clean", "pgd20", "aa"))
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2,
                   open_run="20260101-000000-e1e2e3", queue_worker=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: getattr(app.screen, "state", None) and app.screen.state.status == "completed")
        await pilot.press("p")
        await pilot.pause(0.3)
        assert type(app.screen).__name__ == "ResultsScreen"
        from fairtui.runs.report import per_class_tables
        from fairtui.runs.runfolder import RunView

        tables = per_class_tables(RunView.load(home / "runs" / "20260101-000000-e1e2e3"))
        headers = [c.header for c in tables[0].columns]
        assert "robust pgd20" in headers and "robust aa" in headers  # every attack of the checkpoint
        await pilot.press("escape")
        assert type(app.screen).__name__ == "RunScreen"


@pytest.mark.parametrize("size,split", [((80, 24), False), ((120, 40), True)])
async def test_curves_show_accuracy_beside_the_method_state_when_there_is_room(tmp_path, size, split):
    """At 120x40 the per-class accuracy curves and the method's class-wise state are drawn at once (c
    switches robust / clean, [ ] the state); at 80x24 one plot cycles through all of them."""
    home = tmp_path / "home"
    make_run(home, "20260101-000000-f1f2f3", name="curves", method="cfa")
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2,
                   open_run="20260101-000000-f1f2f3", queue_worker=False)
    async with app.run_test(size=size) as pilot:
        await wait_until(pilot, lambda: getattr(app.screen, "state", None) and app.screen.state.status == "completed")
        app.screen.refresh_plot()
        top, below = app.screen.query_one("#plot", LinePlot), app.screen.query_one("#plot-state", LinePlot)
        assert below.display is split
        assert top.title.startswith("val robust accuracy")
        if split:
            assert below.title.startswith("eps_per_class")
            await pilot.press("c")
            assert top.title.startswith("val clean accuracy")
            await pilot.press("right_square_bracket")
            assert top.title.startswith("val clean accuracy") and not below.title.startswith("eps_per_class")
        else:
            await pilot.press("right_square_bracket")
            assert top.title.startswith("val clean accuracy")
            await pilot.press("right_square_bracket")
            assert top.title.startswith("eps_per_class")


async def test_runs_table_drops_columns_when_narrow_and_brings_them_back(tmp_path):
    from textual.widgets import DataTable

    from fairtui.app.screens.runs_table import COLUMNS, ESSENTIAL, fitting_columns

    rows = [("", "a-long-run-name-of-28-chars-x", "completed", "5/10", "0.381", "0.243", "cccccc", "pgd_at",
             "digits", "small_cnn", "0,1", "01-01 00:02")]
    assert fitting_columns(rows, 80) == list(range(ESSENTIAL))
    assert fitting_columns(rows, 200) == list(range(len(COLUMNS)))
    assert fitting_columns(rows, 10) == list(range(ESSENTIAL))  # the essentials at any width (scrolling)
    home = tmp_path / "home"
    make_run(home, "20260101-000000-d1d2d3", name="a-run-whose-name-fills-its-28-cells")
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=3600,
                   queue_worker=False)
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.screen.query_one(DataTable)
        await wait_until(pilot, lambda: table.row_count == 1)
        labels = lambda: [str(c.label) for c in table.ordered_columns]  # noqa: E731
        assert labels() == [label for _, label in COLUMNS[:ESSENTIAL]]
        await pilot.resize_terminal(160, 40)
        await wait_until(pilot, lambda: len(labels()) == len(COLUMNS))
        await pilot.resize_terminal(80, 24)
        await wait_until(pilot, lambda: len(labels()) == ESSENTIAL)
        assert table.row_count == 1


async def test_keys_typed_right_after_ctrl_u_are_kept(tmp_path):
    """Over SSH ctrl+u and the next characters often arrive in one read. Textual's Input ran ctrl+u
    (a binding) after those characters and so deleted them too (the tag dialog lost "abc"); every
    text field of the app is a LineInput, which edits in the order the keys came."""
    from textual import events
    from textual.widgets import Input

    from fairtui.app.widgets.lineinput import LineInput

    home = tmp_path / "home"
    make_run(home, "20260101-000000-a9a8a7", name="tagged", tags=("old",))
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=3600, queue_worker=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: app.screen.query("DataTable") and app.screen.query_one("DataTable").row_count == 1)
        await pilot.press("t")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "TextDialog")
        field = app.screen.query_one("#text", Input)
        assert isinstance(field, LineInput) and field.value == "old"
        for key, char in [("ctrl+u", "\x15"), ("a", "a"), ("b", "b"), ("c", "c")]:  # one read, as a terminal sends it
            app.post_message(events.Key(key, char))
        await wait_until(pilot, lambda: field.value == "abc", timeout=HANG_S)
        await pilot.press("enter")
        await wait_until(pilot, lambda: json.loads((home / "runs" / "20260101-000000-a9a8a7" / "meta.json")
                                                   .read_text())["tags"] == ["abc"], timeout=HANG_S)


async def test_compare_screen_groups_the_runs_by_profile_and_pairs_them_at_80x24(tmp_path):
    """g groups the compared runs by profile (a method's seeds) and pairs each group with the baseline group by
    seed, in 80 columns; b moves the baseline to the next group."""
    from engine.contract.config import Profile

    home = tmp_path / "home"
    ids = []
    for i, (profile, seed, centre) in enumerate([("base", 0, 0.4), ("base", 1, 0.42), ("fair", 0, 0.5),
                                                 ("fair", 1, 0.52), ("fair", 2, 0.5)]):
        ids.append(f"20260101-00000{i}-aaaaa{i}")
        make_run(home, ids[-1], name=f"{profile}-s{seed}", seed=seed, robust_centre=centre,
                 profile=Profile(name=profile, seed=seed))
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2, compare=ids,
                   queue_worker=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("g")
        await pilot.pause()
        cmp = app.screen.group_comparison
        assert [g.label for g in cmp.groups] == ["base", "fair"] and cmp.baseline == "base"
        (pairing,) = cmp.pairings
        assert pairing.group == "fair" and pairing.dropped_seeds == [2] and pairing.n == 2
        shown = app.export_screenshot().replace("&#160;", " ")
        assert "fair" in shown and "Groups:" in shown
        await pilot.press("b")
        await pilot.pause()
        assert app.screen.group_comparison.baseline == "fair"
        await pilot.press("g")  # back to the runs
        await pilot.pause()
        assert app.screen.comparison is not None and not app.screen.grouped


async def test_compare_screen_pairs_a_fine_tune_with_its_starts_on_s(tmp_path):
    """In the grouped view, s pairs a fine-tune of the baseline with the checkpoints its runs started from (the base
    run's best, by init_from), as `compare --against-start` does, and s again with the base at the same checkpoint."""
    from engine.contract.config import Profile
    from fairtui.runs.runfolder import RunView

    home = tmp_path / "home"
    bases = {seed: f"20260101-00000{seed}-base0{seed}" for seed in (0, 1)}
    for seed, run_id in bases.items():
        make_run(home, run_id, name=f"base-s{seed}", seed=seed, robust_centre=0.4,
                 profile=Profile(name="base", seed=seed))
    ids = list(bases.values())
    for seed, base in bases.items():
        ids.append(f"20260102-00000{seed}-ftft0{seed}")
        make_run(home, ids[-1], name=f"ft-s{seed}", seed=seed, method="faal", robust_centre=0.45,
                 profile=Profile(name="ft", seed=seed), init_from=str(home / "runs" / base))
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2, compare=ids,
                   queue_worker=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app.screen.checkpoint = "last"  # the fine-tunes' last checkpoints
        await pilot.press("s")  # the runs view has no such pairing: s is hidden and does nothing
        await pilot.pause()
        assert not app.screen.against_start and "vs starts" not in app.export_screenshot().replace("&#160;", " ")
        await pilot.press("g")
        await wait_until(pilot, lambda: "vs starts" in app.export_screenshot().replace("&#160;", " "))
        base = {ckpt: [RunView.load(home / "runs" / b).results()[("test", ckpt, "pgd20")]["worst_robust"]
                       for b in bases.values()] for ckpt in ("best", "last")}
        assert base["best"] != base["last"]
        (pairing,) = app.screen.group_comparison.pairings
        assert pairing.by_init and pairing.against == "checkpoint"  # the default: the bases at last too
        assert [b.summary["worst_robust"] for _, b in pairing.pairs] == pytest.approx(base["last"])
        await pilot.press("s")
        await pilot.pause()
        (pairing,) = app.screen.group_comparison.pairings
        assert pairing.against == "start" and [st.checkpoint for st in pairing.starts] == ["best", "best"]
        assert [b.summary["worst_robust"] for _, b in pairing.pairs] == pytest.approx(base["best"])
        assert "s: fine-tunes against the baseline" in str(app.screen.query_one("#compare-title").render())
        await pilot.press("s")
        await pilot.pause()
        assert app.screen.group_comparison.pairings[0].against == "checkpoint"
