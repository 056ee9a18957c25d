"""fairtui export: seeds grouped as mean and std, the attack and its setting named, rows in the order given, and
files written only where they may be (never inside the home, over a file without --force, nor by replacing a
fifo or a socket)."""

import json
import os
import statistics

import pytest

from engine.contract.config import Profile, TrainConfig
from fairtui.runs.synthetic import make_run
from tests.conftest import fairtui_cmd


def cli(*args, home):
    return fairtui_cmd(*args, home=home, env_extra={"COLUMNS": "200"})


def test_export_groups_seeds_as_mean_and_std(tmp_path):
    """A selection (--tag) is grouped by configuration, its seeds as mean and std; runs named one by one are rows
    of their own (below)."""
    home = tmp_path / "home"
    for seed in (0, 1, 2):
        make_run(home, f"2026010{seed}-000000-s{seed}", name=f"cfa-s{seed}", seed=seed,
                 profile=Profile(name="cfa", seed=seed), tags=("table",))
    make_run(home, "20260109-000000-other", name="other", profile=Profile(name="other",
                                                                              train=TrainConfig(epochs=3)), tags=("table",))
    runs = ["--tag", "table"]
    out = cli("export", *runs, "--format", "json", home=home)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["rows"]
    assert len(rows) == 2
    grouped = next(r for r in rows if len(r["runs"]) == 3)
    values = grouped["avg_robust"]["values"]
    assert grouped["avg_robust"]["mean"] == pytest.approx(statistics.mean(values))
    assert grouped["avg_robust"]["std"] == pytest.approx(statistics.stdev(values))
    md = cli("export", *runs, "--format", "md", home=home).stdout
    assert f"{statistics.mean(values) * 100:.1f} ± {statistics.stdev(values) * 100:.1f}" in md
    latex = cli("export", *runs, "--format", "latex", "-o", str(tmp_path / "t.tex"), home=home)
    assert latex.returncode == 0 and r"\pm" in (tmp_path / "t.tex").read_text()
    csv = cli("export", *runs, "--format", "csv", home=home).stdout.splitlines()
    assert csv[0].startswith("label,n_runs,setting,checkpoint,units,avg_clean_mean") and len(csv) == 3


def test_a_replicate_is_not_a_seed(tmp_path):
    """Issue #75: two runs of one configuration and one seed (a reproducibility check) are replicates. Named one by
    one they are two rows, by name, in the order given; in a selection they are one seed, and every format names
    the run set aside."""
    home = tmp_path / "home"
    make_run(home, "20260101-000000-first0", name="first-cfg", seed=0, profile=Profile(name="quickstart"),
             tags=("check",), t0=1000.0)
    make_run(home, "20260101-000001-secnd0", name="second-cfg", seed=0, profile=Profile(name="quickstart"),
             tags=("check",), t0=2000.0)
    make_run(home, "20260101-000002-third1", name="third", seed=1, profile=Profile(name="quickstart", seed=1),
             tags=("check",), t0=3000.0)
    md = cli("export", "first-cfg", "second-cfg", "--format", "md", "--checkpoint", "last", home=home).stdout
    labels = [line.split("|")[1].strip() for line in md.splitlines() if line.startswith("| ") and "Method" not in line]
    assert labels == ["first-cfg", "second-cfg"]
    assert [r["label"] for r in json.loads(cli("export", "second-cfg", "first-cfg", "--format", "json",
                                                home=home).stdout)["rows"]] == ["second-cfg", "first-cfg"]
    outputs = {fmt: cli("export", "--tag", "check", "--format", fmt, home=home) for fmt in ("md", "csv", "latex", "json")}
    for fmt, out in outputs.items():
        assert out.returncode == 0, (fmt, out.stderr)
        assert "seeds 0, 0" not in out.stdout and "seeds 0, 1" in out.stdout, fmt
        assert "second-cfg [20260101-000001-secnd0]: a second run of seed 0" in out.stdout, fmt
    (row,) = json.loads(outputs["json"].stdout)["rows"]
    assert row["runs"] == ["20260101-000000-first0", "20260101-000002-third1"]  # the first run of seed 0 stays
    assert row["set_aside"] == ["second-cfg [20260101-000001-secnd0]: a second run of seed 0"]


