"""Run profiles: what a profile may hold (frozen dataclasses) and its checks, from a parsed TOML table.

Torch-free: `fairtui` validates a profile with this module before it starts an
engine process. Every error is a :class:`ProfileError` whose message reads
``FILE: KEY: what is wrong``. Reading and writing profile files: engine.contract.profile_io.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Optional

from engine.contract.method_params import MethodParams
from engine.contract.method_registry import METHOD_PARAMS
from engine.contract.profile_schema import ProfileError, build, field, to_table, unknown_key_message
from engine.contract.request import CHECKPOINTS, RequestError, check_attack, check_eps
from engine.contract.sinks import LIVE_SINKS

DATASETS = ("digits", "gaussian", "mnist", "fashion_mnist", "cifar10", "cifar100", "svhn", "stl10",
            "tiny_imagenet")
ARCHS = ("small_cnn", "mlp", "preact_resnet18", "resnet18", "wide_resnet")
# Architectures of imported models only (`fairtui import`): the network comes from the source.
IMPORTED_ARCHS = ("torchscript", "robustbench")
# Classes of each data set whose class count the profile cannot change (gaussian: data.gaussian_classes).
NUM_CLASSES = {"digits": 10, "mnist": 10, "fashion_mnist": 10, "cifar10": 10, "cifar100": 100, "svhn": 10,
               "stl10": 10, "tiny_imagenet": 200}


@dataclass(frozen=True)
class DataConfig:
    dataset: str = field("digits", choices=DATASETS)
    root: str = field("data")
    download: bool = field(False)
    val_per_class: int = field(0, min=0)
    val_fraction: float = field(0.1, min=0.0, max=0.9)
    val_extra_per_class: int = field(0, min=0)  # drawn after the training subset: its images stay the seed's
    train_per_class: int = field(0, min=0)  # 0: all of the training data
    test_per_class: int = field(0, min=0)  # 0: all of the test data
    batch_size: int = field(128, min=1)
    eval_batch_size: int = field(256, min=1)
    augment: str = field("auto", choices=("auto", "none", "crop_flip", "crop"))
    # The synthetic `gaussian` data set (FRL Eq. 2 generalised to K classes).
    gaussian_classes: int = field(4, min=2)
    gaussian_dim: int = field(16, min=1)
    gaussian_eta: float = field(0.1, gt=0.0)
    gaussian_sigma: float = field(0.1, gt=0.0)
    gaussian_var_ratio: float = field(3.0, min=1.0)
    gaussian_train_per_class: int = field(500, min=1)
    gaussian_test_per_class: int = field(500, min=1)


@dataclass(frozen=True)
class ModelConfig:
    arch: str = field("small_cnn", choices=ARCHS + IMPORTED_ARCHS)
    depth: int = field(34, min=10)  # WideResNet only
    width: int = field(10, min=1)  # WideResNet widen factor; hidden width factor of small_cnn / mlp
    # ResNet-18 and PreAct-ResNet18: channels of the first stage (the stages have w, 2w, 4w, 8w). 64 is
    # the papers' model; 8 is the CPU-scale CIFAR-10 table's (0.18 M parameters instead of 11.2 M). Not
    # `width`, which every saved profile already holds as 10, the WideResNet widen factor.
    base_width: int = field(64, min=1)
    # The normalisation layer in front of the network: empty = the data set's statistics. An
    # imported model states what it expects (mean 0 and std 1: it takes [0, 1] pixels as they are).
    mean: tuple[float, ...] = field(())
    std: tuple[float, ...] = field((), items_min=1e-12)


@dataclass(frozen=True)
class SourceConfig:
    """Where an imported run's model came from (`fairtui import`); absent for trained runs."""

    kind: str = field("state_dict", choices=("state_dict", "torchscript", "robustbench"))
    path: str = field("")  # the file imported (for RobustBench, the weight file that was read)
    sha256: str = field("")
    robustbench_name: str = field("")
    threat: str = field("")  # RobustBench's threat model: Linf, L2
    # A TorchScript model is a program (loading it runs its code): imported only with --trust-code,
    # recorded here; the engine loads one only when this is true.
    trusted: bool = field(False)


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = field(10, min=1, max=100_000)  # a bound: a tuning range's end is checked against it
    lr: float = field(0.1, gt=0.0)
    momentum: float = field(0.9, min=0.0, max=1.0)
    nesterov: bool = field(False)
    weight_decay: float = field(5e-4, min=0.0)
    schedule: str = field("piecewise", choices=("piecewise", "cosine", "constant"))
    # The lr drops after each milestone epoch. An item may be a share of the run, "50%": epoch
    # ceil(0.5 * epochs), the CFA authors' `t / epochs < 0.5` rule; or a count back from the end, "-10": the
    # rate is lower from epoch epochs - 10 on (the DAFA authors' `epoch >= epochs - 10` on 1-based epochs), so
    # it drops after epoch epochs - 11. The saved profile has the epochs.
    milestones: tuple[int, ...] = field((), items_min=1, percent=True)
    gamma: float = field(0.1, gt=0.0, max=1.0)
    # EMA of the weights, evaluated as the `ema` checkpoint. Unset: the method's form decides (CFA's EMA
    # baseline: 0.85 from epoch 50 in the paper, 0.88 from epoch 1 in the authors' code), else off.
    ema_decay: Optional[float] = field(None, min=0.0, max=0.99999)  # 0: no EMA of weights
    ema_start_epoch: Optional[int] = field(None, min=1)
    device: str = field("auto", choices=("auto", "cpu", "cuda"))
    # The fast path on CUDA is the default since it was measured (issue #36, docs/gpus.md): bf16 autocast
    # with channels-last gave the fp32 run's test robust accuracy within the seed spread, 2.3x faster with
    # compilation. "auto": bf16 on CUDA, and on a CPU with bf16 units (AVX512-BF16, AMX) since the CPU's accuracy
    # check (#57, engine.runtime.device.CPU_AUTO_BF16); fp32 on other CPUs, where bf16 is emulated and slower. "bf16": bf16
    # on any device. Test-split evaluations run in fp32 whatever this is.
    amp: str = field("auto", choices=("auto", "none", "bf16"))
    channels_last: bool = field(True)  # memory layout under bf16 (CUDA's default, the CPU's fast path); else ignored
    # torch.compile for the model's forward and backward passes (attack steps and training step).
    # "auto": on for a one-process CUDA run; off on the CPU and for DDP (compiled DDP has not run on a GPU).
    compile: str = field("auto", choices=("off", "on", "auto"))
    compile_mode: str = field("reduce-overhead", choices=("default", "reduce-overhead", "max-autotune",
                                                          "max-autotune-no-cudagraphs"))
    threads: int = field(0, min=0)  # 0: PyTorch's default (1 with `deterministic`)
    # torch.use_deterministic_algorithms (warn-only where an op has no deterministic kernel), cuDNN
    # deterministic without autotuning, CUBLAS_WORKSPACE_CONFIG, and a fixed CPU thread count: the same
    # profile and seed then give bit-identical results run after run on one machine (docs/results-and-guarantees.md).
    deterministic: bool = field(False)
    # The mode the model runs in while the *training* attack crafts its examples (evaluation attacks
    # always run in eval mode). "eval": BatchNorm uses its running statistics and the attack leaves
    # them alone. "train": batch statistics, every attack forward updates the running statistics, and
    # the training clean accuracy comes from a train-mode forward after the optimiser step: the CFA
    # authors' `train_epoch` for AT and FAT. Unset: "train" for CFA with form = "code" on AT or FAT,
    # else "eval".
    attack_mode: Optional[str] = field(None, choices=("eval", "train"))
    # Several processes (`--gpus 0,1`): BatchNorm statistics over the whole global batch across the
    # ranks (SyncBatchNorm) rather than over each rank's share of it. No effect in one process.
    sync_bn: bool = field(False)
    # Seconds a collective operation of a multi-process run waits for the other ranks before the
    # run fails (a dead or hung rank never leaves the others waiting for ever).
    dist_timeout: float = field(300.0, gt=0.0)
    # Dashboards that also get each epoch's numbers, besides the run folder (which stays the record):
    # "wandb" (Weights & Biases, the extra `fairtui[wandb]`), in `wandb_mode` "offline" by default (synced
    # later with `wandb sync RUN_DIR/wandb/offline-run-*`). A dashboard never fails or changes a run.
    log_to: tuple[str, ...] = field((), items_choices=tuple(LIVE_SINKS))
    wandb_project: str = field("fairtui", max_len=128)
    wandb_entity: str = field("", max_len=128)  # "": the account's default entity
    wandb_mode: str = field("offline", choices=("offline", "online"))


