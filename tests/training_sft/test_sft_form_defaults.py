"""The SFT launch form's LoRA rank defaults to what the configured vLLM server can load
(its --max-lora-rank, LLM_MAX_LORA_RANK), so the default job's adapter is not refused at
publish; Harness-1's 32 where the server takes it."""

from __future__ import annotations

import re

import pytest

from harness_app.roles import Role
from tests import factories
from training.lora import lora_rank_default

pytestmark = pytest.mark.django_db


def _input(page: str, name: str) -> str:
    return re.search(rf'<input [^>]*name="{name}"[^>]*>', page).group(0)


@pytest.mark.parametrize(
    ("server_rank", "rank", "alpha"), [(16, "16", "32"), (64, "32", "64"), (32, "32", "64")]
)
def test_the_default_rank_is_what_the_server_loads(
    researcher_client, settings, server_rank: int, rank: str, alpha: str
) -> None:
    settings.LLM_MAX_LORA_RANK = server_rank

    page = researcher_client.get("/training/sft/new/").content.decode()

    assert f'value="{rank}"' in _input(page, "lora_rank")
    assert f'value="{alpha}"' in _input(page, "lora_alpha")  # alpha / rank stays 2
    assert f"--max-lora-rank {server_rank}" in page


def test_the_default_is_harness_1s_rank_capped_by_the_server() -> None:
    assert [lora_rank_default(32, server_max=n) for n in (8, 16, 32, 64)] == [8, 16, 32, 32]


@pytest.mark.parametrize(("server_rank", "rank", "alpha"), [(16, 16, 32), (64, 32, 64)])
def test_the_api_takes_the_same_default_as_the_form(
    export, llm_policy, weights_dir, settings, server_rank: int, rank: int, alpha: int
) -> None:
    settings.LLM_MAX_LORA_RANK = server_rank
    api = factories.client_for(factories.user("rae", Role.RESEARCHER))
    data = {"export": export.pk, "base_policy": llm_policy.pk, "base_model_dir": str(weights_dir)}

    body = api.post("/api/sft-jobs/", data, format="json").json()

    assert (body["lora_rank"], body["lora_alpha"]) == (rank, alpha)