def test_exports_name_the_attack_and_its_setting_and_say_their_units(tmp_path):
    """Every format says which attack (not "first robust attack"), its eps and subset, and its units: JSON
    and CSV hold fractions, Markdown and LaTeX percent."""
    make_run(tmp_path, "20260101-000000-aaaaaa", name="a", attacks=("pgd20",))
    doc = json.loads(cli("export", "aaaaaa", "--format", "json", home=tmp_path).stdout)
    assert doc["units"] == "fractions in [0, 1]; CV (class-wise variance, not std/mean) in fraction^2" and 0 <= doc["rows"][0]["avg_robust"]["mean"] <= 1
    assert doc["setting"] == doc["rows"][0]["setting"] == "pgd20, eps 8/255, whole split"
    csv = cli("export", "aaaaaa", "--format", "csv", home=tmp_path).stdout.splitlines()
    assert "pgd20, eps 8/255, whole split" in csv[1] and "fractions in [0, 1]" in csv[1]
    md = cli("export", "aaaaaa", "--format", "md", home=tmp_path).stdout
    assert md.startswith("pgd20, eps 8/255, whole split @ best; accuracies in %, CV (class-wise variance) in %^2")
    latex = cli("export", "aaaaaa", "--format", "latex", home=tmp_path).stdout
    assert latex.startswith("% pgd20, eps 8/255, whole split @ best; accuracies in percent")
    for out in (md, latex, json.dumps(doc), "\n".join(csv)):
        assert "first robust attack" not in out


def test_export_never_writes_inside_the_home_nor_over_a_file_without_force(tmp_path):
    """`export -o` pointed at a run's events.jsonl used to overwrite it with CSV (the run became lost)."""
    home = tmp_path / "home"
    run = make_run(home, "20260101-000000-aaaaaa", name="a")
    events = (run / "events.jsonl").read_text()
    into_home = cli("export", "a", "--format", "csv", "-o", str(run / "events.jsonl"), home=home)
    assert into_home.returncode == 2 and "inside the fairtui home" in into_home.stderr
    assert (run / "events.jsonl").read_text() == events
    assert len(into_home.stderr.strip().splitlines()) == 1
    folder = cli("export", "a", "-o", str(tmp_path), home=home)
    assert folder.returncode == 2 and "is a folder" in folder.stderr and "Traceback" not in folder.stderr
    missing = cli("export", "a", "-o", str(tmp_path / "no" / "t.md"), home=home)
    assert missing.returncode == 2 and "no such folder" in missing.stderr
    target = tmp_path / "t.md"
    target.write_text("mine")
    kept = cli("export", "a", "-o", str(target), home=home)
    assert kept.returncode == 2 and "exists; --force overwrites it" in kept.stderr and target.read_text() == "mine"
    assert cli("export", "a", "-o", str(target), "--force", home=home).returncode == 0
    assert target.read_text().startswith("pgd20")


def test_export_writes_into_a_fifo_and_never_replaces_it(tmp_path):
    """`export -o /dev/null --force` swapped the device node for a regular file through the atomic rename
    (harmful as root). A FIFO stands for any special file here (plot -o shares the writer, write_output):
    it must stay one and get the text."""
    import stat

    home = tmp_path / "home"
    make_run(home, "20260101-000000-aaaaaa", name="a")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader is there: the writer's open does not block
    try:
        out = cli("export", "a", "--format", "csv", "-o", str(fifo), "--force", home=home)
        try:
            got = os.read(reader, 1 << 16)  # the export is far below the pipe's buffer
        except BlockingIOError:
            got = b""
    finally:
        os.close(reader)
    assert out.returncode == 0, out.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still the FIFO, not a regular file
    assert got.startswith(b"label,n_runs,setting")
    assert not list(tmp_path.glob(".pipe.fairtui-tmp"))


def test_export_refuses_a_socket(tmp_path):
    import socket

    home = tmp_path / "home"
    make_run(home, "20260101-000000-aaaaaa", name="a")
    path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        out = cli("export", "a", "-o", str(path), "--force", home=home)
    assert out.returncode == 2 and "is a socket" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_export_rows_are_in_the_order_given_and_two_configurations_of_one_profile_are_told_apart(tmp_path):
    import dataclasses

    from engine.contract.config import ModelConfig

    home = tmp_path / "home"
    make_run(home, "20260101-000000-aaaaaa", name="big", profile=Profile(name="digits-dafa"), tags=("t",), t0=2.0)
    make_run(home, "20260101-000001-bbbbbb", name="small", tags=("t",), t0=1.0,
             profile=dataclasses.replace(Profile(name="digits-dafa"), model=ModelConfig(width=4)))
    out = fairtui_cmd("export", "20260101-000001-bbbbbb", "20260101-000000-aaaaaa", "--format", "csv", home=home)
    assert out.returncode == 0, out.stderr
    labels = [line.split(",")[0] for line in out.stdout.splitlines()[1:]]
    assert labels == ["small", "big"]  # named one by one: rows by name, in the order given
    out = fairtui_cmd("export", "--tag", "t", "--format", "csv", home=home)  # a selection: by configuration
    labels = sorted(line.split(",")[0] for line in out.stdout.splitlines()[1:])
    assert labels == ["digits-dafa (model.width=10)", "digits-dafa (model.width=4)"]


