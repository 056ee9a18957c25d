"""The launch dialog: a profile, overrides (checked as `--set` is), name, tags and GPUs.

The profiles are listed with those that fit this machine first (on a machine without GPUs: the
quickstart, then the digits profiles and CIFAR-10 subsets; whole-CIFAR-10 profiles after them, marked
"GPU"), filtered as one types, with the profile launched last highlighted (``<home>/app-state.json``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, OptionList, SelectionList, Static

from engine.contract.results import eps_text
from fairtui.app.widgets.lineinput import LineInput


class LaunchDialog(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "cancel"), Binding("ctrl+l", "launch", "launch")]

    def compose(self) -> ComposeResult:
        self.gpus = self.app.inventory()
        found = sorted(self.app.profiles_dir.glob("*.toml")) if self.app.profiles_dir.is_dir() else []
        self.choices = ordered_choices(found, bool(self.gpus))
        self.profiles: list[Path] = [c.path for c in self.choices]  # the listed ones, as filtered
        with Vertical(classes="dialog launch"):
            from fairtui.runs.home import display_path

            yield Label(f"new run: profile ({display_path(self.app.profiles_dir)})")
            # The fields scroll; the error line and the keys stay in view at any terminal size. The
            # profile and the GPUs, what the dialog is for, sit side by side at the top (80x24 shows both).
            with VerticalScroll(id="launch-fields"):
                with Horizontal(id="launch-top"):
                    with Vertical(id="launch-profiles"):
                        yield LineInput(placeholder="type to filter", id="profile-filter")
                        yield OptionList(*[c.prompt for c in self.choices], id="profile")
                    with Vertical(id="launch-gpus"):
                        if self.gpus:
                            yield Label(f"GPUs ({self.app.queue.per_gpu} run each; several: DDP)")
                            yield SelectionList(*[(short_gpu_label(g), g.index) for g in self.gpus], id="gpus")
                        else:
                            yield Label("no GPU found: CPU only")
                yield Static("", id="profile-info", markup=False)
                yield LineInput(placeholder="overrides: train.epochs=3 attack.eps=8/255", id="overrides")
                yield LineInput(placeholder="name (default: the profile's)", id="name")
                yield LineInput(placeholder="tags, space-separated", id="tags")
                yield LineInput(placeholder="sweep (optional): method.eta=0.05,0.1 train.lr=0.1,0.05", id="grid")
                yield LineInput(placeholder="seeds (optional, a sweep over seeds): 3", id="seeds")
                yield LineInput(placeholder="judge against (optional): BASELINE [results=DIR] [until-decided]",
                                id="judge")
                yield Button("launch (ctrl+l)", id="launch", variant="primary")
            yield Static("", id="launch-error", markup=False)
            yield Label("type: filter  tab: next field  ctrl+l: launch  escape: cancel", classes="hint")

    def on_mount(self) -> None:
        options = self.query_one("#profile", OptionList)
        if self.profiles:
            last = last_profile(self.app.home)
            names = [p.name for p in self.profiles]
            options.highlighted = names.index(last) if last in names else 0
        self.query_one("#profile-filter", Input).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.query_one("#overrides", Input).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id != "profile-filter":
            return
        options = self.query_one("#profile", OptionList)
        current = self.profiles[options.highlighted] if self.profiles and options.highlighted is not None else None
        shown = [c for c in self.choices if c.matches(event.value)]
        self.profiles = [c.path for c in shown]
        options.clear_options()
        options.add_options([c.prompt for c in shown])
        if shown:
            options.highlighted = self.profiles.index(current) if current in self.profiles else 0
        else:
            self.query_one("#profile-info", Static).update(f"no profile matches {event.value!r}")

    def on_key(self, event) -> None:
        """Up and down in the filter move through the profiles it leaves; tab goes on to the overrides, the next
        thing to type (the list it drives is behind it, and what was typed into the list was lost)."""
        if self.focused is not None and self.focused.id == "profile-filter" and event.key == "tab":
            self.query_one("#overrides", Input).focus()
            event.stop()
            event.prevent_default()
        if self.focused is not None and self.focused.id == "profile-filter" and event.key in ("up", "down"):
            options = self.query_one("#profile", OptionList)
            options.action_cursor_up() if event.key == "up" else options.action_cursor_down()
            event.stop()
            event.prevent_default()

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if self.profiles and event.option_index is not None:
            info = next(c.info for c in self.choices if c.path == self.profiles[event.option_index])
            self.query_one("#profile-info", Static).update(info)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_launch()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "profile-filter":  # enter on the filter picks the profile: on to its overrides
            if self.profiles:
                self.query_one("#overrides", Input).focus()
            return
        self.action_launch()

    def action_cancel(self) -> None:
        self.dismiss(None)

    def action_launch(self) -> None:
        from engine.contract.profile_io import check_data_root, load_profile, split_overrides
        from engine.contract.profile_schema import ProfileError
        from fairtui.launch.launcher import GpuChoice, create_run

        error = self.query_one("#launch-error", Static)
        index = self.query_one("#profile", OptionList).highlighted
        if index is None or not self.profiles:
            error.update("choose a profile")
            return
        path = self.profiles[index]
        try:
            overrides = split_overrides(self.query_one("#overrides", Input).value)
        except ValueError as err:
            error.update(f"overrides: {err}")
            return
        if self.gpus:
            chosen = sorted(self.query_one("#gpus", SelectionList).selected)
            choice = GpuChoice(devices=tuple(chosen)) if chosen else GpuChoice(cpu=True)
        else:
            choice = GpuChoice(cpu=True)
        try:
            profile = load_profile(path, overrides + choice.overrides())
            check_data_root(profile, str(path))
        except ProfileError as err:
            error.update(str(err))
            return
        name = self.query_one("#name", Input).value.strip() or None
        tags = self.query_one("#tags", Input).value.split()
        from fairtui.runs.usertext import UserTextError, check_name, check_tag

        try:
            if name:
                check_name(name, "name")
            for t in tags:
                check_tag(t)
        except UserTextError as err:
            error.update(str(err))
            return
        grid = self.query_one("#grid", Input).value.split()
        seeds = self.query_one("#seeds", Input).value.strip()
        judge = self.query_one("#judge", Input).value.strip()
        if judge:
            if grid:
                error.update("a judgement trains one configuration: leave the sweep field empty")
                return
            self.launch_judge(path, overrides, judge, seeds, choice)
            return
        if grid or seeds:
            self.launch_sweep(path, overrides + choice.overrides(), grid, seeds, name, choice)
            return
        run_dir = create_run(self.app.home, profile, str(path), name, tags, choice)
        self.app.queue.submit(run_dir, choice)
        self.app.index.register(run_dir)
        self.app.tick_queue()
        remember_profile(self.app.home, path.name)
        self.dismiss(run_dir.name)

    def launch_judge(self, path, overrides: list[str], text: str, seeds: str, choice) -> None:
        """The dialog's judgement (`fairtui judge`'s checks): its record made, its screen opened, where it runs."""
        from engine.contract.profile_schema import ProfileError
        from fairtui.campaign.judging import Campaign
        from fairtui.campaign.spec import build_spec

        error = self.query_one("#launch-error", Static)
        gpus = "cpu" if choice.cpu else ",".join(str(d) for d in choice.devices)
        try:
            spec = build_spec(judge_request(path, overrides, text, seeds, gpus), self.app.home)
        except (ProfileError, ValueError, OSError) as err:
            error.update(str(err))
            return
        Campaign(self.app.home, spec, self.app.queue)  # its record: the judge screen reopens it
        remember_profile(self.app.home, path.name)
        self.dismiss(f"judge:{spec.key}")

    def launch_sweep(self, path, overrides: list[str], grid: list[str], seeds: str, name, choice) -> None:
        """The dialog's sweep: the same expansion and checks as `fairtui sweep`, on the local queue."""
        from engine.contract.profile_io import apply_overrides
        from engine.contract.profile_schema import ProfileError
        from fairtui.launch.sweep import build_spec, expand, split_profile
        from fairtui.launch.sweep_run import create_children, queue_locally

        error = self.query_one("#launch-error", Static)
        try:
            raw, table = split_profile(path)
            raw = apply_overrides(raw, overrides)
            n_seeds = int(seeds) if seeds else None
            spec = build_spec(path, table, grid, n_seeds, None, "local")
            children = expand(path, raw, spec)
        except (ProfileError, ValueError) as err:
            error.update(str(err))
            return
        record = create_children(self.app.home, str(path), children, spec, name, "local")
        pool = ["cpu"] if choice.cpu else [str(d) for d in choice.devices]
        queue_locally(self.app.home, record, pool, self.app.queue.per_gpu, worker=self.app.queue.worker)
        self.app.tick_queue()
        remember_profile(self.app.home, path.name)
        self.dismiss(record["runs"][0] if record["runs"] else None)


