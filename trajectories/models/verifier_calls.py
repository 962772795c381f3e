"""The LLM verifier's calls (harness_app/harness/llm/verifier.py), one row per judged
(claim, document), written beside the turn they belong to.

They are kept apart from `ModelCall` on purpose: model calls are the policy's trajectory,
which SFT exports and RL batches train on; a verifier call is the environment's work and
must never become training data. Token ids are stored as ModelCall stores them (int32
blobs) when the server returned them.
"""

from __future__ import annotations

from django.db import models


class VerifierCall(models.Model):
    episode = models.ForeignKey(
        "trajectories.Episode", on_delete=models.CASCADE, related_name="verifier_calls"
    )
    turn_index = models.PositiveIntegerField()
    claim = models.TextField()
    doc_id = models.CharField(max_length=500)
    base_url = models.CharField(max_length=500)
    model = models.CharField(max_length=200)
    request = models.JSONField()
    response = models.JSONField(default=dict)
    completion = models.TextField(blank=True)  # the judge's raw answer
    verdict = models.CharField(max_length=20, blank=True)  # "" when the call failed
    rationale = models.TextField(blank=True)
    usage = models.JSONField(default=dict)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    prompt_token_ids_blob = models.BinaryField(default=bytes)
    completion_token_ids_blob = models.BinaryField(default=bytes)
    latency_ms = models.FloatField(default=0.0)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["turn_index", "pk"]

    def __str__(self) -> str:
        return f"verifier call {self.pk} (episode {self.episode_id}, turn {self.turn_index})"

    @property
    def prompt_token_ids(self) -> list[int]:
        from trajectories.models import unpack_ints  # the package imports this module

        return unpack_ints(self.prompt_token_ids_blob)

    @property
    def completion_token_ids(self) -> list[int]:
        from trajectories.models import unpack_ints

        return unpack_ints(self.completion_token_ids_blob)
