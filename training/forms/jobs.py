"""What the RL and SFT launch forms share. The bounds live in the services
(RLJobSettings.check, SFTJobSettings.check and the set-up checks), whose errors name the
field they refuse; the views show them there.

A kind's trainer settings are drawn from its settings dataclass, as a ModelForm draws its
fields from a model: the field's kind from the setting's type (an int, a float, a flag; a
setting that may be None is optional), its initial value from the default, and its label
and help from the kind's tables. The fields the kinds name themselves (what a job trains
on, choices, JSON) are declared on each form."""

from __future__ import annotations

import typing
from typing import Any, ClassVar

from django import forms
from django.conf import settings

CHECKPOINTING_CHOICES = [("", "auto: on for CUDA, off on the CPU"), ("on", "on"), ("off", "off")]


def _checkpointing(value: str) -> bool | None:
    return {"on": True, "off": False}.get(value)


def targets_clean(value: str | None) -> list[str] | None:
    """A comma-separated list of module names; blank: None (the default)."""
    return [part.strip() for part in (value or "").split(",") if part.strip()] or None


class TrainingJobLaunchForm(forms.Form):
    """A job's name, its base weights, its LoRA targets, gradient checkpointing, and the
    kind's trainer settings (`setting_fields`, drawn from `defaults`)."""

    kind_label: ClassVar[str]  # "RL job": the name's help says what a blank gives
    defaults: ClassVar[Any]  # the kind's settings dataclass, at its defaults
    setting_fields: ClassVar[tuple[str, ...]]
    labels: ClassVar[dict[str, str]]
    help_texts: ClassVar[dict[str, str]]  # of the setting fields and the shared ones
    bounds: ClassVar[dict[str, tuple[int, int]]] = {}  # min and max shown on the widget
    optional: ClassVar[frozenset[str]] = frozenset()  # may be left blank: the default
    initials: ClassVar[dict[str, Any]] = {}  # instead of the default (a callable: when drawn)

    name = forms.CharField(required=False, max_length=200, label="Name")
    base_model_dir = forms.CharField(
        max_length=500,
        initial=lambda: settings.RL_BASE_MODEL_DIR,
        help_text="The local folder of the weights that server serves; the trainer loads it.",
        label="Base weights folder",
    )
    lora_targets = forms.CharField(required=False, label="LoRA target modules")
    gradient_checkpointing = forms.TypedChoiceField(
        required=False,
        choices=CHECKPOINTING_CHOICES,
        coerce=_checkpointing,
        empty_value=None,
        label="Gradient checkpointing",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        types = typing.get_type_hints(type(self.defaults))
        for name in self.setting_fields:
            self.fields[name] = self._setting_field(name, types[name])
        self.fields["name"].help_text = f"Optional; blank: {self.kind_label} N."
        self.fields["lora_targets"].initial = ", ".join(self.defaults.lora_targets)
        for name, text in self.help_texts.items():
            self.fields[name].help_text = text
        self.order_fields(self.field_order)

    def _setting_field(self, name: str, hint: Any) -> forms.Field:
        kinds = typing.get_args(hint) or (hint,)
        default = getattr(self.defaults, name)
        attrs: dict[str, Any] = {"label": self.labels[name], "required": False}
        if bool in kinds:
            return forms.BooleanField(**attrs)
        attrs["required"] = default is not None and name not in self.optional
        attrs["initial"] = self.initials.get(name, default)
        if name in self.bounds:
            low, high = self.bounds[name]
            attrs["widget"] = forms.NumberInput({"min": low, "max": high})
        return forms.FloatField(**attrs) if float in kinds else forms.IntegerField(**attrs)

    def clean_lora_targets(self) -> list[str] | None:
        """A comma-separated list; blank leaves the default (or the preset's)."""
        return targets_clean(self.cleaned_data.get("lora_targets"))
