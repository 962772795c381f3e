"""A real Chromium opens every launch form (each page whose address ends in `new/`) at 1400
and 900 px and measures every form control it shows: none may be drawn at zero or a few
pixels, no checkbox may be drawn as a large blank box, and each must carry a visible label.

With SCREENSHOT_DIR set, the batch, ablation and evaluation forms are saved there for
docs/ui.md (1400×900, full page)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from harness_app.roles import Role
from harness_app.services.users import user_ensure
from tests import factories
from tests.chromium import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-forms-123"
WIDTHS = (1400, 900)
SMALLEST = 8  # px: a control narrower or lower than this cannot be seen or hit
LARGEST_TICK = 32  # px: a checkbox or radio button bigger than this is drawn as a blank box
EXPECTED = {
    "batch_launch", "ablation_launch", "evaluation_launch", "sft_export_create",
    "sft_job_launch", "rl_job_launch", "policy_create", "recording_create",
}  # fmt: skip
SCREENSHOTS = {
    "batch_launch": "launch-batch.png",
    "ablation_launch": "launch-ablation.png",
    "evaluation_launch": "launch-evaluation.png",
}

# Every control the page shows (not hidden inputs, nor one inside something folded away),
# its box, its kind, and its label: a <label> (the box of its text, which can run past the
# label's own box), an aria-label or a button's own text; and the box of the fieldset or
# form holding it, which the label's text must stay inside.
MEASURE = """
() => Array.from(document.querySelectorAll(
    'main form input:not([type=hidden]), main form select, main form textarea, main form button'
  ))
  .filter(el => el.checkVisibility({visibilityProperty: true}))
  .map(el => {
    const edges = r => r && {left: r.left, right: r.right, top: r.top, bottom: r.bottom};
    const box = el.getBoundingClientRect();
    const label = el.labels && el.labels[0];
    let text = (el.getAttribute('aria-label') || (el.tagName === 'BUTTON' ? el.innerText : ''));
    let textBox = null;
    if (label) {
      const range = document.createRange();
      range.selectNodeContents(label);
      text = label.innerText;
      const shown = label.checkVisibility({visibilityProperty: true});
      textBox = shown ? range.getBoundingClientRect() : null;
    }
    const holder = el.closest('fieldset') || el.closest('form');
    return {
      name: (el.name || el.id || el.innerText.trim() || el.outerHTML.slice(0, 60))
        + (el.type === 'checkbox' || el.type === 'radio' ? '=' + el.value : ''),
      type: el.type || el.tagName.toLowerCase(),
      width: box.width, height: box.height,
      labelText: text.trim(), hasLabelElement: !!label,
      label: edges(textBox), holder: edges(holder.getBoundingClientRect()),
    };
  })
"""


def _launch_forms() -> dict[str, str]:
    """Every named page whose route ends in `new/`: a form added later is measured too."""
    found: dict[str, str] = {}

    def walk(patterns: list[Any], prefix: str) -> None:
        for entry in patterns:
            route = prefix + str(entry.pattern)
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, route)
            elif isinstance(entry, URLPattern) and entry.name and route.endswith("new/"):
                found[entry.name] = "/" + route

    walk(get_resolver().url_patterns, "")
    return found


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        min(a["right"], b["right"]) - max(a["left"], b["left"]) > 1
        and min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]) > 1
    )


def _label_problem(control: dict[str, Any]) -> str | None:
    label, holder = control["label"], control["holder"]
    if not control["hasLabelElement"]:
        return None if control["labelText"] else "has no label"
    if not control["labelText"] or label is None:
        return "has no visible label"
    if min(label["right"] - label["left"], label["bottom"] - label["top"]) < SMALLEST:
        return "has a label drawn too small to read"
    if label["left"] < holder["left"] - 1 or label["right"] > holder["right"] + 1:
        return f"has its label {control['labelText']!r} running out of its box"
    return None


def _problems(controls: list[dict[str, Any]]) -> list[str]:
    problems = []
    for i, control in enumerate(controls):
        size = f"{control['width']:.0f}x{control['height']:.0f} px"
        where = f"{control['type']} {control['name']!r}"
        if min(control["width"], control["height"]) < SMALLEST:
            problems.append(f"{where} is drawn at {size}")
        elif (
            control["type"] in ("checkbox", "radio")
            and max(control["width"], control["height"]) > LARGEST_TICK
        ):
            problems.append(f"{where} is drawn as a {size} box")
        if (problem := _label_problem(control)) is not None:
            problems.append(f"{where} {problem}")
        for other in controls[i + 1 :]:
            if control["label"] and other["label"] and _overlap(control["label"], other["label"]):
                problems.append(f"{where}'s label overlaps {other['name']!r}'s")
    return problems


def test_every_launch_form_draws_each_control_with_its_label(live_server: Any, page: Any) -> None:
    factories.demo_benchmark(), factories.baseline_policy()
    user_ensure(username="rita", password=PASSWORD, role=Role.RESEARCHER)
    login(page, live_server.url, "rita", PASSWORD)
    forms = _launch_forms()
    assert forms.keys() >= EXPECTED, f"launch forms not found: {EXPECTED - forms.keys()}"
    screenshots = os.environ.get("SCREENSHOT_DIR")
    problems: list[str] = []
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        for name, path in sorted(forms.items()):
            response = page.goto(f"{live_server.url}{path}")
            assert response is not None and response.status == 200, f"{path}: {response}"
            controls = page.evaluate(MEASURE)
            assert len(controls) > 1, f"{path} shows no form"
            problems += [f"{path} at {width} px: {p}" for p in _problems(controls)]
            if screenshots and width == 1400 and name in SCREENSHOTS:
                page.screenshot(path=str(Path(screenshots) / SCREENSHOTS[name]), full_page=True)
    assert not problems, "\n".join(problems)
    assert page.console_watcher.errors == []
