"""The browser fixtures live in tests/chromium.py, registered for the whole suite in
tests/conftest.py, so every test module shares one Chromium; `login` is re-exported here."""

from tests.chromium import login

__all__ = ["login"]
