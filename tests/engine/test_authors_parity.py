"""`form = "code"` is the authors' code: their update rules, written out here from their scripts, on
the same inputs give the same values (no code is copied: each formula is restated in plain torch).

- FRL: hannxu123/fair_robust, frlrmrw.py (the epoch loop, rate1 halving, MultiStepLR [40, 80]) and
  utils_frl2.py (frl_train's multiplier updates, normalize_lambda, cost_sensitive).
- CFA: PKU-ML/CFA, train.py (CCM / CCR from `epoch >= begin`, FAWA gate) and attack.py (attack_pgd
  under model.train()).
- WAT: boqili/WAT, worst_class_adversarial_train.py (adjust_learning_rate(epoch + 1)).
"""

import bisect
import copy

import pytest
import torch
from torch import nn

from engine.contract.config import Profile, AttackConfig, TrainConfig, profile_from_table
from engine.contract.profile_io import load_profile
from engine.contract.method_params import CFAParams, FRLParams
from engine.methods.base import MethodContext, ValResult
from engine.methods.cfa import CFA
from engine.methods.frl import FRL
from tests.conftest import ROOT

K = 10
EPS = 8 / 255


def ctx(params, train: TrainConfig = TrainConfig()) -> MethodContext:
    profile = Profile(attack=AttackConfig(eps=EPS, step=2 / 255, steps=2), train=train, method=params)
    return MethodContext(K, profile, torch.device("cpu"))


def random_val(gen: torch.Generator) -> ValResult:
    clean = 0.5 + 0.5 * torch.rand(K, generator=gen, dtype=torch.float64)
    robust = clean * torch.rand(K, generator=gen, dtype=torch.float64)
    return ValResult(clean.tolist(), robust.tolist())


# -- FRL ------------------------------------------------------------------------------------------------

class AuthorsFRL:
    """frlrmrw.py + utils_frl2.py, restated: one call per fine-tuning epoch, before its training."""

    def __init__(self, rate1=0.05, rate2=0.2, bound=0.07, lim=0.5, remargin=True):
        self.rate1, self.rate2, self.bound, self.lim = rate1, rate2, bound, lim
        self.remargin = remargin  # frlrw.py's utils_frl.py leaves lmbda2 alone (`#+ rate2 * gamma1`)
        self.lmbda = torch.zeros(3 * K, dtype=torch.float64)

    @staticmethod
    def normalize_lambda(lmb, lim):
        lmb = torch.clamp(lmb, min=0)
        return lim * lmb / torch.sum(lmb) if torch.sum(lmb) > lim else lmb

    def epoch(self, now_epoch: int, val: ValResult):
        if now_epoch % 40 == 0:
            self.rate1 = self.rate1 / 2
        # (their tensors are float32; float64 here, so that only the formulas are compared)
        acc = torch.tensor(val.clean_acc_per_class, dtype=torch.float64)
        acc_adv = torch.tensor(val.robust_acc_per_class, dtype=torch.float64)
        class_clean_error, class_bndy_error = 1 - acc, acc - acc_adv
        # evaluate(): totals over the whole (class-balanced) validation set
        total_clean_error, total_bndy_error = class_clean_error.mean(), class_bndy_error.mean()
        gamma0 = class_clean_error - total_clean_error - self.bound
        gamma1 = class_bndy_error - total_bndy_error - self.bound
        lmbda0 = self.lmbda[0:10] + self.rate1 * torch.clamp(gamma0, min=-1000)
        lmbda1 = self.lmbda[10:20] + self.rate1 * 2 * torch.clamp(gamma1, min=-1000)
        lmbda2 = self.lmbda[20:30] + self.rate2 * gamma1 if self.remargin else self.lmbda[20:30]
        lmbda0, lmbda1 = self.normalize_lambda(lmbda0, self.lim), self.normalize_lambda(lmbda1, self.lim)
        self.lmbda = torch.cat([lmbda0, lmbda1, lmbda2])
        # cost_sensitive(): diff_i = 1/10 + 9/10 l_i - 1/10 sum_{j != i} l_j; diff2 = clamp(exp(2 l2), .98, 3)
        diff0 = torch.stack([0.1 + 0.9 * lmbda0[i] - 0.1 * (lmbda0.sum() - lmbda0[i]) for i in range(K)])
        diff1 = torch.stack([0.1 + 0.9 * lmbda1[i] - 0.1 * (lmbda1.sum() - lmbda1[i]) for i in range(K)])
        diff2 = torch.clamp(torch.exp(2 * lmbda2), min=0.98, max=3)
        return diff0, diff1, diff2


