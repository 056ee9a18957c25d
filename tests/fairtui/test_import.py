"""`fairtui import`: models trained elsewhere become runs that evaluate, list and compare like trained ones (what
an import never runs or leaves behind: test_import_safety.py)."""

import functools
import json
import os
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from engine.contract.config import DataConfig, ModelConfig
from engine.data import load_splits
from engine.models import MODELS
from tests.conftest import TINY, fairtui_cmd


def trained_small_cnn() -> nn.Module:
    """fairtui's small_cnn for digits, trained a little on [0, 1] pixels (no normalisation): a new copy each
    call, of weights trained once per test process (10 s of CPU)."""
    net = MODELS["small_cnn"](ModelConfig(arch="small_cnn"), (1, 8, 8), 10)
    net.load_state_dict(_trained_weights())
    return net.eval()


@functools.lru_cache(maxsize=1)
def _trained_weights() -> dict:
    torch.manual_seed(0)
    net = MODELS["small_cnn"](ModelConfig(arch="small_cnn"), (1, 8, 8), 10)
    data = load_splits(DataConfig(dataset="digits", val_per_class=1), 0).train
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    for _ in range(40):
        opt.zero_grad()
        nn.functional.cross_entropy(net(data.images(slice(None))), data.y).backward()
        opt.step()
    return {k: v.clone() for k, v in net.state_dict().items()}


def run_json(*args, home):
    proc = fairtui_cmd(*args, "--json", home=home)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def runs_in(home):
    folder = home / "runs"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_state_dict_import_then_per_class_autoattack_equals_pyautoattack(tmp_path):
    # aa-fast (APGD-CE + APGD-T, pyautoattack's own attacks): standard AA's Square attack takes minutes on
    # the CPU; that the standard version equals pyautoattack too is tests/engine/test_evaluation.py's.
    from engine.attacks.autoattack import make_autoattack
    from engine.data.datasets import stratified_pick
    from engine.contract.results import SUBSET_SEED

    net = trained_small_cnn()
    torch.save({"state_dict": {"module." + k: v for k, v in net.state_dict().items()}}, tmp_path / "net.pt")
    home = tmp_path / "home"
    made = run_json("import", "--state-dict", str(tmp_path / "net.pt"), "--arch", "small_cnn", "--dataset",
                    "digits", "--no-normalize", "--eps", "0.12", "--name", "outside-cnn", "--tag", "zoo", home=home)
    assert made["status"] == "imported"
    started = [json.loads(line) for line in (home / "runs" / made["run_id"] / "events.jsonl").read_text().splitlines()][0]
    assert started["imported"]["kind"] == "state_dict"
    assert started["imported"]["sha256"] == made["source"]["sha256"] and len(made["source"]["sha256"]) == 64

    shown = run_json("eval", "outside-cnn", "--attack", "aa-fast", "--n-per-class", "3", home=home)
    ours = next(r for r in shown["results"] + shown.get("other_results", []) if r["attack"] == "aa-fast")

    test = load_splits(DataConfig(dataset="digits"), 0).test
    test = test.subset(stratified_pick(test.y.numpy(), 3, 1.0, np.random.default_rng(SUBSET_SEED), 10))
    x = test.images(slice(None))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        aa = make_autoattack(net, 0.12, "linf", 0, 10, True, torch.device("cpu"))
        _, y_adv = aa.run_standard_evaluation(x, test.y, batch_size=len(test))
    direct = (torch.bincount(test.y, weights=(y_adv == test.y).double(), minlength=10)
              / torch.bincount(test.y, minlength=10))
    assert ours["robust_acc_per_class"] == pytest.approx(direct.tolist())
    assert 0 < ours["avg_robust"] < ours["avg_clean"]  # the attack did something, not everything
    listed = run_json("ls", "--tag", "zoo", home=home)
    assert [(r["name"], r["status"]) for r in listed] == [("outside-cnn", "imported")]


def test_torchscript_import_evaluates_the_scripted_model(tmp_path):
    net = trained_small_cnn()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.script(net), str(tmp_path / "net.ts"))
    home = tmp_path / "home"
    refused = fairtui_cmd("import", "--torchscript", str(tmp_path / "net.ts"), "--dataset", "digits", home=home)
    assert refused.returncode == 2 and "a TorchScript file is a program" in refused.stderr
    assert "--trust-code" in refused.stderr and runs_in(home) == []
    made = run_json("import", "--torchscript", str(tmp_path / "net.ts"), "--trust-code", "--dataset", "digits",
                    "--eps", "0.2", home=home)
    assert "trusted = true" in (home / "runs" / made["run_id"] / "profile.toml").read_text()
    said = fairtui_cmd("eval", made["run_id"], "--attack", "clean", home=home)
    assert said.returncode == 0 and "its model is TorchScript, imported with --trust-code: evaluating it runs its " \
        "code" in said.stderr
    shown = run_json("eval", made["run_id"], "--attack", "clean", home=home)
    clean = next(r for r in shown["results"] if r["attack"] == "clean")  # the profile's own settings: headline
    test = load_splits(DataConfig(dataset="digits"), 0).test
    with torch.no_grad():
        pred = net(test.images(slice(None))).argmax(1)
    direct = torch.bincount(test.y, weights=(pred == test.y).double(), minlength=10) / torch.bincount(test.y,
                                                                                                       minlength=10)
    assert clean["clean_acc_per_class"] == pytest.approx(direct.tolist())


