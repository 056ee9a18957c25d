"""Every registered model: right output shape, normalisation as the first layer."""

import os

import pytest
import torch

from engine.contract.config import ModelConfig
from engine.models import MODELS, Normalize, build_model


@pytest.mark.parametrize("arch", sorted(MODELS))
def test_forward_shape_and_normalisation_first(arch):
    shape = (16,) if arch == "mlp" else (3, 32, 32)
    stats = ((0.5,), (0.25,)) if arch == "mlp" else ((0.5,) * 3, (0.25,) * 3)
    model = build_model(ModelConfig(arch=arch, depth=10, width=1), shape, 7, *stats)
    assert isinstance(model[0], Normalize)
    assert model(torch.rand(2, *shape)).shape == (2, 7)


def test_normalize_layer_by_hand():
    layer = Normalize((0.5, 0.0), (0.25, 2.0))
    x = torch.tensor([[[[1.0]], [[4.0]]]])  # [1, 2, 1, 1]
    assert layer(x).flatten().tolist() == [2.0, 2.0]


def test_small_cnn_takes_any_image_size():
    for shape in ((1, 8, 8), (1, 28, 28), (3, 96, 96)):
        model = build_model(ModelConfig(arch="small_cnn"), shape, 10, (0.5,) * shape[0], (0.5,) * shape[0])
        assert model(torch.rand(2, *shape)).shape == (2, 10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_small_cnns_pool_is_adaptive_max_pooling_to_the_index_ties_included(dtype):
    """The small CNN pools from a channels-last copy on the CPU (a sixth of the time): its values, the pixels its
    gradient goes to and the gradient itself are nn.AdaptiveMaxPool2d's exactly, on ReLU outputs with many ties
    (a tie routed to another pixel would change every later step), for windows that divide the image and windows
    that overlap. The pool has no weights, so checkpoints keep their keys."""
    from engine.models.small import AdaptiveMaxPool2dCL, SmallCNN

    ours, reference = AdaptiveMaxPool2dCL(4), torch.nn.AdaptiveMaxPool2d(4)
    g = torch.Generator().manual_seed(0)
    for shape in ((28, 28), (7, 9), (8, 8)):
        for _ in range(20):
            x = torch.relu(torch.randint(-3, 4, (4, 16, *shape), generator=g).to(dtype) * 0.5)
            a, b = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
            out, expected = ours(a), reference(b)
            w = torch.randn(out.shape, generator=g).to(dtype)
            (out * w).sum().backward()
            (expected * w).sum().backward()
            assert torch.equal(out, expected) and torch.equal(a.grad, b.grad)
    windows = x.reshape(4, 16, 4, 2, 4, 2).transpose(3, 4).flatten(-2)  # the last input's 2x2 windows
    top = windows.max(-1, keepdim=True).values
    assert ((windows == top).sum(-1)[top.squeeze(-1) > 0] > 1).any()  # ties of a positive maximum were there
    assert list(SmallCNN(1, 10).state_dict()) == [f"{part}.{i}.{kind}" for part, i in (
        ("features", 0), ("features", 2), ("classifier", 1), ("classifier", 3)) for kind in ("weight", "bias")]


def test_wide_resnet_rejects_a_bad_depth():
    with pytest.raises(ValueError, match="6n \\+ 4"):
        build_model(ModelConfig(arch="wide_resnet", depth=30, width=1), (3, 32, 32), 10, (0.5,) * 3, (0.5,) * 3)


def test_the_cpu_trains_in_bf16_when_asked_or_by_auto_where_it_has_bf16_units(monkeypatch):
    """#57: bf16 autocast with channels-last is the CPU's fast path, said in the run's device line. "bf16" asks for
    it anywhere; "auto" takes it only on a CPU with bf16 units (AVX512-BF16 or AMX, the flags faked both ways),
    since the accuracy check found it within the seed spread there (experiments/results/cifar10-cpu-precision/README.md);
    "none" is fp32 everywhere."""
    from engine.runtime import device as utils
    from engine.contract.config import TrainConfig
    from engine.runtime.device import cpu_precision, make_runtime

    fast = make_runtime(TrainConfig(device="cpu", amp="bf16", channels_last=True))
    assert fast.autocast_dtype == torch.bfloat16 and fast.channels_last
    from engine.runtime.device import cpu_text

    assert fast.describe() == f"{cpu_text()}; autocast bfloat16, channels-last"
    threads, cores = torch.get_num_threads(), os.cpu_count()
    assert cpu_text() == f"cpu ({threads} thread{'s' * (threads > 1)} of {cores} core{'s' * (cores > 1)})"
    assert fast.options() == "autocast bfloat16, channels-last"  # the run_started's `runtime`
    assert fast.for_evaluation().autocast_dtype is None  # the test split stays fp32
    flat = make_runtime(TrainConfig(device="cpu", amp="bf16", channels_last=False))
    assert flat.autocast_dtype == torch.bfloat16 and not flat.channels_last
    avx2, sapphire = ["avx2", "fma"], ["avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"]
    assert cpu_precision("auto", avx2) is None  # no bf16 units: emulated bf16 is slower, fp32
    assert cpu_precision("auto", sapphire) == torch.bfloat16
    assert cpu_precision("auto", ["avx512_bf16"]) == torch.bfloat16  # AMD's Zen 4 and 5: AVX512-BF16, no AMX
    assert cpu_precision("auto", ["amx_bf16"]) == torch.bfloat16
    assert cpu_precision("none", sapphire) is None and cpu_precision("bf16", avx2) == torch.bfloat16
    for units, dtype in ((False, None), (True, torch.bfloat16)):  # make_runtime reads this machine's flags
        monkeypatch.setattr(utils, "cpu_has_bf16", lambda flags=None, units=units: units)
        auto = make_runtime(TrainConfig(device="cpu", amp="auto", channels_last=True))
        assert auto.autocast_dtype == dtype and auto.channels_last == units
        assert auto.describe() == (f"{cpu_text()}; autocast bfloat16, channels-last" if units else cpu_text())
        none = make_runtime(TrainConfig(device="cpu", amp="none", channels_last=True))
        assert none.autocast_dtype is None and not none.channels_last and none.options() == "fp32"
    monkeypatch.setattr(utils, "CPU_AUTO_BF16", False)  # the switch that turns the CPU's "auto" back to fp32
    assert make_runtime(TrainConfig(device="cpu", amp="auto")).autocast_dtype is None


def test_cuda_request_without_a_gpu_is_a_clear_error(monkeypatch):
    from engine.contract.config import TrainConfig
    from engine.runtime.device import make_runtime

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="no CUDA device is visible"):
        make_runtime(TrainConfig(device="cuda"))


