"""The evaluation suite: AutoAttack equals pyautoattack, the RNG is untouched, evaluations resume."""

import json
import logging

import pytest
import torch
from torch import nn

from engine.attacks.autoattack import AutoAttackAdapter, make_autoattack
from engine.attacks.suite import AttackSettings
from engine.data import load_splits
from engine.contract.config import DataConfig
from engine.evaluation.evaluate import per_class_result, predict
from engine.runtime.device import make_runtime
from engine.contract.config import TrainConfig
from tests.conftest import events_of, train_tiny


def small_model() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    # a little training so that some points survive the first attacks
    data = load_splits(DataConfig(dataset="digits", val_per_class=1), 0).train
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(60):
        opt.zero_grad()
        nn.functional.cross_entropy(model(data.images(slice(None))), data.y).backward()
        opt.step()
    return model.eval()


@pytest.mark.parametrize("fast, per_class, eps", [(True, 6, 0.1), (False, 3, 0.12)], ids=["aa-fast", "aa"])
def test_per_class_autoattack_equals_pyautoattack_directly(fast, per_class, eps):
    model = small_model()
    test = load_splits(DataConfig(dataset="digits", test_per_class=per_class), 0).test
    settings = AttackSettings(eps=eps, step=0.025, seed=7)
    clean, adv, _ = predict(model, test, AutoAttackAdapter(model, settings, fast=fast), make_runtime(TrainConfig(
        device="cpu")), batch_size=len(test))
    ours = per_class_result(test.y, clean, adv, 10)

    aa = make_autoattack(model, eps, "linf", 7, 10, fast, torch.device("cpu"))
    _, y_adv = aa.run_standard_evaluation(test.images(slice(None)), test.y, batch_size=len(test))
    direct = torch.bincount(test.y, weights=(y_adv == test.y).double(), minlength=10) / torch.bincount(test.y,
                                                                                                       minlength=10)
    assert ours["robust_acc_per_class"] == pytest.approx(direct.tolist())
    assert 0 < ours["avg_robust"] < ours["avg_clean"]  # the attack did something, not everything


def test_autoattack_leaves_the_global_rng_as_it_found_it():
    model = small_model()
    x, y = torch.rand(8, 1, 8, 8), torch.randint(0, 10, (8,))
    torch.manual_seed(123)
    before = torch.get_rng_state()
    AutoAttackAdapter(model, AttackSettings(eps=0.1, step=0.02, seed=0), fast=True).perturb(x, y)
    assert torch.equal(torch.get_rng_state(), before)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    return train_tiny(tmp_path_factory.mktemp("evalrun"))


def test_interrupted_evaluation_continues_from_its_finished_batches(trained_run, monkeypatch):
    from engine.entry import eval_run
    from engine.training import process
    from engine.attacks import pgd

    monkeypatch.setattr(process.StopFlag, "install", lambda self: None)
    calls = {"n": 0}
    real = pgd.PGD.perturb

    def counting(self, x, y, **kw):
        calls["n"] += 1
        return real(self, x, y, **kw)

    monkeypatch.setattr(pgd.PGD, "perturb", counting)
    request = {"attacks": ["pgd7"], "checkpoint": "last", "split": "test", "batch_size": 20}
    monkeypatch.setattr(process.StopFlag, "__call__", lambda self: calls["n"] >= 2)
    assert eval_run.evaluate_run(trained_run, request) == 130  # stopped after 2 of 5 batches
    assert not [e for e in events_of(trained_run) if e["type"] == "eval_result" and e["attack"] == "pgd7"]
    assert list((trained_run / "eval_cache").glob("last-test-pgd7-*.pt"))
    monkeypatch.setattr(process.StopFlag, "__call__", lambda self: False)
    assert eval_run.evaluate_run(trained_run, request) == 0
    assert calls["n"] == 5  # 100 test images / 20: the first 2 batches were not attacked again
    results = [e for e in events_of(trained_run) if e["type"] == "eval_result" and e["attack"] == "pgd7"]
    assert len(results) == 1 and results[0]["checkpoint"] == "last"
    assert not list((trained_run / "eval_cache").glob("last-test-pgd7-*.pt"))
    # a second request reuses the stored result; --force recomputes it
    assert eval_run.evaluate_run(trained_run, request) == 0
    assert calls["n"] == 5
    assert eval_run.evaluate_run(trained_run, {**request, "force": True}) == 0
    assert calls["n"] == 10


