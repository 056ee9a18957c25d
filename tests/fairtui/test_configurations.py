"""Which runs are seeds of one configuration (fairtui.runs.configurations): a profile's seeds trained by two fairtui
versions, or with a runtime request that resolved alike, stay one group; a profile run with other settings
(`--set train.lr=...`), or at another precision, is a group of its own, labelled by what differs, in export and in
`compare --by profile` alike, and never dropped as "a second run of seed N"."""

from __future__ import annotations

import json

from engine.contract.config import Profile
from fairtui.runs.configurations import by_configuration, configuration
from fairtui.runs.runfolder import RunView
from fairtui.runs.synthetic import make_run
from tests.conftest import fairtui_cmd


def run(home, run_id: str, profile: str, seed: int, edit=None, device: str = "cpu", cpu: str = "",
        runtime: str | None = None, flags: tuple = ()) -> RunView:
    """A completed synthetic run of ``profile`` whose run_started's config ``edit`` changes (a version that did
    not record a key, a --set), whose device is ``device`` (the runtime that ran, as engines before the
    ``runtime`` field told it), whose ``runtime`` is ``runtime`` (None: not recorded) and whose provenance
    names ``cpu``."""
    folder = make_run(home, run_id, name=f"{profile}-s{seed}", seed=seed, profile=Profile(name=profile, seed=seed))
    lines = (folder / "events.jsonl").read_text().splitlines()
    started = json.loads(lines[0])
    if edit is not None:
        edit(started["config"])
    started["device"] = device
    started.pop("runtime", None)
    if runtime is not None:
        started["runtime"] = runtime
    if cpu:
        started["provenance"] = {"cpu": {"model": cpu, "flags": list(flags)}}
    (folder / "events.jsonl").write_text("\n".join([json.dumps(started), *lines[1:]]) + "\n")
    return RunView.load(folder)


def unrecorded_kl(config: dict) -> None:  # an engine from before attack.kl existed
    config["attack"].pop("kl", None)
    config["train"]["amp"] = "none"


def lr(value: float):
    return lambda config: config["train"].update(lr=value)


def test_seeds_of_two_versions_and_runtimes_that_ran_alike_are_one_configuration(tmp_path):
    old = run(tmp_path, "20260101-000000-aaaaa0", "p", 0, unrecorded_kl)
    new = run(tmp_path, "20260101-000001-aaaaa1", "p", 1, lambda c: c["train"].update(amp="auto"))
    assert "attack.kl" not in configuration(old) and configuration(new)["runtime"] == "fp32"
    assert [(label, [v.run_id for v in views]) for label, views in by_configuration([old, new])] == \
        [("p", [old.run_id, new.run_id])]


def test_another_precision_and_another_learning_rate_are_configurations_of_their_own(tmp_path):
    views = [run(tmp_path, "20260101-000000-aaaaa0", "p", 0),
             run(tmp_path, "20260101-000001-aaaaa1", "p", 0, lr(0.1625)),
             run(tmp_path, "20260101-000002-aaaaa2", "p", 1),
             run(tmp_path, "20260101-000003-aaaaa3", "p", 0, device="cpu; autocast bfloat16, channels-last"),
             run(tmp_path, "20260101-000004-aaaaa4", "q", 0)]
    base_lr = views[0].config["train"]["lr"]
    got = [(label, [v.run_id[-1] for v in members]) for label, members in by_configuration(views)]
    assert got == [(f"p (runtime=fp32, train.lr={base_lr})", ["0", "2"]),
                   ("p (runtime=fp32, train.lr=0.1625)", ["1"]),
                   (f"p (runtime=autocast bfloat16, channels-last, train.lr={base_lr})", ["3"]),
                   ("q", ["4"])]


def test_a_label_names_more_keys_where_its_first_three_do_not_tell_two_configurations_apart(tmp_path):
    def train(epochs, momentum, weight_decay, lr):
        return lambda c: c["train"].update(epochs=epochs, momentum=momentum, weight_decay=weight_decay, lr=lr)

    views = [run(tmp_path, "20260101-000000-aaaaa0", "p", 0, train(3, 0.9, 0.1, 0.5)),
             run(tmp_path, "20260101-000001-aaaaa1", "p", 0, train(3, 0.9, 0.1, 0.25)),
             run(tmp_path, "20260101-000002-aaaaa2", "p", 0, train(4, 0.8, 0.2, 0.5))]
    assert [label for label, _ in by_configuration(views)] == [
        "p (train.epochs=3, train.lr=0.5, train.momentum=0.9, ...)",
        "p (train.epochs=3, train.lr=0.25, train.momentum=0.9, ...)",
        "p (train.epochs=4, train.lr=0.5, train.momentum=0.8, ...)"]
    views.append(run(tmp_path, "20260101-000003-aaaaa3", "p", 0, train(3, 0.9, 0.2, 0.5)))
    labels = [label for label, _ in by_configuration(views)]
    assert labels[0] == "p (train.epochs=3, train.lr=0.5, train.momentum=0.9, train.weight_decay=0.1)"
    assert len(set(labels)) == 4


