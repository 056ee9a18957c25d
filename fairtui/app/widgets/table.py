"""The runs table: Textual's DataTable, with column widths its owner sets, so that adding rows costs no
measuring, and with its rendered lines kept in step with those widths."""

from __future__ import annotations

from typing import Iterable

from textual.widgets import DataTable


class RunsTable(DataTable):
    """A DataTable whose columns may have widths set by its owner (``fixed_widths``).

    Textual's DataTable measures every cell of every new row when it is next idle
    (``_update_dimensions``): 120,000 cells for 10,000 runs, seconds on an idle machine. The runs
    screen knows each column's width already (it chooses the columns that fit by the same numbers),
    so with ``fixed_widths`` the new rows are not measured, only counted into the table's size.

    Without fixed widths, DataTable widens its columns at that idle moment, but drops the lines it
    has already rendered only when a row has an automatic height. A frame drawn between filling the
    table and that moment stays in its caches with the narrow widths: every cell cut to its header's
    width ("comple", "digi") until the cursor next moves. Counting the widening as an update (the
    counter is part of every cache key) re-renders them.
    """

    fixed_widths = False

    def _update_dimensions(self, new_rows: Iterable) -> None:
        super()._update_dimensions(() if self.fixed_widths else new_rows)
        self._update_count += 1
        self.refresh()