@pytest.mark.parametrize("variant, script", [
    ("reweight_remargin", dict()),  # frlrmrw.py: --bound 0.07, --rate2 0.2
    ("reweight", dict(bound=0.1, rate2=0.1, remargin=False)),  # frlrw.py: --bound 0.1; no margin update
])
def test_frl_code_form_is_the_authors_update_over_three_decays(variant, script):
    params = FRLParams(form="code", variant=variant)
    m = FRL(params, ctx(params))
    authors = AuthorsFRL(**script)
    gen = torch.Generator().manual_seed(0)
    for epoch in range(1, 86):  # through the rate1 halvings at FRL epochs 40 and 80
        val = random_val(gen)
        m.start_epoch(epoch, val)
        diff0, diff1, diff2 = authors.epoch(epoch, val)
        torch.testing.assert_close(m.lambda_nat, authors.lmbda[0:10], rtol=0, atol=1e-12)
        torch.testing.assert_close(m.lambda_bndy, authors.lmbda[10:20], rtol=0, atol=1e-12)
        torch.testing.assert_close(m.lambda_margin, authors.lmbda[20:30], rtol=0, atol=1e-12)
        torch.testing.assert_close(m.weight_nat.double(), diff0.double(), rtol=0, atol=1e-6)
        torch.testing.assert_close(m.weight_bndy.double(), diff1.double(), rtol=0, atol=1e-6)
        # trades_adv(): new_eps = epsilon * weight2, step_size = max(new_eps) / 4
        torch.testing.assert_close(m.eps_per_class.double(), (EPS * diff2).double(), rtol=1e-6, atol=0)
        assert float(m.step_for(m.eps_per_class)) == pytest.approx(float(EPS * diff2.max() / 4), rel=1e-6)
    # the margins moved (RW+RM) and the weights did (both): the comparison was not vacuous
    assert m.lambda_margin.abs().max() > 0.05 or variant == "reweight"
    assert m.lambda_nat.abs().max() > 0 and m.lambda_bndy.abs().max() > 0


def test_frl_code_form_resolves_the_authors_values_and_paper_form_the_papers():
    code, paper = FRLParams(form="code").resolved(), FRLParams().resolved()
    assert (code.tau1, code.tau2, code.alpha1, code.alpha2, code.alpha_margin) == (0.07, 0.07, 0.05, 0.1, 0.2)
    assert (code.alpha_schedule, code.margin_form) == ("code", "code")
    assert FRLParams(form="code", variant="reweight").resolved().tau1 == 0.1  # frlrw.py's --bound0/1
    assert FRLParams(form="code", variant="reweight").resolved().tau2 == 0.1
    assert FRLParams(form="code", variant="reweight", tau1=0.05).resolved().tau1 == 0.05  # explicit wins
    assert (paper.tau1, paper.tau2, paper.alpha1, paper.alpha2, paper.alpha_margin) == (0.05,) * 5
    assert (paper.alpha_schedule, paper.margin_form) == ("paper", "paper")
    # a key given explicitly wins over its form
    assert FRLParams(form="code", alpha_margin=0.05).resolved().alpha_margin == 0.05


def test_frl_fine_tuning_lr_is_the_authors_multisteplr():
    params = FRLParams(form="code")
    m = FRL(params, ctx(params))
    for epoch in range(1, 121):
        # MultiStepLR(milestones=[40, 80], gamma=0.1).step(now_epoch) after each epoch: closed form
        authors = 0.001 * 0.1 ** bisect.bisect_right([40, 80], epoch - 1)
        assert m.lr_for(epoch, 0.1) == pytest.approx(authors, rel=1e-12), epoch


def test_frl_paper_schedule_decays_every_alpha_with_the_lr():
    params = FRLParams(alpha1=0.1, alpha2=0.1, alpha_margin=0.1, decay_every=2)
    m = FRL(params, ctx(params))
    assert m.alpha_scales(1) == m.alpha_scales(2) == (1.0, 1.0)
    assert m.alpha_scales(3) == pytest.approx((0.1, 0.1))
    code = FRL(FRLParams(form="code", decay_every=2), ctx(FRLParams(form="code")))
    assert [code.alpha_scales(e) for e in (1, 2, 3, 4)] == [(1.0, 1.0), (0.5, 1.0), (0.5, 1.0), (0.25, 1.0)]


