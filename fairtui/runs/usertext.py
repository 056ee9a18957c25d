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

# control characters; bidirectional overrides and isolates and zero-width characters too, which make a name print as
# another ("evil<U+202E>txt.exe" shows as "evilexe.txt")
_INVISIBLE = "\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff"
_CONTROL = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{_INVISIBLE}]")
_NOTE_CONTROL = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{_INVISIBLE}]")  # newline and tab are a note's own


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


# -- escaping for a file format: a label that came from a profile or a run name is data, never markup --------

_LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "_": r"\_", "#": r"\#", "$": r"\$", "{": r"\{",
          "}": r"\}", "~": r"\textasciitilde{}", "^": r"\^{}", "±": r"$\pm$"}


def latex(text: object) -> str:
    """``text`` as LaTeX prints it, with no command of its own: every special character escaped (a backslash
    too, so that ``\\input{...}`` or ``\\write18`` is text), control characters as visible escapes."""
    return "".join(_LATEX.get(ch, ch) for ch in inert(text))


def md_cell(text: object) -> str:
    """``text`` in one Markdown table cell: a ``|`` cannot split it, a newline cannot end the row."""
    return inert(text).replace("\\", "\\\\").replace("|", "\\|")


def csv_cell(text: object) -> str:
    """``text`` for a CSV cell a spreadsheet opens: a leading ``=``, ``+``, ``-``, ``@``, tab or carriage return
    (a formula) is quoted with ``'`` (OWASP's rule), control characters are shown as escapes. Numbers are not
    passed through here."""
    out = inert(text)
    return "'" + out if out[:1] in ("=", "+", "-", "@", "\t", "\r") else out


def count(n: int, noun: str, plural: str | None = None) -> str:
    """"1 run", "2 runs", "0 runs"."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def fold_label(label: str, width: int) -> str:
    """``label`` on lines of at most ``width`` characters, broken after a hyphen, underscore or space where one
    falls inside the line (``cifar10-cpu-quick-`` / ``trades``), mid-word only where a word alone is wider."""
    import re

    lines, line = [], ""
    for piece in re.split(r"(?<=[-_ ])", label):
        while len(piece) > width:  # one word wider than the column: cut, as fold would
            if line:
                lines.append(line)
                line = ""
            lines.append(piece[:width])
            piece = piece[width:]
        if len(line) + len(piece) > width:
            lines.append(line)
            line = ""
        line += piece
    return "\n".join(x.rstrip() for x in [*lines, line] if x.strip())