@dataclass(frozen=True)
class AttackConfig:
    """The training attack (and the defaults of the evaluation attacks)."""

    norm: str = field("linf", choices=("linf", "l2"))
    eps: float = field(8 / 255, fraction=True, gt=0.0)
    step: float = field(2 / 255, fraction=True, gt=0.0)
    steps: int = field(10, min=1)
    random_start: bool = field(True)
    loss: str = field("ce", choices=("ce", "cw", "ce_t"))
    temperature: float = field(1.0, gt=0.0)
    # The TRADES KL's arithmetic (engine.attacks.trades.trades_kl): "log_space" (fairtui's, finite gradients for
    # any logits), "textbook" (KLDivLoss(log_softmax, softmax), every authors' code), or "auto": textbook when
    # the method's form is "code", else log space.
    kl: str = field("auto", choices=("auto", "log_space", "textbook"))


@dataclass(frozen=True)
class EvalConfig:
    attacks: tuple[str, ...] = field(("pgd20",))
    val_attack: str = field("pgd10")
    checkpoints: tuple[str, ...] = field(("last", "best"))
    eps: Optional[float] = field(None, fraction=True, gt=0.0)  # default: attack.eps
    step: Optional[float] = field(None, fraction=True, gt=0.0)  # default: attack.step
    cw_kappa: float = field(50.0, min=0.0)
    tpgd_inv_temperature: float = field(5.0, gt=0.0)
    restarts: int = field(1, min=1)
    # false: the run ends without touching the test split (a tuning trial: `fairtui tune` evaluates the best
    # trial's run once, at the end); `fairtui eval` evaluates such a run any time.
    test_at_end: bool = field(True)


