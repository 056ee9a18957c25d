"""A judgement (`fairtui judge`) as a screen: each seed's runs with their progress, and the forest plot of the paired
differences, updating as seeds land. The screen drives the judgement as the command does (a step every few seconds
on a worker thread: pairs recorded as they land, the next seeds queued, the rest stopped once it is decided); the
runs train detached, so leaving the screen or the app loses nothing and reopening it continues."""

from __future__ import annotations

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from fairtui.runs.usertext import inert

POLL_S = 2.0


def judge_key(doc: dict) -> str | None:
    """The judgement a run belongs to (its ``judge:<key>`` tag), or None."""
    return next((t.split(":", 1)[1] for t in doc.get("tags") or [] if str(t).startswith("judge:")), None)


def run_cell(campaign, runs: dict, role: str, seed: int) -> str:
    """A seed's run of one side as its status and progress ("committed" for a committed baseline run)."""
    import json

    from fairtui.campaign.judging import BASELINE
    from fairtui.runs.runfolder import RunView
    from fairtui.runs.runstate import progress_brief

    if role == BASELINE and seed in campaign.spec.baseline.committed:
        return "committed"
    run_dir = runs.get((role, seed))
    if run_dir is None:
        return "-"
    status = RunView.load(run_dir).status()
    if status != "running":
        return status
    try:
        progress = json.loads((run_dir / "progress.json").read_text())
    except (OSError, ValueError):
        progress = {}
    return f"running: {progress_brief(progress) or 'starting'}"


def seed_rows(campaign, runs: dict) -> list[tuple[str, ...]]:
    """One row per seed: the seed, the method's run and the baseline's."""
    from fairtui.campaign.judging import BASELINE, METHOD

    return [(str(s), run_cell(campaign, runs, METHOD, s), run_cell(campaign, runs, BASELINE, s))
            for s in campaign.spec.seeds]


def family_seed_rows(family) -> list[tuple[str, ...]]:
    """A family's rows: the seed, each method's run, the shared baseline's."""
    from fairtui.campaign.judging import BASELINE, METHOD

    runs = [m.runs() for m in family.members]
    return [(str(s), *(run_cell(m, r, METHOD, s) for m, r in zip(family.members, runs)),
             run_cell(family.members[0], runs[0], BASELINE, s)) for s in family.specs[0].seeds]


class JudgeScreen(Screen):
    BINDINGS = [Binding("escape", "app.pop_screen", "back"), Binding("s", "stop", "stop its runs")]

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key
        self.campaign = None
        self.family = None  # a table of methods (fairtui.campaign.family): its members are driven together
        self.final = False
        self.paused = False  # its runs stopped from here (s): the screen reads, and starts nothing

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"judge {self.key}: reading...", id="judge-title", markup=False)
        yield DataTable(id="judge-runs", cursor_type="row")
        yield Static("", id="judge-forest", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.step()
        self.set_interval(POLL_S, self.step)

    @work(thread=True, exclusive=True)
    def step(self) -> None:
        from fairtui.campaign.report import forest_lines, verdict_lines

        if self.final:
            return
        try:
            campaign = self.campaign or self.open()
            if self.family is not None:
                return self.step_family()
            look = campaign.look(campaign.runs()) if self.paused else campaign.step()[0]
            rows = seed_rows(campaign, campaign.runs())
            lines = forest_lines(look)
            if look.final:
                lines += [""] + verdict_lines(look, campaign.spec, campaign.failed, campaign.failed_roles)
        except Exception as err:  # noqa: BLE001 - a worker's error is a notice on the screen, never a dead app
            self.app.call_from_thread(self.show_error, f"judge {self.key}: {type(err).__name__}: {err}")
            return
        self.app.call_from_thread(self.show, look, rows, lines)

    def step_family(self) -> None:
        from fairtui.campaign.family import family_lines

        family = self.family
        try:
            if self.paused:
                family.looks = {m.spec.method.label: m.look(m.runs()) for m in family.members}
                done = False
            else:
                done = family.step()[0]
            rows, lines = family_seed_rows(family), family_lines(family)
        except Exception as err:  # noqa: BLE001 - as step's
            self.app.call_from_thread(self.show_error, f"judge family {family.key}: {type(err).__name__}: {err}")
            return
        self.app.call_from_thread(self.show_family, done, rows, lines)

    def open(self):
        """The judgement of the record ``<home>/judges/<key>.json``, as it was asked; or the family it is a member
        of, or whose baseline run the key names (``family-<key>.json``), all its members together."""
        import json

        from fairtui.campaign.family import open_family
        from fairtui.campaign.judging import Campaign
        from fairtui.campaign.spec import Request, build_spec

        judges = self.app.home / "judges"
        record = json.loads((judges / f"{self.key}.json").read_text()) if (judges / f"{self.key}.json").is_file() \
            else {"family": self.key}
        if record.get("family"):
            self.family = open_family(self.app.home, record["family"], self.app.queue)
            self.campaign = self.family.members[0]
            return self.campaign
        spec = build_spec(Request.from_json(record.get("request") or {}), self.app.home)
        self.campaign = Campaign(self.app.home, spec, self.app.queue)
        return self.campaign

    def show_error(self, message: str) -> None:
        self.query_one("#judge-title", Static).update(inert(message))

    def fill(self, columns: tuple[str, ...], rows) -> None:
        table = self.query_one(DataTable)
        if not table.columns:
            table.add_columns(*columns)
        table.clear()
        for row in rows:
            table.add_row(*(inert(c) for c in row), key=row[0])

    def show_family(self, done: bool, rows, lines) -> None:
        family = self.family
        landed = sum(len(look.seeds) for look in family.looks.values())
        state = "verdict" if done else f"{landed} of {len(family.specs[0].seeds) * len(family.members)} pairs landed"
        self.query_one("#judge-title", Static).update(inert(
            f"judge family {family.key}: {len(family.members)} methods against {family.specs[0].baseline.label}: "
            f"{state}"))
        self.fill(("seed", *(s.method.label for s in family.specs), "baseline"), rows)
        self.query_one("#judge-forest", Static).update("\n".join(inert(line) for line in lines))
        self.final = done

    def show(self, look, rows, lines) -> None:
        spec = self.campaign.spec
        state = "verdict" if look.final else f"{len(look.seeds)} of {len(spec.seeds)} pairs landed"
        how = "until decided" if spec.until_decided else "fixed seeds"
        self.query_one("#judge-title", Static).update(inert(
            f"judge {self.key}: {spec.method.label} against {spec.baseline.label} ({how}): {state}"))
        self.fill(("seed", "method", "baseline"), rows)
        # each line made inert on its own: inert() writes a newline as a visible "\n", and the forest is rows
        self.query_one("#judge-forest", Static).update("\n".join(inert(line) for line in lines))
        self.final = look.final

    def action_stop(self) -> None:
        if self.campaign is None:
            return
        self.paused = True
        stopped = (self.family or self.campaign).stop_rest()
        self.notify(f"{len(stopped)} run(s) stop after their batch; reopen the judgement (or run the same "
                    "`fairtui judge`) to continue")
