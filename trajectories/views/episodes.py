"""The researcher pages: episodes, the episode viewer, groups, comparisons and batches.

Thin adapters: a form reads the request, a selector reads the rows, a service writes.
Everything a page shows from a document, a query or a model reply goes through Django's
autoescaping or `json_script`; the page scripts only ever set textContent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.models import AbstractBaseUser
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Model
from django.http import Http404, HttpRequest, HttpResponse, QueryDict, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from harness_app.harness.csv_cells import csv_writer
from harness_app.ids import as_id
from harness_app.models import Document
from harness_app.roles import Role, browse_required, user_has_role
from trajectories.api.episodes import episode_trajectory_data
from trajectories.forms import EpisodeFilterForm, SavedFilterForm
from trajectories.models import Episode, EpisodeKind
from trajectories.selectors import annotation, recording, tokens
from trajectories.selectors.batches import group_view
from trajectories.selectors.calls import turn_prompts
from trajectories.selectors.episode import (
    CompareError,
    CompareTarget,
    compare_target,
    compare_view,
    document_in_episode,
    episode_get,
    episode_view,
)
from trajectories.selectors.episode_list import (
    DOWNLOAD_COLUMNS,
    episode_list_page,
    episode_list_rows,
    episode_neighbours,
    saved_filters_of,
    sort_headers,
)
from trajectories.services import saved_filters

# --- episodes -------------------------------------------------------------------------------


@browse_required
@require_GET
def episode_list(request: HttpRequest) -> HttpResponse:
    form = EpisodeFilterForm(request.GET)
    filters = form.filters()
    active = _active_filters(form, filters)
    page = episode_list_page(filters=filters, page=request.GET.get("page"))
    context = {
        "form": form,
        "page": page,
        "filtered": bool(active),
        "active_filters": active,
        "headers": sort_headers(sort=filters.get("sort") or "newest"),
        # The viewer's previous/next and breadcrumb walk this same list.
        "list_query": form.query_string(),
        "from_param": urlencode({"from": form.query_string()}) if form.query_string() else "",
        "saved": saved_filters_of(user=request.user),
        "save_form": SavedFilterForm(initial={"query_string": form.query_string()}),
    }
    if filters.get("kind") == EpisodeKind.RECORDED:  # recording-session columns, not recall
        context["recorded"] = True
        recording.recorded_episode_sessions(list(page.object_list), now=timezone.now())
    return render(request, "trajectories/episode_list.html", context)


def _active_filters(form: EpisodeFilterForm, filters: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value as shown) of each filter in use: the collapsed panel's one-line summary."""
    active = []
    for name, value in filters.items():
        if value in (None, "") or name == "sort":
            continue
        if isinstance(value, Model):
            shown = str(value)
        else:
            shown = dict(getattr(form.fields[name], "choices", ())).get(value, value)
        active.append((str(form[name].label), str(shown)))
    return active


# role_required's types name HttpResponse; the stream it returns passes through untouched.
@browse_required  # type: ignore[arg-type]
@require_GET
def episode_list_download(request: HttpRequest, fmt: str) -> StreamingHttpResponse:
    """Every episode of the filtered list (not only the page), streamed as CSV or JSON lines.

    JSON comes as one array, written row by row, so the file opens in any JSON reader.
    """
    if fmt not in ("csv", "json"):
        raise Http404("download as episodes.csv or episodes.json")
    rows = episode_list_rows(filters=EpisodeFilterForm(request.GET).filters())
    if fmt == "csv":
        body: Iterator[str] = _csv_lines(rows)
        content_type = "text/csv"
    else:
        body = _json_array(rows)
        content_type = "application/json"
    response = StreamingHttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="episodes.{fmt}"'
    return response


class _Line:
    """A file-like sink for a CSV writer that hands each written line back."""

    def write(self, text: str) -> str:
        return text


def _csv_lines(rows: Iterator[dict[str, Any]]) -> Iterator[str]:
    writer = csv_writer(_Line())
    yield writer.writerow([name for name, _ in DOWNLOAD_COLUMNS])
    for row in rows:
        yield writer.writerow(["" if v is None else v for v in row.values()])


def _json_array(rows: Iterator[dict[str, Any]]) -> Iterator[str]:
    yield "["
    for number, row in enumerate(rows):
        yield ("," if number else "") + "\n" + json.dumps(row, cls=DjangoJSONEncoder)
    yield "\n]\n"


