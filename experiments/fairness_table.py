"""The CIFAR-10 fairness tables, generated from committed run files alone (no fairtui home, no torch).

    python experiments/fairness_table.py RESULTS [--write-docs docs/results.md] [--figure-dir docs/figures]

RESULTS is a folder of ``<profile>/<run-id>/`` folders, each holding a finished run's small files
(``events.jsonl``, ``profile.toml``, ``meta.json``: `experiments/cifar10_fairness.py --collect` copies
them there). A row is a profile, its seeds are its runs. Every number is read back from the runs' own
``eval_result`` events by the rule every fairtui reader uses (`fairtui.runs.runfolder.headline_results`):
the headline result at the profile's own settings on the whole test split. Exploratory results (AutoAttack
on a class-balanced subset) are shown apart, labelled with their subset.

``--write-docs FILE`` replaces the block between the markers ``<!-- generated: KEY -->`` and
``<!-- end generated: KEY -->`` in FILE (KEY is the folder's name, e.g. ``cifar10-cpu``) with the compact table
(headline and paired), and writes the full one (per class, exploratory results, provenance) to RESULTS/TABLE.md;
a test checks that both are what this script makes of the committed files.
The same script serves the CPU-scale table (experiments/results/cifar10-cpu) and the GPU table
(experiments/results/cifar10).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from fairtui.judge.compare import summarise  # noqa: E402
from fairtui.runs.mechanisms import never_acted_note  # noqa: E402
from fairtui.runs.provenance import commit_label, first_session, resume_notes  # noqa: E402
from fairtui.runs.runfolder import RunView  # noqa: E402
from experiments.fairness_paired import BASES, HEADLINE_ATTACK, paired_table  # noqa: E402,F401

# The table's rows, in the priority order, by the suffix of the profile's name.
METHODS = ["at", "trades", "wat", "cfa-trades", "dafa", "frl", "cfa-at", "tian", "faal", "bat", "csr", "trix", "absld",
           "teacher"]
LABELS = {"at": "PGD-AT", "trades": "TRADES", "frl": "FRL (RW+RM, from PGD-AT)", "cfa-at": "CFA on AT",
          "cfa-trades": "CFA on TRADES", "wat": "WAT", "tian": "Tian et al. (TRADES, class-wise beta)",
          "dafa": "DAFA on TRADES", "faal": "FAAL (from PGD-AT)", "bat": "BAT", "csr": "CSR (from TRADES)",
          "trix": "TRIX (DAFA + mixed attack)", "absld": "ABSLD (student of the teacher)",
          "teacher": "TRADES teacher (twice the width)"}
# The figure's panels: each fairness method beside the base it builds on (at most 8 series a panel).
FIGURES = {"at": ["at", "frl", "cfa-at", "faal"], "trades": ["trades", "wat", "cfa-trades", "dafa", "tian", "bat",
                                                             "csr", "trix"]}
CHECKPOINTS = ["best", "last", "fawa", "ema"]


def interval(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% confidence interval (Student's t, n - 1 degrees of freedom:
    fairtui.judge.stats, the statistics `fairtui compare` gives)."""
    from fairtui.judge.stats import t_interval

    mean, lo, hi = t_interval(values)
    if len(values) >= 2 and len(set(values)) == 1:  # every seed the same: nothing spreads (the t-interval is undefined)
        return mean, 0.0
    return mean, (hi - lo) / 2


def fmt(values: list[float], scale: float = 100.0, digits: int = 1) -> str:
    """``mean ± half-width`` (one seed: the value alone); values in fractions, shown in %."""
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    mean, half = interval(values)
    if len(values) < 2:
        return f"{mean * scale:.{digits}f}"
    return f"{mean * scale:.{digits}f} ± {half * scale:.{digits}f}"


