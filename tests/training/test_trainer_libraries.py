"""The SFT and RL launch forms say when the trainer's libraries are missing (`make run`
installs the web app alone) and which command adds them."""

from __future__ import annotations

import pytest

from training import selectors

PAGES = ("/training/sft/new/", "/training/rl/new/")


@pytest.mark.parametrize("url", PAGES)
def test_a_missing_trainer_library_is_named_with_the_command_that_adds_it(
    researcher_client, monkeypatch, url
):
    monkeypatch.setattr(selectors, "TRAINER_LIBRARIES", ("json", "no_such_trainer_lib"))
    body = researcher_client.get(url).content.decode()
    assert 'id="trainer-libraries"' in body
    assert "no_such_trainer_lib" in body
    assert "make install-train" in body
    assert "json" not in body.split('id="trainer-libraries"')[1].split("</p>")[0]


@pytest.mark.parametrize("url", PAGES)
def test_no_warning_when_the_trainer_libraries_import(researcher_client, monkeypatch, url):
    monkeypatch.setattr(selectors, "TRAINER_LIBRARIES", ("json", "importlib"))
    body = researcher_client.get(url).content.decode()
    assert 'id="trainer-libraries"' not in body
