"""Human and JSON renderings of a run: the epoch line, per-class tables, the summary document."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from engine.contract.results import describe
from engine.contract.protocol import RUNTIME_FP32, resumed_text
from fairtui.runs.configurations import by_configuration, device_kind, session_runtime
from fairtui.runs.home import short_id
from fairtui.runs.runfolder import RunView
from fairtui.runs.usertext import inert


def _fmt(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _argmin(values: list[float | None]) -> int | None:
    pairs = [(v, i) for i, v in enumerate(values) if v is not None]
    return min(pairs)[1] if pairs else None


def epoch_line(event: dict, names: list[str]) -> str:
    train, val = event.get("train", {}), event.get("val", {})
    robust = val.get("robust_acc_per_class") or []
    worst = _argmin(robust)
    worst_name = names[worst] if worst is not None and worst < len(names) else worst
    best = " *" if event.get("is_best") else ""
    # a method's pass over the epoch before training (CSR's confusion matrix), within the epoch's seconds
    prepared = f" ({event['prepare_s']:.0f}s before training)" if event.get("prepare_s") else ""
    # accuracies as clean/robust (EPOCH_LEGEND says so once): the line fits 120 columns
    return (f"epoch {event['epoch']:>3}/{event.get('epochs', '?')} loss {_fmt(train.get('loss'), 4)} | "
            f"train {_fmt(train.get('clean_acc'))}/{_fmt(train.get('robust_acc'))} | "
            f"val {_fmt(val.get('avg_clean'))}/{_fmt(val.get('avg_robust'))} "
            f"worst {_fmt(val.get('worst_robust'))} ({worst_name}) | "
            f"lr {event.get('lr', 0):.3g} {event.get('time_s', 0):.0f}s{prepared}{best}")


EPOCH_LEGEND = ("each epoch: loss | train clean/robust accuracy | val clean/robust, worst class (its name) | "
                "lr, seconds; * new best")


def exploratory_groups(view: RunView) -> list[tuple[tuple[str, ...], dict]]:
    """The run's other evaluations (a subset, another eps, ...) grouped by checkpoint and setting, in the
    order measured: (what differs from the profile, (split, checkpoint, attack) -> the latest result)."""
    groups: dict[tuple, dict] = {}
    for e, why in view.other_results():
        groups.setdefault((e.get("split"), e.get("checkpoint"), tuple(why)), {})[
            (e.get("split"), e.get("checkpoint"), e.get("attack"))] = e  # the latest of each
    return [(why, results) for (_, _, why), results in groups.items()]


def exploratory_tables(view: RunView, groups: list | None = None) -> list[Table]:
    """Exploratory results as per-class tables like the headline ones, one per checkpoint and setting, each
    titled as exploratory with what differs from the profile. ``groups``: those of :func:`exploratory_groups`
    to draw (a run evaluated thousands of ways draws the latest few; default all)."""
    return [t for why, results in (exploratory_groups(view) if groups is None else groups)
            for t in per_class_tables(view, results, note=f"exploratory ({'; '.join(why)})")]


def _merge_same_checkpoints(by_ckpt: dict[str, dict[int, dict[str, dict]]]) -> None:
    """One table, "test @ last = best (epoch 30)", where the best checkpoint is the last and their results are
    the same numbers (the quickstart printed two identical tables)."""
    def numbers(subsets: dict) -> list:
        return [(n, a, r.get("clean_acc_per_class"), r.get("robust_acc_per_class"))
                for n, attacks in sorted(subsets.items()) for a, r in sorted(attacks.items())]

    for key in [k for k in by_ckpt if " @ best (epoch " in k]:
        last = key.replace(" @ best (", " @ last (")
        if last in by_ckpt and numbers(by_ckpt[last]) == numbers(by_ckpt[key]):
            merged = last.replace(" @ last (", " @ last = best (")
            by_ckpt[merged] = by_ckpt.pop(last)
            del by_ckpt[key]


def per_class_tables(view: RunView, results: dict | None = None, note: str = "") -> list[Table]:
    """One table per evaluated checkpoint and setting: a row per class, a column per attack, summary
    rows below. ``results``: (split, checkpoint, attack) -> eval_result; default the run's headline ones.
    ``note`` starts each title (e.g. what makes the results exploratory)."""
    names = view.class_names()
    by_ckpt: dict[str, dict[str, dict]] = {}
    for (split, ckpt, attack), result in (view.results() if results is None else results).items():
        subset = result.get("n_per_class") or (result.get("setting") or {}).get("n_per_class") or 0
        by_ckpt.setdefault(f"{split} @ {ckpt} (epoch {result.get('epoch', '?')})", {}).setdefault(
            subset, {})[attack] = result
    _merge_same_checkpoints(by_ckpt)
    tables = []
    for where, attacks in ((w, a) for w, subsets in by_ckpt.items() for a in subsets.values()):
        settings = sorted({describe(r) for a, r in attacks.items() if a != "clean"}) or \
            [describe(next(iter(attacks.values())))]
        title = f"{note + ': ' if note else ''}{inert(view.name, markup=True)} [{view.run_id}]: {where}, " \
                f"{'; '.join(settings)}"
        # as wide as its title (no word-per-line wrap over a narrow table), at most the terminal's width
        table = Table(title=title, title_justify="left", min_width=len(title))
        table.add_column("class")
        first = next(iter(attacks.values()))
        table.add_column("clean", justify="right")
        robust_attacks = [a for a in attacks if a != "clean"]
        for a in robust_attacks:
            table.add_column(f"robust {a}", justify="right")
        cvc = first.get("cvc_per_class")
        if cvc:
            table.add_column("CVC", justify="right")  # Tian et al.: variance of the clean confidence
        if cvc:
            table.caption = "CVC: the variance of each class's clean confidence (Tian et al.)"
            table.caption_justify = "left"
        worst = {a: _argmin(attacks[a]["robust_acc_per_class"]) for a in robust_attacks}
        for i, name in enumerate(names):
            cells = [_fmt(first["clean_acc_per_class"][i])]
            for a in robust_attacks:
                cell = _fmt(attacks[a]["robust_acc_per_class"][i])
                cells.append(f"[bold red]{cell} <[/]" if worst[a] == i else cell)
            if cvc:
                cells.append(_fmt(cvc[i], 4))
            table.add_row(name, *cells)
        table.add_section()
        for label, key in (("average", "avg_robust"), ("worst class", "worst_robust"),
                           ("worst 20%", "worst20_robust"), ("CV (fraction^2)", "cv"), ("MCD", "mcd")):
            clean_key = {"avg_robust": "avg_clean", "worst_robust": "worst_clean", "cv": "cv_clean"}.get(key)
            clean_cell = _fmt(first.get(clean_key), 4 if key == "cv" else 3) if clean_key else ""
            table.add_row(label, clean_cell, *[_fmt(attacks[a].get(key), 4 if key == "cv" else 3)
                                               for a in robust_attacks])
        tables.append(table)
    return tables


def _state_cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def method_state_tables(state: dict[str, Any], names: list[str], width: int = 80) -> tuple[list[Table], list[str]]:
    """A method's class-wise state as labelled per-class tables that fit ``width`` columns (as many
    tables as it takes), and its other values as "key: value" lines. A vector of K + 1 values is WAT's
    (overall first): its rows are "overall" and the classes; a K-vector leaves "overall" blank."""
    k = len(names)
    vectors = {key: v for key, v in state.items() if isinstance(v, list) and len(v) in (k, k + 1)
               and all(v_ is None or isinstance(v_, (int, float)) for v_ in v)}  # a K x K matrix is a line
    wide = any(len(v) == k + 1 for v in vectors.values())
    rows = (["overall"] if wide else []) + list(names)
    label_width = max(len(r) for r in rows) + 3 if rows else 8
    groups: list[list[str]] = [[]]
    used = label_width
    for key, values in vectors.items():
        col = max(len(key), *(len(_state_cell(v)) for v in values)) + 3
        if groups[-1] and used + col > width:
            groups.append([])
            used = label_width
        groups[-1].append(key)
        used += col
    tables = []
    for keys in (g for g in groups if g):
        table = Table(title_justify="left")
        table.add_column("class")
        for key in keys:
            table.add_column(key, justify="right")
        for i, row in enumerate(rows):
            cells = []
            for key in keys:
                v = vectors[key]
                j = i if len(v) == len(rows) else i - (len(rows) - len(v))  # K-vectors skip "overall"
                cells.append(_state_cell(v[j]) if j >= 0 else "")
            table.add_row(row, *cells)
        tables.append(table)
    lines = [f"{key}: {_state_cell(v) if not isinstance(v, list) else ', '.join(map(_state_cell, v))}"
             for key, v in state.items() if key not in vectors]
    return tables, lines


def run_summary(view: RunView, exit_code: int | None = None) -> dict[str, Any]:
    """The run as one JSON-ready document (for ``--json``)."""
    fin = view.finished or {}
    epochs = view.last_epochs(1)  # the latest alone: a long run's others stay unread
    return {
        "run_id": view.run_id, "name": view.name, "run_dir": str(view.run_dir), "status": view.status(),
        "error": fin.get("error"), "exit_code": exit_code, "class_names": view.class_names(),
        "epochs_done": epochs[-1]["epoch"] if epochs else 0, "epochs": view.total_epochs(),
        "best_epoch": epochs[-1].get("best_epoch") if epochs else None,
        "method": view.config.get("method", {}).get("name"),
        "dataset": view.config.get("data", {}).get("dataset"),
        "imported": view.imported,  # where an imported model came from; None for a trained run
        "init": (view.started or {}).get("init"),  # the checkpoint a fine-tune loaded, as the engine recorded it
        "results": result_rows(view.results().values()),
        # exploratory evaluations (another eps, a subset, ...): never the run's numbers
        "other_results": [{**result_rows([e])[0], "differs": why} for e, why in view.other_results()],
    }


RESULT_KEYS = ("split", "checkpoint", "epoch", "attack", "eps", "n_per_class", "setting", "avg_clean", "avg_robust",
               "worst_robust", "worst20_robust", "cv", "mcd", "clean_acc_per_class", "robust_acc_per_class")


def result_rows(results) -> list[dict]:
    return [{k: r.get(k) for k in RESULT_KEYS} for r in results]


def rho_cell(column, is_baseline: bool, base) -> str:
    """rho against the baseline, or why there is none."""
    if is_baseline:
        return ""
    if column.rho is not None:
        return f"{column.rho:+.3f}"
    if base.summary.get("worst_robust") == 0:
        return "undefined: the baseline's worst class is 0"
    return "undefined: the baseline's average is 0"


def comparison_tables(cmp) -> list[Table]:
    """The compare command's tables: per class, summary with deltas and rho, configuration diff."""
    cols = cmp.columns
    labels = [f"{inert(c.view.name, markup=True)} [{short_id(c.view.run_id)}]" + (" (base)" if i == cmp.baseline
                                                                                 else "") for i, c in enumerate(cols)]
    what = (f"{cmp.settings[0]} @ {cmp.checkpoint}" if not cmp.mixed
            else f"@ {cmp.checkpoint}; SETTINGS DIFFER between runs: see the 'measured with' row")
    title = f"clean / robust per class ({what}); < marks each run's worst class"
    per_class = Table(title=title, title_justify="left", min_width=min(len(title), 80))
    per_class.add_column("class")
    for label in labels:
        per_class.add_column(label, justify="right")
    for i, name in enumerate(cmp.class_names):
        cells = []
        for c in cols:
            cell = f"{_fmt(c.result['clean_acc_per_class'][i])} / {_fmt(c.result['robust_acc_per_class'][i])}"
            cells.append(f"[bold red]{cell} <[/]" if c.worst_class == i else cell)
        per_class.add_row(name, *cells)
    summary = Table(title="summary (delta against the baseline)", title_justify="left")
    summary.add_column("metric")
    for label in labels:
        summary.add_column(label, justify="right")
    for key, label in (("avg_clean", "clean average"), ("avg_robust", "robust average"),
                       ("worst_robust", "robust worst class"), ("worst20_robust", "robust worst 20%"),
                       ("cv", "CV (fraction^2)"), ("mcd", "MCD")):
        digits = 4 if key == "cv" else 3
        cells = []
        for i, c in enumerate(cols):
            delta = "" if i == cmp.baseline else f" ({c.deltas[key]:+.{digits}f})"
            cells.append(f"{_fmt(c.summary[key], digits)}{delta}")
        summary.add_row(label, *cells)
    summary.add_row("rho (WAT Eq. 7)", *[rho_cell(c, i == cmp.baseline, cols[cmp.baseline])
                                         for i, c in enumerate(cols)])
    summary.add_row("measured with", *cmp.settings)
    tables = [per_class, summary]
    if cmp.diff:
        diff = Table(title="configuration: the keys that differ", title_justify="left")
        diff.add_column("key")
        for label in labels:
            diff.add_column(label)
        for key, values in cmp.diff.items():
            diff.add_row(key, *["-" if v is None else str(v) for v in values])
        tables.append(diff)
    return tables


def _setup(record: dict, fingerprint: dict | None) -> tuple:
    """What makes two sessions' arithmetic differ: the data, the CPU, torch and its kernel level and threads,
    the code."""
    cpu, det, code = record.get("cpu") or {}, record.get("determinism") or {}, record.get("code") or {}
    return ((fingerprint or {}).get("train"), cpu.get("model"), tuple(cpu.get("flags") or ()), record.get("torch"),
            det.get("cpu_capability"), det.get("threads"), code.get("git_commit"), code.get("git_dirty"))


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
        return started.get("data_fingerprint"), (cpu.get("model"), tuple(cpu.get("flags") or ()))

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
