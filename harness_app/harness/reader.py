"""The reader of Harness-1's modular RAG protocol: answer the question from the curated set.

After an episode, the documents it curated go to a reader model in importance order
(very_high first; ties in the order they were curated), each as its title and text. The
prompt is clipped to a character budget: each document to at most `max_doc_chars`, and
documents are added while the whole context stays within `max_context_chars` (the last
one that fits only in part is cut at a word). The reader asks any OpenAI-compatible chat
endpoint at temperature 0 for a short answer and records the tokens and latency of the
call; `answers.score_answer` then scores it by EM and F1.

An optional judge (`Reader.judge`) asks a second endpoint, or the same one, whether the
answer matches the gold answers and reads "correct" or "incorrect" from its reply.

Plain chat completions, no token ids: a hosted API serves as well as vLLM.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import httpx

from harness_app.harness.answers import score_answer
from harness_app.harness.llm.client import ChatClient, ModelCallError, Sampling
from harness_app.harness.state import IMPORTANCE_RANK
from harness_app.harness.types import Document, JSONObject, QuerySpec, Retriever

READER_PROMPT_VERSION = "reader-v1"
READER_SYSTEM_PROMPT = (
    "You answer questions from the documents you are given. Reply with the answer only: "
    "a name, a date, a number, a short phrase, or yes or no. No explanation, no full "
    "sentence, do not repeat the question: at most five words.\n"
    "Example: Question: In which city was the author of Faust born? Answer: Frankfurt"
)
JUDGE_SYSTEM_PROMPT = (
    "You grade answers to questions. Given the question, the gold answer(s) and a predicted "
    "answer, reply with exactly one word: correct if the prediction means the same as a "
    "gold answer, otherwise incorrect."
)
_ANSWER_PREFIXES = ("answer:", "the answer is", "final answer:", "a:")


class CuratedLike(Protocol):
    @property
    def importance(self) -> str: ...

    @property
    def added_turn(self) -> int: ...


@dataclass(frozen=True, slots=True)
class ReaderConfig:
    base_url: str
    model: str
    api_key: str = "EMPTY"
    max_tokens: int = 32
    max_context_chars: int = 6000
    max_doc_chars: int = 1500
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        for name in ("max_tokens", "max_context_chars", "max_doc_chars"):
            if getattr(self, name) < 1:
                raise ValueError(f"reader {name} must be at least 1, got {getattr(self, name)}")
        if not self.base_url:
            raise ValueError("reader base_url is empty")


@dataclass(slots=True)
class ReaderResult:
    """One reader call: the answer as cleaned for scoring, the raw reply, what was shown."""

    answer: str
    raw: str = ""
    doc_ids: list[str] = field(default_factory=list)
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: float = 0.0
    error: str = ""
    judge: bool | None = None

    def to_json(self) -> JSONObject:
        return asdict(self)


def curated_order(curated: Mapping[str, CuratedLike]) -> list[str]:
    """Curated doc ids by importance, highest first; ties keep their curation order."""
    position = {doc_id: i for i, doc_id in enumerate(curated)}
    return sorted(
        curated,
        key=lambda d: (
            -IMPORTANCE_RANK.get(curated[d].importance, -1),
            curated[d].added_turn,
            position[d],
        ),
    )


def gold_order(qrels: Mapping[str, int]) -> list[str]:
    """The oracle's documents: answer-bearing (grade 2) first, then other evidence."""
    judged = [(doc_id, grade) for doc_id, grade in qrels.items() if grade >= 1]
    return [doc_id for doc_id, _ in sorted(judged, key=lambda item: -item[1])]


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[: max(limit - 1, 0)]
    if " " in cut:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip() + "…"


def context_blocks(
    documents: Sequence[Document], *, max_context_chars: int, max_doc_chars: int
) -> list[tuple[str, str]]:
    """(doc id, block) per document shown, in order, within the budgets."""
    blocks: list[tuple[str, str]] = []
    left = max_context_chars
    for number, doc in enumerate(documents, start=1):
        head = f"[{number}] {doc.title}\n" if doc.title else f"[{number}]\n"
        room = min(max_doc_chars, left) - len(head)
        if room < 20:  # not even a phrase of the text would fit
            break
        block = head + _clip(doc.text.strip(), room)
        blocks.append((doc.doc_id, block))
        left -= len(block) + 2  # the blank line between blocks
    return blocks