def test_auto_device_picks_cuda_when_the_inventory_has_one(monkeypatch):
    from engine.contract.config import TrainConfig
    from engine.runtime.device import make_runtime

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    rt = make_runtime(TrainConfig(device="auto", amp="bf16", channels_last=True))
    assert rt.device == torch.device("cuda", 0)
    assert rt.autocast_dtype == torch.bfloat16 and rt.channels_last


def test_the_defaults_are_the_fast_path_on_cuda_and_eager_on_the_cpu(monkeypatch):
    """Issue #36's measurement made bf16 + channels-last + compile the CUDA default; the CPU stays eager (bf16
    only where it has the units, #57; fp32 here, the units faked away), and a DDP run stays eager (compiled DDP
    has not run on a GPU)."""
    from engine.runtime import device as utils
    from engine.contract.config import TrainConfig
    from engine.runtime.device import make_runtime

    monkeypatch.setattr(utils, "cpu_has_bf16", lambda flags=None: False)
    cpu = make_runtime(TrainConfig(device="cpu"))
    assert cpu.autocast_dtype is None and not cpu.channels_last and cpu.compile_mode is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: None)
    one = make_runtime(TrainConfig())
    assert one.device.type == "cuda" and one.autocast_dtype == torch.bfloat16 and one.channels_last
    assert one.compile_mode == "reduce-overhead"
    ddp = make_runtime(TrainConfig(), local_rank=0, world=2)
    assert ddp.autocast_dtype == torch.bfloat16 and ddp.compile_mode is None
    plain = make_runtime(TrainConfig(amp="none", compile="off", channels_last=False))
    assert plain.autocast_dtype is None and plain.compile_mode is None and not plain.channels_last
    # a test-split evaluation is fp32 and eager whatever the run trained with
    ev = one.for_evaluation()
    assert ev.autocast_dtype is None and ev.compile_mode is None and ev.device == one.device


@pytest.mark.parametrize("arch", ["preact_resnet18", "resnet18"])
def test_resnet_base_width_sets_the_stages_channels(arch):
    """model.base_width = w gives stages of w, 2w, 4w, 8w channels; 64 is the papers' 11.2 M model."""
    def build(w):
        return build_model(ModelConfig(arch=arch, base_width=w), (3, 32, 32), 10, (0.5,) * 3, (0.5,) * 3)

    narrow, full = build(8), build(64)
    assert narrow(torch.rand(2, 3, 32, 32)).shape == (2, 10)
    convs = [m.out_channels for m in narrow.modules() if isinstance(m, torch.nn.Conv2d)]
    assert sorted(set(convs)) == [8, 16, 32, 64]
    params = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert 0.17e6 < params(narrow) < 0.19e6
    assert 11.1e6 < params(full) < 11.2e6 and params(full) == params(build_model(
        ModelConfig(arch=arch), (3, 32, 32), 10, (0.5,) * 3, (0.5,) * 3))  # the default is the papers' width


def test_the_profiles_of_committed_cpu_results_pin_fp32_now_that_auto_picks_bf16_where_it_can():
    """The CPU-scale CIFAR-10 rows and the digits tables (and their tuning studies) trained in fp32 with "auto"
    (amp unset). Since "auto" picks bf16 on CPUs that have the units (engine.runtime.device.CPU_AUTO_BF16, #57), every
    profile behind committed CPU results pins train.amp = "none", so that a new seed of a row matches its old
    ones in arithmetic on any CPU."""
    import tomllib
    from pathlib import Path

    from engine.runtime import device as utils

    root = Path(__file__).resolve().parents[2] / "profiles"
    profiles = sorted(root.glob("cifar10-cpu-*.toml")) + sorted(root.glob("digits-*.toml"))
    assert len(profiles) >= 25
    unpinned = [p.name for p in profiles if tomllib.loads(p.read_text()).get("train", {}).get("amp") != "none"]
    assert not utils.CPU_AUTO_BF16 or not unpinned, f"pin train.amp = \"none\" in {unpinned}"