@dataclass
class Row:
    """One profile: its completed runs (the seeds) and what they measured."""

    profile: str
    method: str
    views: list[RunView] = field(default_factory=list)

    @property
    def label(self) -> str:
        return LABELS.get(self.method, self.profile)

    @property
    def notes(self) -> list[str]:
        """What some of its runs did not do (a FAWA that never accepted): said beside its headline row."""
        return never_acted_note(self.views, lambda v: int(v.config.get("seed", -1)))

    @property
    def seeds(self) -> list[int]:
        return [int(v.config.get("seed", -1)) for v in self.views]

    def results(self, checkpoint: str, attack: str = HEADLINE_ATTACK) -> list[dict]:
        """Each seed's headline test result at ``checkpoint`` (a seed without one is left out)."""
        found = [v.results().get(("test", checkpoint, attack)) for v in self.views]
        return [r for r in found if r is not None]

    def exploratory(self, attack: str, checkpoint: str) -> list[dict]:
        """Each seed's latest result for ``attack`` at ``checkpoint`` on a class-balanced test subset."""
        out = []
        for v in self.views:
            subset = [e for e, _ in v.other_results() if e.get("attack") == attack and e.get("split") == "test"
                      and e.get("checkpoint") == checkpoint and (e.get("n_per_class") or 0) > 0]
            if subset:
                out.append(subset[-1])
        return out

    def epoch_times(self) -> list[float]:
        return [float(e["time_s"]) for v in self.views for e in v.epochs if "time_s" in e]

    def provenance_by_seed(self, key: str) -> str:
        """One field over the seeds, naming which seeds had which value where they differ ("AVX512 (seeds
        0, 1), AVX2 (seed 2)"): another CPU's kernels give other numbers for the same profile and seed."""
        values = [_provenance(v, key) for v in self.views]
        if len(set(values)) == 1:
            return values[0]
        parts = []
        for value in dict.fromkeys(values):
            seeds = [str(s) for s, v in zip(self.seeds, values) if v == value]
            parts.append(f"{value} ({seeds_label(seeds)})")
        return ", ".join(parts)

    def provenance(self, key: str) -> list[str]:
        """The distinct values of a run_started field over the seeds (device, torch, the code's commit)."""
        return list(dict.fromkeys(_provenance(v, key) for v in self.views))


def seeds_label(seeds: list) -> str:
    """"seed 0" or "seeds 0, 1, 2"."""
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"


def _provenance(view: RunView, key: str) -> str:
    started = first_session(view)  # the session that trained the run's first epochs (resumes: resume_notes)
    record = started.get("provenance", {})
    determinism = record.get("determinism", {})
    return {"commit": lambda: commit_label(record.get("code", {})),
            "device": lambda: started.get("device", "?"), "torch": lambda: record.get("torch", "?"),
            "threads": lambda: str(determinism.get("threads", "?")),
            "cpu": lambda: str(determinism.get("cpu_capability", "?"))
            + (f" on {record['cpu'].get('model')}" if (record.get("cpu") or {}).get("model") else "")}[key]()


def method_of(profile: str) -> str:
    """``cifar10-cpu-cfa-at`` -> ``cfa-at``: the row's method, by the longest known suffix."""
    matches = [m for m in METHODS if profile.endswith("-" + m)]
    return max(matches, key=len) if matches else profile


def load(results: Path) -> list[Row]:
    """The rows of ``results``: every ``<profile>/<run-id>/`` whose run completed, in METHODS' order."""
    rows = []
    if not results.is_dir():
        return rows
    for folder in sorted(p for p in results.iterdir() if p.is_dir()):
        row = Row(folder.name, method_of(folder.name))
        for run_dir in sorted(p for p in folder.iterdir() if (p / "events.jsonl").is_file()):
            view = RunView.load(run_dir)
            if view.status() == "completed":
                row.views.append(view)
        row.views.sort(key=lambda v: int(v.config.get("seed", 0)))
        if row.views:
            rows.append(row)
    order = {m: i for i, m in enumerate(METHODS)}
    return sorted(rows, key=lambda r: (order.get(r.method, len(order)), r.profile))


