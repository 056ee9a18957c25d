"""What the app's test modules share: the engine on the path, a folder of profiles, waiting on a screen."""

import time

import pytest

from fairtui.launch.gpus import GpuInfo
from tests.conftest import HANG_S, ROOT, TINY

FAKE_GPUS = [GpuInfo(0, "Fake GPU", 1024.0, 81920.0, 3.0)]


@pytest.fixture(autouse=True)
def engine_on_path(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.chdir(ROOT)


@pytest.fixture
def profiles(tmp_path):
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "tiny.toml").write_text(TINY)
    return folder


async def wait_until(pilot, predicate, timeout: float = HANG_S) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return
        await pilot.pause(0.2)
    raise TimeoutError
