"""Writing the LLM verifier's calls (trajectories/models/verifier_calls.py).

The rollout worker drains the verifier after each turn and hands its calls here, in the
same way it hands the policy's calls to `rollouts.turn_record`; a crashed attempt's rows
are wiped by `rollouts.episode_claim` with the rest of what it wrote.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness_app.harness.llm.verifier import VerifierCallRecord
from trajectories.models import Episode, VerifierCall, pack_ints


def verifier_calls_record(
    *, episode: Episode, turn_index: int, calls: Sequence[VerifierCallRecord]
) -> None:
    VerifierCall.objects.bulk_create(
        VerifierCall(
            episode=episode,
            turn_index=turn_index,
            claim=call.claim,
            doc_id=call.doc_id[:500],
            base_url=call.base_url[:500],
            model=call.model[:200],
            request=call.request,
            response=call.response,
            completion=call.completion,
            verdict=call.verdict,
            rationale=call.rationale,
            usage=call.usage,
            prompt_tokens=call.prompt_tokens,
            completion_tokens=call.completion_tokens,
            prompt_token_ids_blob=pack_ints(call.prompt_token_ids),
            completion_token_ids_blob=pack_ints(call.completion_token_ids),
            latency_ms=call.latency_ms,
            error=call.error,
        )
        for call in calls
    )