def test_a_row_trained_in_bf16_says_so_and_a_table_that_mixes_runtimes_labels_each_row(tmp_path):
    """The training's runtime is a setting of the numbers: a table of bf16 rows says so in its title, one that
    mixes bf16 and fp32 rows names each row's, and fp32 alone (the default) adds nothing."""
    bf16 = "autocast bfloat16, channels-last"

    def trained_in(run_dir, runtime):
        lines = (run_dir / "events.jsonl").read_text().splitlines()
        started = json.loads(lines[0])
        started["runtime"] = runtime
        (run_dir / "events.jsonl").write_text("\n".join([json.dumps(started), *lines[1:]]) + "\n")

    home = tmp_path / "home"
    for seed in (0, 1):
        trained_in(make_run(home, f"2026010{seed}-000000-new{seed}", name="new", seed=seed,
                            profile=Profile(name="new", seed=seed), tags=("new", "both"), t0=1.0 + seed), bf16)
        make_run(home, f"2026010{seed}-000001-base{seed}", name="base", seed=seed,
                 profile=Profile(name="base", seed=seed), tags=("base", "both"), t0=3.0 + seed)
    new, base = ["--tag", "new"], ["--tag", "base"]
    alone = cli("export", *base, "--format", "md", home=home).stdout
    assert alone.startswith("pgd20, eps 8/255, whole split @ best;") and "trained with" not in alone
    ours = cli("export", *new, "--format", "md", home=home).stdout
    assert ours.startswith(f"pgd20, eps 8/255, whole split; trained with {bf16} @ best;")
    mixed = cli("export", "--tag", "both", "--format", "md", home=home).stdout
    assert mixed.startswith("settings differ between rows (each row names its own)")
    assert f"| new (seeds 0, 1) [pgd20, eps 8/255, whole split; trained with {bf16}] |" in mixed
    assert "| base (seeds 0, 1) [pgd20, eps 8/255, whole split] |" in mixed
    doc = json.loads(cli("export", "--tag", "both", "--format", "json", home=home).stdout)
    assert {r["label"]: r["setting"] for r in doc["rows"]} == {
        "new (seeds 0, 1)": f"pgd20, eps 8/255, whole split; trained with {bf16}",
        "base (seeds 0, 1)": "pgd20, eps 8/255, whole split"}


def test_a_fine_tunes_seeds_group_though_each_starts_from_its_own_seeds_base(tmp_path):
    """FRL, FAAL and CSR fine-tune the same seed's base run: `method.init_from` differs with the seed, as the
    seed does, so their seeds are one group; fine-tunes of bases of two profiles are two; two runs of one seed
    whose bases are not at hand (committed files from another machine) are not folded into one group."""
    from fairtui.judge.compare import seed_groups
    from fairtui.runs.runfolder import RunView

    home = tmp_path / "home"

    def fine_tune(run_id: str, seed: int, base: str) -> RunView:
        run = make_run(home, run_id, name=f"frl-s{seed}", method="frl", seed=seed,
                       profile=Profile(name="frl", seed=seed))
        lines = (run / "events.jsonl").read_text().splitlines()
        started = json.loads(lines[0])
        started["config"]["method"]["init_from"] = base
        (run / "events.jsonl").write_text("\n".join([json.dumps(started), *lines[1:]]) + "\n")
        return RunView.load(run)

    bases = {(p, s): make_run(home, f"2026010{s}-00000{i}-base{i}{s}", name=f"{p}-s{s}", seed=s,
                              profile=Profile(name=p, seed=s))
             for i, p in enumerate(("at", "trades")) for s in (0, 1, 2)}
    from_at = [fine_tune(f"20260201-00000{s}-ftat{s}", s, str(bases["at", s] / "checkpoints" / "best.pt"))
               for s in (0, 1, 2)]
    groups = seed_groups(from_at)
    assert [(label, len(members)) for label, members, _ in groups] == [("frl (seeds 0, 1, 2)", 3)]
    from_trades = [fine_tune(f"20260202-00000{s}-fttr{s}", s, str(bases["trades", s])) for s in (0, 1)]
    assert sorted(len(m) for _, m, _ in seed_groups(from_at + from_trades)) == [2, 3]
    lost = [fine_tune(f"20260203-00000{i}-lost{i}", 0, f"/elsewhere/runs/2025-base{i}") for i in (0, 1)]
    assert [len(m) for _, m, _ in seed_groups(lost)] == [1, 1]  # seed 0 twice: not one group of "seeds 0, 0"


def test_a_base_not_at_hand_is_looked_for_again_once_it_arrives(tmp_path):
    """The app runs for days: a fine-tune's base first read as "a run" (its folder not yet copied) is named by its
    profile once its folder is there, not remembered as unknown."""
    from fairtui.runs.configurations import base_profile

    base = tmp_path / "runs" / "20260101-000000-late00"
    ref = str(base / "checkpoints" / "best.pt")
    assert base_profile(ref) == "a run"
    make_run(tmp_path, base.name, name="at-s0", profile=Profile(name="cifar10-cpu-at"))
    assert base_profile(ref) == "a run of cifar10-cpu-at"
    assert base_profile(str(base)) == "a run of cifar10-cpu-at"
