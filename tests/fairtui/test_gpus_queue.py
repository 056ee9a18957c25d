"""GPU inventory at its boundary (NVML and nvidia-smi faked) and the per-GPU run queue."""

import sys
import types

from fairtui import gpus
from fairtui.launcher import GpuChoice
from fairtui.queue import LocalQueue, devices_of
from fairtui.synthetic import make_run

SMI = """0, NVIDIA A100-SXM4-80GB, 1024, 81920, 37
1, NVIDIA A100-SXM4-80GB, 0, 81920, [N/A]
garbage line
"""


def test_parse_nvidia_smi():
    found = gpus.parse_nvidia_smi(SMI)
    assert [g.index for g in found] == [0, 1]
    assert found[0].memory_used_mib == 1024 and found[0].utilization_pct == 37
    assert found[1].utilization_pct == 0.0
    assert "GPU 0: NVIDIA A100-SXM4-80GB  1024/81920 MiB  37%" == found[0].label()


def test_nvml_first_then_smi_then_cpu_only(monkeypatch):
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetName=lambda h: b"Fake H100",
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=2 * 2**30, total=80 * 2**30),
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=55))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    (g,) = gpus.inventory()
    assert (g.name, g.memory_used_mib, g.memory_total_mib, g.utilization_pct) == ("Fake H100", 2048, 81920, 55)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails: fall back to nvidia-smi
    monkeypatch.setattr(gpus, "from_nvidia_smi", lambda: gpus.parse_nvidia_smi(SMI))
    assert len(gpus.inventory()) == 2
    monkeypatch.setattr(gpus, "from_nvidia_smi", lambda: (_ for _ in ()).throw(FileNotFoundError("nvidia-smi")))
    assert gpus.inventory() == []


def test_queue_respects_per_gpu_limit_and_order(tmp_path, monkeypatch):
    queue = LocalQueue(tmp_path, per_gpu=1)
    started: list[str] = []

    def fake_start(run_dir, choice):
        started.append(run_dir.name)

    running = {"0": 0, "1": 0}
    monkeypatch.setattr(queue, "busy", lambda: dict(running))
    runs = [make_run(tmp_path, f"r{i}", status="running") for i in range(4)]
    queue.submit(runs[0], GpuChoice(devices=(0,)))
    queue.submit(runs[1], GpuChoice(devices=(0,)))
    queue.submit(runs[2], GpuChoice(devices=(1,)))
    queue.submit(runs[3], GpuChoice(devices=(0, 1)))
    assert queue.tick(start=fake_start) == ["r0", "r2"]  # r1 waits for GPU 0, r3 for both
    running.update({"0": 1, "1": 1})
    assert queue.tick(start=fake_start) == []
    running.update({"0": 0, "1": 1})
    assert queue.tick(start=fake_start) == ["r1"]  # in order: r1 before r3
    running.update({"0": 0, "1": 0})
    assert queue.tick(start=fake_start) == ["r3"]
    assert queue.entries() == [] and not (runs[3] / "queued").exists()


def test_the_queue_survives_the_process(tmp_path):
    run = make_run(tmp_path, "r0", status="running")
    LocalQueue(tmp_path).submit(run, GpuChoice(cpu=True))
    assert [e["run_id"] for e in LocalQueue(tmp_path).entries()] == ["r0"]
    assert devices_of("cpu") == ["cpu"] and devices_of("0,3") == ["0", "3"] and devices_of(None) == ["cpu"]
