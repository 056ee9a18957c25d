"""What a model file given to `fairtui import` may be, said once for the app and the engine: the app refuses
a file too large before it hashes it, and the engine before it reads it."""

from __future__ import annotations

from pathlib import Path

# the largest file an import reads: WRN-70-16 (267M parameters, about 1.1 GB in fp32) fits with room
MAX_IMPORT_BYTES = 2 * 2**30


def too_large(path: Path) -> str | None:
    """The refusal of a file larger than any model's weights (None when it is not)."""
    size = path.stat().st_size if path.is_file() else 0
    if size <= MAX_IMPORT_BYTES:
        return None
    return (f"{path}: {size / 2**30:.1f} GiB, more than the weights of any architecture fairtui builds "
            f"({MAX_IMPORT_BYTES / 2**30:.0f} GiB at most); refused before reading it")