def judge_request(path, overrides: list[str], text: str, seeds: str, gpus: str | None):
    """The launch dialog's judgement: "BASELINE [results=DIR]... [until-decided] [max=N]" and the seeds field ("0-4",
    or N for 0 to N - 1); ValueError naming what is wrong."""
    from fairtui.campaign.spec import Request

    words = text.split()
    baseline, results, until, most = words[0], [], False, 10
    for word in words[1:]:
        if word.startswith("results="):
            results.append(word.split("=", 1)[1])
        elif word == "until-decided":
            until = True
        elif word.startswith("max=") and word[4:].isdigit():
            most = int(word[4:])
        else:
            raise ValueError(f"judge against: {word!r}? write BASELINE [results=DIR] [until-decided] [max=N]")
    if seeds.isdigit():
        seeds = f"0-{int(seeds) - 1}" if int(seeds) > 0 else ""
    return Request(str(path), baseline, results, [], list(overrides), seeds or None, until, most, gpus=gpus)


def short_gpu_label(gpu) -> str:
    """A GPU in half the dialog, what decides the choice first (80x24 cuts the end of a long name):
    "0 1/80 GiB 37% A100-SXM4-80GB"."""
    name = gpu.name.replace("NVIDIA ", "")
    return (f"{gpu.index} {gpu.memory_used_mib / 1024:.0f}/{gpu.memory_total_mib / 1024:.0f} GiB "
            f"{gpu.utilization_pct:.0f}% {name}")


