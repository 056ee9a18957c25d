"""What a run ran with, in words: its code, machine, data and runtime per session, the notes a resumed or
re-evaluated run carries, and the warnings a comparison of runs owes when they did not run alike."""

from __future__ import annotations

from engine.contract.protocol import RUNTIME_FP32, resumed_text
from fairtui.runs.configurations import by_configuration, device_kind, session_runtime
from fairtui.runs.runfolder import RunView


def _setup(record: dict, fingerprint: dict | None) -> tuple:
    """What makes two sessions' arithmetic differ: the data, the CPU, torch and its kernel level and threads,
    the code."""
    cpu, det, code = record.get("cpu") or {}, record.get("determinism") or {}, record.get("code") or {}
    return ((fingerprint or {}).get("train"), cpu.get("model"), tuple(cpu.get("flags") or ()), record.get("torch"),
            det.get("cpu_capability"), det.get("threads"), code.get("git_commit"), code.get("git_dirty"))


def provenance_keys(view: RunView) -> dict:
    """What the run's first training session recorded about its arithmetic, as keys `compare RUN RUN` lists where
    two runs differ: the CPU and its kernel-selecting flags, torch's version and kernel level, the threads, the
    environment variables that change kernels (ONEDNN_MAX_CPU_ISA, ...), and the code's commit with a hash of its
    uncommitted changes. Nothing for a run that recorded none."""
    record = first_session(view).get("provenance") or {}
    if not record:
        return {}
    cpu, det, code = record.get("cpu") or {}, record.get("determinism") or {}, record.get("code") or {}
    out = {"cpu": _cpu_text(record)[4:] if cpu else None, "torch": record.get("torch"),
           "kernels": det.get("cpu_capability"), "threads": det.get("threads"),
           "code": (code.get("git_commit") or "?")[:10] + (f" + changes {code['git_diff_sha256'][:10]}"
                                                           if code.get("git_diff_sha256") else
                                                           " + changes" if code.get("git_dirty") else "")}
    out.update({f"env.{k}": v for k, v in (det.get("env") or {}).items() if v is not None})
    return out


def _data_text(fp: dict) -> str:
    return "data " + "/".join(fp.get(k, "?")[:8] for k in ("train", "val", "test"))


def _cpu_text(record: dict) -> str:
    cpu = record.get("cpu") or {}
    return f"cpu {cpu.get('model', '?')} ({', '.join(cpu.get('flags') or []) or '-'})"


def _torch_text(record: dict) -> str:
    det = record.get("determinism") or {}
    return (f"torch {record.get('torch', '?')} {det.get('cpu_capability', '?')} kernels, "
            f"{det.get('threads', '?')} thread(s)")


def commit_label(code: dict) -> str:
    """The code's commit as a run recorded it (its provenance's ``code``), marked when the working tree differed."""
    sha = (code.get("git_commit") or "?")[:7]
    return f"{sha} with uncommitted changes" if code.get("git_dirty") else sha


def _commit_text(record: dict) -> str:
    return f"commit {commit_label(record.get('code') or {})}"


def cpu_kind(view: RunView) -> str:
    """The CPU that trained the run, as its first training session recorded it ("cpu AMD EPYC (avx2, fma, ...)"),
    or "cpu not recorded" (engines before provenance)."""
    record = first_session(view).get("provenance") or {}
    return _cpu_text(record) if record.get("cpu") else "cpu not recorded"


def first_session(view: RunView) -> dict:
    """The session that started the run's numbers (its run_started; the first one that trained, where a run lost
    before its first epoch was started again), or the run's first run_started."""
    return next((s for s in view.training_sessions if s.get("type") == "run_started"), None) or view.started or {}


def resume_notes(view: RunView) -> list[str]:
    """Each resume of the run that ran on another setup than the session before it (another commit, CPU, torch,
    thread count or data, or another device kind or runtime options), or that did not record its own (engines
    before resumes recorded it): its numbers after that point came from there."""
    first = first_session(view)
    before = _setup(first.get("provenance") or {}, first.get("data_fingerprint"))
    ran = _ran_with(first)
    notes = []
    for session in view.training_sessions:
        if session.get("type") != "run_resumed":
            continue
        where, record = resumed_text(session), session.get("provenance")
        runs_with = _ran_with(session)
        other_runtime = None not in (ran, runs_with) and runs_with != ran
        ran = runs_with or ran
        if not record:
            notes.append(f"{where} by an engine that did not record its code or machine")
            continue
        now = _setup(record, session.get("data_fingerprint"))
        if now[0] is None or before[0] is None:  # a side from before data was fingerprinted: not a difference
            now = (before[0], *now[1:])
        if now != before or other_runtime:
            change = [_setup_change(before, now, record, session)] if now != before else []
            change += [f"{runs_with[0]}, {runs_with[1]}"] if other_runtime else []
            notes.append(f"{where} on another setup: {', '.join(change)}")
            before = now
    return notes


def _ran_with(session: dict) -> tuple[str, str] | None:
    """A session's device kind and runtime options ("cuda", "autocast bfloat16, channels-last"): another precision
    or device from a resume on trains the later epochs with other arithmetic. None where the session did not
    name its device."""
    kind = device_kind(session)
    return None if kind is None else (kind, session_runtime(session))


