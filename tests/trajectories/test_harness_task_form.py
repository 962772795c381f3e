"""The harness task form (/harness/tasks/new/): a researcher creates a task without the API;
the service that checks POST /api/harness-tasks/ checks the form too, and its refusals are
named on the field they concern."""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from harness_app.roles import Role
from tests import factories
from trajectories.models import HarnessTask

pytestmark = pytest.mark.django_db

FILES = {"calc.py": "def add(a, b):\n    return a - b\n", "tests/test_calc.py": "x"}


def _form(**overrides: Any) -> dict[str, Any]:
    data = {
        "name": "fix add",
        "instruction": "Make add() add.",
        "repository": json.dumps(FILES),
        "eval_command": "python -m pytest -q",
        "timeout_s": "300",
        "eval_timeout_s": "60",
    }
    return {**data, **overrides}


def _zip(entries: dict[str, bytes]) -> SimpleUploadedFile:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return SimpleUploadedFile("repo.zip", buffer.getvalue(), content_type="application/zip")


@pytest.mark.parametrize(("role", "offered"), [(Role.RESEARCHER, True), (Role.ANNOTATOR, False)])
def test_the_list_page_links_the_form_for_researchers_only(
    client, role: Role, offered: bool
) -> None:
    client.force_login(factories.user("someone", role))
    page = client.get("/harness/tasks/").content.decode()
    assert ('href="/harness/tasks/new/"' in page) is offered


def test_a_researcher_creates_a_task_from_the_form(researcher_client) -> None:
    response = researcher_client.post("/harness/tasks/new/", _form())

    task = HarnessTask.objects.get()
    assert response.status_code == 302 and response.url == f"/harness/tasks/{task.pk}/"
    assert task.files == FILES
    assert (task.timeout_s, task.eval_timeout_s, task.created_by.username) == (300, 60, "rita")
    page = researcher_client.get(response.url).content.decode()
    assert "fix add" in page and "calc.py" in page


def test_the_repository_may_come_as_a_zip_under_one_folder(researcher_client) -> None:
    archive = _zip({"repo/calc.py": FILES["calc.py"].encode(), "repo/tests/test_calc.py": b"x"})
    response = researcher_client.post("/harness/tasks/new/", _form(repository="", archive=archive))

    assert response.status_code == 302
    assert HarnessTask.objects.get().files == FILES


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"repository": '{"../escape.py": "x"}'}, "repository", "no '..' or '.git' component"),
        ({"repository": '["calc.py"]'}, "repository", "files must be a JSON object"),
        ({"repository": "{not json"}, "repository", "Enter a valid JSON"),
        ({"instruction": "   "}, "instruction", "This field is required"),
        ({"eval_command": ""}, "eval_command", "This field is required"),
        ({"timeout_s": "0"}, "timeout_s", "timeout_s must be between 1 and 14400 seconds"),
        ({"eval_timeout_s": "99999"}, "eval_timeout_s", "between 1 and 14400 seconds"),
    ],
)
def test_bad_input_is_named_on_its_field(
    researcher_client, overrides: dict[str, str], field: str, words: str
) -> None:
    response = researcher_client.post("/harness/tasks/new/", _form(**overrides))

    assert response.status_code == 200
    assert not HarnessTask.objects.exists()
    errors = response.context["form"].errors
    assert list(errors) == [field]
    assert words in " ".join(errors[field])
    assert f'id="{field}-error"' in response.content.decode()


@pytest.mark.parametrize(
    ("entries", "words"),
    [
        ({"repo/.git/config": b"x"}, "no '..' or '.git' component"),
        ({"logo.png": b"\x89PNG\r\n\x1a\n\xff\xfe"}, "'logo.png' is not UTF-8 text"),
    ],
)
def test_a_bad_zip_is_named_on_the_upload(
    researcher_client, entries: dict[str, bytes], words: str
) -> None:
    response = researcher_client.post(
        "/harness/tasks/new/", _form(repository="", archive=_zip(entries))
    )

    assert response.status_code == 200 and not HarnessTask.objects.exists()
    assert words in " ".join(response.context["form"].errors["archive"])


def test_files_as_json_and_as_a_zip_at_once_are_refused(researcher_client) -> None:
    response = researcher_client.post("/harness/tasks/new/", _form(archive=_zip({"a.py": b"x"})))

    assert not HarnessTask.objects.exists()
    assert "not both" in " ".join(response.context["form"].errors["archive"])


def test_annotators_are_refused(annotator_client) -> None:
    assert annotator_client.get("/harness/tasks/new/").status_code == 403
    assert annotator_client.post("/harness/tasks/new/", _form()).status_code == 403
    assert not HarnessTask.objects.exists()
