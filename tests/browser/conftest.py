"""The browser fixtures live in tests/browser_fixtures.py, registered for the whole suite in
tests/conftest.py, so every test module shares one Chromium; `login` is re-exported here."""

from tests.browser_fixtures import login

__all__ = ["login"]
