"""Cells a spreadsheet would run as formulas are written as text (OWASP's CSV injection
rule); numbers, negative ones included, stay numbers."""

from __future__ import annotations

import csv
import io

import pytest

from harness_app.harness.ablation_matrix import MATRIX_METRICS, matrix_csv
from harness_app.harness.csv_cells import csv_cell, csv_writer

HOSTILE = '=HYPERLINK("http://x","y")'


@pytest.mark.parametrize(
    ("value", "written"),
    [
        (HOSTILE, "'" + HOSTILE),
        ("+1+cmd|' /C calc'!A0", "'+1+cmd|' /C calc'!A0"),
        ("-2+3", "'-2+3"),
        ("@SUM(A1:A9)", "'@SUM(A1:A9)"),
        ("\t=1+1", "'\t=1+1"),
        ("\r=1+1", "'\r=1+1"),
        ("a = b", "a = b"),
        ("", ""),
        (-0.5, -0.5),
        (-3, -3),
        ("-0.5000", "-0.5000"),  # a number already formatted as text is still a number
        ("-1e-05", "-1e-05"),
        (None, None),
    ],
)
def test_only_text_a_spreadsheet_would_evaluate_is_quoted(value, written):
    assert csv_cell(value) == written


def test_the_writer_quotes_every_cell_of_a_row_and_keeps_numbers():
    out = io.StringIO()
    csv_writer(out).writerow([HOSTILE, -0.5, 2, "plain"])
    assert next(csv.reader(io.StringIO(out.getvalue()))) == ["'" + HOSTILE, "-0.5", "2", "plain"]


def test_the_matrix_csv_quotes_a_condition_name():
    entry = {"condition": HOSTILE, "n": 2}
    for metric in MATRIX_METRICS:
        entry[f"{metric}_mean"], entry[f"{metric}_std"] = 0.5, 0.0
    rows = list(csv.reader(io.StringIO(matrix_csv([entry]))))
    assert rows[1][:3] == ["'" + HOSTILE, "2", "0.5000"]
