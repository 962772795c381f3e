"""Forms of the harness app's pages."""

from __future__ import annotations

from pathlib import Path

from django import forms
from django.core.files.uploadedfile import UploadedFile
from django.core.validators import RegexValidator

from harness_app.importers.formats import SPLIT_PATTERN

MAX_UPLOAD_BYTES = 2 * 1024**3
UPLOAD_SUFFIXES = (".zip", ".json")

# The split names a file (qrels/<split>.tsv), so it may not carry a path.
split_validator = RegexValidator(SPLIT_PATTERN, "Use letters, digits, '.', '_' or '-'.")


class BenchmarkUploadForm(forms.Form):
    file = forms.FileField(
        help_text="A .zip of a BEIR folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv) "
        "or an official HotpotQA .json file."
    )
    name = forms.CharField(max_length=200, help_text="The benchmark's name; must be unique.")
    split = forms.CharField(
        max_length=50,
        initial="test",
        validators=[split_validator],
        help_text="Which qrels/<split>.tsv of a BEIR folder to import.",
    )
    replace = forms.BooleanField(
        required=False, help_text="Swap out an existing benchmark of this name."
    )

    def clean_file(self) -> UploadedFile:
        upload: UploadedFile = self.cleaned_data["file"]
        if Path(upload.name or "").suffix.lower() not in UPLOAD_SUFFIXES:
            raise forms.ValidationError("Upload a .zip (BEIR folder) or a .json (HotpotQA) file.")
        if upload.size and upload.size > MAX_UPLOAD_BYTES:
            raise forms.ValidationError(f"The file is larger than {MAX_UPLOAD_BYTES:,} bytes.")
        return upload