def test_frl_fresh_optimizer_only_at_the_first_fine_tuning_epoch():
    params = FRLParams(pretrain_epochs=3)
    m = FRL(params, ctx(params))
    assert [e for e in range(1, 8) if m.fresh_optimizer(e)] == [4]
    kept = FRLParams(pretrain_epochs=3, finetune_optimizer="continue")
    assert not any(FRL(kept, ctx(kept)).fresh_optimizer(e) for e in range(1, 8))
    no_pretrain = FRLParams(pretrain_epochs=0)
    assert not any(FRL(no_pretrain, ctx(no_pretrain)).fresh_optimizer(e) for e in range(1, 8))


# -- CFA ------------------------------------------------------------------------------------------------

def test_cfa_code_form_calibrates_from_the_11th_epoch_like_the_authors():
    params = CFAParams(form="code", base="trades", fawa=True)
    m = CFA(params, ctx(params))
    assert (m.p.calibration_start_epoch, m.p.fawa_decay, m.p.fawa_threshold, m.p.fawa_start_epoch,
            m.p.lambda1) == (11, 0.88, 0.24, 1, 0.5)
    gen = torch.Generator().manual_seed(1)
    model = nn.Linear(1, 1, bias=False)
    beta, lam1, lam2, d, threshold = 6.0, 0.5, 0.5, 0.88, 0.24
    fawa, seat_init, opened = None, False, 0
    first_changed = None
    for ep in range(14):  # the authors' 0-based epoch; fairtui's epoch is ep + 1
        train_robust = torch.rand(K, generator=gen, dtype=torch.float64)
        robust = 0.15 + 0.3 * torch.rand(K, generator=gen, dtype=torch.float64)  # the gate opens now and then
        val = ValResult([0.9] * K, robust.tolist())
        model.weight.data.fill_(float(ep + 1))
        m.end_epoch(ep + 1, model, train_robust.tolist(), val)
        # what the authors' epoch ep + 1 trains with (cw_tensor[-1, 1, :] = this epoch's train robust)
        nxt = ep + 1
        if nxt >= 10:
            class_eps = (lam1 + train_robust) * EPS
            class_b = (lam2 + train_robust) * beta / (1 + (lam2 + train_robust) * beta)
        else:
            class_eps, class_b = torch.full((K,), EPS, dtype=torch.float64), torch.full((K,), beta / (1 + beta))
        torch.testing.assert_close(m.eps_per_class.double(), class_eps.double(), rtol=1e-6, atol=0)
        ours_b = m.beta_per_class.double() / (1 + m.beta_per_class.double())  # (CE + b KL) / (1 + b)
        torch.testing.assert_close(ours_b, class_b.double(), rtol=1e-6, atol=0)
        if first_changed is None and not torch.allclose(m.eps_per_class, torch.full((K,), EPS)):
            first_changed = ep + 2  # the fairtui epoch that first trains with calibrated margins
        # FAWA: R_min = valid_result min robust; gate at the threshold; the first accepted is copied
        if min(val.robust_acc_per_class) >= threshold:
            opened += 1
            fawa = float(ep + 1) if not seat_init else d * fawa + (1 - d) * float(ep + 1)
            seat_init = True
        got = m.averaged_models().get("fawa")
        assert (got is None) == (fawa is None)
        if fawa is not None:
            assert float(got["weight"]) == pytest.approx(fawa, rel=1e-6)
    assert first_changed == 11
    assert fawa is not None and opened < 14  # the gate opened, and not always: the comparison was not vacuous


def test_cfa_fat_tau_defaults_to_the_authors_3():
    assert CFAParams(base="fat").fat_tau == 3
    m = CFA(CFAParams(base="fat"), ctx(CFAParams(base="fat")))
    assert m.inner.attack.early_stop_tau == 3


# -- the mode of training attacks ---------------------------------------------------------------------------

class SmallBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.head = nn.Linear(4 * 16, 3)

    def forward(self, x):
        return self.head(torch.relu(self.bn(self.conv(x))).flatten(1))


