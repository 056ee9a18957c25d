"""The run index: concurrent writers, crashes, reindex, status reconciliation, damaged event lines."""

import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fairtui.runs.runfolder import RunView
from fairtui.runs.store import RunIndex, document_for
from fairtui.runs.synthetic import make_run
from tests.conftest import HANG_S, ROOT, fairtui_cmd
from tests.fairtui import store_workers


def test_eight_concurrent_writers_lose_nothing(tmp_path):
    # 8 x 25 documents, each written twice: 400 transactions, each an fsync'd replace of the whole file
    # (about 25 ms here), so the writers' lifetimes overlap for seconds while the lock takes turns
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=store_workers.write_index, args=(str(tmp_path), w, 25)) for w in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=HANG_S)
        assert p.exitcode == 0
    # what the writers left in the file (read() would reconcile these folderless documents away)
    docs = RunIndex(tmp_path)._read_all()
    assert len(docs) == 200
    assert len({d["run_id"] for d in docs}) == 200
    assert all(d["status"] == "completed" and d["epoch"] == 1 for d in docs)
    json.loads((tmp_path / "runs.json").read_text())  # well-formed


def test_a_writer_killed_mid_write_leaves_a_loadable_index_and_reindex_restores(tmp_path):
    for i in range(5):
        make_run(tmp_path, f"r{i}", name=f"run{i}")
    RunIndex(tmp_path).reindex()
    code = ("import sys, pathlib\nfrom fairtui.runs.store import RunIndex\nidx = RunIndex(pathlib.Path(sys.argv[1]))\n"
            "i = 0\nwhile True:\n    idx.upsert({'run_id': f'x{i}', 'status': 'running', 'summary': {}, 'pad': 'p' * 5000})\n"
            "    i += 1\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT)
    time.sleep(1.5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    docs = RunIndex(tmp_path).read()  # loads: the file was replaced whole or not at all
    assert {f"r{i}" for i in range(5)} <= {d["run_id"] for d in docs}
    (tmp_path / "runs.json").write_text("{garbage")  # even a damaged index is survivable:
    assert {d["run_id"] for d in RunIndex(tmp_path).read()} == {f"r{i}" for i in range(5)}  # healed from folders
    count, _ = RunIndex(tmp_path).reindex()
    assert count == 5 and len(RunIndex(tmp_path).read()) == 5


def test_stale_running_entries_become_lost(tmp_path):
    run_dir = make_run(tmp_path, "r1", status="running")
    (run_dir / "engine.json").write_text(json.dumps({"pid": 999999, "host": os.uname().nodename,
                                                     "proc_start": 1.0}))
    index = RunIndex(tmp_path)
    index.upsert({**document_for(run_dir), "status": "running"})
    assert index.read()[0]["status"] == "lost"
    assert json.loads((tmp_path / "runs.json").read_text())["_default"]["1"]["status"] == "lost"


def test_live_process_is_running(tmp_path):
    from engine.contract.procinfo import process_start_time

    run_dir = make_run(tmp_path, "r1", status="running")
    (run_dir / "engine.json").write_text(json.dumps({"pid": os.getpid(), "host": os.uname().nodename,
                                                     "proc_start": process_start_time(os.getpid())}))
    assert RunView.load(run_dir).status() == "running"
    (run_dir / "engine.json").write_text(json.dumps({"pid": os.getpid(), "host": os.uname().nodename,
                                                     "proc_start": 12345.0}))  # a reused pid
    assert RunView.load(run_dir).status() == "lost"


def test_damaged_event_lines_are_skipped_with_a_warning(tmp_path):
    run_dir = make_run(tmp_path, "r1", epochs=3)
    path = run_dir / "events.jsonl"
    lines = path.read_text().splitlines()
    lines.insert(2, "this is not json")
    lines[4] = lines[4][:25]  # truncated
    path.write_text("\n".join(lines) + "\n")
    view = RunView.load(run_dir)
    assert len(view.warnings) == 2
    assert f"{path}:3:" in view.warnings[0] and f"{path}:5:" in view.warnings[1]
    assert view.status() == "completed" and len(view.epochs) == 2


def test_ready_listing_equals_the_reconciled_index_and_notices_changes(tmp_path):
    for i in range(3):
        make_run(tmp_path, f"r{i}", name=f"run{i}")
    running = make_run(tmp_path, "r9", status="running")
    from engine.contract.procinfo import process_start_time

    (running / "engine.json").write_text(json.dumps({"pid": os.getpid(), "host": os.uname().nodename,
                                                     "proc_start": process_start_time(os.getpid())}))
    index = RunIndex(tmp_path)
    index.reindex()
    assert {d["run_id"]: d["status"] for d in index.read()}["r9"] == "running"
    assert json.loads(index.listing_json()) == index.read()
    # r9's engine dies: its status changes without anyone writing the index
    (running / "engine.json").write_text(json.dumps({"pid": 999999, "host": os.uname().nodename}))
    assert index.listing_json() is None
    docs = index.read()  # reconciles, rewrites the index and the listing
    assert {d["run_id"]: d["status"] for d in docs}["r9"] == "lost"
    assert json.loads(index.listing_json()) == docs
    make_run(tmp_path, "r5")  # a folder the index has not seen
    assert index.listing_json() is None
    assert len(index.read()) == 5 and len(json.loads(index.listing_json())) == 5


def _append(run_dir, *events):
    import json as _json

    lines = (run_dir / "events.jsonl").read_text().splitlines()
    seq = len(lines)
    with open(run_dir / "events.jsonl", "a") as fh:
        for i, e in enumerate(events):
            fh.write(_json.dumps({"v": 1, "seq": seq + i, "t": 0, "run_id": run_dir.name, **e}) + "\n")


def test_a_stopped_run_resumed_behind_the_index_is_listed_as_it_is_now(tmp_path):
    """Resumed from the app or the queue, nobody tells the index: ls must still see it completed."""
    import json as _json
    import os
    import time

    from fairtui.runs.store import RunIndex
    from fairtui.runs.synthetic import make_run
    from tests.conftest import fairtui_cmd

    run_dir = make_run(tmp_path, "20260101-000000-aaaaaa", name="cfa", status="stopped", epochs=1)
    index = RunIndex(tmp_path)
    assert index.read()[0]["status"] == "stopped"
    assert _json.loads(fairtui_cmd("ls", "--json", home=tmp_path).stdout)[0]["status"] == "stopped"
    time.sleep(0.01)
    _append(run_dir, {"type": "run_resumed", "epoch": 1},
            {"type": "eval_result", "split": "test", "checkpoint": "last", "epoch": 1, "attack": "pgd20",
             "clean_acc_per_class": [0.5] * 10, "robust_acc_per_class": [0.25] * 10, "avg_clean": 0.5,
             "avg_robust": 0.25, "worst_robust": 0.25, "cv": 0.0, "mcd": 0.0},
            {"type": "run_finished", "status": "completed"})
    for args in (("ls", "--json"), ("ls", "--json", "--status", "completed")):
        (doc,) = _json.loads(fairtui_cmd(*args, home=tmp_path).stdout)
        assert doc["status"] == "completed" and doc["summary"]["last/pgd20"]["avg_robust"] == 0.25
    assert "completed" in fairtui_cmd("ls", home=tmp_path, env_extra={"COLUMNS": "200"}).stdout
    # A truncated event stream: ls says what show says.
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    (run_dir / "events.jsonl").write_text("\n".join(lines[:2]) + "\n")  # run_started, epoch_end
    os.utime(run_dir / "events.jsonl", (time.time() + 1, time.time() + 1))
    show = _json.loads(fairtui_cmd("show", "cfa", "--json", home=tmp_path).stdout)["status"]
    assert _json.loads(fairtui_cmd("ls", "--json", home=tmp_path).stdout)[0]["status"] == show == "lost"


def test_an_empty_or_blank_run_reference_is_a_usage_error_and_deletes_nothing(tmp_path):
    from fairtui.runs.synthetic import make_run
    from tests.conftest import fairtui_cmd

    make_run(tmp_path, "20260101-000000-aaaaaa", name="only")
    for ref in ("", " ", "."):
        for args in (("rm", ref, "--yes"), ("show", ref), ("tag", ref, "x")):
            proc = fairtui_cmd(*args, home=tmp_path)
            assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
            assert "RUN must be" in proc.stderr
    assert (tmp_path / "runs" / "20260101-000000-aaaaaa" / "profile.toml").exists()


def test_concurrent_tags_and_notes_lose_no_update(tmp_path):
    import json as _json
    import multiprocessing

    from fairtui.runs.synthetic import make_run

    run_dir = make_run(tmp_path, "20260101-000000-aaaaaa", name="busy")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=store_workers.tag_many, args=(run_dir, "a", 20)),
             ctx.Process(target=store_workers.tag_many, args=(run_dir, "b", 20)),
             ctx.Process(target=store_workers.note_many, args=(run_dir, 20))]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    meta = _json.loads((run_dir / "meta.json").read_text())
    assert sorted(meta["tags"]) == sorted([f"a{i}" for i in range(20)] + [f"b{i}" for i in range(20)])
    assert meta["notes"] == "note 19"


