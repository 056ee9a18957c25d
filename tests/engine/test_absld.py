"""ABSLD is its paper's rule and, with form = "code", its authors' arithmetic (docs/reference/methods-trix-absld.md):
the inner attack, the soft labels, the loss and the temperature update, restated here from the code as plain
loops (no code copied), give fairtui's on the same tensors, in float64 to 1e-12 (float32 for the attack); the
temperature update holds on hand-computed numbers; the teacher is a run, recorded in the student's run_started
with its digest, of another architecture if need be; a missing or changed teacher is refused in one line; and
ABSLD trains and resumes like every method.

The authors' code: zhaoshiji123/ABSLD, absld_loss.py (``absld_inner_loss``) and resnet18_absld_cifar10.py (the
train loop: the tempered teacher logits, ``kl_loss``, the temperature update)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from engine.contract.config import AttackConfig, Profile, TrainConfig
from engine.methods.absld import (absld_attack, distill_kl, tempered_targets, temperature_step)

EPS, STEP, STEPS, K = 8 / 255, 2 / 255, 5, 3


# -- the authors' code, restated ------------------------------------------------------------------------

def authors_tempered(teacher_logits, y, temp_adv, temp_nat):
    """The train loop's two tempered copies: ``.detach()`` views of one tensor, divided in place sample by
    sample (adversarial temperature first), as the code writes them."""
    t = teacher_logits.clone()
    adv = t.detach()
    nat = t.detach()
    for i in range(len(y)):
        adv[i] = adv[i] / temp_adv[y[i]]
        nat[i] = nat[i] / temp_nat[y[i]]
    return adv, nat


def authors_inner(model, teacher_adv, x, noise):
    model.eval()
    x_adv = x.detach() + 0.001 * noise
    for _ in range(STEPS):
        x_adv.requires_grad_()
        loss = F.kl_div(F.log_softmax(model(x_adv), 1), F.softmax(teacher_adv, 1), reduction="none").sum()
        grad = torch.autograd.grad(loss, [x_adv])[0]
        x_adv = x_adv.detach() + STEP * grad.sign()
        x_adv = torch.min(torch.max(x_adv, x - EPS), x + EPS).clamp(0, 1)
    return x_adv.clamp(0, 1)


def authors_kl_loss(a, b):
    return -a * b + torch.log(b + 1e-5) * b


def authors_loss(model, x, x_adv, teacher_adv, teacher_nat):
    model.train()
    adv_logits = model(x_adv)
    nat_logits = model(x)
    kl1 = authors_kl_loss(torch.log(F.softmax(adv_logits, 1)), F.softmax(teacher_adv, 1)).mean()
    kl2 = authors_kl_loss(torch.log(F.softmax(nat_logits, 1)), F.softmax(teacher_nat, 1)).mean()
    return 5.0 / 6.0 * kl1 + 1.0 / 6.0 * kl2, adv_logits, nat_logits


def authors_temperature(temp, total_loss, rate, low=0.5, high=5.0):
    gap = total_loss - torch.mean(total_loss)
    return torch.clamp(temp - rate * gap / torch.max(torch.abs(gap)), low, high)


# -- fixtures -------------------------------------------------------------------------------------------

def small_cnn(dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
                         nn.Flatten(), nn.Linear(16, K)).to(dtype)


class Noise:
    def __init__(self, noise):
        self.noise = noise

    def randn_like(self, x):
        return self.noise


def batch(dtype, n=24, seed=5):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 3, 8, 8, generator=gen, dtype=dtype)
    y = torch.randint(0, K, (n,), generator=gen)
    return x, y, torch.randn(x.shape, generator=gen, dtype=dtype), 4 * torch.randn(n, K, generator=gen, dtype=dtype)


TEMP_ADV = torch.tensor([0.7, 1.3, 2.0], dtype=torch.float64)
TEMP_NAT = torch.tensor([1.5, 0.6, 1.1], dtype=torch.float64)


# -- the rule on hand-computed numbers ------------------------------------------------------------------

def test_the_temperature_update_on_hand_computed_numbers():
    """Class losses [3, 1, 2]: mean 2, gaps [1, -1, 0], largest 1; at rate 0.1 the temperatures [1, 1, 1] become
    [0.9, 1.1, 1.0]: the hard class sharper, the easy one smoother. From [0.55, 4.95, 1] the clamp holds them in
    [0.5, 5]; equal losses move nothing (the code would divide by zero)."""
    ones = torch.ones(3, dtype=torch.float64)
    losses = torch.tensor([3.0, 1.0, 2.0], dtype=torch.float64)
    assert temperature_step(ones, losses, 0.1, 0.5, 5.0).tolist() == pytest.approx([0.9, 1.1, 1.0], abs=1e-15)
    edge = torch.tensor([0.55, 4.95, 1.0], dtype=torch.float64)
    assert temperature_step(edge, losses, 0.1, 0.5, 5.0).tolist() == pytest.approx([0.5, 5.0, 1.0], abs=1e-15)
    assert torch.equal(temperature_step(edge, torch.full((3,), 2.0), 0.1, 0.5, 5.0), edge)
    gen = torch.Generator().manual_seed(1)
    for _ in range(5):
        temp, loss = 0.5 + 4.5 * torch.rand(10, generator=gen, dtype=torch.float64), torch.rand(10, generator=gen,
                                                                                               dtype=torch.float64)
        assert torch.allclose(temperature_step(temp, loss, 0.1, 0.5, 5.0), authors_temperature(temp, loss, 0.1),
                              rtol=0, atol=1e-15)


def test_the_rate_falls_tenfold_at_each_lr_milestone_from_that_epochs_update():
    """The code multiplies the rate by 0.1 at epochs 215, 260 and 285, before that epoch's update."""
    from engine.contract.method_params_recent import ABSLDParams
    from engine.methods.absld import ABSLD

    method = ABSLD.__new__(ABSLD)  # rate_at reads the profile and the parameters only
    method.p = ABSLDParams(teacher="t")
    method.ctx = type("Ctx", (), {"profile": Profile(train=TrainConfig(epochs=300, milestones=(215, 260, 285)))})()
    rates = {e: method.rate_at(e) for e in (1, 214, 215, 259, 260, 285, 300)}
    assert rates == pytest.approx({1: 0.1, 214: 0.1, 215: 0.01, 259: 0.01, 260: 1e-3, 285: 1e-4, 300: 1e-4},
                                  rel=1e-12)


