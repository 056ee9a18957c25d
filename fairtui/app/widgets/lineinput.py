"""A one-line Input whose editing keys keep their place among the typed characters."""

from __future__ import annotations

from textual import events
from textual.widgets import Input


class LineInput(Input):
    """Textual's Input, with ctrl+u / ctrl+k / ctrl+w handled as keys rather than as bindings.

    Over SSH a terminal often delivers ``ctrl+u`` and the characters typed right after it in one
    read. The characters go to the Input at once, while the binding's action runs after them: the
    line the user just retyped was deleted with the old one (the tag dialog lost "abc" typed after
    ``ctrl+u``). Handled here, the edit runs in the order the keys came.
    """

    EDIT_KEYS = {"ctrl+u": "delete_left_all", "ctrl+k": "delete_right_all", "ctrl+w": "delete_left_word"}

    async def _on_key(self, event: events.Key) -> None:
        action = self.EDIT_KEYS.get(event.key)
        if action is not None:
            event.stop()
            event.prevent_default()
            getattr(self, f"action_{action}")()
            return
        await super()._on_key(event)
