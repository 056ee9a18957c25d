"""Writers for the concurrency tests of the run index and meta.json, each started as a process of its own
(multiprocessing's "spawn"). A spawned process imports the module its target lives in: here that is only
fairtui's store, not a test module, whose imports (tests.conftest: torch) cost each writer about 2 s of
CPU before its first write."""

from pathlib import Path


def write_index(home: str, worker: int, n: int) -> None:
    from fairtui.runs.store import RunIndex

    index = RunIndex(Path(home))
    for i in range(n):
        doc = {"run_id": f"w{worker:02d}-{i:03d}", "name": f"w{worker}", "status": "running", "epoch": 0,
               "summary": {}}
        index.upsert(doc)
        index.upsert({**doc, "status": "completed", "epoch": 1})


def tag_many(run_dir, prefix: str, n: int) -> None:
    from fairtui.launch.control import update_meta

    for i in range(n):
        update_meta(run_dir, lambda meta, t=f"{prefix}{i}": meta.setdefault("tags", []).append(t))


def note_many(run_dir, n: int) -> None:
    from fairtui.launch.control import update_meta

    for i in range(n):
        update_meta(run_dir, lambda meta, i=i: meta.update(notes=f"note {i}"))
