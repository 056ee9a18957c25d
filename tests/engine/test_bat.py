"""BAT is its authors' code (docs/reference/methods-bat-csr.md): their two stopping attacks and their loss,
restated here as plain per-sample loops (no code copied), give fairtui's examples, loss, gradient and SGD step
on the same tensors; the reference's worked examples hold; and BAT trains and resumes like every method.

The authors' functions: silvercherry/Improving-Robust-Fairness-via-Balance-Adversarial-Training @ 9bcee67,
train.py (BAT_loss, the train loop's forwards) and train_mode/stop_to_lastclean.py, stop_to_firstadv.py."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from engine.attacks.trades import StoppingTRADESAttack
from engine.contract.config import AttackConfig, Profile
from engine.contract.method_params_recent import BATParams
from engine.methods.bat import BAT, kl_to_uniform
from engine.methods.base import MethodContext

EPS, STEP, STEPS = 8 / 255, 2 / 255, 10


# -- the authors' code, restated ------------------------------------------------------------------------

def authors_kl_sum(logits, clean_logits):
    """nn.KLDivLoss(size_average=False)(log_softmax(logits), softmax(clean_logits))."""
    p = F.softmax(clean_logits, 1)
    return (p * (torch.log(p) - F.log_softmax(logits, 1))).sum()


def authors_stop(model, x, y, start, rule, tau=1):
    """stop_to_lastclean / stop_to_firstadv as loops over the samples still stepping, each output returned in
    its sample's row (the authors reorder rows and keep each sample's own image and label with it)."""
    model.eval()
    clean = model(x).detach()
    it = start.clone()
    previous = start.clone()
    control = [tau] * len(x)
    out = [None] * len(x)
    stepping = list(range(len(x)))
    for _ in range(STEPS):
        if not stepping:
            break
        a = it[stepping].clone().requires_grad_(True)
        logits = model(a)
        keep = []
        for row, i in enumerate(stepping):
            if logits[row].argmax() != y[i]:
                if rule == "last_clean":
                    out[i] = previous[i].clone()
                    continue
                if control[i] == 0:
                    out[i] = a[row].detach().clone()
                    continue
                control[i] -= 1
            keep.append((row, i))
        grad = torch.autograd.grad(authors_kl_sum(logits, clean[stepping]), a)[0]
        for row, i in keep:
            previous[i] = a[row].detach().clone()
            nxt = a[row].detach() + STEP * grad[row].sign()
            nxt = torch.min(torch.max(nxt, x[i] - EPS), x[i] + EPS)
            it[i] = nxt.clamp(0, 1)
        stepping = [i for _, i in keep]
    for i in stepping:
        out[i] = it[i].clone()
    return torch.stack(out)


def authors_bat_loss(firstadv_logits, lastclean_logits, target, beta, clean_logits):
    """BAT_loss: CE(last clean) + beta KL(clean || first adv) + KL(last clean || u) + KL(first adv || u)."""
    b = len(target)
    uniform = torch.ones_like(firstadv_logits) * 0.1

    def kl(inp, tgt):  # KLDivLoss(size_average=False)(log_softmax(inp), softmax(tgt)) / B
        p = F.softmax(tgt, 1)
        return (p * (torch.log(p) - F.log_softmax(inp, 1))).sum() / b

    return (F.cross_entropy(lastclean_logits, target) + beta * kl(firstadv_logits, clean_logits)
            + kl(uniform, lastclean_logits) + kl(uniform, firstadv_logits))


# -- fixtures -------------------------------------------------------------------------------------------

class Linear3(nn.Module):
    """f(x) = 40 * (mean of channel 0, of channel 1, of channel 2): the reference's BAT-2 model."""

    def forward(self, x):
        return 40 * x.mean(dim=(2, 3))


def bat2_batch():
    x = torch.zeros(4, 3, 32, 32)
    for i, channels in enumerate([(0.60, 0.50, 0.1), (0.52, 0.50, 0.1), (0.30, 0.70, 0.1), (0.10, 0.90, 0.1)]):
        for c, v in enumerate(channels):
            x[i, c] = v
    return x, torch.tensor([0, 0, 0, 1])


def small_cnn():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
                         nn.Flatten(), nn.Linear(16, 3))


def ctx_for(model, **method) -> MethodContext:
    profile = Profile(attack=AttackConfig(eps=EPS, step=STEP, steps=STEPS), method=BATParams(**method))
    return MethodContext(3, profile, torch.device("cpu"), attack_model=model)


class FixedNoise:
    """Draws that hand out given start noise, in order (the two attacks' starts)."""

    def __init__(self, *noises):
        self.noises = list(noises)

    def randn_like(self, x):
        return self.noises.pop(0)


