"""Corpora, documents, benchmarks, queries, qrels, import jobs and policy configs.

A corpus is identified by its content hash (the same sha256 the retrieval index records),
so two benchmarks over the same documents share one Corpus row and one index. Rows are
written by harness_app/services/ only; see docs/corpora.md for the import flow.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Count, OuterRef, Subquery
from django.db.models.functions import Coalesce

from harness_app import queues
from harness_app.jobs import Job
from harness_app.policy_hosts import validate_policy_base_url


class IndexStatus(models.TextChoices):
    MISSING = "missing", "Missing"
    QUEUED = "queued", "Queued"
    BUILDING = "building", "Building"
    READY = "ready", "Ready"
    # BM25 is ready; the dense embeddings are being computed (index_progress says how far).
    EMBEDDING = "embedding", "Embedding"
    STALE = "stale", "Stale"
    FAILED = "failed", "Failed"


class Corpus(models.Model):
    name = models.CharField(max_length=200, unique=True)
    # sha256 over the documents in stream order (harness.retrieval.store.ContentHasher)
    content_hash = models.CharField(max_length=64, db_index=True)
    doc_count = models.PositiveIntegerField(default=0)
    index_status = models.CharField(
        max_length=16, choices=IndexStatus.choices, default=IndexStatus.MISSING
    )
    index_path = models.CharField(max_length=500, blank=True)
    index_error = models.TextField(blank=True)
    # Percent of the documents embedded while index_status is "embedding" (indexes.py).
    index_progress = models.PositiveSmallIntegerField(default=0)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "corpora"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Document(models.Model):
    # No database-level foreign key: PostgreSQL checks one with a trigger per inserted row,
    # which tripled the cost of a million-row COPY. Documents are written only by the
    # importer, in the transaction that creates their corpus, and deleted with it
    # (services._corpus_delete_if_unused). The unique constraint below indexes corpus_id.
    corpus = models.ForeignKey(
        Corpus,
        on_delete=models.CASCADE,
        related_name="documents",
        db_constraint=False,
        db_index=False,
    )
    external_id = models.CharField(max_length=500)
    title = models.TextField(blank=True)
    text = models.TextField()

    class Meta:
        # Primary-key order is file order: exports and index builds stream by pk.
        ordering = ["pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["corpus", "external_id"], name="document_unique_external_id"
            )
        ]

    def __str__(self) -> str:
        return self.external_id


class BenchmarkSource(models.TextChoices):
    BEIR = "beir", "BEIR folder"
    HOTPOTQA = "hotpotqa", "HotpotQA JSON"
    MUSIQUE = "musique", "MuSiQue JSONL"
    TWOWIKI = "2wikimultihopqa", "2WikiMultihopQA JSON or JSONL"
    BROWSECOMP_PLUS = "browsecomp-plus", "BrowseComp-Plus folder"
    FRAMES = "frames", "FRAMES-style questions and pages"
    DEMO = "demo", "Built-in demo"


class BenchmarkQuerySet(models.QuerySet["Benchmark"]):
    def with_counts(self) -> BenchmarkQuerySet:
        """Annotate query_count and qrel_count with one correlated subquery each.

        Subqueries rather than Count() over joins: joining queries and qrels together
        would multiply the rows before counting.
        """
        queries = Query.objects.filter(benchmark=OuterRef("pk"))
        qrels = Qrel.objects.filter(query__benchmark=OuterRef("pk"))
        return self.annotate(
            query_count=_count_of(queries, "benchmark"),
            qrel_count=_count_of(qrels, "query__benchmark"),
        )

    def for_list(self) -> BenchmarkQuerySet:
        return self.select_related("corpus", "created_by").with_counts().order_by("name")


def _count_of(queryset: models.QuerySet[Any], group_by: str) -> Coalesce:
    counted = queryset.order_by().values(group_by).annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(counted), 0)


class Benchmark(models.Model):
    name = models.CharField(max_length=200, unique=True)
    corpus = models.ForeignKey(Corpus, on_delete=models.PROTECT, related_name="benchmarks")
    source = models.CharField(max_length=16, choices=BenchmarkSource.choices)
    split = models.CharField(max_length=50, default="test")
    # sha256 over the corpus hash, the split, the queries and the qrels
    content_hash = models.CharField(max_length=64)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created = models.DateTimeField(auto_now_add=True)

    objects = BenchmarkQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Query(models.Model):
    benchmark = models.ForeignKey(Benchmark, on_delete=models.CASCADE, related_name="queries")
    external_id = models.CharField(max_length=500)
    text = models.TextField()
    answer = models.TextField(blank=True)
    metadata = models.JSONField(default=dict, blank=True)

    class Meta:
        verbose_name_plural = "queries"
        ordering = ["pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["benchmark", "external_id"], name="query_unique_external_id"
            )
        ]

    def __str__(self) -> str:
        return self.external_id


class Qrel(models.Model):
    query = models.ForeignKey(Query, on_delete=models.CASCADE, related_name="qrels")
    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="qrels")
    grade = models.PositiveSmallIntegerField()  # 2 answer-bearing, 1 evidence, 0 not relevant

    class Meta:
        ordering = ["pk"]
        constraints = [
            models.UniqueConstraint(fields=["query", "document"], name="qrel_unique_pair")
        ]

    def __str__(self) -> str:
        return f"{self.query_id}→{self.document_id}: {self.grade}"


class ImportStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    UNCHANGED = "unchanged", "Unchanged (identical content)"
    FAILED = "failed", "Failed"


class ImportJobQuerySet(models.QuerySet["ImportJob"]):
    def recent(self, limit: int = 10) -> ImportJobQuerySet:
        return self.select_related("benchmark").order_by("-created_at")[:limit]


class ImportJob(Job):
    """An uploaded file waiting for, undergoing or done with an import by a worker.

    The row holds the durable outcome. Live progress during the import transaction is a
    small JSON file beside the upload (see services.import_progress_read): a row update
    from a second connection would wait on SQLite's single write lock until the import
    committed, which defeats the point of a progress line.
    """

    name = models.CharField(max_length=200)
    fmt = models.CharField(max_length=16, choices=BenchmarkSource.choices)
    split = models.CharField(max_length=50, default="test")
    replace = models.BooleanField(default=False)
    upload_path = models.CharField(max_length=500)
    status = models.CharField(
        max_length=16, choices=ImportStatus.choices, default=ImportStatus.QUEUED
    )
    documents = models.PositiveIntegerField(default=0)
    queries = models.PositiveIntegerField(default=0)
    qrels = models.PositiveIntegerField(default=0)
    message = models.TextField(blank=True)
    benchmark = models.ForeignKey(
        Benchmark, null=True, blank=True, on_delete=models.SET_NULL, related_name="import_jobs"
    )

    FINISHED = (ImportStatus.DONE, ImportStatus.UNCHANGED, ImportStatus.FAILED)
    TASK = queues.IMPORT_JOB_RUN

    objects = ImportJobQuerySet.as_manager()

    @classmethod
    def failure_fields(cls, reason: str) -> dict[str, str]:
        # The pages and the API show an import's outcome, failures included, as its message.
        return {"error": reason, "message": reason}

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"import {self.name} ({self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in (ImportStatus.QUEUED, ImportStatus.RUNNING)


class PolicyKind(models.TextChoices):
    # Deterministic at temperature 0, the default; sampled above it (rule_temperature).
    BASELINE = "baseline", "Rule baseline (no model)"
    OPENAI = "openai", "OpenAI-compatible (vLLM)"


class ToolCallFormat(models.TextChoices):
    OPENAI_TOOLS = "openai_tools", "OpenAI tools"
    JSON_SCHEMA = "json_schema", "JSON schema"


class ToolParser(models.TextChoices):
    """How the policy reads tool calls from raw text on the token-in path
    (harness_app/harness/llm/tool_parsers.py)."""

    HERMES = "hermes", "Hermes / Qwen"
    HARMONY = "harmony", "gpt-oss Harmony"
    LLAMA3_JSON = "llama3_json", "Llama 3 JSON"
    MISTRAL = "mistral", "Mistral"


class ContextMode(models.TextChoices):
    """How the chat policy builds each prompt (harness_app/harness/llm/chat_policy.py)."""

    APPEND = "append", "Append-only conversation"
    RERENDER = "rerender", "Re-rendered each turn (Harness-1)"


class RetrieverKind(models.TextChoices):
    """What the search tool ranks with (harness_app/harness/retrieval/hybrid.py)."""

    BM25 = "bm25", "BM25"
    DENSE = "dense", "Dense (all-MiniLM-L6-v2)"
    HYBRID = "hybrid", "Hybrid: BM25 + dense, fused by RRF (Harness-1)"


class VerifierKind(models.TextChoices):
    """Who judges a `verify` call: term coverage, or a chat model (Harness-1's verifier)."""

    LEXICAL = "lexical", "Lexical (term coverage, no model)"
    LLM = "llm", "LLM judge (yes/no with a rationale)"


class PolicyConfig(models.Model):
    # What a researcher sets, through the API (serializers.py) and the page (forms.py).
    EDITABLE_FIELDS = (
        "name",
        "kind",
        "base_url",
        "model",
        "sampling",
        "system_prompt_version",
        "tool_call_format",
        "tool_parser",
        "context_mode",
        "context_limit",
        "retriever",
        "verifier",
        "verifier_base_url",
        "verifier_model",
        "reranker_base_url",
        "reranker_model",
    )

    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=16, choices=PolicyKind.choices)
    base_url = models.URLField(blank=True, validators=[validate_policy_base_url])
    model = models.CharField(max_length=200, blank=True)
    # temperature, top_p, max_tokens, ... passed to the chat completions call
    sampling = models.JSONField(default=dict, blank=True)
    system_prompt_version = models.CharField(max_length=50, default="v1")
    tool_call_format = models.CharField(
        max_length=16, choices=ToolCallFormat.choices, default=ToolCallFormat.OPENAI_TOOLS
    )
    tool_parser = models.CharField(
        max_length=16, choices=ToolParser.choices, default=ToolParser.HERMES
    )
    context_mode = models.CharField(
        max_length=16, choices=ContextMode.choices, default=ContextMode.APPEND
    )
    # The prompt cap in real tokens; empty: 30,720 in rerender mode, 32,768 in append mode.
    context_limit = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)]
    )
    # Dense and hybrid need the dense extra on the rollout workers (docs/retrieval.md).
    retriever = models.CharField(
        max_length=16, choices=RetrieverKind.choices, default=RetrieverKind.BM25
    )
    # The harness's services (docs/harness.md): an empty URL is VLLM_BASE_URL; the LLM
    # verifier needs a model; an empty reranker model means no reranking.
    verifier = models.CharField(
        max_length=16, choices=VerifierKind.choices, default=VerifierKind.LEXICAL
    )
    verifier_base_url = models.URLField(blank=True, validators=[validate_policy_base_url])
    verifier_model = models.CharField(max_length=200, blank=True)
    reranker_base_url = models.URLField(blank=True, validators=[validate_policy_base_url])
    reranker_model = models.CharField(max_length=200, blank=True)
    # An edit of a config that batches or jobs already use writes a new row, `version` one
    # higher, `previous` the row it was edited from (services/policies.py): the old row,
    # and so every episode made with it, keeps its meaning.
    version = models.PositiveIntegerField(default=1)
    previous = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="next_versions"
    )
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def rule_temperature(self) -> float:
        """A baseline config's temperature: 0 (the default) plays the deterministic
        baseline, above 0 its sampled variant, seeded per episode
        (harness.policies.rule_policy, policies/sampled.py)."""
        temperature = (self.sampling or {}).get("temperature", 0.0)
        numeric = isinstance(temperature, int | float) and not isinstance(temperature, bool)
        return max(float(temperature), 0.0) if numeric else 0.0

    @property
    def is_deterministic(self) -> bool:
        """True when every sample of a query is the same episode: the rule baseline at
        temperature 0, or a model sampled at temperature 0 (greedy). The model client's
        default temperature is 1; the baseline's is 0."""
        if self.kind == PolicyKind.BASELINE:
            return self.rule_temperature == 0
        temperature = (self.sampling or {}).get("temperature", 1.0)
        return isinstance(temperature, int | float) and temperature == 0