def evaluation_notes(view: RunView) -> list[str]:
    """The results that `fairtui eval` measured on another setup than the session that trained the run last
    (another commit, CPU, torch or thread count), grouped by what differs."""
    last = next((s for s in reversed(view.training_sessions) if s.get("provenance")), None)
    if last is None:
        return []
    trained = _setup(last["provenance"], None)[1:]
    grouped: dict[str, list[str]] = {}
    for event in view.eval_results():
        record = event.get("provenance")
        if record and _setup(record, None)[1:] != trained:
            change = _setup_change((None, *trained), _setup(record, None), record, {})
            grouped.setdefault(change, []).append(f"{event.get('attack')} @ {event.get('checkpoint')}")
    return [f"{', '.join(dict.fromkeys(results))} evaluated on another setup: {change}"
            for change, results in grouped.items()]


def provenance_line(view: RunView) -> str | None:
    """Where the run's numbers came from: the data it used (fingerprints of its splits), the CPU that ran it (model
    and kernel-selecting instruction sets), torch's kernel level and threads, the training's runtime where it was not
    plain fp32 ("trained with autocast bfloat16, channels-last"), the code's commit; then each resume
    that ran on another setup or did not record its own (:func:`resume_notes`)."""
    first = first_session(view)
    record = first.get("provenance") or {}
    if not record and not first.get("data_fingerprint"):
        return None
    fp = first.get("data_fingerprint")
    parts = [_data_text(fp) + " (train/val/test)" if fp else "data not fingerprinted (before the fifth fidelity round)",
             _cpu_text(record) if record.get("cpu") else "cpu model not recorded", _torch_text(record)]
    ran = _ran_with(first)
    if ran is not None and ran[1] != RUNTIME_FP32:  # bf16, channels-last, compiled: another arithmetic than fp32
        parts.append(f"trained with {ran[1]}")
    if (record.get("code") or {}).get("git_commit"):
        parts.append(_commit_text(record))
    return "provenance: " + "; ".join(parts + resume_notes(view) + evaluation_notes(view))


def _setup_change(before: tuple, now: tuple, record: dict, session: dict) -> str:
    """The parts of a session's setup (:func:`_setup`) that differ from the one before it, in provenance_line's
    words."""
    said = []
    if before[0] != now[0]:
        said.append(_data_text(session.get("data_fingerprint") or {}))
    if before[1:3] != now[1:3]:
        said.append(_cpu_text(record))
    if before[3:6] != now[3:6]:
        said.append(_torch_text(record))
    if before[6:] != now[6:]:
        said.append(_commit_text(record))
    return ", ".join(said)


# Instruction sets for int8 arithmetic only: no fp32 or bf16 kernel of a training run uses them, so two CPUs that
# differ in these alone train the same numbers. Measured: the quick protocol's TRADES seed 0 on an AMD EPYC of family
# 26 (avx_vnni beside AVX512-BF16) retrained the committed run of a family-25 EPYC without it to the last bit.
INT8_ONLY_FLAGS = frozenset({"avx_vnni", "avx512_vnni", "amx_int8"})


def kernel_flags(cpu: dict) -> list[str]:
    """The CPU record's instruction sets that choose a training run's kernels, in their recorded order."""
    return [f for f in cpu.get("flags") or () if f not in INT8_ONLY_FLAGS]


def provenance_warnings(views: list[RunView], configurations: list[tuple[str, list[RunView]]] | None = None
                        ) -> list[str]:
    """One line for each two runs of the same configuration and seed whose data or CPU differ: their numbers are
    not expected to be equal (docs/results-and-guarantees.md). Runs are bucketed by configuration (a profile run
    with other settings is not expected to match it anyway: fairtui.runs.configurations) and seed first, so a
    comparison of thousands of runs compares only the runs that share both. ``configurations``: the views'
    :func:`by_configuration`, where the caller has it already (`compare --by profile`)."""
    def identity(v: RunView) -> tuple:
        started = first_session(v)  # the session that trained, not a first start that trained nothing
        cpu = (started.get("provenance") or {}).get("cpu") or {}
        return started.get("data_fingerprint"), (cpu.get("model"), tuple(kernel_flags(cpu)))

    buckets: dict[tuple, list[RunView]] = {}
    if configurations is None:
        configurations = by_configuration(list({v.run_id: v for v in views}.values()))
    for label, members in configurations:
        for v in members:
            buckets.setdefault((label, v.config.get("seed")), []).append(v)
    out = []
    for (name, seed), same in buckets.items():
        for i, a in enumerate(same):
            for b in same[i + 1:]:
                (da, ca), (db, cb) = identity(a), identity(b)
                what = [w for w, x, y in (("data", da, db), ("CPU", ca, cb)) if x and y and x != y]
                if what:
                    out.append(f"{a.name} [{a.run_id}] and {b.name} [{b.run_id}] are profile {name!r} seed {seed} on "
                               f"different {' and '.join(what)}: their numbers are not expected to match")
    return out
