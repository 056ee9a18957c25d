"""What the engine and the app agree on, torch-free: the evaluation request (its attack grammar, the eps
rule, the step scaling). The CLI, the app's dialog and the engine build and check a request here only.

(The profile schema, the event stream and result identity still live in engine.profile_schema,
engine.events and engine.results; moving them here is part of issue #25 that is not done.)
"""

from engine.contract.request import (ATTACK_NAME, CHECKPOINTS, KNOWN_ATTACKS, SPLITS, EvalRequest, RequestError,
                                     check_attack, check_eps, parse_attack, scaled_step)

__all__ = ["ATTACK_NAME", "CHECKPOINTS", "KNOWN_ATTACKS", "SPLITS", "EvalRequest", "RequestError", "check_attack",
           "check_eps", "parse_attack", "scaled_step"]
