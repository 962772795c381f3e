"""The SFT export form: the options of POST /api/exports/, with the episode filters."""

from __future__ import annotations

from typing import Any

from django import forms

from harness_app.models import Benchmark, PolicyConfig
from training.models import ExportFormat, Reconstruction
from trajectories.episode_filters import EpisodeFilterError, episode_filters_clean
from trajectories.models import AnnotationStatus

# The export form's own filter fields; any other filter goes in `more_filters`.
EXPORT_FILTER_FIELDS = ("ids", "batch", "policy", "benchmark", "annotation_status")


class SFTExportCreateForm(forms.Form):
    """The options of POST /api/exports/. The filters are checked by the same function the
    service and the API use (episode_filters_clean), and an error lands on the field that
    holds the bad filter."""

    ids = forms.CharField(
        required=False,
        label="Episodes",
        help_text="Episode ids, comma-separated (the episode list's Export action fills them).",
    )
    batch = forms.IntegerField(required=False, label="Batch id", min_value=1)
    policy = forms.ModelChoiceField(
        PolicyConfig.objects.order_by("name"), required=False, empty_label="any policy"
    )
    benchmark = forms.ModelChoiceField(
        Benchmark.objects.order_by("name"), required=False, empty_label="any benchmark"
    )
    annotation_status = forms.ChoiceField(
        required=False,
        choices=[("", "approved only, unless episodes are chosen"), *AnnotationStatus.choices],
        label="Annotation status",
        help_text="Without one, only approved episodes are exported; episodes chosen by id "
        "are exported whatever their label. The count below shows what each filter leaves.",
    )
    more_filters = forms.JSONField(
        required=False,
        initial=dict,  # shown as {} rather than null
        label="More filters (JSON)",
        help_text='Any other episode filter, as for /api/episodes/, e.g. {"status": '
        '"completed", "reward_min": 0.5}.',
    )
    fmt = forms.ChoiceField(choices=ExportFormat.choices, initial=ExportFormat.CHAT, label="Format")
    reconstruction = forms.ChoiceField(
        choices=Reconstruction.choices,
        initial=Reconstruction.PREFIX_MERGE,
        help_text="How an episode's model calls become records: one per chain, or one per call.",
    )

    def clean_more_filters(self) -> dict[str, Any]:
        value = self.cleaned_data.get("more_filters")
        if value in (None, ""):
            return {}
        if not isinstance(value, dict):
            raise forms.ValidationError('give a JSON object, e.g. {"status": "completed"}')
        return value

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        raw = dict(cleaned.get("more_filters") or {})
        for name in EXPORT_FILTER_FIELDS:
            value = cleaned.get(name)
            if value not in (None, ""):
                raw[name] = getattr(value, "pk", value)
        try:
            cleaned["filters"] = episode_filters_clean(raw)
        except EpisodeFilterError as exc:
            self.add_error(exc.key if exc.key in EXPORT_FILTER_FIELDS else "more_filters", str(exc))
        return cleaned
