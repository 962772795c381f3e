"""Every page needs a login; roles decide what a logged-in user may reach."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model

from harness_app.roles import Role
from harness_app.services.users import user_ensure

pytestmark = pytest.mark.django_db


def _login(client, username: str, role: Role | None, staff: bool = False):
    user, _ = user_ensure(username=username, password="pw-123456", role=role, is_staff=staff)
    client.force_login(user)
    return user


def test_anonymous_user_is_sent_to_login(client) -> None:
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


@pytest.mark.parametrize("role", [Role.RESEARCHER, Role.ANNOTATOR])
def test_both_roles_can_browse(client, role: Role) -> None:
    _login(client, "someone", role)
    response = client.get("/")
    assert response.status_code == 200
    assert role.value in response.content.decode()


def test_user_without_role_is_told_what_is_missing(client) -> None:
    _login(client, "norole", None)
    response = client.get("/")
    assert response.status_code == 403
    assert "researcher or annotator role" in response.content.decode()


def test_only_staff_reach_the_admin(client) -> None:
    _login(client, "plain", Role.RESEARCHER)
    assert client.get("/admin/").status_code == 302
    client.logout()
    _login(client, "boss", Role.RESEARCHER, staff=True)
    assert client.get("/admin/").status_code == 200


def test_user_ensure_keeps_an_existing_password_and_swaps_role() -> None:
    user_ensure(username="ann", password="first-pass-1", role=Role.ANNOTATOR)
    user, created = user_ensure(username="ann", password="other-pass-2", role=Role.RESEARCHER)
    assert not created
    user = get_user_model().objects.get(username="ann")
    assert user.check_password("first-pass-1")
    assert list(user.groups.values_list("name", flat=True)) == ["researcher"]


def test_login_form_logs_in_with_the_demo_command(client) -> None:
    from django.core.management import call_command

    call_command("setup_demo", verbosity=0)
    response = client.post("/login/", {"username": "annotator", "password": "harness-demo"})
    assert response.status_code == 302
    assert client.get("/").status_code == 200


def _nav_links(page: str) -> list[str]:
    nav = re.search(r'<nav aria-label="Main">(.*?)</nav>', page, re.S)
    assert nav, "the page has no main nav"
    return re.findall(r'href="([^"]+)"', nav.group(1))


@pytest.mark.parametrize("role", [Role.RESEARCHER, Role.ANNOTATOR])
def test_every_nav_link_opens_for_the_role_that_sees_it(client, role: Role) -> None:
    _login(client, "someone", role)
    links = _nav_links(client.get("/").content.decode())
    assert "/" in links and "/episodes/" in links

    refused = {link: client.get(link).status_code for link in links}
    assert {link: code for link, code in refused.items() if code != 200} == {}


def test_the_nav_offers_researcher_pages_to_researchers_only(client) -> None:
    _login(client, "ann", Role.ANNOTATOR)
    annotator_links = set(_nav_links(client.get("/").content.decode()))
    client.logout()
    _login(client, "rita", Role.RESEARCHER)
    researcher_links = set(_nav_links(client.get("/").content.decode()))

    assert researcher_links - annotator_links == {
        "/batches/new/",
        "/evaluations/",
        "/policies/",
        "/recordings/",
    }
