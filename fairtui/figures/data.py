"""What each figure shows, taken from run folders by the rules every table follows: plain Python, no
matplotlib and no torch, so that it is tested without drawing.

Results are picked as `fairtui export` picks them (:func:`fairtui.judge.compare.pick_result`): the headline
result at ``checkpoint`` unless ``--attack`` / ``--n-per-class`` ask for another, and runs that differ
only in seed are one series (mean and std over the seeds). Series whose results were measured
differently (another attack, eps or subset) are not silently mixed: each then names its own setting.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from engine.contract.results import eps_text
from fairtui.judge.compare import CompareError, pick_result, result_setting, run_rows, seed_groups, summarise
from fairtui.figures import PlotError
from fairtui.runs.runfolder import RunView
from fairtui.runs.runstate import ACCURACY_KEYS, RunState

MAX_SERIES = 8  # the colour-blind-safe palette's colours (Okabe and Ito)


def mean_std(values: list[float | None]) -> tuple[float | None, float]:
    vals = [v for v in values if v is not None]
    if not vals:
        return None, 0.0
    return statistics.mean(vals), statistics.stdev(vals) if len(vals) > 1 else 0.0


@dataclass
class Series:
    """One bar group or point: a run, or the runs of one profile over several seeds."""

    label: str
    runs: list[str]
    setting: str  # "pgd20, eps 0.2, whole split"
    robust: list[list[float | None]] = field(default_factory=list)  # per run, per class
    clean: list[list[float | None]] = field(default_factory=list)
    summaries: list[dict[str, float]] = field(default_factory=list)  # per run (compare.summarise)

    def per_class(self, which: str = "robust") -> tuple[list[float | None], list[float]]:
        """Mean and std over the runs, per class."""
        rows = self.robust if which == "robust" else self.clean
        pairs = [mean_std([r[i] for r in rows]) for i in range(len(rows[0]))]
        return [m for m, _ in pairs], [s for _, s in pairs]

    @property
    def worst_class(self) -> int:
        """The class with the lowest (mean) robust accuracy."""
        means, _ = self.per_class("robust")
        return min(range(len(means)), key=lambda i: (means[i] is None, means[i]))

    def summary(self, key: str) -> tuple[float | None, float]:
        return mean_std([s[key] for s in self.summaries])


@dataclass
class ResultFigure:
    """The series of a `classes` or `tradeoff` figure and what their numbers are."""

    class_names: list[str]
    series: list[Series]
    checkpoint: str

    @property
    def mixed(self) -> bool:
        return len({s.setting for s in self.series}) > 1

    @property
    def caption(self) -> str:
        seeds = "; mean ± std over seeds" if any(len(s.runs) > 1 for s in self.series) else ""
        if self.mixed:
            return f"settings differ between series (each names its own) @ {self.checkpoint}{seeds}"
        return f"{self.series[0].setting} @ {self.checkpoint}{seeds}"

    def legend_label(self, s: Series) -> str:
        return f"{s.label} [{s.setting}]" if self.mixed else s.label


def results(views: list[RunView], attack: str | None, checkpoint: str, n_per_class: int = 0,
            same_classes: bool = True, by_run: bool = False) -> ResultFigure:
    """Each seed group's results at (attack, checkpoint, subset), as `fairtui export` picks them (``by_run``: each
    run a series of its own, labelled by its name: runs named one by one; the replicates a group sets aside are
    named by `fairtui plot` on stderr)."""
    if not views:
        raise PlotError("name at least one run")
    groups = run_rows(views) if by_run else seed_groups(views)
    if len(groups) > MAX_SERIES:
        raise PlotError(f"{len(groups)} series (runs that differ in more than their seed); one figure shows "
                        f"at most {MAX_SERIES}, one colour each")
    names = views[0].class_names()
    out = []
    for label, members, _ in groups:
        series = Series(label, [v.run_id for v in members], "")
        settings = []
        for v in members:
            try:
                result = pick_result(v, attack, checkpoint, n_per_class=n_per_class)
            except CompareError as err:
                raise PlotError(str(err)) from None
            if same_classes and v.class_names() != names:
                raise PlotError(f"run {v.name} [{v.run_id}] has the classes {v.class_names()}, run {views[0].name} "
                                f"[{views[0].run_id}] {names}: one figure cannot put them side by side")
            settings.append(result_setting(v, result))
            series.robust.append(result["robust_acc_per_class"])
            series.clean.append(result["clean_acc_per_class"])
            series.summaries.append(summarise(result))
        series.setting = "; ".join(dict.fromkeys(settings))
        out.append(series)
    return ResultFigure(names, out, checkpoint)


@dataclass
class Panel:
    """One run's per-class values over the epochs."""

    title: str
    epochs: list[int]
    series: list[list[float | None]]  # per class
    labels: list[str]
    highlight: int | None = None  # the class drawn strongest: the worst at the last epoch


def _state(view: RunView) -> RunState:
    return RunState(run_id=view.run_id, class_names=view.class_names(), config=view.config, epochs=view.epochs)