def test_a_fairness_report_over_many_models(tmp_path):
    home = tmp_path / "home"
    for i in range(2):
        torch.manual_seed(i)
        net = MODELS["small_cnn"](ModelConfig(arch="small_cnn"), (1, 8, 8), 10)
        torch.save(net.state_dict(), tmp_path / f"m{i}.pt")
        run_json("import", "--state-dict", str(tmp_path / f"m{i}.pt"), "--arch", "small_cnn", "--dataset", "digits",
                 "--no-normalize", "--eps", "0.2", "--name", f"model-{i}", "--tag", "zoo", home=home)
    report = run_json("eval", "--tag", "zoo", "--attack", "clean,pgd2", home=home)  # one JSON document
    assert sorted(len(doc["results"]) for doc in report["runs"]) == [2, 2]
    table = fairtui_cmd("export", "--tag", "zoo", "--attack", "pgd2", "--format", "md", home=home)
    assert table.returncode == 0, table.stderr
    rows = [line for line in table.stdout.splitlines() if line.startswith("| model-")]
    assert len(rows) == 2  # two models, two rows: never averaged together


def test_imported_and_trained_runs_compare_and_an_imported_run_does_not_train(tmp_path):
    home = tmp_path / "home"
    net = trained_small_cnn()
    torch.save(net.state_dict(), tmp_path / "net.pt")
    made = run_json("import", "--state-dict", str(tmp_path / "net.pt"), "--arch", "small_cnn", "--dataset", "digits",
                    "--no-normalize", "--eps", "0.2", "--name", "imported-cnn", home=home)
    tiny = tmp_path / "tiny.toml"
    tiny.write_text(TINY.replace('attacks = ["pgd5"]', 'attacks = ["pgd20"]').replace("test_per_class = 10",
                                                                                   "test_per_class = 0"))
    proc = fairtui_cmd("run", str(tiny), "--name", "trained-cnn", home=home)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run_json("eval", "imported-cnn", "--attack", "pgd20", home=home)
    cmp = run_json("compare", "trained-cnn", "imported-cnn", "--attack", "pgd20", home=home)
    assert "rho" in json.dumps(cmp) and "imported-cnn" in json.dumps(cmp)
    resumed = fairtui_cmd("resume", made["run_id"], home=home)
    assert resumed.returncode == 2 and "imported model" in resumed.stderr
    profile = home / "runs" / made["run_id"] / "profile.toml"
    refused = fairtui_cmd("run", str(profile), home=home)
    assert refused.returncode == 2 and "fairtui import" in refused.stderr


def test_bad_models_exit_2_naming_the_mismatch_and_leave_nothing(tmp_path):
    home = tmp_path / "home"
    hundred = MODELS["small_cnn"](ModelConfig(arch="small_cnn"), (1, 8, 8), 100)
    torch.save(hundred.state_dict(), tmp_path / "hundred.pt")
    net = MODELS["small_cnn"](ModelConfig(arch="small_cnn"), (1, 8, 8), 10)
    torch.save(net.state_dict(), tmp_path / "net.pt")

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'PWNED'}",))

    torch.save({"weight": Evil()}, tmp_path / "evil.pt")
    nan = {k: v.clone() for k, v in net.state_dict().items()}
    first = next(k for k, v in nan.items() if v.is_floating_point())
    nan[first][0] = float("nan")
    torch.save(nan, tmp_path / "nan.pt")
    cases = [
        (["--state-dict", str(tmp_path / "nan.pt"), "--arch", "small_cnn", "--no-normalize"],
         f"tensor '{first}' has {int(nan[first][0].numel())} non-finite value(s) (NaN or inf)"),
        (["--state-dict", str(tmp_path / "hundred.pt"), "--arch", "small_cnn", "--no-normalize"],
         "10 classes expected, 100 given"),
        (["--state-dict", str(tmp_path / "net.pt"), "--arch", "preact_resnet18", "--no-normalize"],
         "missing keys"),
        (["--state-dict", str(tmp_path / "net.pt"), "--arch", "small_cnn"], "no normalisation layer"),
        (["--state-dict", str(tmp_path / "evil.pt"), "--arch", "small_cnn", "--no-normalize"], "refused"),
        (["--state-dict", str(tmp_path / "missing.pt"), "--arch", "small_cnn"], "no such file"),
        (["--torchscript", str(tmp_path / "net.pt"), "--trust-code"], "TorchScript"),
    ]
    for args, message in cases:
        proc = fairtui_cmd("import", *args, "--dataset", "digits", home=home)
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr, (args, proc.stderr)
    assert not (tmp_path / "PWNED").exists()  # the pickle's code never ran
    assert runs_in(home) == []  # nothing half-made


