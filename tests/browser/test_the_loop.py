"""The whole loop in a real Chromium, as a new researcher and a new annotator would walk it
from the demo: no API call, no admin.

The researcher makes an LLM policy config (its server a canned OpenAI-compatible one, as
vLLM would be), launches a batch with it and watches the batch page reach its final
metrics without a reload while a live Celery worker runs the episodes. The annotator
approves them from the queue. The researcher exports the approved episodes, downloads the
export, and launches an RL job from the export's policy.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from harness_app.models import PolicyConfig
from harness_app.roles import Role
from harness_app.services.users import user_ensure
from tests.chromium import ConsoleWatcher, login
from tests.fakes.openai_server import FakeOpenAIServer
from tests.workers import start_worker
from training.models import RLJob, SFTExport
from trajectories.models import RolloutBatch

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-loop-123"
QUERIES = 3
SEARCH = {"tool": "search_corpus", "arguments": {"query": "Vell lamp inventor"}}
END = {"tool": "end_search", "arguments": {}}


def _policy_reply(n: int, body: dict[str, Any]) -> str:
    # A search first, then the end: every episode has a turn with results to judge. A
    # token-in call's prompt is ids, which the fake makes one per character.
    if "messages" in body:
        seen = json.dumps(body["messages"])
    else:
        seen = "".join(chr(t) for t in body.get("prompt") or [] if 31 < t < 0x110000)
    return json.dumps(END if SEARCH["arguments"]["query"] in seen else SEARCH)


def _page(browser: Any, base_url: str, username: str, role: Role) -> Any:
    user_ensure(username=username, password=PASSWORD, role=role)
    context = browser.new_context(viewport={"width": 1400, "height": 900}, accept_downloads=True)
    page = context.new_page()
    page.console_watcher = ConsoleWatcher(page)
    login(page, base_url, username, PASSWORD)
    return page


def _wait_for(predicate: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_new_researcher_and_annotator_walk_the_whole_loop(
    live_server: Any, browser: Any, demo_benchmark: Any, tmp_path: Path
) -> None:
    weights = tmp_path / "weights"  # what the RL form checks: a folder with config.json
    weights.mkdir()
    (weights / "config.json").write_text("{}")
    # No training queue: the RL job is launched and waits, which is all this walk needs.
    worker = start_worker(tmp_path / "worker", queues="celery,index,rollouts,rollouts_llm")
    with FakeOpenAIServer(model="m", reply=_policy_reply) as llm:
        try:
            rita = _page(browser, live_server.url, "rita", Role.RESEARCHER)

            # 1. A policy config for an OpenAI-compatible server, from the nav.
            rita.click("nav >> text=Policies")
            rita.click("text=New policy")
            rita.fill("#id_name", "fake-llm")
            rita.select_option("#id_kind", "openai")
            rita.fill("#id_base_url", llm.base_url)
            rita.fill("#id_model", "m")
            rita.fill("#id_sampling", '{"temperature": 0.7, "max_tokens": 256}')
            rita.click("main button[type=submit]")
            policy = PolicyConfig.objects.get(name="fake-llm")

            # 2. Launch a batch with it; the page follows the worker to the end, no reload.
            rita.locator("tr", has_text="fake-llm").locator("text=Launch a batch").click()
            rita.select_option("#id_benchmark", str(demo_benchmark.pk))
            rita.fill("#id_query_limit", str(QUERIES))
            rita.fill("#id_samples_per_query", "1")
            rita.click(".form-card button[type=submit]")
            rita.wait_for_url("**/batches/*/")
            batch = RolloutBatch.objects.get()
            assert batch.policy_id == policy.pk
            navigations: list[str] = []
            rita.on("framenavigated", lambda frame: navigations.append(frame.url))
            rita.locator("#batch-live[data-status=completed]").wait_for(timeout=120_000)
            assert navigations == [], "the batch page reloaded"
            live = rita.locator("#batch-live")
            assert live.locator("[data-metric=n]").inner_text() == str(QUERIES), worker.log()[
                -3000:
            ]
            assert rita.locator("text=Cancel batch").count() == 0
            assert llm.calls >= 2 * QUERIES  # a search and an end per episode

            # 3. The annotator approves each episode from the queue.
            anna = _page(browser, live_server.url, "anna", Role.ANNOTATOR)
            anna.click("nav >> text=Annotate")
            for _ in range(QUERIES):
                anna.locator('#label-form button[value="approve"]').click()
                anna.wait_for_load_state("networkidle")
            assert batch.episodes.filter(annotation_status="approved").count() == QUERIES
            assert anna.console_watcher.errors == []

            # 4. Export the approved episodes; the worker writes the file.
            rita.click("nav >> text=Exports")
            rita.click("text=New export")
            rita.fill("#id_batch", str(batch.pk))
            rita.click("main button[type=submit]")
            export = SFTExport.objects.get()
            _wait_for(
                lambda: SFTExport.objects.get(pk=export.pk).status == "done",
                "the export to finish",
            )
            rita.reload()
            with rita.expect_download() as download:
                rita.click("text=Download the JSONL")
            saved = tmp_path / "export.jsonl"
            download.value.save_as(saved)
            assert len(saved.read_text().splitlines()) == QUERIES

            # 5. An RL job from the export's policy, the form filled in from the export.
            rita.click("text=Launch RL from this export's policy")
            assert rita.locator("#id_base_policy").input_value() == str(policy.pk)
            rita.fill("#id_name", "rl from the loop")
            rita.fill("#id_base_model_dir", str(weights))
            rita.click("main button[type=submit]")
            rita.wait_for_url("**/training/rl/*/")
            job = RLJob.objects.get()
            assert job.base_policy_id == policy.pk
            assert "rl from the loop" in rita.locator("h1").inner_text()
            assert rita.console_watcher.errors == []
        finally:
            worker.stop()