# -- the attacks ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("rule", ["last_clean", "first_adv"])
def test_the_stopping_attacks_are_the_authors_on_a_network(rule):
    """Each sample's output equals the authors' loop's, with BatchNorm in eval mode, on a batch where samples
    stop at different steps (and some never)."""
    model = small_cnn()
    gen = torch.Generator().manual_seed(3)
    x = torch.rand(12, 3, 8, 8, generator=gen)
    y = torch.randint(0, 3, (12,), generator=gen)
    noise = torch.randn(x.shape, generator=gen)
    start = (x + 0.001 * noise).clamp(0, 1)
    ours = StoppingTRADESAttack(model, eps=EPS, step=STEP, steps=STEPS, rule=rule).perturb(x, y, FixedNoise(noise))
    theirs = authors_stop(model, x, y, start, rule)
    assert torch.allclose(ours, theirs, atol=1e-6)
    assert ((ours - x).abs().amax(dim=(1, 2, 3)) <= EPS + 1e-6).all() and ours.min() >= 0 and ours.max() <= 1


def test_the_reference_worked_example_bat2():
    """BAT-2: on the linear model, a sample wrong at the start comes out of the last-clean attack as the start
    itself, and of the first-adversarial one after one step; the others step to the ball's edge, made *more*
    confident by the KL attack."""
    model = Linear3()
    x, y = bat2_batch()
    n1 = torch.randn(x.shape, generator=torch.Generator().manual_seed(1))  # each start after manual_seed(1)
    lc = StoppingTRADESAttack(model, eps=EPS, step=STEP, steps=STEPS, rule="last_clean").perturb(x, y, FixedNoise(n1))
    fa = StoppingTRADESAttack(model, eps=EPS, step=STEP, steps=STEPS, rule="first_adv").perturb(x, y, FixedNoise(n1))
    shift = lambda a: ((a - x).mean(dim=(2, 3)) * 255).round(decimals=0)  # noqa: E731
    assert torch.equal(lc[2], (x[2] + 0.001 * n1[2]).clamp(0, 1))  # the start: still misclassified
    assert model(lc[2:3]).argmax().item() == 1
    assert shift(lc)[[0, 1, 3]].tolist() == [[8, -8, -8], [8, -8, -8], [-8, 0, -8]]
    assert shift(fa)[2].tolist() == [-2, 0, -2]  # one step past the start
    assert shift(fa)[[0, 1, 3]].tolist() == [[8, -8, -8], [8, -8, -8], [-8, 0, -8]]


# -- the loss -------------------------------------------------------------------------------------------

def test_the_reference_worked_example_bat1_and_the_uniform_term():
    fa = torch.tensor([[1.0, 2.0, 0.0], [0.5, 0.5, 1.5]])
    lc = torch.tensor([[2.0, 1.0, 0.0], [0.0, 1.0, 0.5]])
    cl = torch.tensor([[3.0, 0.0, -1.0], [0.0, 2.0, 0.0]])
    y = torch.tensor([0, 1])
    from engine.attacks.trades import trades_kl
    from engine.methods.base import ce_per_sample

    assert authors_bat_loss(fa, lc, y, 6.0, cl).item() == pytest.approx(6.560585, rel=1e-6)
    ours = (ce_per_sample(lc, y) + 6.0 * trades_kl(fa, cl) + kl_to_uniform(lc) + kl_to_uniform(fa)).mean()
    assert ours.item() == pytest.approx(6.560585, rel=1e-6)
    assert kl_to_uniform(lc).mean().item() == pytest.approx(0.172319, abs=1e-6)
    assert kl_to_uniform(fa).mean().item() == pytest.approx(0.194751, abs=1e-6)
    assert kl_to_uniform(torch.zeros(1, 100)).item() == pytest.approx(0.0, abs=1e-6)  # K = 100, uniform
    assert kl_to_uniform(torch.tensor([[0.0, 0.0, 50.0]])).item() == pytest.approx(math.log(3), abs=1e-6)


def test_bat_loss_gradient_and_sgd_step_are_the_authors():
    """One batch through fairtui's BAT and through the authors' train-loop body (eval-mode attacks, then three
    train-mode forwards: last clean, first adversarial, clean): the same loss, gradients and weights after one
    SGD step, and the same BatchNorm running statistics."""
    # in float64, so that the two forms' float rounding (the stable log-space KL against the textbook one)
    # stays far below the tolerance
    ours_model, theirs_model = small_cnn().double(), small_cnn().double()
    gen = torch.Generator().manual_seed(5)
    x = torch.rand(16, 3, 8, 8, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (16,), generator=gen)
    n1, n2 = (torch.randn(x.shape, generator=gen, dtype=torch.float64) for _ in range(2))

    method = BAT(BATParams(), ctx_for(ours_model))
    ours_model.train()
    out = method.loss(ours_model, x, y, FixedNoise(n1, n2))
    opt = torch.optim.SGD(ours_model.parameters(), lr=0.1, momentum=0.9, weight_decay=2e-4)
    opt.zero_grad()
    out.loss.backward()
    ours_grads = [p.grad.clone() for p in ours_model.parameters()]
    opt.step()

    lc = authors_stop(theirs_model, x, y, (x + 0.001 * n1).clamp(0, 1), "last_clean")
    fa = authors_stop(theirs_model, x, y, (x + 0.001 * n2).clamp(0, 1), "first_adv")
    theirs_model.train()
    opt2 = torch.optim.SGD(theirs_model.parameters(), lr=0.1, momentum=0.9, weight_decay=2e-4)
    opt2.zero_grad()
    lc_logits, fa_logits, clean_logits = theirs_model(lc), theirs_model(fa), theirs_model(x)
    loss = authors_bat_loss(fa_logits, lc_logits, y, 6.0, clean_logits)
    loss.backward()
    theirs_grads = [p.grad.clone() for p in theirs_model.parameters()]
    opt2.step()

    assert out.loss.item() == pytest.approx(loss.item(), abs=1e-6)
    for a, b in zip(ours_grads, theirs_grads):
        assert torch.allclose(a, b, atol=1e-6)
    for a, b in zip(ours_model.state_dict().values(), theirs_model.state_dict().values()):
        assert torch.allclose(a.double(), b.double(), atol=1e-6)  # weights and BatchNorm statistics