def test_a_killed_engine_that_is_not_reaped_yet_is_not_running(tmp_path):
    import json as _json
    import signal
    import socket
    import subprocess
    import sys

    from engine.contract.procinfo import process_start_time
    from fairtui.runs.runfolder import engine_alive

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    (tmp_path / "engine.json").write_text(_json.dumps({"pid": child.pid, "host": socket.gethostname(),
                                                       "proc_start": process_start_time(child.pid)}))
    assert engine_alive(tmp_path)
    child.send_signal(signal.SIGKILL)
    import time

    deadline = time.time() + HANG_S
    while time.time() < deadline and "Z" not in open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1][:3]:
        time.sleep(0.01)
    assert not engine_alive(tmp_path)  # a zombie: still in /proc, signal 0 still reaches it
    child.wait()


@pytest.fixture
def read_only_home(tmp_path, monkeypatch):
    """A home folder on a read-only mount: every write under it fails with EROFS, as the kernel says it
    (permissions cannot show this: the tests run as root, who writes anywhere)."""
    import builtins
    import errno
    import tempfile

    from fairtui.runs.store import RunIndex

    home = tmp_path / "home"
    make_run(home, "20260101-000000-aaaaaa", name="shared", status="stopped")
    RunIndex(home).read()
    make_run(home, "20260101-000001-bbbbbb", name="unindexed")  # the index is stale as well
    real_open, real_mkstemp = builtins.open, tempfile.mkstemp

    def under_home(path) -> bool:
        return str(Path(path).resolve()).startswith(str(home.resolve()))

    def ro_open(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, Path)) and any(c in mode for c in "wax+") and under_home(file):
            raise OSError(errno.EROFS, "Read-only file system", str(file))
        return real_open(file, mode, *args, **kwargs)

    def ro_mkstemp(*args, dir=None, **kwargs):
        if dir is not None and under_home(dir):
            raise OSError(errno.EROFS, "Read-only file system", str(dir))
        return real_mkstemp(*args, dir=dir, **kwargs)

    monkeypatch.setattr(builtins, "open", ro_open)
    monkeypatch.setattr(tempfile, "mkstemp", ro_mkstemp)
    return home


