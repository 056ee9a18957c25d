"""The engine keeps its stream's fold as it writes (engine.contract.digest_store.Keeper, in EventWriter): the stored
`digest.json` is the fold a reader would make from the whole stream, a reader starts from it and folds only
what came after, two writers of one stream keep it whole, and a stored fold that no longer describes the
stream is never used."""

from __future__ import annotations

import random

from engine.contract import digest as contract
from engine.contract import digest_store as stored
from engine.contract.digest import DIGEST_FILE, Digest, full_event
from engine.contract.events import EventWriter, read_events


def _epoch(rng, epoch, k=5):
    return {"epoch": epoch, "epochs": 50, "lr": 0.1, "time_s": 1.0,
            "val": {"robust_acc_per_class": [rng.random() for _ in range(k)]},
            "method_state": {"beta_per_class": [rng.random() for _ in range(k)],
                             "confusion": [[rng.randrange(9) for _ in range(k)] for _ in range(k)]}}


def _result(rng, eps, k=5):
    return {"split": "test", "checkpoint": "best", "epoch": 3, "attack": "pgd20", "eps": eps, "n_per_class": 0,
            "setting": {"eps": eps, "n_per_class": 0}, "robust_acc_per_class": [rng.random() for _ in range(k)],
            "confusion_matrix": [[rng.randrange(9) for _ in range(k)] for _ in range(k)]}


def _write_run(path, rng, writer=None):
    w = writer or EventWriter(path, "r")
    w.emit("run_started", config={"name": "x", "train": {"milestones": [1, 2]}}, class_names=list("abcde"))
    for epoch in (1, 2, 3, 2, 3):  # a resume repeats epochs 2 and 3
        w.emit("epoch_end", **_epoch(rng, epoch))
    for eps in (0.1, 0.2, 0.1):  # the latest result of an identity wins
        w.emit("eval_result", **_result(rng, eps))
    w.emit("run_finished", status="completed")
    return w


def _fold_whole(path) -> Digest:
    d = Digest()
    with open(path, "rb") as fh:
        contract.fold_from(d, fh, path)
    return d


def _content(d: Digest) -> dict:
    return {"started": d.started, "epochs": d.epoch_list(), "times": d.epoch_times(), "finished": d.finished,
            "evals": d.eval_results(), "count": d.count, "offset": d.offset}


def _stored(path) -> Digest:
    digest = Digest.loads(path.read_bytes())[0]
    digest.source = path.parent / "events.jsonl"  # what load_stored sets: the stream it was checked against
    return digest


def test_the_stored_fold_is_the_fold_of_the_whole_stream_and_matrices_are_read_from_their_line(tmp_path):
    path = tmp_path / "events.jsonl"
    _write_run(path, random.Random(0)).close()
    stored = _stored(tmp_path / DIGEST_FILE)
    assert _content(stored) == _content(_fold_whole(path))
    events, _ = read_events(path)
    assert stored.offset == path.stat().st_size and stored.count == len(events)
    # slim: no matrix in the fold, each left-out matrix found again in its own line of the stream
    last = stored.epoch_list()[-1]
    assert "confusion" not in last["method_state"] and last["_omitted"] == ["method_state.confusion"]
    whole = [e for e in events if e["type"] == "epoch_end"][-1]
    assert full_event(path, last) == whole and last["method_state"]["beta_per_class"] == \
        whole["method_state"]["beta_per_class"]
    results = stored.eval_results()
    assert [r["eps"] for r in results] == [0.2, 0.1]  # the latest of each identity, in the order measured
    assert full_event(path, results[-1]) == [e for e in events if e["type"] == "eval_result"][-1]


def test_a_reader_starts_from_the_engines_fold_and_reads_only_what_came_after(tmp_path, monkeypatch):
    from fairtui.runs.digest import read_digest

    run = tmp_path / "home" / "runs" / "20260101-000000-keeper"
    run.mkdir(parents=True)
    path = run / "events.jsonl"
    writer = _write_run(path, random.Random(1))
    expected = _content(_fold_whole(path))
    folded = []
    real = Digest.fold_line
    monkeypatch.setattr(Digest, "fold_line", lambda d, line, *a: (folded.append(line), real(d, line, *a)))
    assert _content(read_digest(run)) == expected and folded == []
    # the engine stores its fold every SNAPSHOT_S: what came after the last store is all a reader folds
    monkeypatch.setattr(stored, "SNAPSHOT_S", 1e9)
    writer.emit("run_resumed", epoch=3)
    writer.emit("epoch_end", **_epoch(random.Random(2), 4))
    folded.clear()
    digest = read_digest(run)
    assert len(folded) == 2 and digest.finished is None and sorted(digest.epochs) == [1, 2, 3, 4]
    writer.close()  # a writer stores its fold when it closes
    folded.clear()
    digest = read_digest(run)
    assert folded == [] and _content(digest) == _content(_fold_whole(path))


def test_two_writers_of_one_stream_keep_its_fold_whole(tmp_path):
    path = tmp_path / "events.jsonl"
    rng = random.Random(3)
    train, evaluation = EventWriter(path, "r"), EventWriter(path, "r")
    train.emit("run_started", config={"name": "x"}, class_names=list("abcde"))
    train.emit("epoch_end", **_epoch(rng, 1))
    evaluation.emit("eval_result", **_result(rng, 0.3))  # an evaluation beside the training
    train.emit("epoch_end", **_epoch(rng, 2))
    evaluation.close()
    train.emit("run_finished", status="completed")
    train.close()
    stored = _stored(tmp_path / DIGEST_FILE)
    assert _content(stored) == _content(_fold_whole(path))
    assert len(stored.eval_results()) == 1 and sorted(stored.epochs) == [1, 2]