# -- parity with the code -------------------------------------------------------------------------------

def test_the_codes_tempered_copies_compound_and_the_papers_do_not():
    x, y, _, teacher = batch(torch.float64)
    adv, nat = authors_tempered(teacher, y, TEMP_ADV, TEMP_NAT)
    ours_adv, ours_nat = tempered_targets(teacher, y, TEMP_ADV, TEMP_NAT, "code")
    assert torch.allclose(ours_adv, adv, rtol=0, atol=1e-12) and torch.allclose(ours_nat, nat, rtol=0, atol=1e-12)
    assert torch.allclose(adv, teacher / (TEMP_ADV[y] * TEMP_NAT[y])[:, None], rtol=0, atol=1e-12)  # one tensor
    p_adv, p_nat = tempered_targets(teacher, y, TEMP_ADV, TEMP_NAT, "paper")
    assert torch.allclose(p_adv, teacher / TEMP_ADV[y][:, None]) and torch.allclose(p_nat, teacher / TEMP_NAT[y][:, None])


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-6)])
def test_the_inner_attack_is_the_authors(dtype, tol):
    model = small_cnn(dtype)
    x, y, noise, teacher = batch(dtype)
    target = teacher / TEMP_ADV.to(dtype)[y][:, None]
    ours = absld_attack(model, x, target, EPS, STEP, STEPS, Noise(noise))
    theirs = authors_inner(model, target, x, noise)
    assert torch.allclose(ours, theirs, rtol=0, atol=tol)
    assert (ours - x).abs().max() <= EPS + tol and not torch.equal(ours, x)


