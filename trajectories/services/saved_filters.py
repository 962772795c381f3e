"""Writes of the researcher pages that are not rollouts: a user's named episode filters."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from trajectories.models import SavedFilter


@transaction.atomic
def saved_filter_save(*, user: AbstractBaseUser, name: str, query_string: str) -> SavedFilter:
    """Save the filter under `name`, replacing the user's filter of that name if any.

    `query_string` must already be canonical (EpisodeFilterForm.query_string): saving a
    filter never stores parameters the list would not understand.
    """
    saved, _ = SavedFilter.objects.update_or_create(
        user_id=user.pk, name=name.strip(), defaults={"query_string": query_string}
    )
    return saved


def saved_filter_delete(*, user: AbstractBaseUser, pk: int) -> bool:
    """Delete one of the user's saved filters; False when it is not theirs or is gone."""
    deleted, _ = SavedFilter.objects.filter(user_id=user.pk, pk=pk).delete()
    return bool(deleted)
