"""The evaluation suite: AutoAttack equals pyautoattack, the RNG is untouched, evaluations resume."""

import json

import pytest
import torch
from torch import nn

from engine.attacks.autoattack import AutoAttackAdapter, make_autoattack
from engine.attacks.suite import AttackSettings
from engine.data import load_splits
from engine.config import DataConfig
from engine.evaluate import per_class_result, predict
from engine.utils import make_runtime
from engine.config import TrainConfig
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
    from engine import eval_run, run as engine_run
    from engine.attacks import pgd

    monkeypatch.setattr(engine_run.StopFlag, "install", lambda self: None)
    calls = {"n": 0}
    real = pgd.PGD.perturb

    def counting(self, x, y, **kw):
        calls["n"] += 1
        return real(self, x, y, **kw)

    monkeypatch.setattr(pgd.PGD, "perturb", counting)
    request = {"attacks": ["pgd7"], "checkpoint": "last", "split": "test", "batch_size": 20}
    monkeypatch.setattr(engine_run.StopFlag, "__call__", lambda self: calls["n"] >= 2)
    assert eval_run.evaluate_run(trained_run, request) == 130  # stopped after 2 of 5 batches
    assert not [e for e in events_of(trained_run) if e["type"] == "eval_result" and e["attack"] == "pgd7"]
    assert list((trained_run / "eval_cache").glob("last-test-pgd7-*.pt"))
    monkeypatch.setattr(engine_run.StopFlag, "__call__", lambda self: False)
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


def test_bad_requests_exit_2_naming_what_exists(trained_run, capsys):
    from engine import eval_run

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
    bad = fairtui_cmd("eval", trained_run.name, "--eps", "2", home=home)
    assert bad.returncode == 2 and "(0, 1]" in bad.stderr
