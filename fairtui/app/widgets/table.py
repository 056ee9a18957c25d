"""The runs table: Textual's DataTable, with its rendered lines kept in step with its column widths."""

from __future__ import annotations

from typing import Iterable

from textual.widgets import DataTable


class RunsTable(DataTable):
    """A DataTable that re-renders its lines when its columns widen.

    Textual's DataTable measures new rows and widens its columns when it is next idle
    (``_update_dimensions``), but it drops the lines it has already rendered only when a row has an
    automatic height. A frame drawn between filling the table and that idle moment stays in its
    caches with the narrow widths: every cell cut to its header's width ("comple", "digi") until
    the cursor next moves. It happened on about one start in three, and the snapshot tests caught it.
    Counting the widening as an update (the counter is part of every cache key) re-renders them.
    """

    def _update_dimensions(self, new_rows: Iterable) -> None:
        super()._update_dimensions(new_rows)
        self._update_count += 1
        self.refresh()
