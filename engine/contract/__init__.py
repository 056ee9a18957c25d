"""What the engine and the app agree on, torch-free (import-linter keeps it so):

- ``request``: the evaluation request (its attack grammar, the eps rule, the step scaling, the seed); the
  CLI, the app's dialog and the engine build and check a request here only;
- ``profile_schema``: the typed profile schema the profiles and every method's parameters are built with;
- ``events``: the event stream (reading, the single writer's append, schema version);
- ``results``: a result's identity (its setting) and which results are the run's headline numbers.
"""

from engine.contract.request import (ATTACK_NAME, CHECKPOINTS, KNOWN_ATTACKS, SPLITS, EvalRequest, RequestError,
                                     check_attack, check_eps, parse_attack, scaled_step)

__all__ = ["ATTACK_NAME", "CHECKPOINTS", "KNOWN_ATTACKS", "SPLITS", "EvalRequest", "RequestError", "check_attack",
           "check_eps", "parse_attack", "scaled_step"]