def headline_table(rows: list[Row]) -> list[str]:
    lines = ["| method | profile | seeds | checkpoint | clean avg | PGD-20 avg | PGD-20 worst | CV (PGD-20) "
             "| weakest class (each seed) | s / epoch |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        names = row.views[0].class_names()
        times = row.epoch_times()
        time_cell = f"{statistics.median(times):.0f}" if times else "-"
        for ckpt in CHECKPOINTS:
            results = row.results(ckpt)
            if not results:
                continue
            s = [summarise(r) for r in results]
            weakest = [names[min(range(len(names)), key=r["robust_acc_per_class"].__getitem__)] for r in results]
            label = row.label + (" (see the note below the table)" if row.notes else "")
            lines.append(
                f"| {label} | {row.profile} | {len(results)} | {ckpt} | {fmt([x['avg_clean'] for x in s])} | "
                f"{fmt([x['avg_robust'] for x in s])} | {fmt([x['worst_robust'] for x in s])} | "
                f"{fmt([x['cv'] for x in s], scale=1.0, digits=4)} | {', '.join(weakest)} | {time_cell} |")
    notes = [f"- {row.label} (`{row.profile}`): {note}." for row in rows for note in row.notes]
    return lines + (["", *notes] if notes else [])


def per_class_table(rows: list[Row], checkpoint: str = "best") -> list[str]:
    names = rows[0].views[0].class_names()
    lines = ["| method | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for row in rows:
        results = row.results(checkpoint)
        if not results:
            continue
        cells = [fmt([r["robust_acc_per_class"][c] for r in results]) for c in range(len(names))]
        lines.append(f"| {row.label} | " + " | ".join(cells) + " |")
    return lines


def exploratory_table(rows: list[Row], attacks: tuple[str, ...] = ("aa", "aa-fast")) -> list[str]:
    lines = []
    for row in rows:
        for attack in attacks:
            for ckpt in CHECKPOINTS:
                results = row.exploratory(attack, ckpt)
                if not results:
                    continue
                s = [summarise(r) for r in results]
                subset = sorted({int(r["n_per_class"]) for r in results})
                lines.append(f"| {row.label} | {attack} | {ckpt} | {', '.join(map(str, subset))} per class | "
                             f"{len(results)} | {fmt([x['avg_clean'] for x in s])} | "
                             f"{fmt([x['avg_robust'] for x in s])} | {fmt([x['worst_robust'] for x in s])} |")
    if not lines:
        return []
    return ["| method | attack | checkpoint | test subset | seeds | clean avg | robust avg | robust worst |",
            "|---|---|---|---|---|---|---|---|", *lines]


def provenance_lines(rows: list[Row]) -> list[str]:
    out = []
    for row in rows:
        cpu = f" ({row.provenance_by_seed('cpu')} kernels)" if "cpu" in row.provenance("device") else ""
        out.append(f"- {row.label} (`{row.profile}`, seeds {', '.join(map(str, row.seeds))}): device "
                   f"{', '.join(row.provenance('device'))}{cpu}, {', '.join(row.provenance('threads'))} thread(s), "
                   f"torch {', '.join(row.provenance('torch'))}, commit {', '.join(row.provenance('commit'))}"
                   + "".join(f"; seed {seed} {note}" for seed, view in zip(row.seeds, row.views)
                             for note in resume_notes(view)))
    return out


def header(results: Path, rows: list[Row]) -> str:
    """The block's first paragraph: what the numbers are, on which split, and how they were made."""
    started = rows[0].views[0].started or {}
    sizes = started.get("split_sizes", {})
    test_n, train_n = sum(sizes.get("test", [])), sum(sizes.get("train", []))
    cfg = rows[0].views[0].config
    eps = cfg.get("eval", {}).get("eps") or cfg.get("attack", {}).get("eps")
    eps_text = "?" if not eps else f"{eps * 255:.0f}/255" if abs(eps * 255 - round(eps * 255)) < 1e-6 and eps < 0.1 \
        else f"{eps:g}"
    part = cfg.get("data", {}).get("test_per_class") or 0
    split = (f"on a fixed class-balanced part of the test split ({part} images a class, {test_n:,} in all, the same "
             f"for every seed and method: the protocol's headline, never mixed with the whole split's)") if part \
        else f"on the whole test split ({test_n:,} images)"
    return (f"Test accuracy in %, PGD-20 at eps {eps_text} {split}, "
            f"{train_n:,} training images; each cell is the mean ± the half-width of a 95% confidence "
            f"interval over the seeds (Student's t), CV (class-wise variance, not std/mean) in fractions^2 (WAT's unit). "
            f"Generated by "
            f"`python experiments/fairness_table.py {where_of(results)}` from the committed run "
            f"files; do not edit by hand.")


def where_of(results: Path):
    try:
        return results.resolve().relative_to(ROOT)
    except ValueError:
        return results


def table_link(results: Path) -> str:
    """The full table's link from docs/results.md."""
    try:
        return f"../{(results.resolve() / TABLE).relative_to(ROOT)}"
    except ValueError:
        return str(results / TABLE)


def paired_lead(results: Path, short: bool) -> str:
    where = where_of(results)
    bases = f" --bases {where}-bases" if results.with_name(results.name + "-bases").is_dir() else ""
    lead = ("Each method against its base, paired by seed (PGD-20, points of %; `fairtui compare --results "
            f"{where}{bases} --by profile --baseline <base> --checkpoint <checkpoint>` gives the same)")
    if short:
        return (lead + f", at the last checkpoint; the best checkpoint's pairs, and what the columns say, are in "
                f"[{results.name}/{TABLE}]({table_link(results)}#paired):")
    return (lead + ": the mean difference and its 95% t-interval, the paired t-test's p and the exact sign-flip p, the "
            "verdict at 5%, the planning numbers (the smallest difference these seeds detect with 80% power, and the "
            "seeds that detect 2 points, both from the observed spread of the differences: never power at the "
            "observed difference, which only restates p). Holm is the t-test's p adjusted over the table's methods at that checkpoint (a row "
            "against the starts in its method's place; `compare` adjusts over the groups it is given "
            "instead): the verdicts are each method's own, and Holm says which survive being one of many. "
            "A fine-tune has a second row against the checkpoints its runs started from (`--against-start`): "
            "what the fine-tune itself added.")


TABLE = "TABLE.md"  # the full generated table, beside the runs (RESULTS/TABLE.md)


def markdown(results: Path, rows: list[Row] | None = None, compact: bool = False) -> str:
    """The generated block. In full (``RESULTS/TABLE.md``): the headline table, per-class accuracy, exploratory
    results, the paired block and where each row ran. ``compact`` (docs/results.md's block): the headline and
    paired tables, and a link to the full one."""
    rows = load(results) if rows is None else rows
    if not rows:
        return f"No completed run in `{results.name}` yet."
    parts = [header(results, rows), "", *headline_table(rows)]
    if compact:  # the last checkpoint's pairs only: the best checkpoint's are in TABLE.md
        paired = paired_table(results, rows, checkpoints=("last",))
        if paired:
            parts += ["", paired_lead(results, short=True), "", *paired]
        parts += ["", f"Per-class accuracy, exploratory results and where each row ran: [{results.name}/{TABLE}]"
                      f"({table_link(results)})."]
        return "\n".join(parts)
    ckpt = "best" if any(r.results("best") for r in rows) else "last"
    paired = paired_table(results, rows)
    parts += ["", f"Per-class PGD-20 accuracy of the {ckpt} checkpoint (%, mean ± 95% half-width over seeds):", "",
              *per_class_table(rows, ckpt)]
    explore = exploratory_table(rows)
    if explore:
        parts += ["", "Exploratory, not headline: AutoAttack on a class-balanced test subset (seed-chosen).", "",
                  *explore]
    if paired:
        parts += ["", '<a id="paired"></a>' + paired_lead(results, short=False), "", *paired]
    parts += ["", "Where each row ran:", "", *provenance_lines(rows)]
    return "\n".join(parts)


def at_least(low: int):
    """An argparse type: a whole number >= ``low``, refused before anything trains (the experiment scripts' counts)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is below {low}")
        return value
    return parse


def replace_block(text: str, key: str, block: str, mark: str = "<!-- generated: {} -->",
                  end_mark: str = "<!-- end generated: {} -->") -> str:
    """``text`` with the lines between ``mark`` and ``end_mark`` (formatted with ``key``) replaced by ``block``."""
    start, end = mark.format(key), end_mark.format(key)
    if start not in text or end not in text:
        raise SystemExit(f"no block marked {start!r} ... {end!r} to replace")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{block}\n{end}{tail}"


def figure(rows: list[Row], panel: str, path: Path, checkpoint: str = "best") -> Path | None:
    """`fairtui plot classes` of one panel's rows (FIGURES), drawn by fairtui's own figure code."""
    from fairtui.figures import draw, figure_format
    from fairtui.judge.compare import setting_label
    from fairtui.figures.data import ResultFigure, Series

    chosen = [r for m in FIGURES[panel] for r in rows if r.method == m and r.results(checkpoint)]
    if not chosen:
        return None
    series = []
    for row in chosen:
        results = row.results(checkpoint)
        s = Series(f"{row.label} ({seeds_label(row.seeds)})", [v.run_id for v in row.views],
                   "; ".join(dict.fromkeys(setting_label(r) for r in results)))
        s.robust = [r["robust_acc_per_class"] for r in results]
        s.clean = [r["clean_acc_per_class"] for r in results]
        s.summaries = [summarise(r) for r in results]
        series.append(s)
    fig = draw.classes(ResultFigure(chosen[0].views[0].class_names(), series, checkpoint))
    path.write_bytes(draw.to_bytes(fig, figure_format(str(path))))
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, help="a folder of <profile>/<run-id>/ run files")
    parser.add_argument("--write-docs", type=Path, help="replace the generated block for RESULTS in this file")
    parser.add_argument("--figure-dir", type=Path, help="write <RESULTS name>-<at|trades>.png figures here")
    args = parser.parse_args(argv)
    if not args.results.is_dir():
        parser.error(f"{args.results}: no such folder (it should hold <profile>/<run-id>/ folders of run files)")
    rows = load(args.results)
    if not rows:  # an empty or wrong folder is refused, never a table of nothing with exit 0
        parser.error(f"{args.results}: no completed run in it (it should hold <profile>/<run-id>/ folders of run "
                     "files, as experiments/results/cifar10-cpu does)")
    full = markdown(args.results, rows)
    print(full)
    if args.write_docs:
        if not args.write_docs.is_file():
            parser.error(f"--write-docs {args.write_docs}: no such file")
        block = markdown(args.results, rows, compact=True)
        args.write_docs.write_text(replace_block(args.write_docs.read_text(), args.results.name, block))
        (args.results / TABLE).write_text(f"# {args.results.name}: the generated table\n\n{full}\n")
        print(f"wrote the {args.results.name} block of {args.write_docs} and {args.results / TABLE}", file=sys.stderr)
    if args.figure_dir and rows:
        args.figure_dir.mkdir(parents=True, exist_ok=True)
        for panel in FIGURES:
            written = figure(rows, panel, args.figure_dir / f"{args.results.name}-{panel}.png")
            if written:
                print(f"wrote {written}", file=sys.stderr)


if __name__ == "__main__":
    main()