def authors_attack_pgd(model, x, y, eps, alpha, n_iters):
    """CFA's attack.py attack_pgd, restated (run by the caller in train mode, as in its train_epoch)."""
    delta = torch.zeros_like(x).uniform_(-eps, eps)
    delta = torch.clamp(delta, 0 - x, 1 - x)
    delta.requires_grad = True
    for _ in range(n_iters):
        loss = nn.functional.cross_entropy(model(x + delta), y)
        loss.backward()
        grad = delta.grad.detach()
        d = torch.clamp(delta + alpha * torch.sign(grad), min=-eps, max=eps)
        d = torch.clamp(d, 0 - x, 1 - x)
        delta.data = d
        delta.grad.zero_()
    return delta.detach()


def test_train_mode_attack_is_the_cfa_authors_attack_and_updates_bn_like_it():
    from engine.attacks.pgd import PGD

    torch.manual_seed(0)
    model = SmallBN()
    x, y = torch.rand(16, 1, 4, 4), torch.randint(0, 3, (16,))
    theirs_model, ours_model = copy.deepcopy(model).train(), copy.deepcopy(model).train()
    torch.manual_seed(5)
    theirs = x + authors_attack_pgd(theirs_model, x, y, EPS, 2 / 255, 10)
    torch.manual_seed(5)
    ours = PGD(ours_model, eps=EPS, step=2 / 255, steps=10, model_mode="train").perturb(x, y)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
    # 10 train-mode forwards each: the running statistics moved the same way
    torch.testing.assert_close(ours_model.bn.running_mean, theirs_model.bn.running_mean)
    torch.testing.assert_close(ours_model.bn.running_var, theirs_model.bn.running_var)
    assert int(ours_model.bn.num_batches_tracked) == 10 and ours_model.training

    eval_model = copy.deepcopy(model).train()
    torch.manual_seed(5)
    in_eval = PGD(eval_model, eps=EPS, step=2 / 255, steps=10).perturb(x, y)
    assert int(eval_model.bn.num_batches_tracked) == 0 and eval_model.training  # untouched, mode restored
    assert not torch.equal(in_eval, ours)  # the mode changes the examples


def profile_with(method: dict, train: dict | None = None) -> Profile:
    return profile_from_table({"method": method, "train": train or {}}, "test.toml")


@pytest.mark.parametrize("method, train, mode", [
    ({"name": "cfa", "form": "code", "base": "at"}, None, "train"),
    ({"name": "cfa", "form": "code", "base": "fat"}, None, "train"),
    ({"name": "cfa", "form": "code", "base": "trades"}, None, "eval"),  # the authors' TRADES attacks in eval
    ({"name": "cfa", "base": "at"}, None, "eval"),
    ({"name": "pgd_at"}, None, "eval"),
    ({"name": "pgd_at"}, {"attack_mode": "train"}, "train"),
    ({"name": "cfa", "form": "code", "base": "at"}, {"attack_mode": "eval"}, "eval"),
])
def test_training_attack_mode_resolves(method, train, mode):
    from engine.methods import build_method

    profile = profile_with(method, train)
    assert profile.train.attack_mode == mode
    m = build_method(MethodContext(K, profile, torch.device("cpu")))
    attack = getattr(m, "inner", m).attack
    assert attack.model_mode == mode


# -- learning-rate schedules against the authors' -----------------------------------------------------------

# The paper profiles' learning rates, epoch by epoch, against each authors' schedule: test_paper_schedules.py.


def test_frl_fine_tuning_starts_a_fresh_optimizer_in_the_loop(tmp_path):
    """In-run pre-training, then FRL: "fresh" drops the pre-training momentum at the first FRL epoch
    (the authors build a new SGD), "continue" keeps it; the two runs differ only there."""
    import hashlib

    from tests.conftest import train_tiny

    digests = {}
    for choice in ("fresh", "continue"):
        (tmp_path / choice).mkdir()
        run = train_tiny(tmp_path / choice, ("method.name=\"frl\"", "method.pretrain_epochs=1", "train.epochs=2",
                                             "method.finetune_lr=0.05", f"method.finetune_optimizer=\"{choice}\""))
        state = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
        digests[choice] = hashlib.sha256(b"".join(v.numpy().tobytes() for v in state["model"].values())).hexdigest()
        momentum = [s["momentum_buffer"] for s in state["optimizer"]["state"].values()]
        assert momentum and all(torch.isfinite(m).all() for m in momentum)
    assert digests["fresh"] != digests["continue"]


# -- WAT ------------------------------------------------------------------------------------------------

