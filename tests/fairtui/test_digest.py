"""The folded event stream (fairtui.runs.digest): the same answers as reading the whole stream, the stream read
once and then only what was appended, a replaced stream folded again, and the app's run screen loading off
its thread so that `q` quits."""

from __future__ import annotations

import json
import threading

from engine.contract.events import read_events
from fairtui.runs import digest as digest_module
from fairtui.runs.digest import Digest, cache_path, read_digest
from fairtui.runs.runfolder import RunView, headline_results
from fairtui.runs.synthetic import make_run


def _append(path, events: list[dict]) -> None:
    with open(path, "a") as fh:
        for e in events:
            fh.write(json.dumps(e) + "\n")


def _long_run(home, run_id="20260101-000000-longlong"):
    """A run resumed twice (epochs 2 and 3 repeated), evaluated again and again at a few settings, with a
    damaged line: the cases where the latest of something must win."""
    run = make_run(home, run_id, name="long", epochs=4, attacks=("pgd20", "clean"))
    events, _ = read_events(run / "events.jsonl")
    epoch = next(e for e in events if e["type"] == "epoch_end" and e["epoch"] == 2)
    evals = [e for e in events if e["type"] == "eval_result"]
    more = [{"type": "run_resumed", "epoch": 1}, {**epoch, "epoch": 2, "lr": 0.5}, {**epoch, "epoch": 3, "lr": 0.6}]
    for i in range(40):
        for e in evals:
            more.append({**e, "avg_robust": i / 100, "epoch": 4 + i % 3})
            more.append({**e, "avg_robust": i / 50, "setting": {**e["setting"], "n_per_class": 5, "subset_seed": 0}})
    more.append({"type": "run_finished", "status": "stopped"})
    _append(run / "events.jsonl", more)
    with open(run / "events.jsonl", "a") as fh:
        fh.write("not json\n")
    _append(run / "events.jsonl", [{"type": "run_resumed", "epoch": 3}, {"type": "run_finished",
                                                                        "status": "completed"}])
    return run


def test_the_digest_answers_as_the_whole_stream_does(tmp_path):
    run = _long_run(tmp_path)
    events, warnings = read_events(run / "events.jsonl")
    view = RunView.load(run)
    by_epoch = {e["epoch"]: e for e in events if e["type"] == "epoch_end"}
    assert view.epochs == [by_epoch[k] for k in sorted(by_epoch)] and view.epochs[1]["lr"] == 0.5
    assert view.finished == events[-1] and view.status() == "completed"
    assert view.started == events[0]
    config = events[0]["config"]
    # results are kept slim (their confusion matrix left out, its line located), and read whole on demand
    whole = headline_results(events, config)
    assert {k: view.full(e) for k, e in view.results().items()} == whole
    for key, slim in view.results().items():
        assert "confusion_matrix" not in slim and slim["_omitted"] == ["confusion_matrix"]
        assert {k: v for k, v in slim.items() if not k.startswith("_")} == \
            {k: v for k, v in whole[key].items() if k != "confusion_matrix"}
    assert {k: e["avg_robust"] for k, e in view.results().items()} == {
        ("test", c, a): 0.39 for c in ("last", "best") for a in ("pgd20", "clean")}
    latest_subset = {(e["checkpoint"], e["attack"]): e["avg_robust"] for e in events
                     if e["type"] == "eval_result" and e["setting"].get("n_per_class")}
    assert {(e["checkpoint"], e["attack"]): e["avg_robust"] for e, _ in view.other_results()} == latest_subset
    assert view.warnings == warnings and len(warnings) == 1
    # bounded by the run, not its stream: one result per identity however often it was measured
    assert len(view.eval_results()) == 8 and sum(e["type"] == "eval_result" for e in events) > 300