@dataclass(frozen=True)
class Profile:
    name: str = field("run", max_len=200, one_line=True)  # as --name: shown by ls, show, compare and the app
    seed: int = field(0, min=0, max=2**63 - 1)  # int64
    description: str = field("", max_len=20_000)
    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    train: TrainConfig = TrainConfig()
    attack: AttackConfig = AttackConfig()
    method: MethodParams = dataclasses.field(default_factory=lambda: METHOD_PARAMS["pgd_at"]())
    eval: EvalConfig = EvalConfig()
    source: Optional[SourceConfig] = None  # imported runs only

    def to_table(self) -> dict:
        table = to_table(self)
        table["method"] = {"name": self.method.name, **table["method"]}
        return table


SECTIONS = {"data": DataConfig, "model": ModelConfig, "train": TrainConfig, "attack": AttackConfig,
            "eval": EvalConfig}
TOP_LEVEL = ("name", "seed", "description")


def _check_attack_names(names: tuple[str, ...], file: str, key: str) -> None:
    try:
        for name in names:
            check_attack(name)
    except RequestError as err:
        raise ProfileError(file, key, str(err)) from None


def _check_eps(eps: float, norm: str, file: str, key: str) -> None:
    try:
        check_eps(eps, norm)
    except RequestError as err:
        raise ProfileError(file, key, f"an {'L-inf ' if norm == 'linf' else ''}eps {err}") from None


def pinned_form_keys(raw: dict, file: str = "profile", written: dict | None = None) -> list[str]:
    """One warning per key that the profile pins although its method's `form` sets it too, with both
    values: `--set method.form="code"` on a profile that pins the paper's tau1 keeps the paper's tau1.
    ``written``: the profile file as written, before --set; when the run keeps the form the file chose (or
    left to the method), the file's pins are its author's choice (a FAWA start scaled to the schedule) and
    nothing is said, so a shipped profile does not warn on every run."""
    table = raw.get("method", {})
    if not isinstance(table, dict):
        return []
    if written is not None:
        own = written.get("method", {}) if isinstance(written.get("method"), dict) else {}
        if own.get("form") == table.get("form"):
            return []
    params = _method_params(table, file)
    form = getattr(params, "form", None)
    out = []
    pinned_train = raw.get("train", {}) if isinstance(raw.get("train"), dict) else {}
    for section, values, pinned in (("method", params.form_values(), table),
                                    ("train", params.train_defaults(), pinned_train)):
        for key, form_value in values.items():
            if key in pinned and pinned[key] != form_value:
                by = f'method.form = "{form}"' if form else f"method {params.name!r}"
                out.append(f"{section}.{key} = {pinned[key]!r} is pinned by the profile; {by} would set "
                           f"{form_value!r}: the profile's value is used")
    return out


def _method_params(table: dict, file: str) -> MethodParams:
    """The profile's method parameters as written (before the form fills the keys left unset)."""
    if not isinstance(table, dict):
        raise ProfileError(file, "method", "expected a table")
    name = table.get("name", "pgd_at")
    cls = METHOD_PARAMS.get(name)
    if cls is None and isinstance(name, str):  # a method from an installed package (engine.contract.plugins)
        from engine.contract import plugins

        cls = plugins.params_class(name)
    if cls is None:
        from engine.contract import plugins

        known = list(METHOD_PARAMS) + [n for n in plugins.names() if n not in METHOD_PARAMS]  # nothing imported
        raise ProfileError(file, "method.name", f"unknown method {name!r}; choose from {', '.join(known)}")
    params = build(cls, {k: v for k, v in table.items() if k != "name"}, file, "method.", skip=("name",))
    params.validate(file)
    return params


