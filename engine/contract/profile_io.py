"""Profile files: reading a profile (TOML, at most 1 MB), `--set KEY=VALUE` overrides, a run folder's
resolved profile (refused when missing or cut short), and writing one. Torch-free. What a profile may hold,
and its checks, are engine.contract.config's; every error is a :class:`ProfileError`."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from engine.contract.config import Profile, profile_from_table
from engine.contract.profile_schema import ProfileError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MAX_PROFILE_BYTES = 1_000_000


def parse_override(text: str) -> tuple[str, Any]:
    """Split ``KEY=VALUE``; VALUE is read as a TOML value, else taken as a plain string."""
    if "=" not in text:
        raise ProfileError("--set", text, "expected KEY=VALUE, e.g. train.epochs=3")
    key, value = text.split("=", 1)
    key = key.strip()
    if not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*", key):
        raise ProfileError("--set", key, "expected a dotted key such as method.lambda1")
    try:
        parsed = tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value
    return key, parsed


def split_overrides(text: str) -> list[str]:
    """Split a line of ``KEY=VALUE`` overrides, as typed in the app, at the spaces between them.

    Unlike a shell's split, the quotes stay: ``eval.attacks=["clean"] name="a b"`` gives
    ``['eval.attacks=["clean"]', 'name="a b"']``, each VALUE as TOML reads it. Spaces inside quotes or brackets
    do not split; an override wholly wrapped in quotes as a shell would need (``'eval.attacks=["clean"]'``) is
    unwrapped. An unclosed quote or bracket raises ValueError."""
    out: list[str] = []
    token: list[str] = []
    quote = ""
    depth = 0
    for ch in text:
        if quote:
            token.append(ch)
            if ch == quote:
                quote = ""
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch.isspace() and depth <= 0:
            if token:
                out.append("".join(token))
                token = []
            continue
        token.append(ch)
    if quote:
        raise ValueError(f"no closing quotation ({quote})")
    if depth > 0:
        raise ValueError("no closing bracket")
    if token:
        out.append("".join(token))
    return [_unwrap(t) for t in out]


def _unwrap(token: str) -> str:
    if len(token) >= 2 and token[0] == token[-1] and token[0] in "\"'" and "=" in token:
        inner = token[1:-1]
        if token[0] not in inner:  # 'a="x"' is unwrapped; "a"="b" is not one wrapped override
            return inner
    return token


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """Return a copy of ``raw`` with every ``KEY=VALUE`` set at its dotted path."""
    import copy

    out = copy.deepcopy(raw)
    for text in overrides:
        key, value = parse_override(text)
        parts = key.split(".")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ProfileError("--set", key, f"{part!r} is not a table")
        node[parts[-1]] = value
    return out


def _profile_hint(path: Path) -> str:
    """"; did you mean profiles/digits-at.toml?" for a profile named without its folder or suffix."""
    name = path.name if path.suffix == ".toml" else f"{path.name}.toml"
    names = dict.fromkeys((name, name.replace("_", "-")))  # profiles/cifar10_cpu_trades.toml: its hyphens
    for candidate in (c for n in names for c in (Path("profiles") / n, path.with_name(n))):
        if candidate != path and candidate.is_file():
            return f"; did you mean {candidate}?"
    import difflib  # a misspelt name (pgd-at for at): the closest profile of the folder, or of profiles/

    for folder in dict.fromkeys((path.parent, Path("profiles"))):
        known = sorted(c.name for c in folder.glob("*.toml")) if folder.is_dir() else []
        close = difflib.get_close_matches(name.replace("_", "-"), known, n=1, cutoff=0.8)
        if close:
            return f"; did you mean {folder / close[0]}?"
    return ""


def _section_hint(key: str) -> str:
    """"; did you mean 'train.epochs'?" for a section's key given at the top level (`--set epochs=3`)."""
    import dataclasses

    from engine.contract.config import Profile

    for section in dataclasses.fields(Profile):
        default = section.default if section.default is not dataclasses.MISSING else None
        if dataclasses.is_dataclass(default) and key in {f.name for f in dataclasses.fields(default)}:
            return f"; did you mean {section.name}.{key}?"
    return ""