def test_a_cached_digest_reads_only_what_was_appended_and_a_replaced_stream_is_folded_again(tmp_path, monkeypatch):
    monkeypatch.setattr(digest_module, "CACHE_MIN_BYTES", 0)
    run = _long_run(tmp_path)
    folded = []
    real = Digest.fold_line
    monkeypatch.setattr(Digest, "fold_line", lambda d, line, *a: (folded.append(line), real(d, line, *a)))
    first = read_digest(run)
    lines = len((run / "events.jsonl").read_bytes().splitlines())
    assert len(folded) == lines and cache_path(run).exists()
    folded.clear()
    again = read_digest(run)
    assert folded == [] and again.epoch_list() == first.epoch_list() and again.evals == first.evals  # nothing new
    assert (again.started, again.finished, again.offset) == (first.started, first.finished, first.offset)
    _append(run / "events.jsonl", [{"type": "run_resumed", "epoch": 4}])
    assert read_digest(run).finished is None and len(folded) == 1  # only the appended line
    # replaced by a shorter stream of the same start, then by one of the same length: folded from the start
    text = (run / "events.jsonl").read_text().splitlines()
    (run / "events.jsonl").write_text("\n".join(text[:3]) + "\n")
    again = read_digest(run)
    assert again.finished is None and sorted(again.epochs) == [1, 2] and again.evals == {}
    same_length = "\n".join(text[:2] + [text[2].replace('"lr": 0.1', '"lr": 0.9')]) + "\n"
    assert len(same_length) == len("\n".join(text[:3]) + "\n")
    (run / "events.jsonl").write_text(same_length)
    assert read_digest(run).epoch(2)["lr"] == 0.9
    # deleting the run deletes its cached digest
    from fairtui.runs.store import RunIndex

    RunIndex(tmp_path).remove(run.name)
    assert not cache_path(run).exists()


def test_a_fold_stops_when_cancelled_and_a_line_being_written_is_not_cached(tmp_path, monkeypatch):
    monkeypatch.setattr(digest_module, "CACHE_MIN_BYTES", 0)
    monkeypatch.setattr(digest_module, "CHUNK", 256)
    run = _long_run(tmp_path)
    calls = []
    partial = read_digest(run, cancelled=lambda: calls.append(1) or len(calls) > 40)
    assert 0 < partial.lines < len((run / "events.jsonl").read_bytes().splitlines())
    assert not cache_path(run).exists()  # a cancelled fold is not kept
    with open(run / "events.jsonl", "a") as fh:
        fh.write('{"type": "run_resumed", "epoch": 9}')  # no newline yet: still being written
    whole = read_digest(run)
    assert whole.finished is None  # shown
    cached = Digest.loads(cache_path(run).read_bytes())[0] if cache_path(run).exists() else None
    assert cached is None or cached.finished is not None  # never cached


async def test_q_quits_while_the_run_screen_still_folds_a_long_stream(tmp_path, monkeypatch):
    """The run screen folds the stream off the screen's thread: `q` quits while the fold is still at work
    (here, a fold that waits until the test lets it go)."""
    from fairtui.runs import runfolder
    from fairtui.app import make_app

    home = tmp_path / "home"
    make_run(home, "20260101-000000-slowslow", name="slow", epochs=2)
    gate, returned = threading.Event(), []

    def slow_digest(run_dir, cancelled=None):
        gate.wait(120)
        returned.append(True)
        return Digest()

    monkeypatch.setattr(runfolder, "read_digest", slow_digest)
    app = make_app(home=home, profiles_dir=tmp_path, gpu_inventory=lambda: [], poll_interval=0.2,
                   open_run="20260101-000000-slowslow", queue_worker=False)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause(0.3)
            assert "loading" in str(app.screen.query_one("#run-title").render())
            await pilot.press("q")
        assert returned == []  # the app quit while the fold still ran
    finally:
        gate.set()


def test_the_app_replays_a_stride_of_a_long_run_not_every_epoch():
    """The run screen of a run of 229,000 epochs opened in 48 s and 3.8 GB (#55 item 10): it replays a stride."""
    from fairtui.runs.digest import REPLAY_EPOCHS, replay

    d = Digest(started={"type": "run_started"}, finished={"type": "run_finished", "status": "completed"})
    for epoch in range(1, 3 * REPLAY_EPOCHS + 1):
        d.fold({"type": "epoch_end", "epoch": epoch, "time_s": 1.0})
    events = replay(d)
    epochs = [e["epoch"] for e in events if e["type"] == "epoch_end"]
    assert events[0]["type"] == "run_started" and events[-1]["type"] == "run_finished"
    assert len(epochs) <= REPLAY_EPOCHS and epochs[-1] == 3 * REPLAY_EPOCHS and epochs[0] == 1


