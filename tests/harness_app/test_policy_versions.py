"""Editing and deleting policy configs from the pages: an unused config changes in place, a
used one gets a new version so that no episode changes meaning, and only an unused config
can be deleted."""

from __future__ import annotations

from typing import Any

import pytest

from harness_app.models import PolicyConfig, PolicyKind
from tests import factories
from trajectories.models import RolloutBatch
from trajectories.services.rollouts import batch_create

pytestmark = pytest.mark.django_db


def _form(policy: PolicyConfig, **overrides: Any) -> dict[str, Any]:
    return factories.policy_form(
        **{
            "name": policy.name,
            "kind": policy.kind,
            "base_url": policy.base_url,
            "model": policy.model,
            "sampling": '{"temperature": 0.5}',
            **overrides,
        }
    )


@pytest.fixture
def policy() -> PolicyConfig:
    return PolicyConfig.objects.create(name="rules", kind=PolicyKind.BASELINE)


def _use(policy: PolicyConfig, benchmark: Any, batches: int = 1) -> None:
    for _ in range(batches):
        batch_create(benchmark=benchmark, policy=policy, query_limit=1)


def test_an_unused_policy_is_edited_in_place(researcher_client, policy) -> None:
    response = researcher_client.post(f"/policies/{policy.pk}/edit/", _form(policy))

    assert response.status_code == 302
    assert list(PolicyConfig.objects.filter(name__startswith="rules")) == [policy]
    policy.refresh_from_db()
    assert (policy.sampling, policy.version) == ({"temperature": 0.5}, 1)
    page = researcher_client.get(response.url).content.decode()
    assert "Policy &#x27;rules&#x27; saved." in page


def test_a_used_policy_gets_a_new_version_and_its_batches_keep_the_old_one(
    researcher_client, policy, demo_benchmark
) -> None:
    _use(policy, demo_benchmark)
    form_page = researcher_client.get(f"/policies/{policy.pk}/edit/").content.decode()
    assert "used by 1 batch" in form_page and "rules v2" in form_page

    response = researcher_client.post(f"/policies/{policy.pk}/edit/", _form(policy))

    new = PolicyConfig.objects.get(name="rules v2")
    assert (new.version, new.previous, new.sampling) == (2, policy, {"temperature": 0.5})
    policy.refresh_from_db()
    assert (policy.name, policy.version, policy.sampling) == ("rules", 1, {})
    assert RolloutBatch.objects.get().policy == policy
    page = researcher_client.get(response.url).content.decode()
    assert "rules v2" in page and "version 2 of rules" in page
    assert response.url == f"/policies/#policy-{new.pk}"


def test_a_new_version_may_take_a_name_of_its_own(
    researcher_client, policy, demo_benchmark
) -> None:
    _use(policy, demo_benchmark)
    researcher_client.post(f"/policies/{policy.pk}/edit/", _form(policy, name="rules-warm"))

    new = PolicyConfig.objects.get(name="rules-warm")
    assert (new.version, new.previous_id) == (2, policy.pk)


def test_an_old_version_is_not_edited_again_once_a_newer_exists(
    researcher_client, policy, demo_benchmark
) -> None:
    _use(policy, demo_benchmark)
    researcher_client.post(f"/policies/{policy.pk}/edit/", _form(policy))

    response = researcher_client.post(
        f"/policies/{policy.pk}/edit/", _form(policy, sampling='{"temperature": 0.9}')
    )

    assert response.status_code == 200
    assert "rules v2 is its newer version: edit that one" in response.content.decode()
    assert PolicyConfig.objects.filter(name__startswith="rules").count() == 2


def test_an_unused_policy_is_deleted_after_confirmation(researcher_client, policy) -> None:
    confirm = researcher_client.get(f"/policies/{policy.pk}/delete/").content.decode()
    assert "Delete policy rules?" in confirm and "No batch uses it" in confirm
    assert PolicyConfig.objects.filter(pk=policy.pk).exists()

    response = researcher_client.post(f"/policies/{policy.pk}/delete/")

    assert response.status_code == 302
    assert not PolicyConfig.objects.filter(pk=policy.pk).exists()
    assert (
        "Policy &#x27;rules&#x27; deleted." in researcher_client.get(response.url).content.decode()
    )


def test_a_used_policy_is_not_deleted_and_the_page_says_how_many_batches_use_it(
    researcher_client, policy, demo_benchmark
) -> None:
    _use(policy, demo_benchmark, batches=2)
    confirm = researcher_client.get(f"/policies/{policy.pk}/delete/").content.decode()
    assert "used by 2 batches" in confirm

    response = researcher_client.post(f"/policies/{policy.pk}/delete/", follow=True)

    assert PolicyConfig.objects.filter(pk=policy.pk).exists()
    assert "cannot be deleted: it is used by 2 batches" in response.content.decode()


def test_the_list_shows_versions_uses_and_actions(researcher_client, policy, demo_benchmark):
    _use(policy, demo_benchmark)
    researcher_client.post(f"/policies/{policy.pk}/edit/", _form(policy))
    new = PolicyConfig.objects.get(name="rules v2")

    page = researcher_client.get("/policies/").content.decode()

    assert f'href="/policies/{new.pk}/edit/"' in page
    assert f'href="/policies/{new.pk}/delete/"' in page
    assert "1 batch" in page  # the first version's use


def test_the_list_reads_in_a_fixed_number_of_queries(
    researcher_client, demo_benchmark, django_assert_max_num_queries
) -> None:
    for n in range(6):
        _use(PolicyConfig.objects.create(name=f"p{n}", kind=PolicyKind.BASELINE), demo_benchmark)
    with django_assert_max_num_queries(14):
        assert researcher_client.get("/policies/").status_code == 200


def test_annotators_can_neither_edit_nor_delete(annotator_client, policy) -> None:
    assert annotator_client.get(f"/policies/{policy.pk}/edit/").status_code == 403
    assert annotator_client.post(f"/policies/{policy.pk}/edit/", _form(policy)).status_code == 403
    assert annotator_client.post(f"/policies/{policy.pk}/delete/").status_code == 403
    policy.refresh_from_db()
    assert policy.sampling == {}