def test_a_stop_inside_one_autoattack_batch_comes_within_a_forward_pass(trained_run, monkeypatch):
    """One AutoAttack batch (here the whole test split: 100 images) ran to its end after a stop, for minutes on a
    busy machine. The stop now comes between forward passes inside it: a stop asked for after the attack's 30th
    forward pass ends the evaluation at the 31st (exit 130), no result recorded, nothing left hooked; the run's
    other results are kept, and a rerun evaluates it whole."""
    from engine.entry import eval_run
    from engine.training import process

    monkeypatch.setattr(process.StopFlag, "install", lambda self: None)
    passes = {"n": 0, "stop_at": 30}
    real = AutoAttackAdapter.perturb

    def counting(self, x, y, draws=None):
        def count(module, args):
            passes["n"] += 1
        hook = self.model.register_forward_pre_hook(count)
        try:
            return real(self, x, y, draws)
        finally:
            hook.remove()

    monkeypatch.setattr(AutoAttackAdapter, "perturb", counting)
    monkeypatch.setattr(process.StopFlag, "__call__", lambda self: passes["n"] >= passes["stop_at"])
    request = {"attacks": ["aa-fast"], "checkpoint": "last", "split": "test", "batch_size": 100}
    before = [e for e in events_of(trained_run) if e["type"] == "eval_result"]
    assert eval_run.evaluate_run(trained_run, request) == 130
    assert passes["n"] == passes["stop_at"]  # the hook's check runs before the pass counted after it
    after = [e for e in events_of(trained_run) if e["type"] == "eval_result"]
    assert after == before and not [e for e in after if e["attack"] == "aa-fast"]
    passes.update(n=0, stop_at=10**9)
    assert eval_run.evaluate_run(trained_run, request) == 0
    assert passes["n"] > 300  # the whole attack: far past where the stop came
    assert [e["attack"] for e in events_of(trained_run) if e["type"] == "eval_result"][-1] == "aa-fast"


def test_bad_requests_exit_2_naming_what_exists(trained_run, capsys):
    from engine.entry import eval_run

    assert eval_run.evaluate_run(trained_run, {"attacks": ["deepfool"]}) == 2
    assert "unknown attack 'deepfool'" in capsys.readouterr().err
    assert eval_run.evaluate_run(trained_run, {"checkpoint": "fawa"}) == 2
    assert "it has: last, best" in capsys.readouterr().err
    assert eval_run.evaluate_run(trained_run, {"eps": 1.5}) == 2
    assert "(0, 1]" in capsys.readouterr().err


def test_fairtui_eval_json_and_subset(trained_run, tmp_path):
    from tests.conftest import fairtui_cmd

    home = trained_run.parent.parent
    proc = fairtui_cmd("eval", trained_run.name, "--attack", "fgsm,clean", "--n-per-class", "3", "--json",
                       "--checkpoint", "best", home=home)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert {r["attack"] for r in doc["results"]} == {"fgsm", "clean"}
    fgsm = next(r for r in doc["results"] if r["attack"] == "fgsm")
    assert fgsm["n_per_class"] == 3 and fgsm["checkpoint"] == "best"
    from engine.contract.events import read_events
    from engine.runtime.provenance import cpu

    stored = [e for e in read_events(trained_run / "events.jsonl")[0] if e["type"] == "eval_result"
              and e["attack"] == "fgsm" and e["n_per_class"] == 3]  # a later evaluation records its own setup
    assert stored[-1]["provenance"]["cpu"] == cpu() and stored[-1]["provenance"]["code"]
    bad = fairtui_cmd("eval", trained_run.name, "--eps", "2", home=home)
    assert bad.returncode == 2 and "(0, 1]" in bad.stderr