def test_a_replay_keeps_each_resume_where_it_came():
    """Found on the fresh-clone walk: a run stopped in epoch 2 and resumed, opened afterwards, showed its epochs and
    not a word of the stop or the resume. The replay puts each resume after the epoch it took the run up from, and
    the screen's log says it as it did live."""
    from engine.contract.protocol import resumed_text
    from fairtui.runs.digest import replay
    from fairtui.runs.runstate import RunState

    d = Digest(started={"type": "run_started"}, finished={"type": "run_finished", "status": "completed"})
    d.fold({"type": "run_started", "epoch": 0})
    for epoch in (1, 2, 3):
        d.fold({"type": "epoch_end", "epoch": epoch, "time_s": 1.0})
        if epoch == 1:
            d.fold({"type": "run_resumed", "epoch": 1, "batch": 46, "batches": 157, "phase": "train"})
    d.fold({"type": "run_resumed", "epoch": 3, "batch": 0, "phase": "test"})
    d.fold({"type": "run_finished", "status": "completed"})
    kinds = [(e["type"], e.get("epoch")) for e in replay(d)]
    assert kinds == [("run_started", None), ("epoch_end", 1), ("run_resumed", 1), ("epoch_end", 2),
                     ("epoch_end", 3), ("run_resumed", 3), ("run_finished", None)]
    state = RunState(run_id="r")
    lines = [state.log_line(e) for e in replay(d) if e["type"] == "run_resumed"]
    assert lines == ["resumed in epoch 2, after batch 46 of 157", resumed_text({"epoch": 3, "phase": "test"})]


def _provenance(commit: str, model: str = "AMD EPYC", threads: int = 1) -> dict:
    return {"code": {"git_commit": commit * 40, "git_dirty": False}, "torch": "2.14.1",
            "determinism": {"threads": threads, "cpu_capability": "AVX2"}, "cpu": {"model": model, "flags": ["avx2"]}}


def _sessions_run(home, resumes: list[dict]):
    """A run whose first run_started trained nothing (lost before its first epoch and started again at
    commit b), then trained, then was resumed as ``resumes`` say (each after the epoch it names)."""
    run = make_run(home, "20260101-000000-sessns", name="sessions", epochs=4)
    lines = (run / "events.jsonl").read_text().splitlines()
    started = json.loads(lines[0])
    fp = {"train": "feedfacefeedface", "val": "v" * 16, "test": "t" * 16}
    first = {**started, "provenance": _provenance("a")}
    again = {**started, "provenance": _provenance("b"), "data_fingerprint": fp}
    body = [json.loads(line) for line in lines[1:]]
    epochs = [e for e in body if e["type"] == "epoch_end"]
    rest = [e for e in body if e["type"] != "epoch_end"]
    out = [first, again]
    done = 0
    for resume in resumes:
        out += epochs[done:resume["epoch"]] + [{"type": "run_finished", "status": "stopped"},
                                              {"type": "run_resumed", "data_fingerprint": fp, **resume}]
        done = resume["epoch"]
    out += epochs[done:] + rest
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in out))
    return run


def test_the_sessions_that_made_a_runs_numbers_are_kept_with_what_they_ran_on(tmp_path):
    """A session taken up again at the very place it took the run up trained nothing: it drops out; a resume's
    code and machine are kept, and survive the stored digest."""
    run = _sessions_run(tmp_path, [{"epoch": 1, "provenance": _provenance("b")},  # stopped before a batch:
                                   {"epoch": 1, "provenance": _provenance("c")},  # this one took it up
                                   {"epoch": 2, "batch": 5, "batches": 9, "phase": "train"}])
    view = RunView.load(run)
    commit = lambda s: (s.get("provenance") or {}).get("code", {}).get("git_commit", "-")[:1]  # noqa: E731
    kept = [(s["type"], s["epoch"], s.get("batch"), commit(s)) for s in view.training_sessions]
    assert kept == [("run_started", 0, 0, "b"), ("run_resumed", 1, 0, "c"), ("run_resumed", 2, 5, "-")]
    assert view.started["provenance"]["code"]["git_commit"][0] == "a"  # the profile's record stays the first
    again = Digest.loads(view.digest.dumps())[0]
    assert again.training_sessions() == view.digest.training_sessions()