@browse_required
@require_GET
def episode_selection(request: HttpRequest) -> HttpResponse:
    """The list's row selection acted on: compare two, label them in bulk, or export them.

    The rows' checkboxes submit here, so the actions work without scripts as well.
    """
    ids = [int(v) for v in request.GET.getlist("ids") if v.isdigit()]
    action = request.GET.get("action", "")
    back = f"{reverse('episode_list')}?{request.GET.get('from', '')}"
    if not ids:
        messages.error(request, "Select episodes first: tick the boxes of their rows.")
        return redirect(back)
    joined = ",".join(map(str, ids))
    if action == "compare":
        if len(ids) != 2:
            messages.error(request, f"Compare needs exactly two episodes; {len(ids)} selected.")
            return redirect(back)
        return _compare_redirect(request, ids[0], ids[1], back=back)
    if action == "label":
        return redirect(f"{reverse('annotate_bulk')}?{urlencode({'ids': joined})}")
    if action == "export":
        # The SFT export form (training's pages) reads the chosen episodes from `episodes`.
        return redirect(f"/exports/new/?{urlencode({'episodes': joined})}")
    messages.error(request, "Choose an action: compare, label or export.")
    return redirect(back)


def _compare_redirect(request: HttpRequest, a: int, b: int, *, back: str) -> HttpResponse:
    """Two runs of one query go to the compare view; two queries of one evaluation run to
    its paired comparison (researchers); anything else back to the list, saying why."""
    target = compare_target(a_pk=a, b_pk=b)
    if target.same_query:
        return redirect(f"{reverse('compare')}?{urlencode({'a': a, 'b': b})}")
    if target.evaluation is not None and user_has_role(request.user, Role.RESEARCHER):
        return redirect(_evaluation_compare_url(target))
    messages.error(request, f"Not compared: {target.reason}.")
    return redirect(back)


def _evaluation_compare_url(target: CompareTarget) -> str:
    url = reverse("evaluation_detail", args=[target.evaluation])
    config_a, config_b = target.configs
    if config_a == config_b:  # one configuration on two queries: its run's picker
        return f"{url}#compare"
    params = {"a": config_a, "b": config_b, "benchmark": target.benchmark or ""}
    return f"{url}?{urlencode(params)}#compare"


@browse_required
@require_POST
def saved_filter_create(request: HttpRequest) -> HttpResponse:
    form = SavedFilterForm(request.POST)
    if not form.is_valid() or not isinstance(request.user, AbstractBaseUser):
        messages.error(request, "Give the filter a name of at most 100 characters.")
        return redirect("episode_list")
    # Re-read through the filter form, so only parameters the list understands are kept.
    raw = QueryDict(form.cleaned_data["query_string"])
    query_string = EpisodeFilterForm(raw).query_string()
    saved = saved_filters.saved_filter_save(
        user=request.user, name=form.cleaned_data["name"], query_string=query_string
    )
    messages.success(request, f"Saved the filter {saved.name!r}.")
    return redirect(f"{reverse('episode_list')}?{query_string}")


@browse_required
@require_POST
def saved_filter_delete(request: HttpRequest, pk: int) -> HttpResponse:
    if isinstance(request.user, AbstractBaseUser):
        saved_filters.saved_filter_delete(user=request.user, pk=pk)
    return redirect("episode_list")


def _episode_or_404(pk: int) -> Episode:
    episode = episode_get(pk=pk)
    if episode is None:
        raise Http404("no such episode")
    return episode


@browse_required
@require_GET
def episode_detail(request: HttpRequest, pk: int) -> HttpResponse:
    episode = _episode_or_404(pk)
    # Provenance: the SFT exports holding this episode (one query).
    sft_exports = list(episode.sft_exports.select_related("export").order_by("-export_id"))
    if episode.is_recorded:
        recorded = recording.recording_view(episode=episode, now=timezone.now())
        context = {"view": recorded, "episode": episode, "sft_exports": sft_exports}
        return render(request, "trajectories/recording_detail.html", context)
    view = episode_view(episode=episode)
    context = {
        "view": view,
        "episode": episode,
        "sft_exports": sft_exports,
        **_list_navigation(request, episode),
    }
    # Why annotators judged it as they did; an annotator, labelling blind, sees only their own.
    blind = not user_has_role(request.user, Role.RESEARCHER)
    context["annotations"] = annotation.episode_annotations(
        episode=episode, viewer=request.user, blind=blind
    )
    return render(request, "trajectories/episode_detail.html", context)


