"""A judgement against a baseline committed on another kind of CPU (#82 item 4): said before anything trains, and by
default the baseline's seeds are trained here, so that each pair is trained on one CPU; --baseline-cpu committed
pairs across CPUs and says so. compare names a group, or a pairing, that mixes kinds and tests the halves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fairtui.campaign.spec import Request, baseline_cpu_check, build_spec
from fairtui.judge.machines import group_cpu_note, kernel_kind, pairing_cpu_lines, same_kernels
from fairtui.runs.provenance import first_session
from tests.conftest import ROOT

QUICK = ROOT / "experiments" / "results" / "cifar10-cpu-quick"
XEON = ROOT / "experiments" / "results" / "cifar10-cpu-quick-xeon"
INTEL = {"cpu": {"model": "Intel(R) Xeon(R) Processor", "vendor": "GenuineIntel", "family": "6", "model_id": "207",
                 "flags": ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
                           "avx512_fp16", "avx_vnni"]},
         "determinism": {"cpu_capability": "AVX512"}}


def committed_trades() -> dict:
    from fairtui.campaign.judging import committed_by_seed
    from fairtui.judge.sources import grouped, read_results

    views, _ = read_results([QUICK])
    return committed_by_seed(grouped(views, "profile")["cifar10-cpu-quick-trades"])[0]


def test_the_committed_amd_runs_and_an_intel_machine_run_other_kernels():
    committed = committed_trades()
    amd = first_session(committed[0]).get("provenance")
    assert amd["cpu"]["vendor"] == "AuthenticAMD" and amd["determinism"]["cpu_capability"] == "AVX512"
    assert not same_kernels(amd, INTEL) and same_kernels(amd, amd)  # the same capability level, other kernels
    assert kernel_kind(committed[0]).startswith("AVX512 on AMD EPYC (avx2, fma")


def test_cpus_that_differ_only_in_int8_instructions_run_the_same_kernels():
    """A family-26 EPYC adds avx_vnni (int8 only) to the committed family-25 runs' AVX512-BF16: it retrained their
    TRADES seed 0 to the last bit, so the judge pairs with them here and trains nothing again; a flag that chooses
    fp32 or bf16 kernels (avx512_fp16, amx_bf16) still makes another kind."""
    amd = first_session(committed_trades()[0]).get("provenance")
    zen5 = {"cpu": dict(amd["cpu"], family="26", model_id="2", flags=amd["cpu"]["flags"] + ["avx_vnni"]),
            "determinism": amd["determinism"]}
    assert same_kernels(amd, zen5)
    said: list[str] = []
    kept, here = baseline_cpu_check(committed_trades(), "t", ["cpu"], "here", said.append, here=zen5)
    assert len(kept) == 10 and here == [] and not said
    for flag in ("avx512_fp16", "amx_bf16"):
        other = {"cpu": dict(amd["cpu"], flags=amd["cpu"]["flags"] + [flag]), "determinism": amd["determinism"]}
        assert not same_kernels(amd, other), flag
    assert "vnni" not in kernel_kind(committed_trades()[0])  # the label names what chooses the kernels


def test_by_default_the_baseline_seeds_of_another_cpu_are_trained_here():
    said: list[str] = []
    kept, here = baseline_cpu_check(committed_trades(), "cifar10-cpu-quick-trades", ["cpu"], "here", said.append,
                                    here=INTEL)
    assert kept == {} and here == list(range(10))
    (line,) = said
    assert "committed seeds 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 trained on AVX512 on AMD EPYC" in line
    assert "this machine is AVX512 on Intel(R) Xeon(R) Processor" in line and "trained here too (10 more run(s))" in line
    said.clear()  # judged at seeds 0-4: the runs it trains are counted among those
    baseline_cpu_check(committed_trades(), "t", ["cpu"], "here", said.append, here=INTEL, seeds=[0, 1, 2, 3, 4])
    assert "trained here too (5 more run(s))" in said[0]
    said.clear()
    kept, here = baseline_cpu_check(committed_trades(), "t", ["cpu"], "committed", said.append, here=INTEL)
    assert len(kept) == 10 and here == [] and "round differently" in said[0] and "--baseline-cpu committed" in said[0]
    said.clear()  # the same kind: nothing to say, nothing to train
    amd = first_session(committed_trades()[0]).get("provenance")
    assert baseline_cpu_check(committed_trades(), "t", ["cpu"], "here", said.append, here=amd)[1] == [] and not said
    with pytest.raises(ValueError, match="--baseline-cpu must be here or committed"):
        baseline_cpu_check(committed_trades(), "t", ["cpu"], "elsewhere", said.append, here=amd)


def test_a_judgement_against_another_cpus_baseline_trains_it_here_and_keys_apart(tmp_path, monkeypatch):
    import fairtui.campaign.spec as spec_mod

    monkeypatch.setattr(spec_mod, "this_cpu", lambda: INTEL)
    said: list[str] = []
    data = tmp_path / "data" / "cifar-10-batches-py"  # data.root is checked before anything exists
    data.mkdir(parents=True)
    (data / "test_batch").write_bytes(b"")
    request = Request(str(ROOT / "profiles" / "cifar10-cpu-quick-trades.toml"), "cifar10-cpu-quick-trades",
                      [str(QUICK)], overrides=["method.beta=3", f"data.root={data.parent}"], checkpoint="last")
    spec = build_spec(request, tmp_path / "home", warn=said.append)
    assert spec.baseline.committed == {} and spec.baseline_here == list(range(10)) and spec.seeds == list(range(10))
    assert any("trained here too" in line for line in said)
    across = build_spec(Request(**{**request.to_json(), "baseline_cpu": "committed"}), tmp_path / "home", warn=said.append)
    assert len(across.baseline.committed) == 10 and across.key != spec.key  # two judgements, never one record


def test_compare_names_a_pairing_across_cpus_and_tests_the_halves(tmp_path):
    """The committed quick TRADES (AMD) against DAFA seeds 0 and 1 trained on the Intel Xeon: every pair crosses."""
    from fairtui.judge.groups import compare_groups
    from fairtui.judge.sources import grouped, read_results

    views, _ = read_results([QUICK, XEON])
    groups = grouped(views, "profile")
    amd_trades = [v for v in groups["cifar10-cpu-quick-trades"] if "quick-xeon" not in str(v.run_dir)]
    intel_trades = [v for v in groups["cifar10-cpu-quick-trades"] if "quick-xeon" in str(v.run_dir)]
    dafa = [v for label, vs in groups.items() if label.startswith("cifar10-cpu-quick-dafa") for v in vs
            if "quick-xeon" in str(v.run_dir)]
    assert intel_trades and dafa
    cmp = compare_groups({"dafa": dafa, "trades": amd_trades}, "trades", checkpoint="last")
    (p,) = cmp.pairings
    assert any("every pair trained its two runs on different kinds of CPU" in line for line in p.cpus)
    # a group of both kinds is named, with each kind's seeds
    intel_seeds = sorted(int(v.config["seed"]) for v in intel_trades)
    mixed = intel_trades + [v for v in amd_trades if int(v.config["seed"]) not in intel_seeds]
    cmp = compare_groups({"trades": mixed, "dafa": dafa}, "trades", checkpoint="last")
    (note,) = [n for n in next(g for g in cmp.groups if g.label == "trades").notes if "kinds of CPU" in n]
    assert note.startswith("trained on 2 kinds of CPU") and "Intel(R) Xeon(R)" in note and "AMD EPYC" in note
    assert f"(seeds {', '.join(map(str, intel_seeds))})" in note
    same = compare_groups({"dafa": dafa, "trades": intel_trades}, "trades", checkpoint="last")
    assert same.pairings[0].cpus == [] and all(not group_cpu_note(g) for g in same.groups)


def test_halves_of_two_kinds_are_compared_by_welch(tmp_path):
    """Pairs of two kinds, three each, whose mean differences sit far apart: the halves differ, by Welch's test."""
    from types import SimpleNamespace

    from scipy import stats as sp

    def member(seed, worst, kind):
        view = SimpleNamespace(training_sessions=[{"type": "run_started", "device": "cpu", "provenance": kind}],
                               started=None)
        return SimpleNamespace(view=view, seed=seed, summary={"worst_robust": worst})

    amd = {"cpu": {"model": "AMD EPYC", "vendor": "AuthenticAMD", "flags": ["avx2"]},
           "determinism": {"cpu_capability": "AVX2"}}
    a = [0.12, 0.13, 0.11]
    b = [0.20, 0.22, 0.21]
    pairs = [(member(s, 0.1 + d, amd), member(s, 0.1, amd)) for s, d in enumerate(a)]
    pairs += [(member(3 + s, 0.1 + d, INTEL), member(3 + s, 0.1, INTEL)) for s, d in enumerate(b)]
    lines = pairing_cpu_lines(SimpleNamespace(pairs=pairs, group="m", baseline="b"))
    expected = sp.ttest_ind(a, b, equal_var=False).pvalue
    assert any(f"Welch p {expected:.3g}" in line and " differ " in line for line in lines), lines


