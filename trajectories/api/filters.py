"""Episode filters as API query parameters: checked, named in the schema, and a 400 that
names the bad one. The episode list, annotation agreement and the bulk actions share them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request

from trajectories.episode_filters import (
    FILTER_KEYS,
    ID_FILTERS,
    RANGE_FILTERS,
    EpisodeFilterError,
    episode_filters_clean,
)

NOT_FILTERS = {"cursor", "format", "page", "page_size"}

FILTER_PARAMETERS = [
    OpenApiParameter(
        key,
        OpenApiTypes.INT
        if key in ID_FILTERS
        else OpenApiTypes.NUMBER
        if key in RANGE_FILTERS
        else OpenApiTypes.STR,
        description="q: text in the question" if key == "q" else "",
    )
    for key in FILTER_KEYS
]


def filters_from(raw: Mapping[str, Any], *, prefix: str = "") -> dict[str, Any]:
    """Checked episode filters, or a 400 that names the bad one."""
    try:
        return episode_filters_clean(raw)
    except EpisodeFilterError as exc:
        raise ValidationError({f"{prefix}{exc.key}": [exc.detail]}) from None


def query_filters(request: Request) -> dict[str, Any]:
    """The episode filters in the request's query string, checked."""
    raw = {k: v for k, v in request.query_params.items() if k not in NOT_FILTERS}
    return filters_from(raw)