def cli_in_process(monkeypatch, capsys, *args):
    from fairtui.cli import main

    monkeypatch.setattr(sys, "argv", ["fairtui", *args])
    try:
        main()
        code = 0
    except SystemExit as exit_:
        code = exit_.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_read_only_home_can_be_read_and_says_when_it_cannot_be_written(read_only_home, monkeypatch, capsys):
    home = str(read_only_home)
    code, out, err = cli_in_process(monkeypatch, capsys, "ls", "--json", "--home", home)
    assert code == 0, err
    assert sorted(d["name"] for d in json.loads(out)) == ["shared", "unindexed"]
    assert cli_in_process(monkeypatch, capsys, "ls", "--home", home)[0] == 0
    assert cli_in_process(monkeypatch, capsys, "show", "shared", "--json", "--home", home)[0] == 0
    for args in (("reindex",), ("tag", "shared", "x")):
        code, out, err = cli_in_process(monkeypatch, capsys, *args, "--home", home)
        assert code == 1, (args, err)
        assert "read-only" in err and len(err.strip().splitlines()) == 1, err


async def test_the_app_opens_on_a_read_only_home_and_lists_its_runs(read_only_home):
    from fairtui.app import make_app

    app = make_app(home=read_only_home, profiles_dir=read_only_home, gpu_inventory=lambda: [], poll_interval=0.2,
                   queue_worker=False)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(10):  # several queue ticks and index polls
            await pilot.pause(0.1)
        table = app.screen.query_one("DataTable")
        text = str([table.get_row_at(i) for i in range(table.row_count)])
        assert "shared" in text and "unindexed" in text
    assert app.return_code in (0, None)