def profile_info(p) -> str:
    """What a profile runs: its description, method, data set, model and epochs."""
    return (f"{p.description or p.name}: {p.method.name} on {p.data.dataset} / {p.model.arch}, "
            f"{p.train.epochs} epochs, eps {eps_text(p.attack.eps)}")


@dataclass(frozen=True)
class ProfileChoice:
    """A profile in the list: whether it fits this machine, and what the list shows of it."""

    path: Path
    fits: bool
    text: str  # name and description, for the filter
    info: str  # what it runs (profile_info), or why it cannot be read: shown under the list

    @property
    def prompt(self) -> Text:
        label = Text(self.path.name)
        if not self.fits:
            label.append(" GPU", style="dim")
        return label

    def matches(self, typed: str) -> bool:
        """Every word typed is in the name or the description (case ignored)."""
        return all(word in self.text for word in typed.lower().split())


def fits_cpu(profile) -> bool:
    """Whether a profile trains in reasonable time without a GPU: the embedded digits, or a subset of a
    larger data set (``data.train_per_class``, the cifar10-cpu profiles); not a whole CIFAR-10 schedule."""
    return profile.data.dataset == "digits" or profile.data.train_per_class > 0


def ordered_choices(paths: list[Path], have_gpus: bool) -> list[ProfileChoice]:
    """The quickstart first, then the profiles that fit this machine, then the rest; by name within each."""
    from engine.contract.profile_io import load_profile
    from engine.contract.profile_schema import ProfileError

    out = []
    for path in paths:  # each read once, when the dialog opens
        try:
            profile = load_profile(path)
            fits, text, info = have_gpus or fits_cpu(profile), f"{path.name} {profile.description or ''}", \
                profile_info(profile)
        except (ProfileError, OSError) as err:
            # listed where it can be chosen: the launch says what is wrong
            fits, text, info = True, path.name, f"cannot read it: {err}"
        out.append(ProfileChoice(path, fits, text.lower(), info))
    return sorted(out, key=lambda c: (c.path.name != "quickstart.toml", not c.fits, c.path.name))


STATE_FILE = "app-state.json"  # in the home: what the app remembers between sessions (the last profile)


def last_profile(home: Path) -> str | None:
    try:
        return json.loads((home / STATE_FILE).read_text()).get("launch_profile")
    except (OSError, ValueError, AttributeError):
        return None


def remember_profile(home: Path, name: str) -> None:
    from engine.contract.atomic import atomic_write_json

    try:
        state = json.loads((home / STATE_FILE).read_text())
        state = state if isinstance(state, dict) else {}
    except (OSError, ValueError):
        state = {}
    state["launch_profile"] = name
    try:
        atomic_write_json(home / STATE_FILE, state)
    except OSError:
        pass  # a convenience: never a reason for a launch to fail