def validation_setting(view: RunView) -> str:
    """What the per-epoch validation numbers are: "val pgd10, eps 0.2"."""
    from engine.contract.results import profile_setting

    attack = (view.config.get("eval") or {}).get("val_attack", "pgd10")
    eps = profile_setting(view.config, attack).get("eps")
    return f"val {attack}" + (f", eps {eps_text(eps)}" if eps is not None else "")


def curves(views: list[RunView], clean: bool = False) -> list[Panel]:
    """Per-class validation accuracy over the epochs, one panel per run (the worst class at the last
    epoch highlighted)."""
    key = "val clean accuracy" if clean else "val robust accuracy"
    panels = []
    for v in views:
        epochs, series, labels = _state(v).trajectory(key)
        if not epochs:
            raise PlotError(f"run {v.name} [{v.run_id}] has no epochs to draw (an imported model, or a run that "
                            "has not finished its first epoch)")
        last = [s[-1] for s in series]
        worst = min(range(len(last)), key=lambda i: (last[i] is None, last[i]))
        what = validation_setting(v) if not clean else "val clean"
        panels.append(Panel(f"{v.name} ({what})", epochs, series, labels, worst))
    return panels


def state_keys(view: RunView) -> list[str]:
    """The method_state keys with one value per class (K, or K + 1 for WAT), then K x K matrices."""
    keys = [k for k in _state(view).state_keys() if k not in ACCURACY_KEYS]
    k = len(view.class_names())
    for e in view.epochs:
        for key, value in (e.get("method_state") or {}).items():
            if key not in keys and is_matrix(value, k):
                keys.append(key)
        for path in e.get("_omitted", ()):  # a matrix the digest left out of a slim epoch
            key = path[len("method_state."):] if path.startswith("method_state.") else None
            if key and "." not in key and key not in keys:
                keys.append(key)
    return keys


def is_matrix(value, k: int) -> bool:
    return (isinstance(value, list) and len(value) == k and k > 0
            and all(isinstance(row, list) and len(row) == k for row in value))


@dataclass
class Heatmap:
    """A K x K matrix (a robustness confusion matrix, DAFA's P) with what it is."""

    title: str
    matrix: list[list[float]]
    class_names: list[str]
    row_label: str = "true class"
    col_label: str = "predicted class"
    percent: bool = True  # rows normalised to 100 %


def state(views: list[RunView], key: str | None) -> tuple[str, list[Panel | Heatmap]]:
    """The method's class-wise state ``key`` over the epochs, one panel per run (default: the first run's
    first class-wise key); a matrix (DAFA's ``adv_prob_matrix``) is drawn at the last epoch that has it."""
    available = state_keys(views[0])
    key = key or next(iter(available), None)
    if key is None:
        raise PlotError(f"run {views[0].name} [{views[0].run_id}] reports no class-wise state (method "
                        f"{(views[0].config.get('method') or {}).get('name', '?')}): nothing to draw")
    panels: list[Panel | Heatmap] = []
    for v in views:
        keys = state_keys(v)
        if key not in keys:
            raise PlotError(f"run {v.name} [{v.run_id}] has no class-wise state {key!r}; it has: "
                            f"{', '.join(keys) or 'none'}")
        names = v.class_names()
        # the last epoch that has the matrix, read whole (the digest keeps epochs slim)
        last = next((e for e in reversed(v.epochs) if f"method_state.{key}" in e.get("_omitted", ())
                     or is_matrix((e.get("method_state") or {}).get(key), len(names))), None)
        matrix = (v.full(last).get("method_state") or {}).get(key) if last is not None else None
        if is_matrix(matrix, len(names)):
            panels.append(Heatmap(f"{v.name}: {key}, epoch {last['epoch']}", matrix, names, "class", "class",
                                  percent=False))
            continue
        epochs, series, labels = _state(v).trajectory(key)
        panels.append(Panel(v.name, epochs, series, labels))
    return key, panels


def confusion(view: RunView, attack: str | None, checkpoint: str, n_per_class: int = 0) -> Heatmap:
    """The robustness confusion matrix of one result (rows: true class; columns: the class predicted
    under attack), in percent of each row."""
    try:
        result = pick_result(view, attack, checkpoint, n_per_class=n_per_class)
    except CompareError as err:
        raise PlotError(str(err)) from None
    counts = view.full(result).get("confusion_matrix")  # left out of the slim result the digest keeps
    names = view.class_names()
    if not is_matrix(counts, len(names)):
        raise PlotError(f"run {view.name} [{view.run_id}]: its {result.get('attack')} result @ {checkpoint} holds no "
                        f"confusion matrix (written before fairtui recorded one): fairtui eval {view.run_id} "
                        f"--attack {result.get('attack')} --checkpoint {checkpoint} measures it again")
    rows = []
    for row in counts:
        total = sum(row)
        rows.append([100.0 * c / total if total else 0.0 for c in row])
    return Heatmap(f"{view.name}: {result_setting(view, result)} @ {checkpoint}", rows, names, "true class",
                   "predicted under attack")