def _build_method(table: Any, file: str) -> MethodParams:
    if not isinstance(table, dict):
        raise ProfileError(file, "method", "expected a table")
    return _method_params(table, file).resolved()


def profile_from_table(raw: dict, file: str) -> Profile:
    """Build and check a whole profile from its parsed TOML table."""
    known = list(TOP_LEVEL) + list(SECTIONS) + ["method", "source"]
    if "sweep" in raw:
        raise ProfileError(file, "sweep", "this profile describes a sweep: run it with `fairtui sweep`")
    for key in raw:
        if key not in known:
            raise ProfileError(file, key, unknown_key_message(key, known))
    top = build(Profile, {k: raw[k] for k in TOP_LEVEL if k in raw}, file, "",
                skip=tuple(SECTIONS) + ("method",))
    sections = {name: build(cls, raw.get(name, {}), file, name + ".") for name, cls in SECTIONS.items()}
    method = _build_method(raw.get("method", {}), file)
    source = build(SourceConfig, raw["source"], file, "source.") if "source" in raw else None
    profile = dataclasses.replace(top, method=method, source=source, **sections)
    return _resolve(profile, file)


def _resolve(p: Profile, file: str) -> Profile:
    """Fill derived defaults and check the relations between sections."""
    _check_attack_names(p.eval.attacks, file, "eval.attacks")
    _check_attack_names((p.eval.val_attack,), file, "eval.val_attack")
    for ckpt in p.eval.checkpoints:
        if ckpt not in CHECKPOINTS:
            raise ProfileError(file, "eval.checkpoints", f"unknown checkpoint {ckpt!r}; choose from "
                               f"{', '.join(CHECKPOINTS)}")
    _check_eps(p.attack.eps, p.attack.norm, file, "attack.eps")
    given = p.train.milestones
    p = dataclasses.replace(p, train=dataclasses.replace(p.train, milestones=milestone_epochs(p.train)))
    early = [str(m) for m, e in zip(given, p.train.milestones) if e < 1]  # "-10" of 8 epochs: epoch -3
    if early:
        raise ProfileError(file, "train.milestones", f"{', '.join(early)} falls before the first of {p.train.epochs} "
                           "epochs: raise train.epochs or remove it")
    if list(p.train.milestones) != sorted(p.train.milestones):
        raise ProfileError(file, "train.milestones", f"must be increasing, got {list(p.train.milestones)}")
    pretrain = getattr(p.method, "pretrain_epochs", 0)
    if pretrain and pretrain >= p.train.epochs:
        raise ProfileError(file, "method.pretrain_epochs", f"{pretrain} pre-training epochs leave no {p.method.name} "
                           f"epoch in train.epochs ({p.train.epochs}): lower it (--set method.pretrain_epochs=N) "
                           "or raise train.epochs")
    p.method.validate_profile(p, file)
    reads = p.method.reads_validation()  # trained on zeros without a validation split: refused instead
    if reads and not p.data.val_per_class and not p.data.val_fraction:
        raise ProfileError(file, "data.val_fraction", f"{p.method.name} updates its class-wise state from the "
                           f"validation split every epoch ({reads}): it needs one (data.val_per_class or "
                           "data.val_fraction above 0)")
    if p.data.val_extra_per_class and not p.data.train_per_class:
        raise ProfileError(file, "data.val_extra_per_class", "draws from what data.train_per_class leaves: set it too")
    if not p.eval.attacks:
        raise ProfileError(file, "eval.attacks", "needs at least one attack (else the run ends with no result)")
    if not p.eval.checkpoints:
        raise ProfileError(file, "eval.checkpoints", "needs at least one checkpoint (last, best, ...)")
    imported = p.source is not None or p.method.name == "imported" or p.model.arch in IMPORTED_ARCHS
    if imported and (p.source is None or p.method.name != "imported"):
        raise ProfileError(file, "source" if p.source is None else "method.name",
                           "imported models (a [source] table, method \"imported\", model.arch torchscript or "
                           "robustbench) come from `fairtui import`, which writes all three; they do not train")
    if p.model.arch in IMPORTED_ARCHS and p.source is not None and p.source.kind != p.model.arch:
        raise ProfileError(file, "model.arch", f"{p.model.arch!r} does not match source.kind {p.source.kind!r}")
    if len(p.model.mean) != len(p.model.std):
        raise ProfileError(file, "model.std", f"needs as many values as model.mean ({len(p.model.mean)}), got "
                           f"{len(p.model.std)}")
    if p.model.arch == "wide_resnet" and (p.model.depth - 4) % 6:
        raise ProfileError(file, "model.depth", f"a WideResNet has depth 6n + 4 (16, 22, 28, 34, 40, ...), got "
                           f"{p.model.depth}")
    k = p.data.gaussian_classes if p.data.dataset == "gaussian" else NUM_CLASSES[p.data.dataset]
    betas = getattr(p.method, "beta_per_class", ())
    if betas and len(betas) != k:
        raise ProfileError(file, "method.beta_per_class", f"needs {k} values (one per class of "
                           f"{p.data.dataset}), got {len(betas)}")
    if p.data.dataset == "gaussian" and p.model.arch != "mlp":
        raise ProfileError(file, "model.arch", "the gaussian data set is a vector: use arch = \"mlp\"")
    ev = dataclasses.replace(p.eval, eps=p.eval.eps or p.attack.eps, step=p.eval.step or p.attack.step)
    _check_eps(ev.eps, p.attack.norm, file, "eval.eps")
    return dataclasses.replace(p, eval=ev, train=resolved_train(p))


