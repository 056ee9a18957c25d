"""What fairtui lets through to sbatch: option names and values checked before a job exists (a value never adds a
line to the batch script), and the options fairtui writes itself, refused from --sbatch."""

from __future__ import annotations

import re

from engine.contract.profile_schema import ProfileError

# What sbatch accepts, where a value names something of the cluster's (submitit shell-quotes every value it
# writes as `#SBATCH --key=value`; a key goes in unquoted, and a newline anywhere ends the line).
NAME = r"[A-Za-z0-9_][A-Za-z0-9_.\-]*"
SBATCH_PATTERNS = {
    "partition": re.compile(rf"^{NAME}(,{NAME})*$"),  # one partition, or several separated by commas
    "account": re.compile(rf"^{NAME}$"),
    "qos": re.compile(rf"^{NAME}(,{NAME})*$"),
    "reservation": re.compile(rf"^{NAME}(,{NAME})*$"),
    # minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
    "time": re.compile(r"^(\d+|\d+:\d{1,2}(:\d{1,2})?|\d+-\d{1,2}(:\d{1,2}(:\d{1,2})?)?)$"),
}
SBATCH_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_\-]*$")
# sbatch options fairtui writes itself: the job's log, array, name and requeue signal (submitit's), and those it has
# an option of its own for; an --sbatch of one of them is refused, naming where it is set instead
OWNED_SBATCH = {"output": None, "o": None, "error": None, "e": None, "array": None, "a": None, "job-name": None,
                "J": None, "signal": None, "open-mode": None, "wrap": None, "time": "--time", "t": "--time",
                "nodes": "--nodes", "N": "--nodes", "cpus-per-task": "--cpus", "c": "--cpus",
                "gpus-per-node": "--gpus-per-node", "mem": "--mem-gb", "partition": "--partition", "p": "--partition"}
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_sbatch_value(where: str, key: str, value: object) -> str:
    """``value`` as the text sbatch gets for ``--key``, or a ProfileError naming ``where``: never a control
    character (a newline would add a line, and so a command, to the batch script), and for the settings
    that name the cluster's partitions, accounts, QOS and reservations or give a time, sbatch's form."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ProfileError(where, key, f"expected a string or a number, got {type(value).__name__}")
    text = str(value)
    if CONTROL.search(text):
        raise ProfileError(where, key, f"{text!r} contains a control character (a newline would add a command "
                           "to the batch script)")
    pattern = SBATCH_PATTERNS.get(key.replace("-", "_").removeprefix("slurm_"))
    if pattern is not None and not pattern.match(text):
        raise ProfileError(where, key, f"{text!r} is not a Slurm {key} (letters, digits, '_', '.', '-'"
                           + (", several separated by commas" if "," in pattern.pattern else "") + ")")
    return text
