"""Every registered model: right output shape, normalisation as the first layer."""

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


def test_wide_resnet_rejects_a_bad_depth():
    with pytest.raises(ValueError, match="6n \\+ 4"):
        build_model(ModelConfig(arch="wide_resnet", depth=30, width=1), (3, 32, 32), 10, (0.5,) * 3, (0.5,) * 3)


def test_cpu_runtime_ignores_cuda_only_options():
    from engine.contract.config import TrainConfig
    from engine.utils import make_runtime

    rt = make_runtime(TrainConfig(device="cpu", amp="bf16", channels_last=True))
    assert rt.device.type == "cpu" and rt.autocast_dtype is None and not rt.channels_last


def test_cuda_request_without_a_gpu_is_a_clear_error(monkeypatch):
    from engine.contract.config import TrainConfig
    from engine.utils import make_runtime

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="no CUDA device is visible"):
        make_runtime(TrainConfig(device="cuda"))


def test_auto_device_picks_cuda_when_the_inventory_has_one(monkeypatch):
    from engine.contract.config import TrainConfig
    from engine.utils import make_runtime

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    rt = make_runtime(TrainConfig(device="auto", amp="bf16", channels_last=True))
    assert rt.device == torch.device("cuda", 0)
    assert rt.autocast_dtype == torch.bfloat16 and rt.channels_last


def test_the_defaults_are_the_fast_path_on_cuda_and_fp32_eager_on_the_cpu(monkeypatch):
    """Issue #36's measurement made bf16 + channels-last + compile the CUDA default; the CPU keeps fp32 eager
    (its numbers must not change), and a DDP run stays eager (compiled DDP has not run on a GPU)."""
    from engine.contract.config import TrainConfig
    from engine.utils import make_runtime

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
