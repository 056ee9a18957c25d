"""train.compile: the compiled model keeps the engine's semantics and never recompiles for a short batch."""

import pytest
import torch
import torch.nn.functional as F

from engine.attacks.pgd import PGD
from engine.runtime.compiled import ShapeStableModel, compile_model
from engine.contract.config import TrainConfig
from engine.models import SmallCNN
from engine.runtime.device import make_runtime

from tests.conftest import events_of, make_run_dir, run_engine


class CountingBackend:
    """A torch.compile backend that records every graph it is asked to compile and every call."""

    def __init__(self):
        self.graphs = 0
        self.batch_sizes: list[int] = []

    def __call__(self, gm, example_inputs):
        self.graphs += 1

        def run(*args):
            # the input images are the [B, 1, 8, 8] argument (the others are lifted parameters)
            self.batch_sizes += [a.shape[0] for a in args if isinstance(a, torch.Tensor) and a.shape[1:] == (1, 8, 8)]
            return gm.forward(*args)

        return run


def pgd_at_epoch(model, batches):
    attack = PGD(model, eps=0.2, step=0.05, steps=2)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in batches:
        model.train()
        eps = torch.where(y % 2 == 0, 0.1, 0.2)  # per-sample margins, as CFA and FRL give them
        x_adv = attack.perturb(x, y, eps=eps)
        opt.zero_grad()
        F.cross_entropy(model(x_adv), y).backward()
        opt.step()


def test_short_last_batch_runs_eager_and_the_graphs_stay_fixed():
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager = torch.nn.Sequential(SmallCNN(1, 10))
    backend = CountingBackend()
    model = compile_model(eager, sizes=(8,), mode="default", backend=backend)
    g = torch.Generator().manual_seed(0)
    batches = [(torch.rand(n, 1, 8, 8, generator=g), torch.randint(0, 10, (n,), generator=g)) for n in (8, 8, 3)]
    pgd_at_epoch(model, batches)
    graphs = backend.graphs
    assert graphs >= 1
    pgd_at_epoch(model, batches)
    pgd_at_epoch(model, batches)
    assert backend.graphs == graphs  # no recompilation after the first epoch
    assert set(backend.batch_sizes) == {8}  # the short batch of 3 never reached the compiled graph
    # eval and train mode both went through the compiled module
    assert len(backend.batch_sizes) > 0
    assert "compiled" not in dict(model.named_modules())  # the wrapper does not own the compiled copy
    assert not any(k.startswith("_orig_mod") for k in eager.state_dict())


def test_wrapper_follows_train_and_eval_mode():
    eager = torch.nn.Sequential(SmallCNN(1, 10))
    model = ShapeStableModel(eager, torch.compile(eager, backend="eager"), sizes=(4,), clone_outputs=True)
    model.eval()
    assert not eager.training
    model.train()
    assert eager.training
    out = model(torch.rand(4, 1, 8, 8))
    assert out.requires_grad  # a copy of the output still carries its gradient


def test_compile_is_decided_once_by_the_runtime():
    assert make_runtime(TrainConfig(device="cpu")).compile_mode is None
    assert make_runtime(TrainConfig(device="cpu", compile="auto")).compile_mode is None  # auto: CUDA only
    rt = make_runtime(TrainConfig(device="cpu", compile="on"))
    assert rt.compile_mode == "default" and not rt.cuda_graphs  # no CUDA graphs on the CPU
    assert "compiled" in rt.describe()


@pytest.mark.timeout(600)
def test_compiled_run_trains_like_the_eager_one(tmp_path, tiny_profile):
    # CFA on AT: per-sample margins from epoch 2, FAWA, eval-mode attacks, train-mode updates.
    cfa = ('method.name="cfa"', 'method.base="at"', "method.calibration_start_epoch=2",
           "method.fawa_start_epoch=1", "method.fawa_threshold=0.0")
    runs = {}
    for mode in ("off", "on"):
        run_dir = make_run_dir(tmp_path, tiny_profile(), name=mode, overrides=(*cfa, f'train.compile="{mode}"'))
        proc = run_engine(run_dir)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[mode] = events_of(run_dir)
        ckpt = torch.load(run_dir / "checkpoints" / "last.pt", map_location="cpu", weights_only=True)
        assert not any(k.startswith("_orig_mod") for k in ckpt["model"])
    ends = {mode: [e for e in ev if e["type"] == "epoch_end"] for mode, ev in runs.items()}
    assert "compiled" in next(e for e in runs["on"] if e["type"] == "run_started")["device"]
    for off, on in zip(ends["off"], ends["on"]):
        assert on["train"]["loss"] == pytest.approx(off["train"]["loss"], rel=1e-3)
        assert on["method_state"]["eps_per_class"] == pytest.approx(off["method_state"]["eps_per_class"], abs=0.02)
        assert on["val"]["clean_acc_per_class"] == pytest.approx(off["val"]["clean_acc_per_class"], abs=0.21)


def test_cuda_graph_modes_turn_off_the_graph_trees_gc_assertion(monkeypatch):
    """reduce-overhead turns off CUDA graph trees' slow-path check (gc.collect, then an assertion that an output
    listed live still is), which stopped the first short-table PGD-AT run on an H100 in epoch 5; compiling
    without CUDA graphs leaves torch's setting alone. torch.compile is lazy: nothing compiles here."""
    import torch._inductor.config as inductor_config

    monkeypatch.setattr(inductor_config.triton, "slow_path_cudagraph_asserts", True)
    compile_model(torch.nn.Sequential(SmallCNN(1, 10)), sizes=(8,), mode="default")
    assert inductor_config.triton.slow_path_cudagraph_asserts
    model = compile_model(torch.nn.Sequential(SmallCNN(1, 10)), sizes=(8,), mode="reduce-overhead")
    assert not inductor_config.triton.slow_path_cudagraph_asserts
    assert model.clone_outputs  # CUDA graphs overwrite their outputs: the wrapper still copies them