RB_MODEL = "Wong2020Fast"


def robustbench_zoo():
    """The robustbench package's zoo, or skip (it is an optional extra: fairtui[robustbench])."""
    try:
        from engine.entry.imported import robustbench_entry

        # Wong et al.'s PreActResNet-18 (11 M parameters): the import path is the same for every entry, and
        # the Standard WideResNet-28-10 (36 M) takes three times as long to build, save and load
        return robustbench_entry(RB_MODEL, "cifar10", "Linf")
    except Exception as err:  # noqa: BLE001
        pytest.skip(f"robustbench is not usable here: {err}")


def test_robustbench_entry_imports_from_its_model_dir_and_evaluates(tmp_path):
    from tests.engine.test_data import write_cifar

    entry = robustbench_zoo()
    write_cifar(tmp_path / "data", n_train=50, n_test=20)
    home, models = tmp_path / "home", tmp_path / "models"
    args = ("import", "--robustbench", RB_MODEL, "--dataset", "cifar10", "--threat", "linf", "--model-dir",
            str(models), "--data-root", str(tmp_path / "data"))
    missing = fairtui_cmd(*args, home=home)
    assert missing.returncode == 2
    where = models / "cifar10" / "Linf" / f"{RB_MODEL}.pt"
    assert str(where) in missing.stderr and "load_model" in missing.stderr and runs_in(home) == []

    torch.manual_seed(0)
    model = entry["model"]()  # random weights, saved where RobustBench's loader looks
    where.parent.mkdir(parents=True)
    torch.save({"state_dict": {"module." + k: v for k, v in model.state_dict().items()}}, where)
    made = run_json(*args, "--name", "rb-model", home=home)
    shown = run_json("eval", "rb-model", "--attack", "clean", home=home)
    clean = next(r for r in shown["results"] if r["attack"] == "clean")
    test = load_splits(DataConfig(dataset="cifar10", root=str(tmp_path / "data")), 0).test
    with torch.no_grad():
        pred = model.eval()(test.images(slice(None))).argmax(1)
    direct = torch.bincount(test.y, weights=(pred == test.y).double(), minlength=10) / torch.bincount(test.y,
                                                                                                       minlength=10)
    assert clean["clean_acc_per_class"] == pytest.approx(direct.tolist())
    doc = run_json("show", made["run_id"], home=home)
    assert doc["imported"]["robustbench_name"] == RB_MODEL and doc["imported"]["threat"] == "Linf"


