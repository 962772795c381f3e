"""CSV that a spreadsheet opens without running anything: every CSV the project writes
(the episode list, ablation matrices, evaluation transfer tables, `ablate --csv`) goes
through `csv_writer`.

Policy names, question text and condition names come from users and imported files. A
cell starting with `=`, `+`, `-`, `@`, a tab or a carriage return is a formula to Excel,
LibreOffice and Google Sheets (`=HYPERLINK(…)` becomes a live link in an annotator's
sheet), so such text is written with a leading `'`, as OWASP's CSV-injection advice says.
Only text is quoted: a number, negative ones included, stays the number it is.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
# A number already formatted as text ("-0.2500", "-1e-05"): a spreadsheet reads it as that
# number and it can run nothing, so it is left as it is.
_NUMBER_TEXT = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?")


def csv_cell(value: Any) -> Any:
    """The value as it may be written: text a spreadsheet would evaluate gets a leading
    `'`; anything else (numbers, dates, None) is returned untouched."""
    if (
        isinstance(value, str)
        and value.startswith(FORMULA_STARTS)
        and not _NUMBER_TEXT.fullmatch(value)
    ):
        return "'" + value
    return value


class SafeCsvWriter:
    """csv.writer whose rows pass through `csv_cell`; `writerow` answers what the
    underlying file's `write` answered (a streaming view uses the written line)."""

    def __init__(self, out: SupportsWrite[str]) -> None:
        self._writer = csv.writer(out)

    def writerow(self, row: Iterable[Any]) -> Any:
        return self._writer.writerow([csv_cell(value) for value in row])


def csv_writer(out: SupportsWrite[str]) -> SafeCsvWriter:
    return SafeCsvWriter(out)