def test_the_papers_kl_is_the_kl_and_the_codes_is_a_kth_of_it():
    gen = torch.Generator().manual_seed(4)
    s, t = torch.randn(6, 10, generator=gen, dtype=torch.float64), torch.randn(6, 10, generator=gen, dtype=torch.float64)
    p, logq = F.softmax(t, 1), F.log_softmax(s, 1)
    kl = (p * (p.log() - logq)).sum(1).mean()  # each sample's KL, averaged over the batch
    assert distill_kl(s, t, "paper").item() == pytest.approx(kl.item(), rel=1e-12)
    assert distill_kl(s, t, "code").item() == pytest.approx(authors_kl_loss(logq, p).mean().item(), rel=1e-12)
    s.requires_grad_(True)
    g_paper = torch.autograd.grad(distill_kl(s, t, "paper"), s)[0]
    g_code = torch.autograd.grad(distill_kl(s, t, "code"), s)[0]
    assert torch.allclose(g_paper, 10 * g_code, rtol=0, atol=1e-14)  # the code's mean over B x K: a tenth


def absld_on(model, teacher_model, form="code"):
    from engine.contract.method_params_recent import ABSLDParams
    from engine.methods.absld import ABSLD

    method = ABSLD.__new__(ABSLD)  # built without a teacher run: the teacher module is given
    from engine.methods.base import Method, MethodContext

    profile = Profile(attack=AttackConfig(eps=EPS, step=STEP, steps=STEPS), method=ABSLDParams(teacher="t", form=form))
    Method.__init__(method, profile.method, MethodContext(K, profile, torch.device("cpu"), attack_model=model))
    method.p = profile.method
    method._teacher = teacher_model, {"sha256": "x", "run_id": "t"}
    method.temp_adv, method.temp_nat = TEMP_ADV.clone(), TEMP_NAT.clone()
    method.loss_adv = torch.zeros(K, dtype=torch.float64)
    method.loss_nat = torch.zeros(K, dtype=torch.float64)
    method.trained_with, method.measured = {}, {}
    return method


def test_absld_loss_gradient_sgd_step_and_class_losses_are_the_authors():
    """One batch of the code form through fairtui's ABSLD and through the authors' loop body (teacher on x,
    tempered copies, inner attack, adversarial then clean train-mode forwards, 5/6 and 1/6 of kl_loss's means):
    the same loss, gradients, weights and BatchNorm statistics after one SGD step, and the class losses that move
    the temperatures."""
    dtype = torch.float64
    ours_model, theirs_model, teacher = small_cnn(dtype), small_cnn(dtype), small_cnn(dtype, seed=1).eval()
    x, y, noise, _ = batch(dtype, seed=9)
    method = absld_on(ours_model, teacher)
    ours_model.train()
    out = method.loss(ours_model, x, y, Noise(noise))
    opt = torch.optim.SGD(ours_model.parameters(), lr=0.1, momentum=0.9, weight_decay=2e-4)
    opt.zero_grad()
    out.loss.backward()
    ours_grads = [p.grad.clone() for p in ours_model.parameters()]
    opt.step()

    with torch.no_grad():
        t = teacher(x).detach()
    adv_t, nat_t = authors_tempered(t, y, TEMP_ADV, TEMP_NAT)
    x_adv = authors_inner(theirs_model, adv_t, x, noise)
    loss, adv_logits, nat_logits = authors_loss(theirs_model, x, x_adv, adv_t, nat_t)
    opt2 = torch.optim.SGD(theirs_model.parameters(), lr=0.1, momentum=0.9, weight_decay=2e-4)
    opt2.zero_grad()
    loss.backward()
    theirs_grads = [p.grad.clone() for p in theirs_model.parameters()]
    opt2.step()

    assert out.loss.item() == pytest.approx(loss.item(), rel=0, abs=1e-12)
    for a, b in zip(ours_grads, theirs_grads):
        assert torch.allclose(a, b, rtol=0, atol=1e-12)
    for a, b in zip(ours_model.state_dict().values(), theirs_model.state_dict().values()):
        assert torch.allclose(a.double(), b.double(), rtol=0, atol=1e-12)
    ce_adv = F.cross_entropy(adv_logits.detach(), y, reduction="none")
    want = torch.zeros(K, dtype=dtype).index_add_(0, y, ce_adv)
    assert torch.allclose(method.loss_adv, want, rtol=0, atol=1e-12)


