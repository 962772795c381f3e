"""Ids from outside that are not ids get a 400 naming the field, never a 500 or a silent
truncation: JSON's true and 1.7 are not episode 1, and a number past 64 bits never
reaches the database driver."""

from __future__ import annotations

import pytest

from tests import factories

pytestmark = pytest.mark.django_db

NOT_IDS = ["true", "1.7", "-3", "0", "1e3", "99999999999999999999999", "９"]


@pytest.mark.parametrize("value", NOT_IDS)
@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/api/episodes/?batch={}", "batch"),
        ("/api/episodes/?benchmark={}", "benchmark"),
        ("/api/annotations/?episode={}", "episode"),
        ("/api/recordings/report/?session={}", "session"),
        ("/api/harness-groups/?task={}", "task"),
    ],
)
def test_an_id_that_is_not_one_is_a_400_naming_the_field(researcher_api, path, field, value):
    response = researcher_api.get(path.format(value))
    assert response.status_code == 400, response.content
    assert response["content-type"].startswith("application/json")
    assert "id" in " ".join(response.json()[field])


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "lots"])
def test_min_reward_must_be_a_finite_number(researcher_api, value):
    response = researcher_api.get(f"/api/episodes/reward-hacking/?min_reward={value}")
    assert response.status_code == 400
    assert response.json()["min_reward"] == [f"expected a finite number, got {value!r}"]


@pytest.mark.parametrize("value", ["99999999999999999999999", "1.7", "true"])
@pytest.mark.parametrize("field", ["batch", "benchmark", "policy"])
def test_pages_take_a_huge_or_loose_id_without_a_500(client, researcher, field, value):
    client.force_login(researcher)
    assert client.get(f"/compare/?a={value}&b=1").status_code == 400
    listed = client.get(f"/episodes/?{field}={value}")
    # The list stays usable and says which filter it ignored.
    assert listed.status_code == 200
    assert f"{field}: " in listed.content.decode() and "(ignored)" in listed.content.decode()


def test_a_good_id_still_filters(researcher_api):
    batch = factories.run_batch(factories.demo_benchmark(), factories.baseline_policy())
    other = factories.run_batch(factories.demo_benchmark(), factories.baseline_policy())
    listed = researcher_api.get(f"/api/episodes/?batch={batch.pk}").json()
    ids = sorted(e["id"] for e in listed["results"])
    assert ids == sorted(batch.episodes.values_list("pk", flat=True)) and other.pk != batch.pk