def test_a_failed_method_seed_is_counted_as_a_loss_in_the_verdict():
    """STATS.md: a failed seed is an outcome. Four landed differences and one seed whose method run failed: the
    verdict says how it reads with that seed counted as the worst difference seen, by hand."""
    import math
    from types import SimpleNamespace

    from scipy import stats as sp

    from fairtui.campaign.judging import BASELINE, METHOD
    from fairtui.campaign.outcome import counted_as_losses

    diffs = [0.05, 0.06, 0.04, 0.05]
    look = SimpleNamespace(differences=lambda: list(diffs))
    spec = SimpleNamespace(seeds=[0, 1, 2, 3, 4], until_decided=False, effect=0.02)
    counted = counted_as_losses(look, spec, {4: METHOD})
    by_hand = diffs + [0.04]
    mean = sum(by_hand) / 5
    sd = math.sqrt(sum((d - mean) ** 2 for d in by_hand) / 4)
    half = sp.t.ppf(0.975, 4) * sd / math.sqrt(5)
    assert counted["failed_seeds"] == [4] and counted["loss"] == 0.04 and counted["n"] == 5
    assert counted["mean"] == pytest.approx(0.048) and counted["interval"] == pytest.approx([mean - half, mean + half])
    assert counted["verdict"].startswith("better (t-test")
    assert counted_as_losses(look, spec, {4: BASELINE}) is None  # the baseline's failure says nothing of the method
    assert counted_as_losses(look, spec, {}) is None
    seq = counted_as_losses(look, SimpleNamespace(seeds=list(range(10)), until_decided=True, effect=0.02,
                                                   alpha=0.05), {7: METHOD})
    assert seq["verdict"] in ("better", "not decided at 5 seeds")