def test_a_deleted_run_folder_leaves_the_index_at_the_next_read(tmp_path):
    make_run(tmp_path, "20260101-000000-aaaaaa", name="keep")
    gone = make_run(tmp_path, "20260101-000001-bbbbbb", name="gone")
    index = RunIndex(tmp_path)
    assert {d["name"] for d in index.read()} == {"keep", "gone"}
    shutil.rmtree(gone)
    assert [d["name"] for d in index.read()] == ["keep"]
    assert [d["run_id"] for d in index._read_all()] == ["20260101-000000-aaaaaa"]  # the file too, not only the view
    from tests.conftest import fairtui_cmd

    shown = fairtui_cmd("show", "gone", home=tmp_path)
    assert shown.returncode == 2 and "did you mean" not in shown.stderr


def test_the_index_never_holds_an_older_note_than_the_folder(tmp_path):
    """A note written to meta.json after the run was indexed (another process's `note`, between its write and
    its re-register): the next read shows the folder's note, not the indexed one."""
    from fairtui.launch.launcher import change_meta

    run = make_run(tmp_path, "20260101-000000-aaaaaa", name="a")
    index = RunIndex(tmp_path)
    change_meta(run, lambda m: m.update(notes="old"))
    index.register(run)
    time.sleep(0.01)
    change_meta(run, lambda m: m.update(notes="new", tags=["t"]))
    doc = next(d for d in index.read() if d["run_id"] == run.name)
    assert (doc["notes"], doc["tags"]) == ("new", ["t"])


def test_the_first_read_of_an_unindexed_home_is_batched_and_leaves_the_lock_free_between_batches(
        tmp_path, monkeypatch):
    """Rebuilding the index inside `ls` writes the file once per batch, not once per run (which made the
    first `ls` on 2,000 runs take 10 minutes), and `tag` can take the lock while documents are made."""
    import fcntl

    from fairtui.runs import store

    for i in range(23):
        make_run(tmp_path, f"20260101-{i:06d}-u", name=f"u{i}", epochs=1)
    monkeypatch.setattr(store, "BATCH", 10)
    writes, lock_free = [], []
    real_write, real_document = store.AtomicJSONStorage.write, store.document_for

    def counting_write(self, data):
        writes.append(len(data.get("_default", {})))
        real_write(self, data)

    def probing_document(run_dir, view=None):
        with open(tmp_path / "runs.json.lock", "a") as other:  # as `tag` would, from another open file
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(other, fcntl.LOCK_UN)
                lock_free.append(True)
            except BlockingIOError:
                lock_free.append(False)
        return real_document(run_dir, view)

    monkeypatch.setattr(store.AtomicJSONStorage, "write", counting_write)
    monkeypatch.setattr(store, "document_for", probing_document)
    docs = RunIndex(tmp_path).read()
    assert len(docs) == 23 and writes == [10, 20, 23]  # two full batches, then the rest
    assert lock_free and all(lock_free)
    assert [d["run_id"] for d in RunIndex(tmp_path)._read_all()] == sorted(d["run_id"] for d in docs)


