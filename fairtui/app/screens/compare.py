"""The compare screen: per-class robust bars grouped by class, summary with deltas and rho, config diff; with g, the
runs grouped by profile (a method's seeds), each group paired by seed with the baseline group (fairtui.judge.groups), and
with s a fine-tune of the baseline against the checkpoints its runs started from."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen

from fairtui.runs.home import short_id
from fairtui.runs.usertext import inert
from textual.widgets import Footer, Header, Static

from fairtui.app.widgets.bars import GroupedBars


class CompareScreen(Screen):
    BINDINGS = [Binding("escape", "app.pop_screen", "back"), Binding("b", "next_baseline", "baseline"),
                Binding("c", "next_checkpoint", "checkpoint"), Binding("g", "toggle_groups", "groups"),
                Binding("s", "toggle_starts", "vs starts")]

    def __init__(self, run_ids: list[str], attack: str | None = None, checkpoint: str | None = None,
                 groups: bool = False, baseline_label: str | None = None):
        """``groups``: open in the groups view (`compare --by ... --tui`); ``checkpoint``: the one every run is read
        at (None: the runs' headline one, their profiles' first of eval.checkpoints: last for the quick protocol);
        ``baseline_label``: the baseline group, as `--baseline` names it."""
        super().__init__()
        self.run_ids, self.attack, self.checkpoint = run_ids, attack, checkpoint
        self.baseline = 0
        self.baseline_label = baseline_label
        self.comparison = None
        self.grouped = groups
        self.group_comparison = None
        self.against_start = False  # groups: a fine-tune against its starts (compare --against-start)

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="compare-body"):
            yield Static("", id="compare-title")
            yield Static("", id="compare-summary")
            yield GroupedBars(id="compare-bars")
            yield Static("", id="compare-diff")
        yield Footer()

    def on_mount(self) -> None:
        if self.checkpoint is None:
            self.checkpoint = self.headline_checkpoint()
        self.render_comparison()

    def views(self):
        from fairtui.runs.runfolder import RunView

        return [RunView.load(self.app.run_dir(r)) for r in self.run_ids]

    def headline_checkpoint(self) -> str:
        """The checkpoint the runs report first (their profiles' eval.checkpoints[0]) where they agree, else best."""
        firsts = {tuple((v.config.get("eval") or {}).get("checkpoints") or ["best"])[0] for v in self.views()}
        return firsts.pop() if len(firsts) == 1 else "best"

    def checkpoints_at_hand(self) -> list[str]:
        """The checkpoints some run has a test result at, in the usual order."""
        have = {key[1] for v in self.views() for key in v.results() if key[0] == "test"}
        return [c for c in ("best", "last", "ema", "fawa") if c in have] or ["best"]

    def action_next_checkpoint(self) -> None:
        at_hand = self.checkpoints_at_hand()
        i = at_hand.index(self.checkpoint) if self.checkpoint in at_hand else -1
        self.checkpoint = at_hand[(i + 1) % len(at_hand)]
        self.render_comparison()

    def render_groups(self) -> None:
        """The runs grouped by profile: each group's seeds with intervals, and each paired with the baseline group
        by seed (the text `fairtui compare --by profile --baseline` prints, which fits 80 columns)."""
        from rich.console import Group

        from fairtui.judge.compare import CompareError
        from fairtui.judge.group_report import terminal
        from fairtui.judge.groups import compare_groups
        from fairtui.judge.sources import grouped
        from fairtui.runs.runfolder import RunView

        named = grouped([RunView.load(self.app.run_dir(r)) for r in self.run_ids], "profile")
        labels = list(named)
        if self.baseline_label in labels:  # --baseline, once: b moves on from it
            self.baseline, self.baseline_label = labels.index(self.baseline_label), None
        baseline = labels[self.baseline % len(labels)]
        try:
            self.group_comparison = compare_groups(named, baseline, self.attack, self.checkpoint,
                                                   against_start=self.against_start)
        except CompareError as err:
            self.query_one("#compare-title", Static).update(f"cannot compare groups: {inert(err, markup=True)}")
            return
        self.query_one("#compare-title", Static).update(
            f"{len(labels)} groups of {len(self.run_ids)} runs by profile at {self.checkpoint}; baseline "
            f"{inert(baseline, markup=True)} (b: next baseline, c: checkpoint, g: runs, s: fine-tunes against "
            f"{'the baseline' if self.against_start else 'their starts'})")
        self.query_one("#compare-summary", Static).update(Group(*terminal(self.group_comparison)))
        self.query_one(GroupedBars).display = False
        self.query_one("#compare-diff", Static).update("")

    def render_comparison(self) -> None:
        if self.grouped:
            self.render_groups()
            return
        self.query_one(GroupedBars).display = True
        from fairtui.judge.compare import CompareError, compare
        from fairtui.judge.tables import comparison_tables
        from fairtui.runs.runfolder import RunView

        views = [RunView.load(self.app.run_dir(r)) for r in self.run_ids]
        try:
            self.comparison = compare(views, self.attack, self.checkpoint, self.baseline)
        except CompareError as err:
            self.query_one("#compare-title", Static).update(f"cannot compare: {inert(err, markup=True)}")
            return
        cmp = self.comparison
        what = cmp.settings[0] if not cmp.mixed else "SETTINGS DIFFER between runs (see 'measured with')"
        self.query_one("#compare-title", Static).update(
            f"{len(views)} runs, robust accuracy: {what} @ {cmp.checkpoint}; baseline "
            f"{inert(cmp.columns[cmp.baseline].view.name, markup=True)} (b: next baseline)")
        tables = comparison_tables(cmp)
        self.query_one("#compare-summary", Static).update(tables[1])
        self.query_one(GroupedBars).show(cmp.class_names, [
            (f"{inert(c.view.name)} [{short_id(c.view.run_id)}]", c.result["robust_acc_per_class"])
            for c in cmp.columns])
        self.query_one("#compare-diff", Static).update(tables[2] if len(tables) > 2 else "configurations are equal")

    def action_next_baseline(self) -> None:
        self.baseline = (self.baseline + 1) % len(self.run_ids)
        self.render_comparison()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """s belongs to the grouped view: hidden from the footer while the runs are shown."""
        return self.grouped if action == "toggle_starts" else True

    def action_toggle_starts(self) -> None:
        """Groups only: a fine-tune of the baseline against the checkpoints its runs started from, or back."""
        self.against_start = not self.against_start
        self.render_comparison()

    def action_toggle_groups(self) -> None:
        self.grouped = not self.grouped
        self.baseline = 0
        self.refresh_bindings()
        self.render_comparison()
