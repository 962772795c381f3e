"""Fixtures shared by the test packages: one definition each.

A fixture used by one package only lives in that package's conftest.py; builders that are
plain functions live in tests/factories.py, the fake model server in tests/fakes/.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from django.core.cache import cache
from django.db import connection

from harness_app.models import Benchmark, PolicyConfig, PolicyKind
from harness_app.roles import Role
from harness_app.services.benchmarks import benchmark_import
from tests import factories
from tests.chromium import LAUNCH_ARGS, ConsoleWatcher, chromium_path
from tests.fakes.openai_server import FakeOpenAIServer
from tests.paths import ROOT, shared_data_root
from tests.workers import LiveWorker, start_worker
from trajectories.models import Episode, RolloutBatch
from trajectories.services.annotations import annotation_bulk_apply

# --- markers: the real vLLM server -----------------------------------------------------------


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    from tests.vllm import SKIP_REASON, VLLM_URL

    for item in items:
        marker = item.get_closest_marker("vllm")
        if marker is None:
            continue
        if not VLLM_URL:
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))
        if marker.kwargs.get("adapters"):
            item.add_marker(pytest.mark.xdist_group("vllm-adapters"))
    # The real-vLLM tests are the slowest: started first, they overlap everything else.
    items.sort(key=lambda item: item.get_closest_marker("vllm") is None)


# --- shared benchmark data and the real model server ---------------------------------------


def _probe_database_features() -> None:
    """Django asks the database some features lazily, with queries of its own the first
    time (SQLite's JSON support: a savepoint and a SELECT JSON). Asked before a count
    starts, they are never counted, so a query count does not depend on which test ran
    first (the suite must pass in any order: --random-order)."""
    _ = connection.features.supports_json_field


@pytest.fixture
def django_assert_num_queries(django_assert_num_queries: Any, db: None) -> Any:
    _probe_database_features()
    return django_assert_num_queries


@pytest.fixture
def django_assert_max_num_queries(django_assert_max_num_queries: Any, db: None) -> Any:
    _probe_database_features()
    return django_assert_max_num_queries


@pytest.fixture(scope="session")
def shared_data() -> Path:
    root = shared_data_root()
    if not root.is_dir():
        pytest.skip(f"shared benchmark data not found at {root} (set HARNESS_SHARED_DATA)")
    return root


@pytest.fixture(scope="session")
def hotpotqa_dir(shared_data: Path) -> Path:
    path = shared_data / "hotpotqa-dev500"
    if not (path / "corpus.jsonl").is_file():
        pytest.skip(f"hotpotqa-dev500 not found under {shared_data}")
    return path


@pytest.fixture(scope="session")
def scifact_dir(shared_data: Path) -> Path:
    path = shared_data / "scifact"
    if not (path / "corpus.jsonl").is_file():
        pytest.skip(f"scifact not found under {shared_data}")
    return path


def smollm2_model_dir() -> Path:
    """SmolLM2-135M-Instruct as `make llm` lays it out (LLM_DIR overrides .llm/)."""
    return Path(os.environ.get("LLM_DIR", ROOT / ".llm")) / "smollm2-135m-instruct"


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    for package in ("torch", "transformers", "peft"):
        pytest.importorskip(package, reason=f"the trainer needs {package} (the 'train' extra)")
    path = smollm2_model_dir()
    if not (path / "model.safetensors").is_file():
        pytest.skip(f"no SmolLM2 safetensors folder at {path}: run `make llm` (or set LLM_DIR)")
    return path


@pytest.fixture(scope="session")
def tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(smollm2_dir))


# --- the fake model server and policies behind it (RL and SFT jobs) ----------------------


@pytest.fixture
def lora_server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(model="smollm2") as server:
        yield server


@pytest.fixture
def weights_dir(tmp_path: Path) -> Path:
    """A folder that looks like model weights to the create checks (the trainer is never
    started on it)."""
    folder = tmp_path / "weights"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


@pytest.fixture
def llm_policy(lora_server: FakeOpenAIServer) -> PolicyConfig:
    return PolicyConfig.objects.create(
        name="smollm2",
        kind=PolicyKind.OPENAI,
        base_url=lora_server.base_url,
        model="smollm2",
        tool_call_format="json_schema",
        sampling={"temperature": 1.0, "max_tokens": 64},
    )


@pytest.fixture
def served_model() -> str:
    """The real vLLM server's base model (tests/vllm.py); use with `needs_vllm`."""
    from tests.vllm import base_model

    return base_model()


# --- users and clients ---------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _fresh_throttle_counts() -> Iterator[None]:
    # The API's throttle counts live in the cache; each test starts with none.
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def researcher(db: None) -> Any:
    return factories.user("rita", Role.RESEARCHER)


@pytest.fixture
def annotator(db: None) -> Any:
    return factories.user("anna", Role.ANNOTATOR)


@pytest.fixture
def researcher_client(client: Any, researcher: Any) -> Any:
    client.force_login(researcher)
    return client


@pytest.fixture
def annotator_client(client: Any, annotator: Any) -> Any:
    client.force_login(annotator)
    return client


@pytest.fixture
def researcher_api(researcher: Any) -> Any:
    return factories.client_for(researcher)


@pytest.fixture
def annotator_api(annotator: Any) -> Any:
    return factories.client_for(annotator)


@pytest.fixture
def anonymous_api() -> Any:
    return factories.client_for(None)


# --- the demo benchmark and episodes played on it ------------------------------------------


@pytest.fixture
def demo_benchmark(db: None) -> Benchmark:
    return factories.demo_benchmark()


@pytest.fixture
def baseline_policy(db: None) -> PolicyConfig:
    return factories.baseline_policy()


@pytest.fixture
def ran_batch(demo_benchmark: Benchmark, baseline_policy: PolicyConfig) -> RolloutBatch:
    """Two queries × two samples of the baseline policy on the demo benchmark."""
    return factories.batch_played(
        demo_benchmark, baseline_policy, query_limit=2, samples_per_query=2
    )


@pytest.fixture
def approved(demo_benchmark: Benchmark, baseline_policy: PolicyConfig, researcher: Any) -> Any:
    """Two queries of the baseline, every episode approved by the researcher: what an SFT
    export takes by default."""
    batch = factories.run_batch(demo_benchmark, baseline_policy, queries=2)
    annotation_bulk_apply(actor=researcher, filters={"batch": batch.pk}, label="approve")
    return batch


@pytest.fixture
def episode(ran_batch: RolloutBatch) -> Episode:
    return ran_batch.episodes.select_related("query").order_by("pk").first()


@pytest.fixture
def hostile_episode(tmp_path: Path, baseline_policy: PolicyConfig) -> Episode:
    """A real episode over hostile documents, plus a hostile model reply and observation."""
    result = benchmark_import(
        path=factories.write_hostile_demo(tmp_path / "hostile"), name="hostile", fmt="beir"
    )
    benchmark = Benchmark.objects.get(pk=result.benchmark_id)
    batch = factories.batch_played(benchmark, baseline_policy, query_limit=1)
    episode = batch.episodes.get()
    turn = episode.turn_rows.get(index=1)
    turn.observation += f"\n{factories.IMG} <a href='{factories.JS_URL}'>click</a>"
    turn.save(update_fields=["observation"])
    factories.model_call_create(
        episode,
        turn_index=1,
        content=f"I think {factories.SCRIPT}{factories.IMG}",
        token_text=factories.SCRIPT,
    )
    return episode


@pytest.fixture
def new_model_call() -> Any:
    """factories.model_call_create, for the modules that take their helpers as fixtures."""
    return factories.model_call_create


@pytest.fixture
def payloads() -> SimpleNamespace:
    return SimpleNamespace(
        script=factories.SCRIPT, img=factories.IMG, js_url=factories.JS_URL, all=factories.PAYLOADS
    )


# --- a real Celery worker and a real Chromium ----------------------------------------------


@pytest.fixture
def live_worker(tmp_path: Path, transactional_db: None) -> Iterator[LiveWorker]:
    worker = start_worker(tmp_path)
    yield worker
    worker.stop()


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    path = chromium_path()
    if path is None:
        pytest.skip("no Chromium found (apt-get install chromium, or set CHROMIUM_PATH)")
    playwright_api = pytest.importorskip("playwright.sync_api")
    # Playwright's sync API runs an event loop in the test thread, so Django's async-safety
    # guard must be told the ORM calls the tests make there (creating users) are fine.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with playwright_api.sync_playwright() as pw:
        instance = pw.chromium.launch(executable_path=path, headless=True, args=LAUNCH_ARGS)
        yield instance
        instance.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.console_watcher = ConsoleWatcher(page)
    yield page
    context.close()


@pytest.fixture
def broker_down(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every task send refused, as kombu refuses it when the broker is unreachable."""
    from kombu.exceptions import OperationalError

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise OperationalError("connection refused")

    monkeypatch.setattr("harness_app.queues.enqueue", refuse)