def milestone_epochs(train: TrainConfig) -> tuple[int, ...]:
    """The milestones as epochs (:func:`milestone_epoch`): "p%" is ceil(p / 100 * epochs), the first epoch with
    (epoch - 1) / epochs >= p / 100 being the first at the lower lr (exact, in fractions); "-k" is epochs - k - 1."""
    return tuple(milestone_epoch(m, train.epochs) for m in train.milestones)


def milestone_epoch(m: int | str, epochs: int) -> int:
    """One milestone as the epoch after which the rate drops: an epoch as it is, "p%" (ceil(p / 100 * epochs)), or
    "-k" (epochs - k - 1: the rate is lower from epoch epochs - k on)."""
    from engine.contract.profile_schema import parse_from_end, parse_percent

    if not isinstance(m, str):
        return m
    if m.strip().startswith("-"):
        return epochs - parse_from_end(m) - 1
    return math.ceil(parse_percent(m) / 100 * epochs)


def profile_warnings(p: Profile) -> list[str]:
    """What a valid profile will do that its author may not expect (stderr at `fairtui run`, engine.log)."""
    out = []
    for m in dict.fromkeys(p.train.milestones):  # "75%" and "90%" of 2 epochs are both epoch 2: said once
        if m >= p.train.epochs:
            where = "after" if m > p.train.epochs else "at"
            out.append(f"train.milestones: milestone {m} is {where} the last epoch ({p.train.epochs}) and will "
                       "not fire")
    return out


# What an unset `[train]` key means when the method's form does not set it either.
TRAIN_DEFAULTS: dict[str, object] = {"ema_decay": 0.0, "ema_start_epoch": 1, "attack_mode": "eval"}


def resolved_train(p: Profile) -> TrainConfig:
    """``p.train`` with every unset key filled: the profile's value, else the method form's
    (``MethodParams.train_defaults``), else TRAIN_DEFAULTS. The EMA's start follows whoever set its
    decay: `ema_decay = 0.5` alone is an EMA of the profile's own, from epoch 1 as for any method,
    not from the form's start."""
    form = p.method.train_defaults()
    if p.train.ema_decay is not None:
        form.pop("ema_start_epoch", None)
    defaults = {**TRAIN_DEFAULTS, **form}
    return dataclasses.replace(p.train, **{key: value for key, value in defaults.items()
                                           if getattr(p.train, key) is None})


def training_attack_mode(p: Profile) -> str:
    """``train.attack_mode`` resolved: train mode for the CFA authors' code on AT and FAT, else eval."""
    return str(resolved_train(p).attack_mode)


def trades_kl_form(p: Profile) -> str:
    """``attack.kl`` resolved: "textbook" (the authors' codes' KLDivLoss) when the method's form is "code" (WAT's
    ``loss_form``), else "log_space", unless the profile names one."""
    if p.attack.kl != "auto":
        return p.attack.kl
    params = p.method
    resolved = params.resolved() if hasattr(params, "resolved") else params
    code = "code" in (getattr(resolved, "form", None), getattr(resolved, "loss_form", None))
    return "textbook" if code else "log_space"