def _list_navigation(request: HttpRequest, episode: Episode) -> dict[str, Any]:
    """Previous/next episode and the way back, within the list the viewer was opened from.

    `from` holds the list's query string (filters and sort); without it, the whole list,
    newest first.
    """
    form = EpisodeFilterForm(QueryDict(request.GET.get("from", "")))
    list_query = form.query_string()
    neighbours = episode_neighbours(filters=form.filters(), episode=episode)
    back = QueryDict(list_query, mutable=True)
    if neighbours.page > 1:
        back["page"] = str(neighbours.page)
    suffix = f"?{urlencode({'from': list_query})}" if list_query else ""
    return {
        "neighbours": neighbours,
        "list_url": f"{reverse('episode_list')}?{back.urlencode()}".rstrip("?"),
        "list_filtered": any(k != "sort" for k in QueryDict(list_query)),
        "from_suffix": suffix,
    }


@browse_required
@require_GET
def episode_trajectory(request: HttpRequest, pk: int) -> HttpResponse:
    """The episode's whole trajectory as a JSON file: the API's episode document."""
    episode = _episode_or_404(pk)
    data = episode_trajectory_data(episode=episode)
    response = HttpResponse(
        json.dumps(data, cls=DjangoJSONEncoder, indent=1), content_type="application/json"
    )
    response["Content-Disposition"] = f'attachment; filename="episode-{pk}-trajectory.json"'
    return response


@browse_required
@require_GET
def episode_tokens(request: HttpRequest, pk: int, turn: int) -> HttpResponse:
    """One turn's token strips; the viewer loads it when the turn is first shown."""
    episode = _episode_or_404(pk)
    decoder = tokens.token_decoder()
    strips = tokens.token_strips(episode=episode, turn_index=turn, decoder=decoder)
    context = {"episode": episode, "turn": turn, "strips": strips, "decoder_note": decoder.note}
    return render(request, _fragment_or_page(request, "token_strips"), context)


@browse_required
@require_GET
def episode_prompt(request: HttpRequest, pk: int, turn: int) -> HttpResponse:
    """The exact prompt of each model call made in answer to the turn's observation."""
    episode = _episode_or_404(pk)
    prompts = turn_prompts(episode=episode, turn_index=turn)
    context = {"episode": episode, "turn": turn, "prompts": prompts}
    return render(request, _fragment_or_page(request, "prompt"), context)


@browse_required
@require_GET
def episode_document(request: HttpRequest, pk: int) -> HttpResponse:
    """A document as this episode met it: relevance grade, history, text with query terms."""
    episode = _episode_or_404(pk)
    if episode.batch is None:
        raise Http404("a recorded episode has no corpus")
    doc_id = request.GET.get("doc", "")
    document = (
        Document.objects.filter(corpus_id=episode.batch.benchmark.corpus_id, external_id=doc_id)
        .only("pk", "external_id", "title", "text")
        .first()
    )
    if document is None:
        raise Http404("no such document in this episode's corpus")
    context = {
        "episode": episode,
        "document": document,
        "info": document_in_episode(episode=episode, document=document),
    }
    return render(request, _fragment_or_page(request, "document"), context)


def _fragment_or_page(request: HttpRequest, name: str) -> str:
    # htmx asks for the fragment; following the link without scripts gets a whole page.
    if request.headers.get("HX-Request"):
        return f"trajectories/{name}_fragment.html"
    return f"trajectories/{name}_page.html"


# --- groups and comparisons --------------------------------------------------------------------


@browse_required
@require_GET
def group_detail(request: HttpRequest, pk: int) -> HttpResponse:
    view = group_view(pk=pk)
    if view is None:
        raise Http404("no such group")
    return render(request, "trajectories/group_detail.html", {"view": view})


def _int_param(request: HttpRequest, name: str) -> int | None:
    value = request.GET.get(name, "")
    return as_id(value)


@browse_required
@require_GET
def compare(request: HttpRequest) -> HttpResponse:
    a, b = _int_param(request, "a"), _int_param(request, "b")
    if a is None or b is None:
        error = "Choose two episodes: /compare/?a=<episode id>&b=<episode id>."
        return render(request, "trajectories/compare.html", {"error": error}, status=400)
    try:
        view = compare_view(a_pk=a, b_pk=b)
    except CompareError as exc:
        return render(request, "trajectories/compare.html", {"error": str(exc)}, status=400)
    return render(request, "trajectories/compare.html", {"view": view})