# -- the teacher ----------------------------------------------------------------------------------------

def teacher_run(tmp_path):
    """A digits teacher of another architecture than the tiny student's small CNN: an MLP trained by TRADES."""
    from tests.conftest import train_tiny

    (tmp_path / "teacher").mkdir()
    return train_tiny(tmp_path / "teacher", ('method.name="trades"', 'model.arch="mlp"', "train.epochs=1"))


def test_absld_trains_records_its_teacher_and_resumes_to_the_same_weights(tmp_path, tiny_profile):
    """A student small CNN distils an MLP teacher: run_started names the teacher's run, checkpoint, architecture
    and SHA-256; each epoch's method_state holds the temperatures it trained with (they move after the first);
    stopped after its first epoch and resumed, the run ends where an uninterrupted one does."""
    from engine.runtime.checkpoint import sha256_of
    from tests.conftest import events_of, trained_whole_and_resumed
    from tests.engine.test_distributed import max_weight_difference

    teacher = teacher_run(tmp_path)
    profile = tiny_profile()
    overrides = ('method.name="absld"', f'method.teacher="{teacher}"', "method.temp_rate=0.5", "train.epochs=2")
    whole, part = trained_whole_and_resumed(tmp_path, profile, overrides, 1)
    assert max_weight_difference(whole, part) == 0.0
    started = next(e for e in events_of(whole) if e["type"] == "run_started")
    record = started["teacher"]
    assert record["run_id"] == teacher.name and record["checkpoint"] in ("best", "last") and record["arch"] == "mlp"
    assert record["sha256"] == sha256_of(teacher / "checkpoints" / f"{record['checkpoint']}.pt")
    states = [e["method_state"] for e in events_of(whole) if e["type"] == "epoch_end"]
    assert states[0]["temperature_adv"] == [1.0] * 10 and states[1]["temperature_adv"] != [1.0] * 10
    assert states[1]["temperature_adv"] == states[0]["next_temperature_adv"]


def test_a_missing_teacher_is_one_line_and_creates_nothing(tmp_path, tiny_profile):
    from tests.conftest import fairtui_cmd

    home = tmp_path / "home"
    profile = tiny_profile()
    for ref in ("nosuchrun", str(tmp_path / "gone")):
        proc = fairtui_cmd("run", str(profile), "--set", 'method.name="absld"', "--set", f'method.teacher="{ref}"',
                           home=home)
        assert proc.returncode == 2, proc.stderr
        assert "method.teacher" in proc.stderr and proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
        assert not (home / "runs").exists() or not any((home / "runs").iterdir())
    proc = fairtui_cmd("run", str(profile), "--set", 'method.name="absld"', home=home)
    assert proc.returncode == 2 and "ABSLD distils a robust teacher" in proc.stderr


def test_a_changed_teacher_stops_the_resume_in_one_line(tmp_path, tiny_profile):
    """The student resumes only with the teacher it began with (its SHA-256 in the checkpoint)."""
    from tests.conftest import make_run_dir, run_engine

    teacher = teacher_run(tmp_path)
    profile = tiny_profile()
    first = ('method.name="absld"', f'method.teacher="{teacher}"', "train.epochs=1")
    run = make_run_dir(tmp_path, profile, "run", first)
    assert run_engine(run).returncode == 0
    ckpt = next(p for p in (teacher / "checkpoints" / "best.pt", teacher / "checkpoints" / "last.pt") if p.exists())
    state = torch.load(ckpt, weights_only=True)
    state["model"] = {k: v + 0.01 if v.is_floating_point() else v for k, v in state["model"].items()}
    torch.save(state, ckpt)
    (run / "profile.toml").write_text((make_run_dir(tmp_path, profile, "two", first[:-1] + ("train.epochs=2",))
                                       / "profile.toml").read_text())
    proc = run_engine(run)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "method.teacher" in proc.stderr and "has changed since this run started" in proc.stderr
    end = json.loads((run / "events.jsonl").read_text().splitlines()[-1])
    assert end["type"] == "run_finished" and end["status"] == "failed"
