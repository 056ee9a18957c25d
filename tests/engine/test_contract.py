"""engine.contract: one evaluation request, checked by one set of rules for the CLI, the app and the engine."""

import pytest

from engine.contract import EvalRequest, RequestError, check_eps, parse_attack, scaled_step


def test_a_request_round_trips_and_fills_nothing_in_itself():
    req = EvalRequest(attacks=("pgd20", "aa"), checkpoint="last", split="val", n_per_class=5, eps=0.1)
    assert EvalRequest.from_json(req.to_json()) == req
    assert EvalRequest.from_json({}) == EvalRequest()  # the profile's own values are the engine's to fill


@pytest.mark.parametrize("doc, field, words", [
    ({"attacks": ["deepfool"]}, "attacks", "unknown attack 'deepfool'; known: clean, fgsm, pgd<N>"),
    ({"checkpoint": "middle"}, "checkpoint", "unknown checkpoint 'middle'"),
    ({"split": "train"}, "split", "must be test or val"),
    ({"n_per_class": -1}, "n_per_class", "at least 0"),
    ({"eps": -0.1}, "eps", "positive"),
    ({"eps": float("nan")}, "eps", "positive"),
    ({"epsilon": 0.1}, "epsilon", "unknown request key 'epsilon'"),
])
def test_a_bad_request_names_its_field(doc, field, words):
    with pytest.raises(RequestError, match=words) as err:
        EvalRequest.from_json(doc)
    assert err.value.field == field


def test_the_eps_bound_depends_on_the_norm_and_the_step_scales_with_eps():
    assert check_eps(1.0, "linf") == 1.0 and check_eps(2.0, "l2") == 2.0 and check_eps(2.0, None) == 2.0
    with pytest.raises(RequestError, match=r"\(0, 1\]"):
        check_eps(1.5, "linf")
    assert scaled_step(0.05, 0.2, 0.1) == pytest.approx(0.025)
    from engine.contract.results import requested_setting

    config = {"attack": {"eps": 0.2, "step": 0.05, "norm": "linf"}, "eval": {}, "seed": 1}
    assert requested_setting(config, "pgd20", eps=0.1)["step"] == scaled_step(0.05, 0.2, 0.1)


def test_the_attack_grammar():
    assert parse_attack("pgd20") == ("pgd", 20) and parse_attack("cw") == ("cw", 20)
    assert parse_attack("aa-fast") == ("aa-fast", 0) and parse_attack("tpgd5") == ("tpgd", 5)
    with pytest.raises(RequestError):
        parse_attack("pgd-20")


def test_the_engine_takes_an_l2_eps_above_1_and_refuses_it_for_linf(tmp_path):
    from engine.contract.config import Profile
    from engine.contract.profile_io import dumps_profile, load_run_profile
    from engine.entry.eval_run import EvalRequestError, check_request

    for norm, ok in (("l2", True), ("linf", False)):
        run = tmp_path / norm
        run.mkdir()
        table = Profile(name=norm).to_table()
        table["attack"]["norm"] = norm
        from engine.contract.config import profile_from_table

        (run / "profile.toml").write_text(dumps_profile(profile_from_table(table, norm)))
        profile = load_run_profile(run)
        if ok:
            assert check_request({"eps": 2.0}, profile).eps == 2.0
        else:
            with pytest.raises(EvalRequestError, match=r"eps: must be in \(0, 1\]"):
                check_request({"eps": 2.0}, profile)


def test_a_lock_probe_creates_nothing_and_is_never_taken_for_a_holder(tmp_path):
    """`is_locked` on a run folder without the file makes no file (a reader must not change the folder it
    reads); a probe holds the lock for an instant, which a starter's patience waits out, while a real holder
    (another open file) still refuses it."""
    import threading

    from engine.contract.locks import is_locked, try_lock

    path = tmp_path / "engine.lock"
    assert not is_locked(path) and not path.exists()
    probe = open(path, "a")
    import fcntl

    fcntl.flock(probe, fcntl.LOCK_EX)  # a probe caught in the act
    assert try_lock(path) is None  # no patience: refused
    threading.Timer(0.1, probe.close).start()  # the probe lets go while the starter waits
    held = try_lock(path, patience=60.0)
    assert held is not None and is_locked(path)
    assert try_lock(path, patience=0.2) is None  # a holder for good is still refused after the patience
    held.close()
    assert not is_locked(path)
