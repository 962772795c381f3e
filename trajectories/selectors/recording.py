"""Reads over recording sessions: their calls as token chains, per agent, as plain data.

Reconstruction is `harness.llm.reconstruct`'s, by strategy: `per_request`, or
`prefix_merge` within each agent (`reconstruct`), whose breaks name subagent
starts and context compaction. The older names "prefix" and "request" are accepted as
aliases (the API's ?mode=). `recording_report` compares the two on a set of sessions.
Aborted and refused calls carry no completion and are left out of the chains; an aborted
one still makes the session non-trainable (`RecordingSession.untrainable_reason`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, Max, QuerySet, Sum
from django.db.models.functions import Coalesce, Length

from harness_app.harness.llm.reconstruct import (
    PREFIX_MERGE,
    STRATEGIES,
    STRATEGY_ALIASES,
    CallTokens,
    ChainBreak,
    Segment,
    reconstruct,
    strategy_clean,
)
from harness_app.harness.llm.reconstruct_report import (
    StrategyReport,
    TrainerShape,
    strategy_report,
)
from trajectories.models import Episode, ModelCall, RecordingSession
from trajectories.selectors.calls import (
    BLOB_FIELDS,
    CallSummary,
    call_summary,
    call_tokens_by_episode,
)

# Every name a caller may pass: the strategies, then their older aliases.
MODES = (*STRATEGIES, *STRATEGY_ALIASES)


def recording_sessions() -> QuerySet[RecordingSession]:
    return RecordingSession.objects.select_related("episode", "created_by").order_by("-pk")


# Token ids are packed as 4-byte ints (models.pack_ints), so a blob's length / 4 counts them.
_CALL_TOKEN_BYTES = Length("episode__model_calls__prompt_token_ids_blob") + Length(
    "episode__model_calls__completion_token_ids_blob"
)


def recording_sessions_for_list() -> QuerySet[RecordingSession]:
    """Sessions newest first with `call_count`, `token_count` (prompt + completion ids of
    every call) and `last_call_at`, counted in the same query as the rows."""
    return (
        recording_sessions()
        .order_by("-created_at", "-pk")
        .annotate(
            call_count=Count("episode__model_calls"),
            token_count=Coalesce(Sum(_CALL_TOKEN_BYTES), 0) / 4,
            last_call_at=Max("episode__model_calls__created_at"),
        )
    )


def recorded_episode_sessions(episodes: list[Any], *, now: Any) -> list[Any]:
    """Sets `session` (with its counts and `state`) on each recorded episode of a list
    page, in one query: the episode list's `?kind=recorded` columns."""
    ids = [e.pk for e in episodes]
    sessions = {s.episode_id: s for s in recording_sessions_for_list().filter(episode_id__in=ids)}
    for session in sessions.values():
        session.state = session_state(session, now=now)  # type: ignore[attr-defined]
    for episode in episodes:
        episode.session = sessions.get(episode.pk)
    return episodes


def recording_session_manageable_by(session: RecordingSession, user: Any) -> bool:
    """Whether `user` may close, revoke or re-key the session: its owner, or staff. Another
    researcher could otherwise end a colleague's recording mid-run."""
    if user is None or not getattr(user, "is_authenticated", False):
        return False
    return bool(user.is_staff) or session.created_by_id == user.pk


def session_state(session: RecordingSession, *, now: Any) -> str:
    if session.closed_at is not None:
        return "closed"
    if session.revoked_at is not None:
        return "revoked"
    if session.expires_at <= now:
        return "expired"
    return "open"


def recorded_call_tokens(*, episode: Episode | int) -> list[CallTokens]:
    """The episode's successful calls, in the order they finished, with their agent."""
    rows = (
        ModelCall.objects.filter(episode=episode, error="")
        .order_by("turn_index", "pk")
        .only("pk", "policy_version", "agent", "rerendered", *BLOB_FIELDS)
    )
    return [c.call_tokens() for c in rows]