def test_compare_by_profile_keeps_a_variant_of_a_profile_as_its_own_group(tmp_path):
    """The CFA-on-TRADES step-size probe: the row's profile run again with --set train.lr; before, `compare --by
    profile` put both in the row's group and left the probe's seeds out as second runs of their seeds."""
    home = tmp_path / "home"
    for seed in (0, 1, 2):
        run(home, f"2026010{seed}-000000-base0{seed}", "base", seed)
        run(home, f"2026010{seed}-000001-row00{seed}", "row", seed)
        run(home, f"2026010{seed}-000002-probe{seed}", "row", seed, lr(0.1625))
    out = fairtui_cmd("compare", "--by", "profile", "--baseline", "base", "--checkpoint", "last", "--json", home=home)
    assert out.returncode == 0, out.stderr
    groups = {g["label"]: g for g in json.loads(out.stdout)["groups"]}
    row_lr = Profile(name="row").train.lr
    assert set(groups) == {"base", f"row (train.lr={row_lr})", "row (train.lr=0.1625)"}
    assert all(g["n"] == 3 and g["left_out"] == [] for g in groups.values())
    paired = {e["group"] for e in json.loads(out.stdout)["paired"]}
    assert paired == {f"row (train.lr={row_lr})"}
    # the probe trained with another lr schedule than the base: paired only when allowed, and then named
    (refused,) = json.loads(out.stdout)["not_paired"]
    assert refused["group"] == "row (train.lr=0.1625)" and refused["reason"].startswith("train.lr schedule differs")
    allowed = fairtui_cmd("compare", "--by", "profile", "--baseline", "base", "--checkpoint", "last", "--json",
                          "--allow-protocol-difference", home=home)
    entries = {e["group"]: e for e in json.loads(allowed.stdout)["paired"]}
    assert set(entries) == {f"row (train.lr={row_lr})", "row (train.lr=0.1625)"}
    assert entries["row (train.lr=0.1625)"]["protocol_differences"][0].startswith("train.lr schedule differs (lr 0.1625")
    assert entries[f"row (train.lr={row_lr})"]["protocol_differences"] == []
    wrong = fairtui_cmd("compare", "--by", "profile", "--baseline", "row", home=home)
    assert wrong.returncode == 2 and "row (train.lr=0.1625)" in wrong.stderr


def test_runs_of_one_seed_are_warned_of_another_cpu_only_within_one_configuration(tmp_path):
    from fairtui.runs.provenance import provenance_warnings

    row = run(tmp_path, "20260101-000000-row000", "row", 0, cpu="AVX512 machine")
    probe = run(tmp_path, "20260101-000001-probe0", "row", 0, lr(0.1625), cpu="AVX2 machine")
    assert provenance_warnings([row, probe]) == []
    again = run(tmp_path, "20260101-000002-again0", "row", 0, cpu="AVX2 machine")
    [line] = provenance_warnings([row, probe, again])
    assert row.run_id in line and again.run_id in line and "different CPU" in line


def test_cpus_that_differ_in_int8_instructions_alone_are_not_warned_of(tmp_path):
    """Found judging TRIX on a family-25 EPYC: its seeds 0-4 retrained the family-26 rows to the last bit, and compare
    warned that their numbers were not expected to match (avx_vnni, an int8-only set, was in one CPU's flags). The
    warning reads the CPU as the judge's kind does: without the int8-only sets."""
    from fairtui.runs.provenance import provenance_warnings

    home = tmp_path
    kinds = ("avx2", "avx512f", "avx512_bf16")
    row = run(home, "20260101-000000-row000", "row", 0, cpu="AMD EPYC", flags=kinds)
    vnni = run(home, "20260101-000001-vnni00", "row", 0, cpu="AMD EPYC", flags=(*kinds, "avx512_vnni", "avx_vnni"))
    assert provenance_warnings([row, vnni]) == []
    amx = run(home, "20260101-000002-amx000", "row", 0, cpu="AMD EPYC", flags=(*kinds, "amx_bf16"))
    [line] = provenance_warnings([row, amx])
    assert amx.run_id in line and "different CPU" in line


def test_a_fine_tunes_seeds_stay_one_group_whether_or_not_their_bases_are_at_hand(tmp_path):
    """Committed FRL seeds whose bases were trained on another machine, and one whose base is in this home: one
    group (a base's presence on this machine once split them). Once fine-tunes of two base profiles are at hand,
    those whose bases are not cannot be placed, and are a group of their own."""
    base = run(tmp_path, "20260101-000000-base03", "at", 3)
    views = [run(tmp_path, f"20260102-00000{s}-frl00{s}", "frl", s,
                 lambda c, s=s: c["method"].update(init_from=f"/elsewhere/runs/2025-at-s{s}")) for s in (0, 1, 2)]
    views.append(run(tmp_path, "20260102-000003-frl003", "frl", 3,
                     lambda c: c["method"].update(init_from=str(base.run_dir / "checkpoints" / "best.pt"))))
    assert [(label, len(m)) for label, m in by_configuration(views)] == [("frl", 4)]
    other = run(tmp_path, "20260100-000000-trades", "trades", 4)
    views.append(run(tmp_path, "20260102-000004-frl004", "frl", 4,
                     lambda c: c["method"].update(init_from=str(other.run_dir))))
    labels = [label for label, _ in by_configuration(views)]
    assert labels == ["frl (method.init_from=a run)", "frl (method.init_from=a run of at)",
                      "frl (method.init_from=a run of trades)"], labels


