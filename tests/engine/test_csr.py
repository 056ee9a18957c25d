"""CSR is its authors' code (docs/reference/methods-bat-csr.md): their confusion counts, G and loss, restated here
(no code copied), give fairtui's on the same tensors; the reference's worked examples hold; the edge cases
(a class never confused, a C of zeros, K = 100) are defined; and CSR trains, resumes (also when stopped while C
is being built) and runs on two ranks like every method.

The authors' functions: Alexkael/CONFUSIONAL-SPECTRAL-REGULARIZATION @ 92856c7,
CIFAR10_TRADES_fairness/train_fair.py (train: the confusion pass, svd, rescaling) and trades_fair.py
(trades_loss)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from engine.contract.config import AttackConfig, Profile
from engine.contract.method_params_recent import CSRParams
from engine.methods.base import MethodContext
from engine.methods.csr import CSR, confusion_counts, spectral_weights

K = 3


# -- the authors' code, restated ------------------------------------------------------------------------

def authors_counts(output_adv, y, k):
    """train(): the true logit -= 0.1 * itself, argmax, cmt[pred][target] += 1 where they differ."""
    out = output_adv.clone()
    cmt = torch.zeros(k, k)
    for ii in range(len(y)):
        out[ii][y[ii]] -= out[ii][y[ii]] * 0.1
    pred = out.max(1, keepdim=True)[1].reshape(-1)
    for i in range(len(y)):
        if y[i] != pred[i]:
            cmt[pred[i]][y[i]] += 1
    return cmt


def authors_g(cmt):
    u, s, v = torch.svd(cmt)
    gm = torch.outer(u[:, 0], v[:, 0])
    return 2 * (gm - gm.min()) / (gm.max() - gm.min()) + 0.01


def authors_loss(logits_clean, logits_adv_kl, logits_clean_kl, logits_adv, y, gm, beta):
    """trades_loss after the attack: CE(f(x)); (1/B) KLDiv(log_softmax(f(x')), softmax(f(x))); the G-weighted
    one-hot KLDiv on a fourth forward f(x'); 0.7 CE + beta KL + 0.3 that."""
    b = len(y)

    def kldiv_sum(log_q, target):  # nn.KLDivLoss(size_average=False): sum target * (log target - log_q), 0 log 0 = 0
        return torch.where(target > 0, target * (torch.log(target.clamp_min(1e-30)) - log_q), torch.zeros_like(target)).sum()

    loss_natural = F.cross_entropy(logits_clean, y)
    loss_robust = kldiv_sum(F.log_softmax(logits_adv_kl, 1), F.softmax(logits_clean_kl, 1)) / b
    pred = logits_adv.max(1, keepdim=True)[1].reshape(-1)
    rw = torch.stack([gm[pred[i]][y[i]] for i in range(b)])
    yy = (F.one_hot(y, gm.shape[0]).to(rw.dtype).t() * rw).t()
    loss_yy = kldiv_sum(F.log_softmax(logits_adv, 1), yy) / b
    return 0.7 * loss_natural + beta * loss_robust + 0.3 * loss_yy


# -- worked examples and edge cases ---------------------------------------------------------------------

def test_the_reference_worked_example_csr1():
    c = torch.tensor([[0.0, 4.0, 1.0], [10.0, 0.0, 2.0], [3.0, 6.0, 0.0]])
    g, sigma1, undefined = spectral_weights(c, 0.01, 2.0)
    expected = [[0.222821, 0.035495, 0.010000], [2.010000, 0.544201, 0.344710], [0.890788, 0.225626, 0.135099]]
    assert torch.allclose(g, torch.tensor(expected, dtype=torch.float64), atol=1e-6)
    assert sigma1 == pytest.approx(10.856759, abs=1e-6) and not undefined
    assert torch.allclose(g, authors_g(c).double(), atol=1e-6)


def test_the_reference_worked_example_csr3_the_true_logit_scale_is_no_margin():
    out = torch.tensor([[2.0, 1.9, 0.5], [-1.0, -0.95, -2.0]])
    y = torch.tensor([0, 0])
    counts = confusion_counts(out, y, K, 0.9)
    assert counts[1, 0] == 1 and counts.sum() == 1  # row 0 counted (1.8 < 1.9); row 1 not (-0.9 > -0.95)
    assert torch.equal(counts.float(), authors_counts(out, y, K))


def test_confusion_counts_are_the_authors_on_random_batches():
    gen = torch.Generator().manual_seed(4)
    for k in (3, 10, 100):
        out = torch.randn(256, k, generator=gen) * 3
        y = torch.randint(0, k, (256,), generator=gen)
        assert torch.equal(confusion_counts(out, y, k, 0.9).float(), authors_counts(out, y, k))


def test_g_edge_cases():
    # a class never confused (its row and column of C empty): G is still defined and in range
    c = torch.zeros(4, 4)
    c[1, 0], c[0, 1], c[2, 1] = 5, 2, 1
    g, _, undefined = spectral_weights(c, 0.01, 2.0)
    assert not undefined and g.min() == pytest.approx(0.01) and g.max() == pytest.approx(2.01)
    assert torch.allclose(g, authors_g(c).double(), atol=1e-6)
    # all zeros: torch.svd gives an arbitrary singular pair (the identity's first vectors), so the code weighs
    # the cell [0][0] by 2.01 and every other by 0.01; fairtui weighs every sample alike and says so
    arbitrary = torch.full((3, 3), 0.01)
    arbitrary[0, 0] = 2.01
    assert torch.allclose(authors_g(torch.zeros(3, 3)), arbitrary)
    g, sigma1, undefined = spectral_weights(torch.zeros(3, 3), 0.01, 2.0)
    assert undefined and sigma1 == 0.0 and torch.equal(g, torch.ones(3, 3, dtype=torch.float64))
    # K = 100 (CIFAR-100), a random C: the authors' G
    c = torch.poisson(torch.rand(100, 100, generator=torch.Generator().manual_seed(0)) * 3)
    c.fill_diagonal_(0)
    g, _, _ = spectral_weights(c, 0.01, 2.0)
    assert torch.allclose(g, authors_g(c).double(), atol=1e-5)


def test_the_reference_worked_example_csr2_and_the_loss_is_the_authors():
    gm = spectral_weights(torch.tensor([[0.0, 4.0, 1.0], [10.0, 0.0, 2.0], [3.0, 6.0, 0.0]]), 0.01, 2.0)[0]
    clean = torch.tensor([[2.0, 0.5, -1.0], [0.0, 1.0, 0.2]])
    adv = torch.tensor([[0.5, 1.5, 0.0], [0.3, 0.9, 1.2]])
    y = torch.tensor([0, 1])
    assert authors_loss(clean.double(), adv.double(), clean.double(), adv.double(), y, gm, 6.0).item() == \
        pytest.approx(3.334241, abs=1e-6)


class Forwards(nn.Module):
    """A model that returns given logits, forward by forward, and records the mode of each forward."""

    def __init__(self, outputs):
        super().__init__()
        self.outputs = list(outputs)
        self.modes = []
        self.w = nn.Parameter(torch.ones((), dtype=torch.float64))

    def forward(self, x):
        self.modes.append(self.training)
        return self.outputs.pop(0) * self.w


def test_csr_loss_gradient_and_forwards_are_the_authors():
    """The loss on four given train-mode forwards (x, x', x, x', the code's order), its gradient, and the
    weights of one SGD step: fairtui's CSR against the authors' trades_loss, restated (float64)."""
    torch.manual_seed(0)
    k, b = 10, 32
    gen = torch.Generator().manual_seed(2)
    outs = [torch.randn(b, k, generator=gen, dtype=torch.float64) * 2 for _ in range(4)]
    y = torch.randint(0, k, (b,), generator=gen)
    c = torch.poisson(torch.rand(k, k, generator=gen) * 4)
    c.fill_diagonal_(0)
    params = CSRParams()
    ctx = MethodContext(k, Profile(attack=AttackConfig(eps=8 / 255, step=2 / 255, steps=1), method=params),
                        torch.device("cpu"), attack_model=nn.Identity())
    method = CSR(params, ctx)
    method.epoch = 1
    method.weights = spectral_weights(c, 0.01, 2.0)[0]
    method.attack.perturb = lambda x, draws=None: x  # the attack is tested elsewhere: here, the loss
    model = Forwards(outs).train()
    out = method.loss(model, torch.zeros(b, 3, 2, 2, dtype=torch.float64), y)
    assert model.modes == [True] * 4
    out.loss.backward()
    w = torch.ones((), dtype=torch.float64, requires_grad=True)
    theirs = authors_loss(outs[0] * w, outs[1] * w, outs[2] * w, outs[3] * w, y, authors_g(c.double()), 6.0)
    theirs.backward()
    assert out.loss.item() == pytest.approx(theirs.item(), abs=1e-6)
    assert model.w.grad.item() == pytest.approx(w.grad.item(), abs=1e-6)


def test_a_bad_csr_key_is_one_line():
    from engine.contract.config import profile_from_table
    from engine.contract.profile_schema import ProfileError

    with pytest.raises(ProfileError, match="method.g_span"):
        profile_from_table({"method": {"name": "csr", "g_span": 0}}, "p.toml")
    with pytest.raises(ProfileError, match="method.init_from"):
        profile_from_table({"method": {"name": "csr", "init_from": "x", "pretrain_epochs": 1}}, "p.toml")


# -- in the engine --------------------------------------------------------------------------------------

# a confusion pass of many steps: long enough (seconds) for progress.json to show it, so the test can stop it
CSR_RUN = ('method.name="csr"', "method.pretrain_epochs=1", "train.epochs=2", "method.confusion_steps=100")


def test_csr_trains_records_c_and_g_and_resumes_from_a_stop_or_a_kill_while_c_is_built(tmp_path, tiny_profile):
    """C, G and sigma1 in every fine-tuning epoch's method state, the confusion pass's seconds in the epoch
    event; a run stopped (SIGTERM: it says so) or killed (kill -9: nothing recorded, the last checkpoint is
    the pre-training epoch's) while C is being built (epoch 2's pass) resumes to the uninterrupted run's
    weights, C, G and per-class results."""
    import signal

    from tests.conftest import make_run_dir, run_engine
    from tests.engine.test_distributed import events_of, max_weight_difference

    profile = tiny_profile()
    whole = make_run_dir(tmp_path, profile, "whole", CSR_RUN)
    assert run_engine(whole).returncode == 0
    ends = events_of(whole, "epoch_end")
    assert ends[0]["method_state"]["phase"].startswith("pretrain") and "prepare_s" not in ends[0]
    for e in ends[1:]:
        state = e["method_state"]
        assert len(state["confusion"]) == 10 and len(state["spectral_weights"]) == 10 and state["sigma1"] >= 0
        assert e["prepare_s"] > 0
        g = torch.tensor(state["spectral_weights"])
        assert "note" in state or (g.min().item() == pytest.approx(0.01) and g.max().item() == pytest.approx(2.01))

    for sig in (signal.SIGTERM, signal.SIGKILL):
        part = make_run_dir(tmp_path, profile, f"part-{sig.name}", CSR_RUN)
        code = _signal_inside_the_confusion_pass(part, sig)
        if sig == signal.SIGTERM:
            assert events_of(part, "run_finished")[-1].get("status") == "stopped"  # stopped inside the pass
        else:
            assert code == -signal.SIGKILL and not events_of(part, "run_finished")
        assert len(events_of(part, "epoch_end")) == 1
        assert run_engine(part).returncode == 0
        assert max_weight_difference(whole, part) == 0.0, sig.name
        resumed = events_of(part, "epoch_end")
        assert [e["method_state"] for e in resumed] == [e["method_state"] for e in ends], sig.name
        assert [e["val"] for e in resumed] == [e["val"] for e in ends], sig.name


def _signal_inside_the_confusion_pass(run_dir, sig) -> int:
    """Train ``run_dir`` and send ``sig`` once epoch 2's confusion pass is under way; the engine's exit code."""
    import json
    import os
    import time

    from tests.engine.test_distributed import start

    proc = start(run_dir, 1)
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        try:
            doc = json.loads((run_dir / "progress.json").read_text())
        except (OSError, ValueError):
            doc = {}
        if doc.get("phase") == "prepare" and doc.get("epoch") == 2:
            os.kill(proc.pid, sig)
            break
        time.sleep(0.01)
    return proc.wait(timeout=600)


def test_two_ranks_build_one_c_and_train_csr_as_one_process(tmp_path, tiny_profile):
    from tests.conftest import make_run_dir
    from tests.engine.test_distributed import FP32, events_of, max_weight_difference, train

    profile = tiny_profile()
    run = ('method.name="csr"', "method.pretrain_epochs=1", "train.epochs=2", *FP32)
    one, two = (make_run_dir(tmp_path, profile, name, run) for name in ("one", "two"))
    assert train(one, 1).returncode == 0
    res = train(two, 2)
    assert res.returncode == 0, res.stderr
    e1, e2 = events_of(one, "epoch_end")[-1], events_of(two, "epoch_end")[-1]
    assert e2["method_state"]["confusion"] == e1["method_state"]["confusion"]  # the ranks' counts summed
    assert e2["val"]["robust_acc_per_class"] == e1["val"]["robust_acc_per_class"]
    assert max_weight_difference(one, two) < 1e-3