def recording_segments(
    *, episode: Episode | int, mode: str = PREFIX_MERGE
) -> tuple[list[Segment], list[ChainBreak]]:
    """The episode's sequences under a strategy (or its alias); ValueError names `mode`."""
    strategy = strategy_clean(mode, field="mode")
    return reconstruct(recorded_call_tokens(episode=episode), strategy=strategy)


def recording_trajectory(*, session: RecordingSession, mode: str = PREFIX_MERGE) -> dict[str, Any]:
    """The session's training sequences: tokens, loss masks, logprobs, and the breaks."""
    segments, breaks = recording_segments(episode=session.episode_id, mode=mode)
    main = segments[0].agent if segments else ""
    return {
        "session": session.pk,
        "episode": session.episode_id,
        "mode": strategy_clean(mode, field="mode"),
        "trainable": session.trainable,
        "untrainable_reason": session.untrainable_reason,
        "chains": [
            {
                "agent": s.agent,
                "role": "main" if s.agent == main else "subagent",
                "call_ids": list(s.call_ids),
                "policy_versions": sorted(s.policy_versions),
                "sampled_tokens": s.sampled_tokens,
                "token_ids": s.token_ids,
                "loss_mask": s.loss_mask,
                "logprobs": s.logprobs,
            }
            for s in segments
        ],
        "breaks": [{"call_id": b.call_id, "reason": b.reason} for b in breaks],
    }


@dataclass
class ChainView:
    number: int
    agent: str
    role: str
    calls: list[tuple[int, CallSummary]] = field(default_factory=list)  # (turn index, call)
    sampled_tokens: int = 0
    tokens: int = 0


@dataclass
class RecordingView:
    session: RecordingSession
    state: str
    chains: list[ChainView]
    breaks: dict[int, str]
    failed: list[CallSummary]  # aborted or refused calls, in no chain
    report: StrategyReport  # this session under each strategy (RL job trainer defaults)


def recording_view(*, episode: Episode, now: Any) -> RecordingView:
    """The recorded episode page: session facts, chains with their calls, and what each
    reconstruction strategy would cost (three queries)."""
    session = RecordingSession.objects.select_related("created_by", "harness_run").get(
        episode=episode
    )
    call_tokens = recorded_call_tokens(episode=episode)
    segments, breaks = reconstruct(call_tokens, strategy=PREFIX_MERGE)
    calls = ModelCall.objects.filter(episode=episode).defer("request", *BLOB_FIELDS)
    summaries = {c.pk: (c, call_summary(c)) for c in calls.order_by("turn_index", "pk")}
    main = segments[0].agent if segments else ""
    chains = []
    for number, segment in enumerate(segments):
        chain = ChainView(
            number=number,
            agent=segment.agent,
            role="main agent" if segment.agent == main else "subagent",
            sampled_tokens=segment.sampled_tokens,
            tokens=len(segment.token_ids),
        )
        chain.calls = [
            (summaries[pk][0].turn_index, summaries[pk][1])
            for pk in (int(str(p)) for p in segment.call_ids)
        ]
        chains.append(chain)
    in_chain = {int(str(pk)) for s in segments for pk in s.call_ids}
    failed = [summary for pk, (_, summary) in summaries.items() if pk not in in_chain]
    return RecordingView(
        session=session,
        state=session_state(session, now=now),
        chains=chains,
        breaks={int(str(b.call_id)): b.reason for b in breaks},
        failed=failed,
        report=strategy_report([call_tokens]),
    )


def recording_report(
    *,
    sessions: QuerySet[RecordingSession] | None = None,
    shape: TrainerShape | None = None,
) -> StrategyReport:
    """Both strategies' figures over the sessions' successful calls (two queries).

    Only token blobs are read; each session is reconstructed on its own."""
    sessions = recording_sessions() if sessions is None else sessions
    episode_ids = list(sessions.order_by("episode_id").values_list("episode_id", flat=True))
    rows = ModelCall.objects.filter(episode_id__in=episode_ids, error="")
    calls = call_tokens_by_episode(rows.order_by("episode_id", "turn_index", "pk"))
    return strategy_report([calls.get(pk, []) for pk in episode_ids], shape)