def read_toml(path: str | Path) -> dict:
    path = Path(path)
    try:
        if path.is_dir():
            raise ProfileError(str(path), "", "is a folder, not a profile file")
        with open(path, "rb") as fh:
            data = fh.read(MAX_PROFILE_BYTES + 1)
        if len(data) > MAX_PROFILE_BYTES:
            raise ProfileError(str(path), "", f"larger than {MAX_PROFILE_BYTES // 1000} kB: not a profile")
        return tomllib.loads(data.decode("utf-8"))
    except FileNotFoundError:
        raise ProfileError(str(path), "", "no such profile file" + _profile_hint(path)) from None
    except PermissionError:
        raise ProfileError(str(path), "", "not readable (permission denied)") from None
    except OSError as err:
        raise ProfileError(str(path), "", f"cannot be read: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise ProfileError(str(path), "", "not UTF-8 text (a binary or UTF-16 file?); a profile is TOML") from None
    except tomllib.TOMLDecodeError as err:
        raise ProfileError(str(path), "", f"not valid TOML: {err}") from None


def check_data_root(profile: Profile, file: str) -> None:
    """A data set read from files needs ``data.root`` to be a folder (checked before a run folder exists)."""
    d = profile.data
    if d.dataset in ("digits", "gaussian") or d.download:
        return
    root = Path(d.root).expanduser()
    expected = DATA_LAYOUT.get(d.dataset)
    holds = f"the folder that holds {expected[1]}" if expected else f"the folder of the {d.dataset} files"
    fix = (f"give it with --set data.root=DIR, {holds}; data.download = true fetches them where the network "
           "reaches")
    if not root.exists():
        raise ProfileError(file, "data.root", f"{str(root)!r} does not exist: {fix}")
    if not root.is_dir():
        raise ProfileError(file, "data.root", f"{str(root)!r} is a file, not a folder: {fix}")
    if expected and not all((root / part).exists() for part in expected[0]):
        missing = next(part for part in expected[0] if not (root / part).exists())
        parent = root.parent
        if all((parent / part).exists() for part in expected[0]):  # the data set's own folder given for its parent
            raise ProfileError(file, "data.root", f"{str(root)!r} is the data set's own folder; give the folder that "
                               f"holds it: --set data.root={parent}")
        raise ProfileError(file, "data.root", f"{str(root)!r} has no {missing}: {fix}")


# What a file-based data set's root must hold, checked before a run folder exists: (paths that must exist, how to
# say it). The readers (engine.data.vision) say the rest, file by file.
DATA_LAYOUT = {
    "cifar10": (("cifar-10-batches-py/test_batch",), "cifar-10-batches-py/"),
    "cifar100": (("cifar-100-python/test",), "cifar-100-python/"),
    "svhn": (("train_32x32.mat", "test_32x32.mat"), "train_32x32.mat and test_32x32.mat"),
    "stl10": (("stl10_binary",), "stl10_binary/"),
    "tiny_imagenet": (("tiny-imagenet-200",), "tiny-imagenet-200/"),
}


def load_profile(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Profile:
    """Read, override and check a profile file. Raises :class:`ProfileError`."""
    raw = read_toml(path)
    if overrides:
        raw = apply_overrides(raw, list(overrides))
        try:
            return profile_from_table(raw, str(path))
        except ProfileError as err:
            # Name --set as the culprit when the bad key was set there.
            keys = {parse_override(o)[0] for o in overrides}
            if err.key in keys or any(k.startswith(err.key + ".") for k in keys):  # trian.epochs: "trian" unknown
                hint = _section_hint(err.key) if "." not in err.key and err.problem.startswith("unknown key") else ""
                raise ProfileError("--set", err.key, err.problem.replace(" (known:", hint + " (known:", 1)
                                   if hint else err.problem) from None
            raise
    return profile_from_table(raw, str(path))


RUN_PROFILE_TABLES = ("data", "model", "train", "attack", "method", "eval")


def load_run_profile(run_dir: Path) -> Profile:
    """A run folder's ``profile.toml``: the resolved profile that every run folder holds whole. One that is
    missing, empty or cut short (a full disk while it was written) is refused rather than read as
    defaults: a run must never continue with settings it did not start with."""
    path = Path(run_dir) / "profile.toml"
    raw = read_toml(path)
    profile = profile_from_table(raw, str(path))  # a wrong value is named first, as in any profile
    missing = [t for t in RUN_PROFILE_TABLES if not isinstance(raw.get(t), dict)]
    if missing:
        raise ProfileError(str(path), missing[0], "missing from the run's resolved profile (the file is empty or "
                           "cut short: a full disk when it was written?); the run cannot continue on defaults")
    return profile


def dumps_profile(profile: Profile) -> str:
    import tomli_w

    return tomli_w.dumps(profile.to_table())
