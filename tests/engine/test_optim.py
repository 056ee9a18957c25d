"""engine.training.optim.SGD: the same weights as torch.optim.SGD on the CPU, bit for bit, and the same checkpoint layout."""

import copy
import subprocess
import sys

import pytest
import torch
from torch import nn

from engine.training.optim import SGD, new_sgd
from tests.conftest import HANG_S, ROOT, TINY, engine_env, make_run_dir

CONFIGS = [
    dict(lr=0.1, momentum=0.9, weight_decay=5e-4),  # the profiles' setting
    dict(lr=0.05, momentum=0.9, weight_decay=2e-4, nesterov=True),
    dict(lr=0.2),  # plain SGD: no momentum buffer
    dict(lr=0.1, momentum=0.5, dampening=0.25, weight_decay=1e-3),
]


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 10))


def train(model: nn.Module, opt, steps: range, lr_at=None) -> None:
    """Steps with seeded batches; at odd steps the last layer gets no gradient (a frozen head: grad None)."""
    for step in steps:
        if lr_at:
            for group in opt.param_groups:
                group["lr"] = lr_at(step)
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(16, 1, 8, 8, generator=g), torch.randint(0, 10, (16,), generator=g)
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        if step % 2:
            for p in model[-1].parameters():
                p.grad = None
        opt.step()


def assert_same(a: nn.Module, b: nn.Module) -> None:
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), name


@pytest.mark.parametrize("hyper", CONFIGS, ids=["default", "nesterov", "plain", "dampening"])
def test_steps_give_the_weights_of_torch_sgd_bit_for_bit(hyper):
    ours, theirs = net(), net()
    a, b = SGD(ours.parameters(), **hyper), torch.optim.SGD(theirs.parameters(), **hyper)
    schedule = lambda step: hyper["lr"] * (0.1 if step >= 4 else 1.0)  # noqa: E731 the engine sets group["lr"]
    train(ours, a, range(7), schedule)
    train(theirs, b, range(7), schedule)
    assert_same(ours, theirs)
    assert not torch.equal(ours[0].weight, net()[0].weight)  # it trained
    for p, q in zip(ours.parameters(), theirs.parameters()):
        if "momentum_buffer" in b.state.get(q, {}):
            assert torch.equal(a.state[p]["momentum_buffer"], b.state[q]["momentum_buffer"])
        else:
            assert "momentum_buffer" not in a.state.get(p, {})


def test_the_state_dict_is_torch_s_and_either_resumes_from_the_other():
    hyper = CONFIGS[0]
    ours, theirs = net(), net()
    a, b = SGD(ours.parameters(), **hyper), torch.optim.SGD(theirs.parameters(), **hyper)
    train(ours, a, range(3))
    train(theirs, b, range(3))
    mine, torchs = a.state_dict(), b.state_dict()
    assert mine["param_groups"] == torchs["param_groups"]
    assert mine["state"].keys() == torchs["state"].keys()
    for i in torchs["state"]:
        assert mine["state"][i].keys() == torchs["state"][i].keys()
        assert torch.equal(mine["state"][i]["momentum_buffer"], torchs["state"][i]["momentum_buffer"])

    # a checkpoint of torch.optim.SGD resumed by SGD, and one of SGD by torch.optim.SGD: both continue as torch's
    reference = copy.deepcopy(theirs)
    ref_opt = torch.optim.SGD(reference.parameters(), **hyper)
    ref_opt.load_state_dict(copy.deepcopy(torchs))
    train(reference, ref_opt, range(3, 6))

    from_torch = copy.deepcopy(theirs)
    resumed = SGD(from_torch.parameters(), lr=1.0)  # the hyper-parameters come from the state_dict
    resumed.load_state_dict(copy.deepcopy(torchs))
    train(from_torch, resumed, range(3, 6))
    assert_same(from_torch, reference)

    from_ours = copy.deepcopy(ours)
    back = torch.optim.SGD(from_ours.parameters(), lr=1.0)
    back.load_state_dict(copy.deepcopy(mine))
    train(from_ours, back, range(3, 6))
    assert_same(from_ours, reference)


def test_bad_hyper_parameters_and_a_mismatched_state_dict_are_refused():
    with pytest.raises(ValueError, match="learning rate"):
        SGD(net().parameters(), lr=-0.1)
    with pytest.raises(ValueError, match="Nesterov"):
        SGD(net().parameters(), lr=0.1, nesterov=True)
    other = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1).state_dict()
    with pytest.raises(ValueError, match="doesn't match"):
        SGD(net().parameters(), lr=0.1).load_state_dict(other)


def test_the_cpu_gets_this_sgd_and_other_devices_torch_s():
    assert isinstance(new_sgd(net().parameters(), torch.device("cpu"), lr=0.1), SGD)
    assert isinstance(new_sgd(net().parameters(), torch.device("meta"), lr=0.1), torch.optim.SGD)


def test_a_cpu_training_run_does_not_import_torch_dynamo(tmp_path):
    """What engine.training.optim is for: importing torch._dynamo is about half of a small CPU run's start-up."""
    (tmp_path / "tiny.toml").write_text(TINY)
    run_dir = make_run_dir(tmp_path, tmp_path / "tiny.toml", overrides=("train.epochs=1",))
    probe = ("import runpy, sys\nsys.argv = ['engine', 'train', sys.argv[1]]\ntry:\n"
             "    runpy.run_module('engine', run_name='__main__')\nexcept SystemExit as end:\n"
             "    print('exit', end.code, 'torch._dynamo' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", probe, str(run_dir)], env=engine_env(), cwd=ROOT,
                          capture_output=True, text=True, timeout=HANG_S)
    assert proc.stdout.split()[-3:] == ["exit", "0", "False"], proc.stdout + proc.stderr[-2000:]