def test_autoattack_reports_which_attack_runs_and_what_is_still_robust_without_changing_its_result():
    """Progress inside one AutoAttack batch: each of its attacks as it starts, the images still robust after
    each (never more than before), an ETA once one is measured; the adversarial examples are the same."""
    model = small_model()
    test = load_splits(DataConfig(dataset="digits", test_per_class=3), 0).test
    x, y = test.images(slice(None)), test.y
    settings = AttackSettings(eps=0.1, step=0.025, seed=7)
    reports: list[dict] = []
    watched = AutoAttackAdapter(model, settings, fast=True)
    watched.on_progress = reports.append
    x_watched = watched.perturb(x, y)
    x_plain = AutoAttackAdapter(model, settings, fast=True).perturb(x, y)
    assert torch.equal(x_watched, x_plain)
    assert [r["current"] for r in reports if r["current"]] == ["apgd-ce", "apgd-t"]
    done = reports[-1]["done"]
    assert [d["attack"] for d in done] == ["apgd-ce", "apgd-t"] and reports[-1]["n"] == len(x)
    clean_right = int((model(x).argmax(1) == y).sum())
    robust = [reports[0]["robust"]] + [d["robust"] for d in done]
    assert robust[0] == clean_right and robust == sorted(robust, reverse=True)
    with torch.no_grad():
        assert done[-1]["robust"] == int((model(x_watched).argmax(1) == y).sum())
    after_first = next(r for r in reports if len(r["done"]) == 1)
    assert after_first["eta_s"] is not None and after_first["eta_s"] >= 0
    assert logging.getLogger("auto-attack").handlers == []  # nothing left behind


def test_an_autoattack_progress_line_names_the_attack_the_survivors_and_the_eta():
    from fairtui.runs.runstate import progress_line

    p = {"phase": "eval", "attack": "aa", "batch": 0, "batches": 1, "batch_in": 1,
         "aa": {"attacks": ["apgd-ce", "apgd-t", "fab-t", "square"], "n": 100, "robust": 61, "current": "apgd-t",
                "done": [{"attack": "apgd-ce", "robust": 61, "time_s": 12.0}], "eta_s": 190.0}}
    text, fraction = progress_line(p)
    assert text == "aa ETA 3 min 10 s | batch 1/1: apgd-t (2/4); 61/100 robust after apgd-ce"  # ETA first (80 columns)
    first = {**p, "aa": {**p["aa"], "current": "apgd-ce", "done": [], "robust": 80, "eta_s": None}}
    assert progress_line(first)[0] == "aa ETA after apgd-ce | batch 1/1: apgd-ce (1/4); 80/100 robust"
    # Square still to run and not timed: the ETA covers the gradient attacks and names it (#56 item 10)
    before_square = {**p, "aa": {**p["aa"], "unmeasured": ["square"]}}
    assert progress_line(before_square)[0].startswith("aa ETA 3 min 10 s + square (not timed yet) | batch 1/1")


def test_the_autoattack_eta_times_square_apart_from_the_gradient_attacks():
    """52 s from APGD's rate before a Square that took 145 s (#56 item 10): the gradient attacks left are timed
    at the gradient attacks' measured cost per pass; Square, never timed, is left out of the seconds and named."""
    from types import SimpleNamespace

    from engine.attacks.autoattack import AutoAttackProgress

    aa = SimpleNamespace(attacks_to_run=["apgd-ce", "apgd-t", "fab-t", "square"],
                         apgd=SimpleNamespace(n_iter=100, n_restarts=1),
                         apgd_targeted=SimpleNamespace(n_iter=100, n_target_classes=9, n_restarts=1),
                         fab=SimpleNamespace(n_iter=100, n_target_classes=9),
                         square=SimpleNamespace(n_queries=5000))
    progress = AutoAttackProgress(aa, 100, lambda info: None)
    progress.info.update(robust=60, done=[{"attack": "apgd-ce", "robust": 60, "time_s": 10.0}])
    # 100 images x 100 passes in 10 s; apgd-t and fab-t: 60 x 900 passes each at that rate = 54 s each
    assert progress.eta() == 108.0 and progress.info["unmeasured"] == ["square"]
    progress.info.update(robust=50, done=[*progress.info["done"], {"attack": "apgd-t", "robust": 50, "time_s": 54.0},
                                          {"attack": "fab-t", "robust": 50, "time_s": 45.0}])
    assert progress.eta() == 0.0 and progress.info["unmeasured"] == ["square"]  # what is left is untimed


