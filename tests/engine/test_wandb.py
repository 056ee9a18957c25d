"""`train.log_to = ["wandb"]`: a run writes an offline W&B run with its numbers (read back here from the
offline run file), the numbers of the run do not change, and W&B failing never fails the run."""

import json
import os
import struct
import sys
import types

import pytest

from engine.contract.profile_io import load_profile
from tests.conftest import ROOT, TINY, events_of, train_tiny


def wandb_records(run_dir):
    """The records of the run's offline W&B file(s): W&B's header, then LevelDB log blocks of
    protocol-buffer `Record`s (what `wandb sync` uploads)."""
    from wandb.proto import wandb_internal_pb2 as pb

    out = []
    for path in sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb")):
        data = path.read_bytes()
        assert data[:4] == b":W&B"
        pos, partial = 7, b""
        while pos + 7 <= len(data):
            left = 32768 - pos % 32768
            if left < 7:
                pos += left
                continue
            _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
            if kind == 0:
                pos += left
                continue
            chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
            partial = chunk if kind in (1, 2) else partial + chunk
            if kind in (1, 4):
                record = pb.Record()
                record.ParseFromString(partial)
                out.append(record)
    return out


def items(update) -> dict:
    return {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in update}


@pytest.fixture(scope="module")
def mirrored_run(tmp_path_factory):
    pytest.importorskip("wandb")
    folder = tmp_path_factory.mktemp("wandb")
    run_dir = train_tiny(folder, overrides=('train.log_to=["wandb"]', "train.wandb_project=fairtui-test"))
    return run_dir


def test_a_run_writes_an_offline_wandb_run_with_every_epoch(mirrored_run):
    records = wandb_records(mirrored_run)
    kinds = [r.WhichOneof("record_type") for r in records]
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run.run_id == mirrored_run.name and run.project == "fairtui-test"
    config = items(run.config.update)
    assert config["method"]["name"] == "pgd_at" and config["train"]["log_to"] == ["wandb"]
    events = events_of(mirrored_run)
    epochs = [e for e in events if e["type"] == "epoch_end"]
    history = [items(r.history.item) for r in records if r.WhichOneof("record_type") == "history"]
    assert [h["_step"] for h in history] == [e["epoch"] for e in epochs]
    names = next(e for e in events if e["type"] == "run_started")["class_names"]
    for h, e in zip(history, epochs):
        assert h[f"val/robust_per_class/0_{names[0]}"] == pytest.approx(e["val"]["robust_acc_per_class"][0])
        assert h["val/robust_worst"] == pytest.approx(min(e["val"]["robust_acc_per_class"]))
        assert h["train/loss"] == pytest.approx(e["train"]["loss"])
    summary = {}
    for r in records:
        if r.WhichOneof("record_type") == "summary":
            summary.update(items(r.summary.update))
    best = next(e for e in events if e["type"] == "eval_result" and e["checkpoint"] == "best" and e["attack"] == "pgd5")
    assert summary["test/best/pgd5/worst_robust"] == pytest.approx(best["worst_robust"])
    assert summary["settings/test/best/pgd5"].startswith("pgd5, eps ")
    exit_record = [r.exit for r in records if r.WhichOneof("record_type") == "exit"]
    assert kinds[-1] == "exit" and exit_record[-1].exit_code == 0
    assert next(e for e in reversed(events) if e["type"] == "run_finished")["status"] == "completed"


def test_mirroring_does_not_change_the_runs_numbers(mirrored_run, tmp_path):
    plain = train_tiny(tmp_path)

    def numbers(run_dir):
        return [(e["type"], e.get("val"), e.get("robust_acc_per_class")) for e in events_of(run_dir)
                if e["type"] in ("epoch_end", "eval_result")]

    assert numbers(plain) == numbers(mirrored_run)


class Mirrored:
    """The engine's wiring in small: each event recorded first, then handed to W&B's live mirror."""

    def __init__(self, run_dir, profile):
        from engine.runtime.sinks import LiveMirror
        from engine.runtime.wandb_log import WandbSink

        self.run_dir, self.emitted, self.closed = run_dir, [], False
        self.events = self
        self.mirror = LiveMirror("wandb", WandbSink(run_dir, profile), run_dir, profile)

    def emit(self, type_, **payload):
        event = {"type": type_, **payload}
        self.emitted.append(event)
        self.mirror(event)
        return event

    def close(self):
        self.mirror.close()
        self.closed = True


def mirror(tmp_path, monkeypatch, fake_wandb):
    profile_path = tmp_path / "p.toml"
    profile_path.write_text(TINY)
    profile = load_profile(profile_path, ['train.log_to=["wandb"]'])
    monkeypatch.setitem(sys.modules, "wandb", fake_wandb)
    return Mirrored(tmp_path / "20260101-000000-abcdef", profile)