def authors_wat_loss(natural_logits, adv_logits, target, nat_w, bndy_w, beta):
    """worst_class_adversarial_train.py's train(): class sums weighted by the class's entry, plus the
    overall TRADES loss weighted by the last entry (their weights: classes first, overall last)."""
    k = len(nat_w) - 1
    nat = nn.functional.cross_entropy(natural_logits, target, reduction="none")
    bndy = nn.functional.kl_div(nn.functional.log_softmax(adv_logits, 1), nn.functional.softmax(natural_logits, 1),
                                reduction="none").sum(1)
    nat_loss = sum(nat[target == i].sum() * nat_w[i] for i in range(k))
    bndy_loss = sum(bndy[target == i].sum() * bndy_w[i] for i in range(k))
    loss = (nat_loss + beta * bndy_loss) / len(target)
    trades = nat.mean() + beta * bndy.sum() / len(target)
    return loss + trades * bndy_w[k]


def test_wat_code_form_is_the_authors_loss_from_the_first_epoch():
    """Their weights start as torch.ones(K + 1) (sum K + 1), then K * exp(eta S) / sum (sum K)."""
    from engine.contract.method_params import WATParams
    from engine.methods.wat import WAT, hedge_weights

    k, beta, eta = 3, 6.0, 0.1
    params = WATParams(loss_form="code", beta=beta, eta=eta)
    m = WAT(params, MethodContext(k, Profile(attack=AttackConfig(eps=EPS, step=2 / 255, steps=2), method=params),
                                  torch.device("cpu")))
    torch.manual_seed(0)
    model = SmallBN().eval()
    x, y = torch.rand(12, 1, 4, 4), torch.tensor([0, 1, 2] * 4)
    theirs_w = torch.ones(k + 1)
    costs = [torch.tensor([1.0, 2.0, 0.5, 3.0], dtype=torch.float64),  # overall first (ours)
             torch.tensor([0.7, 0.2, 1.5, 0.9], dtype=torch.float64)]
    total = torch.zeros(k + 1, dtype=torch.float64)
    for epoch in (1, 2, 3):
        m.start_epoch(epoch, None)
        torch.manual_seed(epoch)
        ours = m.use_attack_model(model).loss(model, x, y).loss.detach()
        torch.manual_seed(epoch)
        x_adv = m.attack.perturb(x)
        with torch.no_grad():
            expected = authors_wat_loss(model(x), model(x_adv), y, theirs_w, theirs_w, beta)
        assert float(ours) == pytest.approx(float(expected), rel=1e-5), epoch
        if epoch == 1:  # 1.1 on CIFAR-10; (K + 1) / K = 4/3 here against a uniform start summing to K
            assert sum(m.method_state()["loss_weights"]) == pytest.approx(k + 1)
        cost = costs[epoch - 1] if epoch <= 2 else torch.zeros(k + 1, dtype=torch.float64)
        m.val_cost = cost
        m.cost_sums = m.cost_sums + cost
        m.hedge = hedge_weights(m.cost_sums, eta)
        # theirs: class_factor = exp(eta * sum of costs), classes first and overall last
        total = total + cost
        theirs_order = torch.cat([total[1:], total[:1]])
        factor = (theirs_order * eta).exp()
        theirs_w = (k * factor / factor.sum()).float()


@pytest.mark.parametrize("name", ["cfa-at", "cfa-trades", "cfa-fat"])
def test_cfa_form_sets_the_ema_baseline_and_an_explicit_key_wins(name):
    """The authors' train.py updates its EMA from the first epoch with --decay-rate 0.88 (FAWA's);
    the paper's EMA baseline starts with the weight averaging at epoch 50, decay 0.85."""
    path = ROOT / "profiles" / f"{name}.toml"
    paper, code = load_profile(path), load_profile(path, ['method.form="code"'])
    assert (paper.train.ema_decay, paper.train.ema_start_epoch) == (0.85, 50)
    assert (code.train.ema_decay, code.train.ema_start_epoch) == (0.88, 1)
    kept = load_profile(path, ['method.form="code"', "train.ema_start_epoch=20"])
    assert (kept.train.ema_decay, kept.train.ema_start_epoch) == (0.88, 20)
    own = load_profile(path, ["train.ema_decay=0.5"])  # paper form: an EMA of one's own starts at 1
    assert (own.train.ema_decay, own.train.ema_start_epoch) == (0.5, 1)
    # a profile without the keys: the code form still gets the authors' EMA; other methods none
    assert profile_with({"name": "cfa", "form": "code"}).train.ema_decay == 0.88
    assert profile_with({"name": "pgd_at"}).train.ema_decay == 0.0