def test_eval_says_when_it_reuses_a_stored_result(trained_run):
    from tests.conftest import fairtui_cmd

    home = trained_run.parent.parent
    args = ("eval", trained_run.name, "--attack", "fgsm", "--n-per-class", "2", "--checkpoint", "last")
    first = fairtui_cmd(*args, home=home)
    assert first.returncode == 0 and "reused" not in first.stderr
    again = fairtui_cmd(*args, home=home)
    assert again.returncode == 0
    assert "fgsm @ last: reused the stored result (measured " in again.stderr and "--force recomputes" in again.stderr
    doc = json.loads(fairtui_cmd(*args, "--json", home=home).stdout)
    assert doc["reused"] == ["fgsm"]


@pytest.mark.parametrize("attack", ["pgd20", "aa-fast"])
def test_an_evaluation_gives_the_same_numbers_whatever_ran_before_it(attack):
    """An evaluation draws its attack's random start from the result's recorded seed and the batch index:
    the same weights at the same settings give the same per-class numbers after any other random work,
    and the caller's random state is left as it was."""
    from engine.attacks.suite import build_attack

    model = small_model()
    test = load_splits(DataConfig(dataset="digits", test_per_class=4), 0).test
    settings = AttackSettings(eps=0.12, step=0.03, seed=5)
    runtime = make_runtime(TrainConfig(device="cpu"))

    def evaluate(global_seed: int, seed: int | None) -> list:
        torch.manual_seed(global_seed)
        torch.rand(1000)  # other random work in the process
        before = torch.get_rng_state()
        _, adv, _ = predict(model, test, build_attack(attack, model, settings), runtime, batch_size=13, seed=seed)
        if seed is not None:
            assert torch.equal(torch.get_rng_state(), before)
        return adv.tolist()

    assert evaluate(1, seed=5) == evaluate(2, seed=5)
    if attack == "pgd20":  # the draws matter: unseeded, two global states give two answers
        assert evaluate(1, seed=None) != evaluate(2, seed=None)


def test_fairtui_eval_twice_gives_the_same_per_class_numbers(trained_run):
    from engine.entry import eval_run

    request = {"attacks": ["pgd7"], "checkpoint": "best", "split": "test", "batch_size": 30, "force": True}
    torch.manual_seed(1)
    assert eval_run.evaluate_run(trained_run, request) == 0
    torch.manual_seed(2)
    assert eval_run.evaluate_run(trained_run, request) == 0
    runs = [e for e in events_of(trained_run) if e["type"] == "eval_result" and e["attack"] == "pgd7"
            and e["checkpoint"] == "best"]
    assert len(runs) >= 2 and runs[-1]["robust_acc_per_class"] == runs[-2]["robust_acc_per_class"]


def test_the_request_seed_is_the_result_identity_and_its_draws(trained_run):
    """A request's seed seeds the draws and is recorded: two seeds are two results (neither the headline
    one); the run's own seed, given or not, is the same result."""
    from engine.entry import eval_run
    from engine.contract.results import is_headline, same_setting

    base = {"attacks": ["pgd20"], "checkpoint": "best", "split": "test", "force": True}  # the profile's own
    config = next(e for e in events_of(trained_run) if e["type"] == "run_started")["config"]
    for seed in (None, config["seed"], 12345):
        assert eval_run.evaluate_run(trained_run, {**base, "seed": seed}) == 0
    own_default, own_given, other = [e for e in events_of(trained_run) if e["type"] == "eval_result"
                                     and e["attack"] == "pgd20" and e["checkpoint"] == "best"][-3:]
    assert same_setting(own_default["setting"], own_given["setting"])
    assert own_default["robust_acc_per_class"] == own_given["robust_acc_per_class"]
    assert other["setting"]["seed"] == 12345 and not same_setting(other["setting"], own_default["setting"])
    assert is_headline(own_default, config) and not is_headline(other, config)


def test_a_bad_request_seed_is_refused():
    from engine.contract import EvalRequest, RequestError

    for bad in (-1, 1.5, True, 2**63):
        with pytest.raises(RequestError, match="a whole number") as err:
            EvalRequest.from_json({"seed": bad})
        assert err.value.field == "seed"
    assert EvalRequest.from_json({"seed": 3}).seed == 3
