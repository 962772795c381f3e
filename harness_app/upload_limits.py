"""What an uploaded benchmark may be: its file kinds and size, its format and split names.

The page's upload form and the API's upload serializer both check them, with these limits.
"""

from __future__ import annotations

from django.core.validators import RegexValidator

from harness_app.importers.formats import FORMATS, SPLIT_PATTERN
from harness_app.models import BenchmarkSource

MAX_UPLOAD_BYTES = 2 * 1024**3
UPLOAD_SUFFIXES = (".zip", ".json", ".jsonl")
UPLOAD_KINDS = "a .zip (a benchmark folder), a .json or a .jsonl file"
FORMAT_CHOICES = [("auto", "Detect from the file")] + [
    (value, label) for value, label in BenchmarkSource.choices if value in FORMATS
]

# The split names a file (qrels/<split>.tsv), so it may not carry a path.
split_validator = RegexValidator(SPLIT_PATTERN, "Use letters, digits, '.', '_' or '-'.")
