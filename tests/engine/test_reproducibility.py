"""What a run records about its determinism, and the deterministic mode's promise on one machine."""

import hashlib
import json
import subprocess
import sys

import torch

from tests.conftest import HANG_S, ROOT, TINY, engine_env, events_of, train_tiny


def model_digest(run_dir) -> str:
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["model"]
    h = hashlib.sha256()
    for key in sorted(state):
        h.update(key.encode())
        h.update(state[key].cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def test_deterministic_mode_is_recorded_and_two_runs_are_bit_identical(tmp_path):
    # threads = 0 in the profile: the deterministic mode fixes the CPU thread count at 1
    overrides = ("train.deterministic=true", "train.threads=0", 'method.name="trades"')
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = train_tiny(tmp_path / "a", overrides)
    b = train_tiny(tmp_path / "b", overrides)
    det = events_of(a)[0]["provenance"]["determinism"]
    assert det["deterministic_algorithms"] is True and det["cudnn_deterministic"] is True
    assert det["cudnn_benchmark"] is False and det["threads"] == 1
    assert det["env"]["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert model_digest(a) == model_digest(b)
    ends = lambda run: [(e["val"], e["train"]["loss"]) for e in events_of(run) if e["type"] == "epoch_end"]  # noqa
    assert ends(a) == ends(b)


def test_every_run_records_its_thread_count_switches_cpu_and_data(tmp_path):
    run = train_tiny(tmp_path, ("train.threads=2",))
    started = events_of(run)[0]
    det = started["provenance"]["determinism"]
    assert det["threads"] == 2 and det["deterministic_algorithms"] is False
    assert {"interop_threads", "cpu_count", "cpu_capability", "cudnn_deterministic", "env"} <= set(det)
    from engine.runtime.provenance import KERNEL_FLAGS, cpu

    assert started["provenance"]["cpu"] == cpu() and set(cpu()["flags"]) <= set(KERNEL_FLAGS)
    # the data's fingerprint is the splits' own: the same profile's splits, loaded again, hash the same
    from engine.contract.profile_io import load_profile
    from engine.data import load_splits

    profile = load_profile(run / "profile.toml")
    splits = load_splits(profile.data, profile.seed)
    assert started["data_fingerprint"] == splits.fingerprint()


def test_the_data_fingerprint_moves_with_one_pixel_or_one_label():
    import numpy as np

    from engine.data.datasets import Splits
    from engine.data.tensors import TensorData

    def splits(x, y):
        d = TensorData(torch.as_tensor(x), torch.as_tensor(y))
        return Splits(d, d, d, ["a", "b"], (0.0,), (1.0,), "none")

    x, y = np.zeros((4, 1, 2, 2), dtype=np.uint8), np.array([0, 1, 0, 1])
    base = splits(x, y).fingerprint()
    h = hashlib.sha256()
    h.update(b"torch.uint8(4, 1, 2, 2)" + x.tobytes() + b"torch.int64(4,)" + y.tobytes())
    assert base["train"] == h.hexdigest()[:16] == base["test"]
    x2 = x.copy()
    x2[3, 0, 1, 1] = 1
    assert splits(x2, y).fingerprint()["train"] != base["train"]
    assert splits(x, np.array([0, 1, 1, 1])).fingerprint()["train"] != base["train"]


def test_the_cpu_record_reads_model_and_kernel_flags_from_cpuinfo():
    from engine.runtime.provenance import cpu

    info = ("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
            "model name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: fpu sse avx2 fma avx512f avx512_bf16 "
            "amx_bf16 amx_tile avx512_vnni\n\nprocessor\t: 1\nmodel name\t: something else\n")
    record = cpu(info)
    assert record["model"] == "Intel(R) Xeon(R) Platinum 8480+" and record["model_id"] == "143"
    assert record["flags"] == ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16"]


def test_an_environment_variable_that_changes_kernels_is_recorded_and_compare_names_it(tmp_path):
    """#72 item 7: a run with ONEDNN_MAX_CPU_ISA set trained to other numbers and recorded the same run_started as
    one without. run_started now records it (and torch's kernel level, and a hash of the checkout's uncommitted
    changes), and `fairtui compare RUN RUN` lists the provenance keys that differ."""
    from tests.conftest import fairtui_cmd, make_run_dir

    profile = tmp_path / "tiny.toml"
    profile.write_text(TINY)
    home = tmp_path / "home"
    plain = make_run_dir(home, profile, name="plain")
    capped = make_run_dir(home, profile, name="capped")
    for run_dir, extra in ((plain, {}), (capped, {"ONEDNN_MAX_CPU_ISA": "SSE41"})):
        proc = subprocess.run([sys.executable, "-m", "engine", "train", str(run_dir)],
                              env={**engine_env(), **extra}, capture_output=True, text=True, timeout=HANG_S, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr[-2000:]
    det = [events_of(r)[0]["provenance"]["determinism"] for r in (plain, capped)]
    assert "ONEDNN_MAX_CPU_ISA" not in det[0]["env"] and det[1]["env"]["ONEDNN_MAX_CPU_ISA"] == "SSE41"
    assert det[0]["cpu_capability"] and det[0]["cpu_capability"] == det[1]["cpu_capability"]
    shown = fairtui_cmd("compare", "plain", "capped", "--json", home=home)
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert doc["config_diff"]["provenance.env.ONEDNN_MAX_CPU_ISA"] == [None, "SSE41"], doc["config_diff"]
    text = fairtui_cmd("compare", "plain", "capped", home=home, env_extra={"COLUMNS": "200"}).stdout
    assert "provenance.env.ONEDNN_MAX_CPU_ISA" in text and "SSE41" in text
