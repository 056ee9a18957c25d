"""The evaluation attacks, one row each: everything the request, a result's identity, the engine's suite and the
help texts know of an attack is derived from :data:`ATTACKS` (torch-free).

A row gives the attack's name (for a counted attack, the family that takes its step count: ``pgd`` for
``pgd20``), its default step count (None: the name takes no count), the settings that change its numbers
(besides the subset, which every result records), the engine's builder (``module:function``, called as
``builder(model, settings, steps)`` by engine.attacks.suite) and a line of help. Adding an attack is a row
here and its builder (docs/development.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# the settings of the iterative attacks: their step, restarts, the batching of their random start, their seed
_ITERATIVE = ("eps", "norm", "step", "restarts", "batch_size", "seed")


@dataclass(frozen=True)
class Attack:
    name: str
    steps: int | None  # the default step count of a counted attack (pgd -> pgd20); None: no count
    setting: tuple[str, ...]  # what changes its numbers (engine.contract.results.attack_setting)
    builder: str  # "module:function" of the engine (engine.attacks.*)
    help: str

    def pattern(self) -> str:
        return re.escape(self.name) + (r"(\d+)?" if self.steps is not None else "")


ATTACKS: list[Attack] = [
    Attack("clean", None, (), "engine.attacks.suite:build_clean", "clean"),
    Attack("fgsm", None, ("eps", "norm"), "engine.attacks.suite:build_fgsm", "fgsm"),
    Attack("pgd", 20, _ITERATIVE, "engine.attacks.suite:build_pgd", "pgd<N> (pgd20, pgd100)"),
    Attack("cw", 20, _ITERATIVE + ("cw_kappa",), "engine.attacks.suite:build_cw", "cw<N>"),
    Attack("tpgd", 20, _ITERATIVE + ("tpgd_inv_temperature",), "engine.attacks.suite:build_tpgd", "tpgd<N>"),
    Attack("aa", None, ("eps", "norm", "batch_size", "seed"), "engine.attacks.suite:build_aa", "aa"),
    Attack("aa-fast", None, ("eps", "norm", "batch_size", "seed"), "engine.attacks.suite:build_aa_fast", "aa-fast"),
]


def _by_length() -> list[Attack]:
    return sorted(ATTACKS, key=lambda a: -len(a.name))  # "aa-fast" is tried before "aa"


def grammar() -> re.Pattern:
    """The names the table admits: ``^(clean|fgsm|pgd(\\d+)?|...)$``."""
    return re.compile("^(" + "|".join(a.pattern() for a in _by_length()) + ")$")


def known() -> str:
    """The attacks, for messages and help texts."""
    return ", ".join(a.help for a in ATTACKS)


def find(name: str) -> tuple[Attack, int] | None:
    """The row of attack ``name`` and its step count ('pgd20' -> (pgd, 20); 'cw' -> (cw, 20); 'aa' -> (aa, 0));
    None for a name the table does not admit."""
    if not isinstance(name, str):
        return None
    for attack in _by_length():
        match = re.fullmatch(attack.pattern(), name)
        if match:
            if attack.steps is None:
                return attack, 0
            return attack, int(match.group(1) or attack.steps)
    return None


def family(name: str) -> str:
    """The row's name of a result's attack (also for a name written by an older fairtui: its longest known
    prefix, else the name itself)."""
    found = find(name)
    if found:
        return found[0].name
    return next((a.name for a in _by_length() if isinstance(name, str) and name.startswith(a.name)), name)


def row(name: str) -> Attack | None:
    return next((a for a in ATTACKS if a.name == family(name)), None)
