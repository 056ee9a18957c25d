"""Text a user typed (run names, tags, notes): checked where it comes in, made inert where it goes out.

A name with an escape sequence could clear a terminal or change its title when `ls` prints it, and a
name with brackets is Rich markup. So:
- at input, names and tags refuse every control character, notes every one but newline and tab, and
  each has a length cap (one line, exit 2, at the command line; the same message in the app);
- at output, whatever a home already holds (written before this rule, or by hand) is shown with its
  control characters as visible escapes (``\\x1b``), and escaped for Rich markup where it goes into one.
"""

from __future__ import annotations

import re

NAME_MAX = 200  # characters of a run's or sweep's name
TAG_MAX = 100
NOTE_MAX = 20_000

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_NOTE_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # newline and tab are a note's own


class UserTextError(ValueError):
    """Refused user text: the message names what and why, in one line."""


def check_name(text: str, what: str = "--name") -> str:
    return _check(text, what, NAME_MAX, _CONTROL)


def check_tag(text: str, what: str = "tag") -> str:
    if not text.strip():
        raise UserTextError(f"{what}: empty")
    return _check(text, what, TAG_MAX, _CONTROL)


def check_note(text: str, what: str = "note") -> str:
    return _check(text, what, NOTE_MAX, _NOTE_CONTROL)


def check_name_and_tags(name: str | None, tags: list[str]) -> None:
    """A command's ``--name`` and ``--tag`` options (run, import)."""
    if name is not None:
        check_name(name)
    for tag in tags:
        check_tag(tag, "--tag")


def _check(text: str, what: str, limit: int, control: re.Pattern) -> str:
    found = control.search(text)
    if found:
        raise UserTextError(f"{what}: control character {found.group()!r} at position {found.start()}; "
                            "names, tags and notes are plain text")
    if len(text) > limit:
        raise UserTextError(f"{what}: at most {limit} characters, got {len(text)}")
    return text


def inert(text: object, markup: bool = False, keep_newlines: bool = False) -> str:
    """``text`` safe to print: control characters as visible escapes, and (``markup``) Rich markup escaped."""
    pattern = _NOTE_CONTROL if keep_newlines else _CONTROL
    out = pattern.sub(lambda m: repr(m.group())[1:-1], str(text))
    if markup:
        from rich.markup import escape

        out = escape(out)
    return out