def test_a_stored_fold_of_another_stream_is_never_used(tmp_path):
    from fairtui.runs.digest import read_digest

    run = tmp_path / "home" / "runs" / "20260101-000000-replaced"
    run.mkdir(parents=True)
    path = run / "events.jsonl"
    _write_run(path, random.Random(4)).close()
    stored = (run / DIGEST_FILE).read_text()
    # the stream replaced by a shorter one (its start kept): the stored fold covers bytes it no longer has
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:3]))
    assert sorted(read_digest(run).epochs) == [1, 2] and read_digest(run).finished is None
    # rewritten in place at the same length (one number changed): the fold is made again
    _write_run(path.with_name("other.jsonl"), random.Random(4)).close()
    path.write_bytes(b"".join(lines))
    (run / DIGEST_FILE).write_text(stored)
    assert read_digest(run).finished is not None  # unchanged stream, fresh fold: used
    changed = b"".join(lines).replace(b'"lr":0.1', b'"lr":0.7', 1)
    assert len(changed) == len(b"".join(lines))
    path.write_bytes(changed)
    (run / DIGEST_FILE).write_text(stored)
    assert read_digest(run).epoch(1)["lr"] == 0.7


def test_a_stored_fold_reads_an_epoch_only_when_a_reader_asks_for_it(tmp_path):
    """`show`, `compare` and the index need the latest epoch and the timings: a long run's other epochs stay
    where they are in the stream, read when a reader asks for them (the app reads a stride of them)."""
    path = tmp_path / "events.jsonl"
    _write_run(path, random.Random(5)).close()
    stored = _stored(tmp_path / DIGEST_FILE)
    assert all(isinstance(v, tuple) for v in stored.epochs.values())  # each epoch its place in the stream
    assert len((tmp_path / DIGEST_FILE).read_bytes()) < len(path.read_bytes()) / 2
    whole = _fold_whole(path)
    assert stored.epoch_times() == whole.epoch_times() and stored.last_epochs(1) == whole.last_epochs(1)
    assert sorted(stored.recent) == [3]  # the latest alone was read
    assert stored.epoch_list() == whole.epoch_list()
    assert all(isinstance(v, tuple) for v in stored.epochs.values())  # still places: memory does not grow


def test_a_long_stream_is_folded_by_place_without_parsing_its_epochs(tmp_path, monkeypatch):
    """#55 item 10: a stream of many small epochs. The engine's epoch lines are folded from their first bytes
    (epoch and time), never parsed; the fold holds each epoch's place, not the epoch; the stored fold is a few
    bytes an epoch; and reading an epoch reads its line, the same event a whole fold holds."""
    path = tmp_path / "events.jsonl"
    w = EventWriter(path, "r")
    w.emit("run_started", config={"name": "x"}, class_names=list("abcde"))
    rng = random.Random(7)
    for epoch in range(1, 401):
        w.emit("epoch_end", **_epoch(rng, epoch))
    w.emit("run_finished", status="completed")
    w.close()
    (tmp_path / DIGEST_FILE).unlink()
    parsed = []
    real = contract.parse_line
    monkeypatch.setattr(contract, "parse_line", lambda line: parsed.append(line) or real(line))
    d = _fold_whole(path)
    assert len(parsed) == 2  # run_started and run_finished; no epoch line
    assert all(isinstance(v, tuple) for v in d.epochs.values()) and len(d.epochs) == 400
    assert d.epoch_times() == [1.0] * 400
    monkeypatch.setattr(contract, "parse_line", real)
    events, _ = read_events(path)
    whole = [e for e in events if e["type"] == "epoch_end"]
    assert [full_event(path, d.epoch(k)) for k in (1, 200, 400)] == [whole[0], whole[199], whole[399]]
    assert len(d.recent) == 3
    with open(path, "rb") as fh:
        stored.store(tmp_path / "fold.json", d, fh)
        again = stored.load_stored(tmp_path / "fold.json", fh)
    assert (tmp_path / "fold.json").stat().st_size < 60 * 400 + 4000  # places and times, not epochs
    assert again.epoch_times() == d.epoch_times() and again.epoch(400) == d.epoch(400)


def test_a_stride_of_a_long_run_keeps_its_first_and_latest_epochs():
    d = Digest()
    for epoch in range(1, 10_001):
        d.fold({"type": "epoch_end", "epoch": epoch, "time_s": 1.0})
    picked = [e["epoch"] for e in d.sampled_epochs(2000)]
    assert len(picked) <= 2000 and picked[0] == 1 and picked[-50:] == list(range(9951, 10_001))
    assert picked == sorted(set(picked))
    assert [e["epoch"] for e in d.sampled_epochs(20_000)] == list(range(1, 10_001))  # short enough: all


def test_an_epoch_whose_line_was_replaced_reads_as_unread_not_as_another_epoch(tmp_path):
    path = tmp_path / "events.jsonl"
    _write_run(path, random.Random(8)).close()
    d = _fold_whole(path)
    path.write_bytes(b"\n" * path.stat().st_size)  # the stream replaced under the fold
    event = d.epoch(1)
    assert event["epoch"] == 1 and event.get("_unread") is True