def test_wandb_failing_is_one_warning_and_the_events_are_all_written(tmp_path, monkeypatch, caplog):
    calls = []

    class Run:
        summary: dict = {}

        def log(self, values, step):
            calls.append(step)
            if step == 2:
                raise ConnectionError("W&B\nbackend gone")

        def finish(self, exit_code):
            calls.append(("finish", exit_code))

    fake = types.SimpleNamespace(init=lambda **kw: Run(), Settings=lambda **kw: None)
    m = mirror(tmp_path, monkeypatch, fake)
    m.emit("run_started", class_names=["a", "b"])
    for epoch in (1, 2, 3):
        m.emit("epoch_end", epoch=epoch, val={"robust_acc_per_class": [0.1, 0.2]})
    m.emit("run_finished", status="completed")
    m.close()
    assert [e["type"] for e in m.events.emitted] == ["run_started"] + ["epoch_end"] * 3 + ["run_finished"]
    assert calls == [1, 2, ("finish", 1)]  # off after the failure: epoch 3 is not sent
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == ["train.log_to wandb: W&B backend gone; the run goes on without W&B (its run folder "
                        "is the record)"]
    assert m.events.closed


def test_wandb_missing_names_the_extra_and_the_run_goes_on(tmp_path, monkeypatch, caplog):
    m = mirror(tmp_path, monkeypatch, None)  # `import wandb` raises ImportError
    m.emit("run_started", class_names=["a", "b"])
    m.emit("epoch_end", epoch=1, val={"robust_acc_per_class": [0.1, 0.2]})
    assert len(m.events.emitted) == 2
    assert any("pip install 'fairtui[wandb]'" in r.getMessage() for r in caplog.records)


def test_wandb_is_given_the_runs_identity_and_mode(tmp_path, monkeypatch):
    seen = {}

    class Run:
        summary: dict = {}

        def log(self, values, step):
            seen.setdefault("steps", []).append(step)

        def finish(self, exit_code):
            seen["exit"] = exit_code

    def init(**kw):
        seen.update(kw)
        return Run()

    m = mirror(tmp_path, monkeypatch, types.SimpleNamespace(init=init, Settings=lambda **kw: kw))
    m.run_dir.mkdir()
    (m.run_dir / "meta.json").write_text(json.dumps({"name": "my-run", "tags": ["paper", "v2"]}))
    m.emit("run_resumed", epoch=3, class_names=["a", "b"])  # a resumed run continues the same W&B run
    m.emit("epoch_end", epoch=4, val={"robust_acc_per_class": [0.1, 0.2]})
    m.emit("run_finished", status="stopped")
    assert seen["id"] == "20260101-000000-abcdef" and seen["resume"] == "allow"
    assert seen["name"] == "my-run" and seen["tags"] == ["paper", "v2"] and seen["mode"] == "offline"
    assert seen["settings"]["console"] == "off" and seen["steps"] == [4] and seen["exit"] == 1


def test_a_hung_wandb_is_abandoned_and_the_run_completes(tmp_path):
    """W&B that never answers (a stuck service, a network file system): each call is bounded, the mirror
    turns itself off with one warning, the run completes, and the engine exits although W&B's own exit
    hook would wait for ever."""
    import subprocess
    import textwrap

    from tests.conftest import engine_env, make_run_dir

    fake = tmp_path / "fake" / "wandb"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(textwrap.dedent("""
        import atexit, time
        atexit.register(lambda: time.sleep(3600))  # W&B's teardown, waiting on a service that is gone

        class Settings:
            def __init__(self, **kw):
                pass

        class Run:
            summary = {}

            def log(self, values, step):
                time.sleep(3600)

            def finish(self, exit_code=0):
                time.sleep(3600)

        def init(**kw):
            return Run()
    """))
    profile = tmp_path / "p.toml"
    profile.write_text(TINY)
    run_dir = make_run_dir(tmp_path, profile, overrides=('train.log_to=["wandb"]',))
    env = engine_env()
    env.update(PYTHONPATH=f"{tmp_path / 'fake'}{os.pathsep}{env['PYTHONPATH']}", FAIRTUI_WANDB_TIMEOUT_S="2")
    proc = subprocess.run([sys.executable, "-m", "engine", "train", str(run_dir)], env=env, capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    events = events_of(run_dir)
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "completed"
    assert [e["epoch"] for e in events if e["type"] == "epoch_end"] == [1, 2]
    warned = [line for line in proc.stderr.splitlines() if "train.log_to wandb" in line and "WARNING" in line]
    assert len(warned) == 1 and "W&B did not answer within 2 s" in warned[0], proc.stderr[-2000:]
