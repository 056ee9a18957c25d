"""`fairtui import` and the models it loads never run what a file brings, nor outlive a stop: a crafted pickle
and a state dict larger than any model are refused before they are read, a TorchScript file runs only under
the trust recorded at its import (and not once replaced), and a model that never returns, or a signal that
lands during the import's check, leaves no run and no process behind."""

import os
import warnings

import pytest
import torch
from torch import nn

from tests.conftest import HANG_S, fairtui_cmd
from tests.fairtui.test_import import run_json, runs_in, trained_small_cnn


def test_a_state_dict_larger_than_any_model_is_refused_before_it_is_read(tmp_path, monkeypatch):
    big = tmp_path / "big.pt"
    with open(big, "wb") as fh:  # sparse: 2.5 GB on paper, nothing on disk
        fh.truncate(int(2.5 * 2**30))
    proc = fairtui_cmd("import", "--state-dict", str(big), "--arch", "small_cnn", "--dataset", "digits",
                       "--no-normalize", home=tmp_path / "home")
    assert proc.returncode == 2 and "2.5 GiB" in proc.stderr and "refused before reading it" in proc.stderr
    assert runs_in(tmp_path / "home") == []
    # ... by the command, before it hashes the file (it hashed all 2.5 GB first, then the engine refused it)
    import hashlib

    import typer

    from fairtui.cli.import_ import _source_file

    monkeypatch.setattr(hashlib, "sha256", lambda: pytest.fail("the file was hashed before its size was checked"))
    with pytest.raises(typer.Exit):
        _source_file("state_dict", str(big), "models", "digits", "Linf")
    from engine.entry.imported import ImportFailed, read_state_dict  # and the engine's own check says the same

    with pytest.raises(ImportFailed, match="refused before reading it"):
        read_state_dict(big)


def test_a_crafted_pickle_as_init_from_is_refused_before_any_folder_exists(tmp_path, tiny_profile):
    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'PWNED'}",))

    torch.save({"model": Evil()}, tmp_path / "evil.pt")
    home = tmp_path / "home"
    proc = fairtui_cmd("run", str(tiny_profile()), "--set", 'method.name="frl"', "--set",
                       f'method.init_from="{tmp_path / "evil.pt"}"', home=home)
    assert proc.returncode == 2, proc.stderr
    assert "method.init_from" in proc.stderr and "refused" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "PWNED").exists() and runs_in(home) == []


def test_a_torchscript_run_without_recorded_trust_is_never_loaded(tmp_path):
    """A run whose profile does not say `trusted = true` (made before --trust-code existed, or edited):
    the engine refuses to load its TorchScript model, so its code never runs."""
    net = trained_small_cnn()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.script(net), str(tmp_path / "net.ts"))
    home = tmp_path / "home"
    made = run_json("import", "--torchscript", str(tmp_path / "net.ts"), "--trust-code", "--dataset", "digits",
                    "--eps", "0.2", home=home)
    profile = home / "runs" / made["run_id"] / "profile.toml"
    profile.write_text(profile.read_text().replace("trusted = true", "trusted = false"))
    proc = fairtui_cmd("eval", made["run_id"], "--attack", "clean", home=home)
    assert proc.returncode == 2 and "was not imported with --trust-code" in proc.stderr


def test_a_trusted_torchscript_file_replaced_after_import_is_never_loaded(tmp_path):
    """Trust is bound to the file imported (its SHA-256), not to the run: a model.ts swapped afterwards is
    refused before torch.jit.load runs it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.script(trained_small_cnn()), str(tmp_path / "net.ts"))
        torch.jit.save(torch.jit.script(_NeverReturns()), str(tmp_path / "other.ts"))
    home = tmp_path / "home"
    made = run_json("import", "--torchscript", str(tmp_path / "net.ts"), "--trust-code", "--dataset", "digits",
                    "--eps", "0.2", home=home)
    assert fairtui_cmd("eval", made["run_id"], "--attack", "clean", home=home).returncode == 0
    (home / "runs" / made["run_id"] / "imported" / "model.ts").write_bytes((tmp_path / "other.ts").read_bytes())
    proc = fairtui_cmd("eval", made["run_id"], "--attack", "pgd5", home=home, timeout=120)
    assert proc.returncode == 2 and "is not the file trusted at import" in proc.stderr, proc.stderr


class _NeverReturns(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        while bool(y.sum() > -1e30):  # a TorchScript program may loop for ever
            y = y * 1.0
        return y.flatten(1)[:, :10]


def _engine_processes_of(folder) -> list[int]:
    """Live processes whose command line names ``folder`` (the import's check, `python -m engine import`)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if str(folder).encode() in fh.read():
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


def _save_looping_model(path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.script(_NeverReturns()), str(path))


def test_a_model_that_never_returns_is_given_up_at_the_time_limit_and_leaves_nothing(tmp_path):
    _save_looping_model(tmp_path / "loop.ts")
    home = tmp_path / "home"
    proc = fairtui_cmd("import", "--torchscript", str(tmp_path / "loop.ts"), "--trust-code", "--dataset", "digits",
                       "--check-timeout", "4", home=home)
    assert proc.returncode == 1 and "did not finish in 4 s" in proc.stderr and "--check-timeout" in proc.stderr
    assert runs_in(home) == [] and _engine_processes_of(home) == []


def test_sigterm_during_the_import_check_kills_the_check_and_removes_the_run(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import engine_env

    _save_looping_model(tmp_path / "loop.ts")
    home = tmp_path / "home"
    proc = subprocess.Popen([sys.executable, "-c", "from fairtui.cli import main; main()", "import", "--torchscript",
                             str(tmp_path / "loop.ts"), "--trust-code", "--dataset", "digits", "--home", str(home)],
                            env=engine_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    end = time.time() + HANG_S
    while time.time() < end and not _engine_processes_of(home / "runs"):  # the check has started
        time.sleep(0.05)
    assert _engine_processes_of(home / "runs"), "the check never started"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 143 and "interrupted; nothing was imported" in err
    assert runs_in(home) == [] and _engine_processes_of(home) == []


@pytest.mark.parametrize("signame, code", [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_signal_that_lands_while_the_check_is_being_started_still_kills_it(tmp_path, monkeypatch, capsys,
                                                                              signame, code):
    """The race the test above can hit on a busy machine: the check has started (its command line is in
    /proc) but Popen has not yet returned its pid to `fairtui import`. The signal lands there on purpose
    here; the check must still be killed and the run removed, not left running in its own session."""
    import signal
    import sys

    from fairtui.launch import launcher
    from fairtui.cli import main

    real_start, started = launcher.start_engine, []

    def start_then_signal(*args, **kwargs):
        proc = real_start(*args, **kwargs)
        started.append(proc)
        os.kill(os.getpid(), getattr(signal, signame))  # its handler runs here, before the pid is returned
        return proc

    monkeypatch.setattr(launcher, "start_engine", start_then_signal)
    _save_looping_model(tmp_path / "loop.ts")
    home = tmp_path / "home"
    monkeypatch.setattr(sys, "argv", ["fairtui", "import", "--torchscript", str(tmp_path / "loop.ts"),
                                      "--trust-code", "--dataset", "digits", "--home", str(home)])
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with pytest.raises(SystemExit) as leaving:
        main()
    assert leaving.value.code == code and "interrupted; nothing was imported" in capsys.readouterr().err
    assert len(started) == 1 and started[0].returncode == -signal.SIGKILL  # killed and reaped, not orphaned
    assert runs_in(home) == [] and _engine_processes_of(home) == []
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == handlers