def test_show_names_each_resume_that_ran_on_another_setup_or_did_not_say(tmp_path):
    from fairtui.runs.provenance import provenance_line

    same = _sessions_run(tmp_path / "same", [{"epoch": 2, "provenance": _provenance("b")}])
    line = provenance_line(RunView.load(same))
    assert line.startswith("provenance: data feedface/vvvvvvvv/tttttttt (train/val/test); cpu AMD EPYC (avx2); "
                           "torch 2.14.1 AVX2 kernels, 1 thread(s); commit bbbbbbb")
    assert "resumed" not in line  # the same setup: nothing to say
    other = _sessions_run(tmp_path / "other", [{"epoch": 1, "provenance": _provenance("b", threads=2)},
                                               {"epoch": 2, "provenance": _provenance("c", threads=2)},
                                               {"epoch": 3}])
    line = provenance_line(RunView.load(other))
    assert line.endswith("; commit bbbbbbb"
                         "; resumed after epoch 1 on another setup: torch 2.14.1 AVX2 kernels, 2 thread(s)"
                         "; resumed after epoch 2 on another setup: commit ccccccc"
                         "; resumed after epoch 3 by an engine that did not record its code or machine"), line
    # results measured later by `fairtui eval`: one on another commit is named, one on the training's setup not
    events = [json.loads(line) for line in (other / "events.jsonl").read_text().splitlines()]
    result = next(e for e in events if e["type"] == "eval_result")
    extra = [{**result, "attack": "aa", "checkpoint": "best", "provenance": _provenance("d", threads=2)},
             {**result, "attack": "fgsm", "checkpoint": "last", "provenance": _provenance("c", threads=2)}]
    _append(other / "events.jsonl", extra)
    line = provenance_line(RunView.load(other))
    assert line.endswith("machine; aa @ best evaluated on another setup: commit ddddddd"), line
    from tests.conftest import fairtui_cmd

    shown = fairtui_cmd("show", "20260101-000000-sessns", "--json", home=tmp_path / "other")
    assert shown.returncode == 0, shown.stderr
    assert [s["epoch"] for s in json.loads(shown.stdout)["sessions"]] == [0, 1, 2, 3]


def test_show_names_a_resume_that_trained_on_another_device_or_precision(tmp_path):
    """A CPU run in fp32 resumed on a GPU (train.device = "auto" there: bf16, channels-last) trains its later
    epochs with other arithmetic on the same commit and CPU record: the resume is named with the device and
    options it ran with, read from its ``runtime`` or, for older engines, its device text; a resume back to the
    CPU in fp32 is named again, and one that changes nothing is not."""
    from fairtui.runs.provenance import provenance_line

    gpu = "cuda (NVIDIA H200; CUDA_VISIBLE_DEVICES=0); autocast bfloat16, channels-last"
    run = _sessions_run(tmp_path, [{"epoch": 1, "provenance": _provenance("b"), "device": gpu},
                                   {"epoch": 2, "provenance": _provenance("b"), "device": "cpu", "runtime": "fp32"},
                                   {"epoch": 3, "provenance": _provenance("b"), "device": "cpu"}])
    line = provenance_line(RunView.load(run))
    assert line.endswith("; commit bbbbbbb"
                         "; resumed after epoch 1 on another setup: cuda, autocast bfloat16, channels-last"
                         "; resumed after epoch 2 on another setup: cpu, fp32"), line


def test_show_says_a_run_trained_in_bf16_and_not_one_in_fp32(tmp_path):
    """The provenance line names the training's runtime where it was not plain fp32 (a CPU run with
    train.amp = "bf16", or "auto" where it picks bf16): its numbers come from other arithmetic than an fp32 run's of
    the same profile and seed. An fp32 run's line does not mention it; an engine that did not name its device is
    not guessed at."""
    from fairtui.runs.provenance import provenance_line

    runs = {}
    for label, device in (("bf16", "cpu; autocast bfloat16, channels-last"), ("fp32", "cpu"), ("unsaid", None)):
        run = make_run(tmp_path / label, f"20260101-000000-{label:>6}".replace(" ", "x"), name=label, epochs=2)
        lines = (run / "events.jsonl").read_text().splitlines()
        started = {**json.loads(lines[0]), "provenance": _provenance("b")}
        started.pop("device", None)
        started.pop("runtime", None)
        if device is not None:
            started["device"] = device
        (run / "events.jsonl").write_text("\n".join([json.dumps(started), *lines[1:]]) + "\n")
        runs[label] = provenance_line(RunView.load(run))
    assert ", 1 thread(s); trained with autocast bfloat16, channels-last; commit bbbbbbb" in runs["bf16"], runs["bf16"]
    assert "trained with" not in runs["fp32"] and "trained with" not in runs["unsaid"]
