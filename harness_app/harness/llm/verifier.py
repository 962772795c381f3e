"""Harness-1's model verifier: one chat call per (claim, document), a yes/no answer.

The judge reads the claim and the document's first `DOC_CHARS` (6,000) characters of text
under its title, at temperature 0, and answers `verdict: yes` or `verdict: no` followed by a
rationale. Any OpenAI-compatible chat endpoint serves (the local vLLM by default).

Parsing is lenient about form and strict about meaning: case, markdown emphasis, quotes,
`=` or `-` for the colon and text before or after are all accepted; an answer that names no
verdict, or both, is "unclear" and keeps the raw text as its rationale. yes maps to
supported (score 1.0), no to unsupported (0.0), unclear scores 0.5.

Every call, failed ones included, is kept as a `VerifierCallRecord` (usage, latency, model,
token ids when the server returns them) until they are taken (`take_calls`; the runner
puts them on each turn's record): the web app stores them apart from the policy's calls,
which are training data and these are not. A server
that cannot be reached, times out, or answers with an error raises `VerifierError` (a
`ServiceError` naming the URL), which ends the episode; timeouts are bounded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import httpx

from harness_app.harness.compress import clip
from harness_app.harness.llm.client import ChatClient, ModelCallError, ModelCallRecord, Sampling
from harness_app.harness.types import Document, ServiceError
from harness_app.harness.verify import EVIDENCE_CHARS, Verdict

DOC_CHARS = 6000
MAX_TOKENS = 192
RATIONALE_CHARS = 2000
SCORES = {"supported": 1.0, "unsupported": 0.0, "unclear": 0.5}

SYSTEM_PROMPT = (
    "You judge whether a document supports a claim. Use only the document. Answer in this "
    "form and nothing else:\n"
    "verdict: yes   (the document supports the claim) or verdict: no   (it does not)\n"
    "rationale: one or two sentences saying why."
)

# "verdict" then a separator, with markdown or quotes anywhere around; the answer is a
# whole word and not the prompt's own "yes|no" or "yes/no" echoed back.
_VERDICT_RE = re.compile(
    r"verdict[\s*_\"'`]*[:=\-]?[\s*_\"'`]*(yes|no)\b(?![\s*]*[|/])", re.IGNORECASE
)
_RATIONALE_RE = re.compile(r"rationale[\s*_\"'`]*[:=\-]?[\s*_\"'`]*(.*)", re.IGNORECASE | re.DOTALL)
# Left around a rationale by markdown, quotes or a JSON-shaped answer.
_WRAPPING = " \t\n\"'`*_{}"
_LEADING = _WRAPPING + ".,;:-"


class VerifierError(ServiceError):
    """The verifier's server failed: reason `verifier_unreachable` (no connection, a
    timeout) or `verifier_error` (an error status, an answer that is not a chat reply)."""


@dataclass(frozen=True, slots=True)
class ParsedVerdict:
    verdict: str  # supported | unsupported | unclear
    rationale: str


def parse_verdict(text: str) -> ParsedVerdict:
    """The verdict and rationale in a judge's reply; "unclear" with the raw text when the
    reply names no verdict or contradicts itself."""
    matches = list(_VERDICT_RE.finditer(text))
    answers = {m.group(1).lower() for m in matches}
    if len(answers) != 1:
        return ParsedVerdict("unclear", text.strip()[:RATIONALE_CHARS])
    verdict = "supported" if answers == {"yes"} else "unsupported"
    labelled = _RATIONALE_RE.search(text)
    if labelled:
        rationale = labelled.group(1)
    else:  # no label: what follows the verdict, else what precedes it
        after = text[matches[-1].end() :].lstrip(_LEADING).rstrip(_WRAPPING)
        rationale = after or text[: matches[0].start()]
    rationale = " ".join(rationale.split()).lstrip(_LEADING).rstrip(_WRAPPING)
    return ParsedVerdict(verdict, rationale[:RATIONALE_CHARS])


def judge_messages(
    claim: str, document: Document, doc_chars: int = DOC_CHARS
) -> list[dict[str, str]]:
    body = document.text[:doc_chars]
    user = f"Claim: {claim}\n\nDocument title: {document.title}\nDocument text:\n{body}"
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


@dataclass
class VerifierCallRecord:
    """One judge call as the web app stores it. `verdict` is "" when the call failed."""

    claim: str
    doc_id: str
    base_url: str
    model: str
    request: dict[str, Any]
    response: dict[str, Any] = field(default_factory=dict)
    completion: str = ""
    verdict: str = ""
    rationale: str = ""
    usage: dict[str, Any] = field(default_factory=dict)
    prompt_token_ids: list[int] = field(default_factory=list)
    completion_token_ids: list[int] = field(default_factory=list)
    latency_ms: float = 0.0
    error: str = ""

    @property
    def prompt_tokens(self) -> int:
        return int(self.usage.get("prompt_tokens") or 0)

    @property
    def completion_tokens(self) -> int:
        return int(self.usage.get("completion_tokens") or 0)


class LLMVerifier:
    """A `Verifier` backed by a chat model. Not thread-safe: one per episode runner."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        timeout_s: float = 60.0,
        api_key: str = "EMPTY",
        capture_tokens: bool = True,
        retries: int = 1,
        doc_chars: int = DOC_CHARS,
        max_tokens: int = MAX_TOKENS,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not model:
            raise ValueError("an LLM verifier needs a model name")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.retries = retries
        self.doc_chars = doc_chars
        # vLLM's token ids come back only when asked; another server may refuse the field.
        self.capture_tokens = capture_tokens
        self.sampling = Sampling(temperature=0.0, top_p=1.0, max_tokens=max_tokens)
        self.calls: list[VerifierCallRecord] = []
        # capture_tokens=False: the client must not insist on token ids; we read them here.
        self._client = ChatClient(
            self.base_url,
            model,
            timeout_s=timeout_s,
            api_key=api_key,
            capture_tokens=False,
            transport=transport,
        )

    def close(self) -> None:
        self._client.close()

    def take_calls(self) -> list[VerifierCallRecord]:
        """The calls made since the last take, oldest first (`types.CallRecorder`)."""
        calls, self.calls = self.calls, []
        return calls

    def verify(self, claim: str, document: Document) -> Verdict:
        extra = {"return_token_ids": True} if self.capture_tokens else {}
        request = self._client.build_request(
            judge_messages(claim, document, self.doc_chars), self.sampling, **extra
        )
        for attempt in range(self.retries + 1):
            record = VerifierCallRecord(claim, document.doc_id, self.base_url, self.model, request)
            self.calls.append(record)
            try:
                call = self._client.complete(request)
            except ModelCallError as exc:
                _fill(record, exc.record)
                record.error = record.error or str(exc)
                if exc.retryable and attempt < self.retries:
                    continue
                raise _service_error(self.base_url, exc) from exc
            _fill(record, call)
            return self._verdict(record)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _verdict(self, record: VerifierCallRecord) -> Verdict:
        choice = (record.response.get("choices") or [{}])[0]
        content = (choice.get("message") or {}).get("content")
        if not isinstance(content, str):
            record.error = "verifier_error: the answer has no message content"
            raise VerifierError(
                "verifier_error",
                f"verifier at {self.base_url}: the answer is not a chat reply "
                "(no choices[0].message.content)",
            )
        parsed = parse_verdict(content)
        record.completion = content
        record.verdict, record.rationale = parsed.verdict, parsed.rationale
        evidence = (clip(parsed.rationale, EVIDENCE_CHARS),) if parsed.rationale else ()
        return Verdict(parsed.verdict, SCORES[parsed.verdict], evidence, parsed.rationale)


def _fill(record: VerifierCallRecord, call: ModelCallRecord | None) -> None:
    if call is None:
        return
    record.response = call.response
    record.usage = call.usage or dict(call.response.get("usage") or {})
    record.latency_ms = call.latency_ms
    record.error = call.error
    body = call.response
    choice = (body.get("choices") or [{}])[0]
    record.prompt_token_ids = _ints(body.get("prompt_token_ids"))
    record.completion_token_ids = _ints(choice.get("token_ids"))


def _ints(value: Any) -> list[int]:
    if not isinstance(value, list) or not all(type(v) is int for v in value):
        return []
    return list(value)


def _service_error(base_url: str, exc: ModelCallError) -> VerifierError:
    unreachable = exc.kind in {"model_unreachable", "model_timeout"}
    what = "unreachable" if exc.kind == "model_unreachable" else "failed"
    if exc.kind == "model_timeout":
        what = "timed out"
    reason = "verifier_unreachable" if unreachable else "verifier_error"
    detail = str(exc).removeprefix(f"{exc.kind}: ")
    return VerifierError(reason, f"verifier at {base_url} {what}: {detail}"[:2000])
