"""`fairtui export --format tensorboard`: the event files open in TensorBoard's own reader with every
per-class number of the run, at its epoch, and only the headline test results."""

import json
import shutil

import pytest

pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

from fairtui.judge.compare import setting_label  # noqa: E402
from fairtui.runs.runfolder import RunView  # noqa: E402
from tests.conftest import fairtui_cmd  # noqa: E402
from tests.fairtui.test_app import DATA  # noqa: E402


def recorded_cfa(home):
    run_dir = home / "runs" / "20261122-000000-cfa001"
    run_dir.mkdir(parents=True)
    shutil.copy(DATA / "cfa_digits_events.jsonl", run_dir / "events.jsonl")
    shutil.copy(DATA / "cfa_digits_profile.toml", run_dir / "profile.toml")
    (run_dir / "meta.json").write_text(json.dumps({"name": "recorded-cfa"}))
    return RunView.load(run_dir)


def read(folder) -> EventAccumulator:
    ea = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    return ea


def test_a_finished_run_opens_in_tensorboards_reader_with_its_per_class_numbers(tmp_path):
    home = tmp_path / "home"
    view = recorded_cfa(home)
    out = tmp_path / "tb"
    proc = fairtui_cmd("export", view.run_id, "--format", "tensorboard", "-o", str(out), home=home)
    assert proc.returncode == 0, proc.stderr
    (folder,) = out.iterdir()
    assert folder.name == f"recorded-cfa-{view.run_id}"
    ea = read(folder)
    scalars = set(ea.Tags()["scalars"])
    epochs = view.epochs
    # validation per class, every epoch, at its step, to float32
    for k in (0, 7):
        got = ea.Scalars(f"val/robust_per_class/{k}_{k}")
        assert [s.step for s in got] == [e["epoch"] for e in epochs]
        assert [s.value for s in got] == pytest.approx([e["val"]["robust_acc_per_class"][k] for e in epochs], abs=1e-6)
        assert got[0].wall_time == pytest.approx(epochs[0]["t"])
    worst = ea.Scalars("val/robust_worst")
    assert [s.value for s in worst] == pytest.approx([min(e["val"]["robust_acc_per_class"]) for e in epochs], abs=1e-6)
    assert [s.value for s in ea.Scalars("train/loss")] == pytest.approx([e["train"]["loss"] for e in epochs], rel=1e-6)
    assert {"train/lr", "train/epoch_time_s", "val/clean_avg", "val/robust_cv"} <= scalars
    # CFA's class-wise state and its flags
    margins = ea.Scalars("state/eps_per_class/3_3")
    assert [s.value for s in margins] == pytest.approx([e["method_state"]["eps_per_class"][3] for e in epochs])
    assert "state/fawa_accepted" in scalars and "state/val_worst_robust" in scalars
    # the headline test results at the end, per checkpoint and attack, with their settings as text
    best = view.results()[("test", "best", "pgd20")]
    got = ea.Scalars("test/best/pgd20/robust_per_class/5_5")
    assert len(got) == 1 and got[0].value == pytest.approx(best["robust_acc_per_class"][5], abs=1e-6)
    assert ea.Scalars("test/best/pgd20/worst_robust")[0].value == pytest.approx(best["worst_robust"], abs=1e-6)
    assert {"test/fawa/pgd20/avg_robust", "test/last/clean/avg_clean"} <= scalars
    assert not any(t.startswith("test/last/clean/robust") for t in scalars)
    tensors = set(ea.Tags()["tensors"])
    assert {"_hparams_/experiment", "_hparams_/session_start_info", "profile", "settings/test/best/pgd20"} <= tensors
    setting = ea.Tensors("settings/test/best/pgd20")[0].tensor_proto.string_val[0].decode()
    assert setting == f"{setting_label(best)} @ best" and setting.startswith("pgd20, ")


def test_the_profile_is_the_runs_hparams(tmp_path):
    from tensorboard.plugins.hparams import plugin_data_pb2

    home = tmp_path / "home"
    view = recorded_cfa(home)
    out = tmp_path / "tb"
    assert fairtui_cmd("export", view.run_id, "--format", "tensorboard", "-o", str(out), home=home).returncode == 0
    ea = read(next(out.iterdir()))
    event = ea.Tensors("_hparams_/session_start_info")[0]
    assert event.step == 0
    meta = ea.SummaryMetadata("_hparams_/session_start_info")
    data = plugin_data_pb2.HParamsPluginData.FromString(meta.plugin_data.content)
    hp = data.session_start_info.hparams
    assert hp["method.name"].string_value == "cfa"
    assert hp["method.lambda1"].number_value == pytest.approx(0.5)
    assert hp["method.fawa"].bool_value is True


def test_it_writes_outside_the_home_and_replaces_only_with_force(tmp_path):
    home = tmp_path / "home"
    view = recorded_cfa(home)
    inside = fairtui_cmd("export", view.run_id, "--format", "tensorboard", "-o", str(home / "tb"), home=home)
    assert inside.returncode == 2 and "inside the fairtui home" in inside.stderr
    no_dir = fairtui_cmd("export", view.run_id, "--format", "tensorboard", home=home)
    assert no_dir.returncode == 2 and "-o DIR" in no_dir.stderr
    out = tmp_path / "tb"
    assert fairtui_cmd("export", view.run_id, "--format", "tensorboard", "-o", str(out), home=home).returncode == 0
    again = fairtui_cmd("export", view.run_id, "--format", "tensorboard", "-o", str(out), home=home)
    assert again.returncode == 2 and "--force replaces it" in again.stderr
    first = sorted(p.name for p in out.rglob("*"))
    forced = fairtui_cmd("export", view.run_id, "--format", "tensorboard", "-o", str(out), "--force", home=home)
    assert forced.returncode == 0, forced.stderr
    assert len(list(next(out.iterdir()).iterdir())) == 1  # the old event file was replaced, not added to
    assert len(first) == 2 and not list(out.glob(".*fairtui-tmp"))
