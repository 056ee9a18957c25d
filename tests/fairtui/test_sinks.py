"""Dashboards are sinks of one feed (engine.contract.sinks): what the engine hands W&B live, event by event,
and what `export --format tensorboard` hands TensorBoard from the run folder are the same calls with the
same scalars under the same names."""

from __future__ import annotations

import json
import shutil

from engine.contract.sinks import Feed
from fairtui.runs.runfolder import RunView
from fairtui.judge.tbexport import feed_run
from tests.fairtui.test_app import DATA


class Recording:
    def __init__(self):
        self.calls: list[tuple] = []

    def open(self, run):
        self.calls.append(("open", run.run_id, run.name, run.class_names))

    def epoch(self, step, wall_time, scalars):
        self.calls.append(("epoch", step, wall_time, scalars))

    def result(self, step, wall_time, key, label, scalars):
        self.calls.append(("result", step, key, label, scalars))

    def close(self, status):
        self.calls.append(("close", status))


def test_the_live_feed_and_a_run_folders_replay_give_every_dashboard_the_same_calls(tmp_path):
    run_dir = tmp_path / "runs" / "20261122-000000-cfa001"
    run_dir.mkdir(parents=True)
    shutil.copy(DATA / "cfa_digits_events.jsonl", run_dir / "events.jsonl")
    shutil.copy(DATA / "cfa_digits_profile.toml", run_dir / "profile.toml")
    (run_dir / "meta.json").write_text(json.dumps({"name": "recorded-cfa"}))
    view = RunView.load(run_dir)
    live = Recording()
    feed = Feed(live, view.run_id, view.name, [], view.config)
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        feed(json.loads(line))  # as the engine hands each event on once written
    feed.end()
    replayed = Recording()
    feed_run(view, replayed)

    def key(call):
        return call[:2] if call[0] == "epoch" else call[:3] if call[0] == "result" else call[:1]

    live_last = {key(c): c for c in live.calls}  # a repeated epoch or result: its latest, as a dashboard keeps
    assert {key(c): c for c in replayed.calls} == live_last
    epochs = [c for c in live.calls if c[0] == "epoch"]
    results = [c for c in live.calls if c[0] == "result"]
    assert epochs and results and live.calls[0][0] == "open" and live.calls[-1] == ("close", "completed")
    assert "val/robust_per_class/3_3" in epochs[-1][3] and all(r[3].endswith(("@ best", "@ last", "@ fawa", "@ ema"))
                                                                for r in results)