def test_seeds_trained_on_two_gpus_are_one_configuration_and_a_cpu_run_is_not(tmp_path):
    options = "; autocast bfloat16, channels-last, compiled (reduce-overhead)"
    gpu = lambda name, visible: f"cuda ({name}; CUDA_VISIBLE_DEVICES={visible}){options}"  # noqa: E731
    views = [run(tmp_path, "20260101-000000-aaaaa0", "p", 0, device=gpu("NVIDIA H200", 0)),
             run(tmp_path, "20260101-000001-aaaaa1", "p", 1, device=gpu("NVIDIA H200", 1)),
             run(tmp_path, "20260101-000002-aaaaa2", "p", 2, device=gpu("NVIDIA H100 80GB HBM3", "all")),
             run(tmp_path, "20260101-000003-aaaaa3", "p", 3, device="cuda (NVIDIA H200; CUDA_VISIBLE_DEVICES=0)"),
             run(tmp_path, "20260101-000004-aaaaa4", "p", 4, device=f"cpu{options}")]
    assert configuration(views[0])["runtime"] == "autocast bfloat16, channels-last, compiled (reduce-overhead)"
    assert configuration(views[3])["runtime"] == "fp32"
    got = [[v.run_id[-1] for v in members] for _, members in by_configuration(views)]
    # which GPU ran (and which card) is not a setting; the options are, and the device type is not compared
    assert got == [["0", "1", "2", "4"], ["3"]]


def test_the_recorded_runtime_is_read_before_the_device_text_and_older_runs_still_parse(tmp_path):
    """run_started's ``runtime`` field is what the run trained with; the device text is read only for runs of
    engines that did not record it. A run whose device text would parse otherwise (it never does from an
    engine: the two come from one Runtime) shows which one is read."""
    options = "autocast bfloat16, channels-last"
    recorded = run(tmp_path, "20260101-000000-aaaaa0", "p", 0, device="cpu", runtime=options)
    older = run(tmp_path, "20260101-000001-aaaaa1", "p", 1, device=f"cpu; {options}")
    plain = run(tmp_path, "20260101-000002-aaaaa2", "p", 2, device="cpu", runtime="fp32")
    assert configuration(recorded)["runtime"] == configuration(older)["runtime"] == options
    assert configuration(plain)["runtime"] == "fp32"
    assert [[v.run_id[-1] for v in members] for _, members in by_configuration([recorded, older, plain])] == \
        [["0", "1"], ["2"]]


def test_labels_that_differ_only_at_their_end_stay_apart_at_80_columns(tmp_path):
    """#70 item 5: at 80 columns `digits-trades (method.b…` hid what told two groups apart. A long label folds onto
    a second line of its cell; every label is shown whole in the groups table."""
    home = tmp_path / "home"
    for seed in (0, 1):
        run(home, f"2026010{seed}-000000-aaaaa{seed}", "cifar10-cpu-quick-cfa-trades", seed,
            lambda c: c["method"].update(beta=6.0))
        run(home, f"2026010{seed}-000001-bbbbb{seed}", "cifar10-cpu-quick-cfa-trades", seed,
            lambda c: c["method"].update(beta=3.0))
    out = fairtui_cmd("compare", "--by", "profile", home=home, env_extra={"COLUMNS": "80"})
    assert out.returncode == 0, out.stderr
    assert max(len(line) for line in out.stdout.splitlines()) <= 80
    table = out.stdout.split("Per-class")[0]
    joined = "".join(line.split("  ")[0].strip() for line in table.splitlines())  # the group cells, unfolded
    for beta in ("3.0", "6.0"):
        assert f"(method.beta={beta})" in joined, out.stdout


def test_a_trades_code_form_run_is_never_a_seed_of_runs_from_before_the_form(tmp_path):
    """Runs from before `method.form` (TRADES had one form: the paper's) did not record it; a code-form run of the
    same profile is its own configuration, a paper-form one joins them."""
    old = run(tmp_path, "20260101-000000-aaaaa0", "t", 0, lambda c: c["method"].update(name="trades"))
    paper = run(tmp_path, "20260101-000001-aaaaa1", "t", 1, lambda c: c["method"].update(name="trades", form="paper"))
    code = run(tmp_path, "20260101-000002-aaaaa2", "t", 2, lambda c: c["method"].update(name="trades", form="code"))
    assert "form" not in old.config["method"]
    groups = by_configuration([old, paper, code])
    assert [[v.run_id for v in views] for _, views in groups] == [[old.run_id, paper.run_id], [code.run_id]]
