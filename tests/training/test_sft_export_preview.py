"""The export form counts what it would export before it is submitted, refuses an export
of zero naming the filter that emptied it, and an export's page follows its progress."""

from __future__ import annotations

import json
import re

import pytest

from training.forms import SFTExportCreateForm
from training.models import ExportStatus, SFTExport
from training.services.exports import sft_export_run
from trajectories.services.annotations import annotation_label

pytestmark = pytest.mark.django_db
PREVIEW = "/training/exports/new/preview/"


def _form(**overrides: str) -> dict[str, str]:
    return {"fmt": "chat", "reconstruction": "prefix_merge", "more_filters": "", **overrides}


def test_the_example_in_the_help_text_is_accepted_by_the_form(approved) -> None:
    help_text = str(SFTExportCreateForm.base_fields["more_filters"].help_text)
    example = re.search(r"\{.*\}", help_text)
    assert example, help_text
    form = SFTExportCreateForm(_form(more_filters=example.group()))
    assert form.is_valid(), form.errors
    assert form.cleaned_data["filters"] == json.loads(example.group())


def test_the_preview_counts_clause_by_clause_and_names_the_one_that_empties_it(
    researcher_client, ran_batch
) -> None:
    page = researcher_client.get(PREVIEW, _form(batch=str(ran_batch.pk))).content.decode()
    assert '<b id="export-count">0</b>' in page
    assert (
        f"0 episodes: 4 episodes match batch={ran_batch.pk}, but none of them matches "
        "annotation_status=approved (approved only: the default without an annotation status)"
    ) in page
    assert re.search(rf">batch={ran_batch.pk}</td>\s*<td class=\"num\">4</td>", page)
    assert re.search(
        r">annotation_status=approved \(approved only.*</td>\s*<td class=\"num\">0<", page
    )


def test_the_preview_of_chosen_episodes_shows_their_labels_and_no_hidden_approved_only(
    researcher_client, ran_batch, researcher
) -> None:
    first, second, third = ran_batch.episodes.order_by("pk")[:3]
    annotation_label(annotator=researcher, episode=first, label="approve")
    annotation_label(annotator=researcher, episode=second, label="reject", reason="format")
    ids = f"{first.pk},{second.pk},{third.pk}"
    page = researcher_client.get(PREVIEW, _form(ids=ids)).content.decode()
    assert '<b id="export-count">3</b>' in page
    assert "Approved only is off" in page
    assert "By annotation status: Not annotated 1 · Approved 1 · Rejected 1" in page


def test_the_preview_says_what_is_wrong_with_a_bad_filter(researcher_client) -> None:
    page = researcher_client.get(PREVIEW, _form(more_filters='{"status": "done"}')).content.decode()
    assert "not one of" in page and 'id="export-count"' not in page


def test_the_preview_is_for_researchers(annotator_client) -> None:
    assert annotator_client.get(PREVIEW).status_code == 403


def test_the_form_refuses_an_export_of_zero_episodes(
    researcher_client, ran_batch, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=False):
        response = researcher_client.post("/training/exports/new/", _form(batch=str(ran_batch.pk)))
    assert response.status_code == 200
    assert "none of them matches annotation_status=approved" in response.content.decode()
    assert not SFTExport.objects.exists()


def test_an_export_page_follows_its_progress_until_it_ends(
    researcher_client, approved, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=False):
        researcher_client.post("/training/exports/new/", _form(batch=str(approved.pk)))
    export = SFTExport.objects.get()
    progress = f"/training/exports/{export.pk}/progress/"
    queued = researcher_client.get(f"/training/exports/{export.pk}/").content.decode()
    assert f'hx-get="{progress}" hx-trigger="every 2s"' in queued
    assert "reload" not in queued and "download" not in queued.lower()
    assert "2 episodes match" in queued

    SFTExport.objects.filter(pk=export.pk).update(status=ExportStatus.RUNNING, episodes=1)
    running = researcher_client.get(progress).content.decode()
    assert 'hx-trigger="every 2s"' in running
    assert '<progress max="2" value="1"' in running

    sft_export_run(export_id=export.pk)
    done = researcher_client.get(progress).content.decode()
    assert "hx-trigger" not in done  # the last refresh: polling stops
    assert f'href="/api/exports/{export.pk}/download/"' in done