def test_the_index_keeps_numbers_as_measured_so_ls_rounds_once(tmp_path):
    """0.72149 was kept as 0.7215 and `ls` printed 0.722 where every other view printed 0.721 (#56 item 10); an
    index made before keeps its rounded numbers only until it is read again."""
    import json

    from fairtui.runs.store import RunIndex, document_for
    from fairtui.runs.synthetic import make_run

    run = make_run(tmp_path, "r1")
    lines = (run / "events.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    for e in events:
        if e.get("type") == "eval_result":
            e["avg_robust"] = 0.72149
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    doc = document_for(run)
    assert doc["summary"]["best/pgd20"]["avg_robust"] == 0.72149
    assert f"{doc['summary']['best/pgd20']['avg_robust']:.3f}" == "0.721"
    index = RunIndex(tmp_path)
    index.register(run)
    old = {**doc, "summary": {"best/pgd20": {"avg_robust": 0.7215}}}
    old.pop("numbers")
    with index.transaction() as db:  # as an index of an earlier version stored it
        db.truncate()
        db.insert(old)
    (read,) = index.read()
    assert read["summary"]["best/pgd20"]["avg_robust"] == 0.72149


@pytest.mark.parametrize("how", ["never indexed", "runs copied into an indexed home"])
def test_an_index_of_part_of_a_home_is_never_trusted(tmp_path, how):
    """#71 item 2, the probe's sequence: run folders copied in (or runs.json deleted), then `tag` writes the index.
    Every command still sees every run: `ls --json` lists them all, `show NAME` finds a run by its name, and an
    ambiguous `rm NAME --yes` is refused with nothing deleted."""
    home = tmp_path / "home"
    if how == "runs copied into an indexed home":
        make_run(home, "20260101-000000-first0", name="first")
        assert fairtui_cmd("ls", "--json", home=home).returncode == 0  # indexed, with its listing
    for i in range(3):
        make_run(home, f"20260102-00000{i}-share{i}", name="shared")
    make_run(home, "20260102-000009-other9", name="other")
    assert fairtui_cmd("tag", "other", "x", home=home).returncode == 0
    every = sorted(p.name for p in (home / "runs").iterdir())
    listed = json.loads(fairtui_cmd("ls", "--json", home=home).stdout)
    assert sorted(d["run_id"] for d in listed) == every
    shown = fairtui_cmd("show", "shared", home=home)
    assert shown.returncode == 0 and "20260102-000002-share2" in shown.stdout
    refused = fairtui_cmd("rm", "shared", "--yes", home=home)
    assert refused.returncode == 2 and "names 3 runs" in refused.stderr
    assert sorted(p.name for p in (home / "runs").iterdir()) == every


def test_the_gpus_column_says_where_a_run_that_named_no_device_trained(tmp_path):
    """`fairtui run` without --gpus leaves the choice to the engine: the index says where it trained ("cpu", the
    GPUs it saw), "auto" before it starts, and what --gpus named where it named one."""
    import json as _json

    cpu = make_run(tmp_path, "20260101-000000-cpu000")
    gpu = make_run(tmp_path, "20260101-000001-gpu000")
    events = (gpu / "events.jsonl").read_text().splitlines()
    first = _json.loads(events[0])
    first["device"] = "cuda (NVIDIA H200; CUDA_VISIBLE_DEVICES=1); autocast bfloat16"
    (gpu / "events.jsonl").write_text("\n".join([_json.dumps(first), *events[1:]]) + "\n")
    named = make_run(tmp_path, "20260101-000002-named0")
    meta = _json.loads((named / "meta.json").read_text())
    (named / "meta.json").write_text(_json.dumps({**meta, "gpus": "0,1"}))
    waiting = make_run(tmp_path, "20260101-000003-queued")
    (waiting / "events.jsonl").write_text("")
    assert [document_for(d).get("gpus") for d in (cpu, gpu, named, waiting)] == ["cpu", "1", "0,1", "auto"]
