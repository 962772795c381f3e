"""Fields the API's shapes share."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from harness_app.harness.ablation import REFERENCE_CONDITIONS, condition_name


class ConditionField(serializers.ChoiceField):
    """An ablation condition by its one name; the reference's older names (`minus_verify`,
    ...) are accepted and read as it. The schema lists the one names only."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(choices=list(REFERENCE_CONDITIONS), **kwargs)

    def to_internal_value(self, data: Any) -> Any:
        return super().to_internal_value(condition_name(data) if isinstance(data, str) else data)