def reader_messages(question: str, blocks: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """The chat the reader model sees."""
    context = "\n\n".join(block for _, block in blocks) or "(no documents)"
    user = (
        f"Documents:\n\n{context}\n\nQuestion: {question}\nAnswer in at most five words.\nAnswer:"
    )
    return [
        {"role": "system", "content": READER_SYSTEM_PROMPT},
        {"role": "user", "content": user},
    ]


def clean_answer(text: str) -> str:
    """The first non-blank line, without an "Answer:" lead, quotes or a final full stop."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    lowered = line.lower()
    for prefix in _ANSWER_PREFIXES:
        if lowered.startswith(prefix):
            line = line[len(prefix) :].strip()
            break
    line = line.strip().strip("\"'“”*").strip()
    return line[:-1].rstrip() if line.endswith(".") else line


def judge_messages(question: str, golds: Sequence[str], prediction: str) -> list[dict[str, Any]]:
    gold_text = " | ".join(golds)
    user = (
        f"Question: {question}\nGold answer(s): {gold_text}\nPredicted answer: {prediction}\n"
        "Is the prediction correct?"
    )
    return [
        {"role": "system", "content": JUDGE_SYSTEM_PROMPT},
        {"role": "user", "content": user},
    ]


def judge_verdict(text: str) -> bool | None:
    """True for "correct", False for "incorrect" (or "not correct"); None when neither."""
    lowered = text.strip().lower()
    if "incorrect" in lowered or "not correct" in lowered:
        return False
    return True if "correct" in lowered else None


class Reader:
    """A reader model (and optionally a judge) behind OpenAI-compatible endpoints."""

    def __init__(
        self,
        config: ReaderConfig,
        *,
        judge: ReaderConfig | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.config = config
        self.judge_config = judge
        self._client = _client(config, transport)
        self._judge = _client(judge, transport) if judge is not None else None

    def close(self) -> None:
        self._client.close()
        if self._judge is not None:
            self._judge.close()

    def read(self, question: str, documents: Sequence[Document]) -> ReaderResult:
        """Ask for the answer; a failed call comes back as a result with `error` set."""
        blocks = context_blocks(
            documents,
            max_context_chars=self.config.max_context_chars,
            max_doc_chars=self.config.max_doc_chars,
        )
        result = ReaderResult(answer="", doc_ids=[d for d, _ in blocks], model=self.config.model)
        sampling = Sampling(temperature=0.0, top_p=1.0, max_tokens=self.config.max_tokens)
        request = _plain_request(self._client, reader_messages(question, blocks), sampling)
        try:
            record = self._client.complete(request)
        except ModelCallError as exc:
            result.error = str(exc)
            result.latency_ms = exc.record.latency_ms if exc.record else 0.0
            return result
        result.raw = str(record.message.get("content") or "")
        result.answer = clean_answer(result.raw)
        result.prompt_tokens = int(record.usage.get("prompt_tokens") or 0)
        result.completion_tokens = int(record.usage.get("completion_tokens") or 0)
        result.latency_ms = round(record.latency_ms, 1)
        return result

    def judge(self, question: str, golds: Sequence[str], prediction: str) -> bool | None:
        """The judge's verdict; None without a judge, on a failed call or an unclear reply."""
        if self._judge is None or self.judge_config is None:
            return None
        sampling = Sampling(temperature=0.0, top_p=1.0, max_tokens=8)
        messages = judge_messages(question, golds, prediction)
        try:
            record = self._judge.complete(_plain_request(self._judge, messages, sampling))
        except ModelCallError:
            return None
        return judge_verdict(str(record.message.get("content") or ""))

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def documents_of(retriever: Retriever, doc_ids: Sequence[str]) -> list[Document]:
    """The documents in the given order; an id the corpus lacks is skipped."""
    return [retriever.document(d) for d in doc_ids if d in retriever]


def answer_fields(
    reader: Reader, query: QuerySpec, documents: Sequence[Document], *, judge: bool = False
) -> dict[str, Any]:
    """What one reading adds to an episode's metrics: `reader_answer`, `reader` (the call's
    model, doc ids, tokens, latency, error) and, when the call worked and the query has a
    gold answer, `answer_em` and `answer_f1` (and `answer_judge`, 1.0 or 0.0, when the judge
    is asked and gives a clear verdict)."""
    result = reader.read(query.text, documents)
    fields: dict[str, Any] = {"reader_answer": result.answer, "reader": result.to_json()}
    score = None if result.error else score_answer(result.answer, query.gold_answers)
    if score is None:
        return fields
    fields["answer_em"], fields["answer_f1"] = score.em, round(score.f1, 4)
    verdict = reader.judge(query.text, query.gold_answers, result.answer) if judge else None
    if verdict is not None:
        fields["answer_judge"] = float(verdict)
        fields["reader"]["judge"] = verdict
    return fields


def _plain_request(
    client: ChatClient, messages: list[dict[str, Any]], sampling: Sampling
) -> dict[str, Any]:
    # No logprobs: the reader needs none, and some hosted models refuse to give them.
    request = client.build_request(messages, sampling)
    request.pop("logprobs", None)
    request.pop("top_logprobs", None)
    return request


def _client(config: ReaderConfig, transport: httpx.BaseTransport | None) -> ChatClient:
    return ChatClient(
        config.base_url,
        config.model,
        timeout_s=config.timeout_s,
        api_key=config.api_key,
        policy_version=READER_PROMPT_VERSION,
        transport=transport,
        capture_tokens=False,
    )


def served_model(base_url: str, *, api_key: str = "EMPTY", timeout_s: float = 10.0) -> str:
    """The first model /v1/models lists that is not a LoRA adapter: the reader's default."""
    try:
        response = httpx.get(
            f"{base_url.rstrip('/')}/models",
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=timeout_s,
        )
        response.raise_for_status()
        models = response.json()["data"]
    except (httpx.HTTPError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"cannot list the models of {base_url}: {exc}") from None
    if not models:
        raise ValueError(f"{base_url}/models lists no model")
    return str(next((m["id"] for m in models if not m.get("parent")), models[0]["id"]))