def test_the_authors_layer_layout_of_preact_resnet18_imports(tmp_path):
    """CFA's published PreActResNet18 names its blocks layer1.0 ... layer4.1, its final BatchNorm `bn` and a
    projection `shortcut.0`: the same network as fairtui's preact_resnet18 under other names."""
    import re

    from engine.models import build_model

    torch.manual_seed(0)
    ours = build_model(ModelConfig(arch="preact_resnet18"), (3, 32, 32), 10, (0.5,) * 3, (0.25,) * 3).eval()
    for module in ours.modules():  # non-trivial BatchNorm statistics, so a wrong mapping shows
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.1, 0.1)
            module.running_var.uniform_(0.5, 1.5)

    def authors_name(key: str) -> str:  # fairtui's name -> the CFA authors' model.py name
        m = re.match(r"layers\.(\d)\.(.*)", key)
        if m:
            block, rest = int(m.group(1)), m.group(2)
            rest = re.sub(r"^shortcut\.", "shortcut.0.", rest)
            return f"layer{block // 2 + 1}.{block % 2}.{rest}"
        return "bn." + key[4:] if key.startswith("bn1.") else key

    theirs = {authors_name(k): v for k, v in ours[1].state_dict().items()}
    assert any(k.startswith("layer4.1.") for k in theirs) and "bn.weight" in theirs
    torch.save(theirs, tmp_path / "cfa.pt")
    from engine.entry.imported import from_layer_layout, load_strict

    fresh = build_model(ModelConfig(arch="preact_resnet18"), (3, 32, 32), 10, (0.5,) * 3, (0.25,) * 3).eval()
    load_strict(fresh[1], from_layer_layout(theirs, "preact_resnet18"), "preact_resnet18", 10)
    x = torch.rand(4, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(fresh(x), ours(x))  # the same network, logit for logit
    from tests.engine.test_data import write_cifar

    write_cifar(tmp_path / "data", n_train=50, n_test=20)
    home = tmp_path / "home"
    made = run_json("import", "--state-dict", str(tmp_path / "cfa.pt"), "--arch", "preact_resnet18", "--dataset",
                    "cifar10", "--mean", "0.5,0.5,0.5", "--std", "0.25,0.25,0.25", "--data-root",
                    str(tmp_path / "data"), home=home)
    shown = run_json("eval", made["run_id"], "--attack", "clean", home=home)
    clean = next(r for r in shown["results"] if r["attack"] == "clean")
    test = load_splits(DataConfig(dataset="cifar10", root=str(tmp_path / "data")), 0).test
    with torch.no_grad():
        pred = ours(test.images(slice(None))).argmax(1)
    direct = torch.bincount(test.y, weights=(pred == test.y).double(), minlength=10) / torch.bincount(test.y,
                                                                                                       minlength=10)
    assert clean["clean_acc_per_class"] == pytest.approx(direct.tolist())


def test_the_layer_layout_of_resnet18_maps_logit_for_logit():
    """WAT's ResNet18 (models/resnet.py): layer1.0 ... layer4.1, shortcut Sequential(conv, bn) as fairtui's."""
    import re

    from engine.entry.imported import from_layer_layout, load_strict
    from engine.models import build_model

    torch.manual_seed(1)
    ours = build_model(ModelConfig(arch="resnet18"), (3, 32, 32), 10, (0.5,) * 3, (0.25,) * 3).eval()
    theirs = {}
    for key, value in ours[1].state_dict().items():
        m = re.match(r"layers\.(\d)\.(.*)", key)
        theirs[f"layer{int(m.group(1)) // 2 + 1}.{int(m.group(1)) % 2}.{m.group(2)}" if m else key] = value
    fresh = build_model(ModelConfig(arch="resnet18"), (3, 32, 32), 10, (0.5,) * 3, (0.25,) * 3).eval()
    load_strict(fresh[1], from_layer_layout(theirs, "resnet18"), "resnet18", 10)
    x = torch.rand(4, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(fresh(x), ours(x))


def test_import_says_which_eps_it_recorded_and_why(tmp_path):
    """A digits model imported without --eps is evaluated at digits' usual 0.2 (not CIFAR's 8/255), and the
    import says so; `show` prints the normalisation in words."""
    home = tmp_path / "home"
    torch.save(trained_small_cnn().state_dict(), tmp_path / "net.pt")
    proc = fairtui_cmd("import", "--state-dict", str(tmp_path / "net.pt"), "--arch", "small_cnn", "--dataset",
                       "digits", "--no-normalize", "--name", "cnn", home=home)
    assert proc.returncode == 0, proc.stderr
    assert "evaluation eps 0.2 (Linf), from fairtui's digits profiles' 0.2; --eps chooses another" in proc.stderr
    shown = fairtui_cmd("show", "cnn", home=home, env_extra={"COLUMNS": "120"})
    assert "normalisation: none added (the model takes [0, 1] pixels)" in shown.stdout
    assert "eps 0.2," in shown.stdout
    refused = fairtui_cmd("import", "--state-dict", str(tmp_path / "net.pt"), "--arch", "small_cnn", "--dataset",
                          "digits", "--threat", "l2", "--no-normalize", home=home)
    assert refused.returncode == 2 and "no usual L2 eps for digits: give the model's own with --eps" in refused.stderr


def test_an_evaluation_whose_logits_are_not_finite_fails_instead_of_reporting(tmp_path):
    """NaN weights that got in anyway (an old run, a checkpoint edited by hand): `fairtui eval` fails with one
    line and writes no result (it used to report class 0 at 100% clean and robust accuracy)."""
    home = tmp_path / "home"
    torch.save(trained_small_cnn().state_dict(), tmp_path / "net.pt")
    made = run_json("import", "--state-dict", str(tmp_path / "net.pt"), "--arch", "small_cnn", "--dataset", "digits",
                    "--no-normalize", "--name", "cnn", home=home)
    run_dir = home / "runs" / made["run_id"]
    for name in ("best.pt", "last.pt"):
        state = torch.load(run_dir / "checkpoints" / name, weights_only=True)
        key = next(k for k, v in state["model"].items() if v.is_floating_point() and v.dim() > 1)
        state["model"][key].fill_(float("nan"))
        torch.save(state, run_dir / "checkpoints" / name)
    before = (run_dir / "events.jsonl").read_text()
    proc = fairtui_cmd("eval", "cnn", "--attack", "fgsm", "--n-per-class", "2", home=home)
    assert proc.returncode == 1
    assert "fairtui eval: fgsm @ best: the model gives non-finite logits (NaN or inf) on clean batch 1" in proc.stderr
    assert "eval_result" not in (run_dir / "events.jsonl").read_text()[len(before):]