def test_a_bad_bat_key_is_one_line():
    from engine.contract.config import profile_from_table
    from engine.contract.profile_schema import ProfileError

    with pytest.raises(ProfileError, match="method.firstadv_tau"):
        profile_from_table({"method": {"name": "bat", "firstadv_tau": -1}}, "p.toml")
    with pytest.raises(ProfileError, match="method.tau"):
        profile_from_table({"method": {"name": "bat", "tau": 1}}, "p.toml")


def test_bat_trains_and_resumes_to_the_same_weights(tmp_path, tiny_profile):
    """Stopped after its first epoch and resumed, BAT ends where an uninterrupted run does."""
    from tests.conftest import trained_whole_and_resumed
    from tests.engine.test_distributed import max_weight_difference

    whole, part = trained_whole_and_resumed(tmp_path, tiny_profile(), ('method.name="bat"', "train.epochs=2"), 1)
    assert max_weight_difference(whole, part) == 0.0


@pytest.mark.parametrize("rule", ["last_clean", "first_adv"])
def test_samples_that_cross_the_boundary_midway_stop_as_the_authors_do(rule):
    """Near-boundary samples on the linear model, whose KL ascent sends some across the boundary after a few
    steps: their outputs (the last right iterate, or the first wrong one past tau) equal the authors' loop's,
    and such mid-attack stops do happen here (the test would be vacuous otherwise)."""
    model = Linear3()
    gen = torch.Generator().manual_seed(7)
    n = 64
    margin = 0.002 + 0.03 * torch.rand(n, generator=gen)
    x = torch.full((n, 3, 32, 32), 0.1)
    x[:, 0] = (0.5 + margin).view(-1, 1, 1)
    x[:, 1] = 0.5
    y = torch.zeros(n, dtype=torch.long)
    noise = torch.randn(x.shape, generator=gen)
    start = (x + 0.001 * noise).clamp(0, 1)
    ours = StoppingTRADESAttack(model, eps=EPS, step=STEP, steps=STEPS, rule=rule).perturb(x, y, FixedNoise(noise))
    theirs = authors_stop(model, x, y, start, rule)
    assert torch.allclose(ours, theirs, atol=1e-6)
    moved = ((ours - start).abs().amax(dim=(1, 2, 3)) > 1e-6)
    at_edge = ((ours - x).abs().amax(dim=(1, 2, 3)) > EPS - 1e-6)
    wrong = model(ours).argmax(1) != y
    if rule == "last_clean":  # stopped mid-way: moved, right, not yet at the ball's edge
        assert (moved & ~wrong & ~at_edge).any()
    else:  # stopped mid-way: moved, wrong, not at the edge
        assert (moved & wrong & ~at_edge).any()


def test_two_ranks_train_bat_as_one_process(tmp_path, tiny_profile):
    """BAT under DDP: each rank attacks its shard with the whole batch's draws, so two ranks give the
    one-process run's per-class numbers, and its weights to float rounding (cf. the DAFA test's tolerance).
    One epoch: the all-reduced gradient rounds differently from the one-process one (weights 2.4e-4 apart
    after it here, TRADES's 9e-5), and BAT's early stops turn such a difference into another stopping step
    for a sample, so by the second epoch one validation image of the tiny split had flipped."""
    from tests.conftest import make_run_dir
    from tests.engine.test_distributed import FP32, events_of, max_weight_difference, train

    profile = tiny_profile()
    one, two = (make_run_dir(tmp_path, profile, name, ('method.name="bat"', "train.epochs=1", *FP32))
                for name in ("one", "two"))
    assert train(one, 1).returncode == 0
    res = train(two, 2)
    assert res.returncode == 0, res.stderr
    for e1, e2 in zip(events_of(one, "epoch_end"), events_of(two, "epoch_end"), strict=True):
        assert e2["val"]["robust_acc_per_class"] == e1["val"]["robust_acc_per_class"]
        assert e2["distributed"]["world_size"] == 2
    assert max_weight_difference(one, two) < 1e-3
