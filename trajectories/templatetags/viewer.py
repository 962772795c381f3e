"""Row markup for the episode viewer's long lists.

The curated set is printed once per turn (30 rows × 40 turns) and the pool can hold 500
documents. As template loops these rows took most of the page's server time, and even
format_html spent ~50 µs a row in Django's lazy-aware escaping wrappers. So the rows are
built here with `html.escape` (what django.utils.html.escape calls underneath), which
escapes every value from the episode just the same: &, <, >, " and '.
"""

from __future__ import annotations

from collections.abc import Iterable
from html import escape
from urllib.parse import quote

from django import template
from django.utils.safestring import SafeString, mark_safe

from trajectories.selectors.turns import Change, CuratedRow, PoolRow

register = template.Library()
_NOT_RELEVANT = ' <span class="muted" title="judged not relevant">✗</span>'
_READ = ' <span class="muted" title="read in full">read</span>'


@register.filter
def turn_name(index: int | None) -> str:
    """A turn as people read it: turns are numbered from 1, and index 0 is the start (the
    reset's opening observation, before the policy acted), not a turn."""
    if index is None:
        return "—"
    return "the start" if index == 0 else f"turn {index:d}"


@register.filter
def turn_number(index: int) -> str:
    """The short form, for the timeline and table cells: "start", 1, 2, …"""
    return "start" if index == 0 else f"{index:d}"


def _doc_link(doc_url: str, doc_id: str, title: str = "") -> str:
    href = escape(f"{doc_url}?doc={quote(doc_id, safe='')}")
    hint = f' title="{escape(title)}"' if title else ""
    return f'<a class="doc" href="{href}"{hint}>{escape(doc_id)}</a>'


def _gold(grade: int | None) -> str:
    if grade:
        return f' <span class="gold" title="relevant, grade {grade:d}">★{grade:d}</span>'
    return _NOT_RELEVANT if grade == 0 else ""


def _curated_item(row: CuratedRow, doc_url: str) -> str:
    classes = ("is-gold " if row.grade else "") + (f"changed-{row.change}" if row.change else "")
    tag = escape(row.tag)
    change = f' <span class="change">{escape(row.change)}</span>' if row.change else ""
    return (
        f'<li class="{escape(classes)}"><span class="tag tag-{tag}">{tag}</span> '
        f"{_doc_link(doc_url, row.doc_id)}{_gold(row.grade)}{change}</li>"
    )


@register.simple_tag
def curated_items(rows: Iterable[CuratedRow], doc_url: str) -> SafeString:
    """<li> rows of a curated set: tag, document link, gold mark, this turn's change."""
    return mark_safe("".join(_curated_item(r, doc_url) for r in rows))  # each value escaped above


_CHANGE_DETAIL = {"retagged": "was ", "evicted": "for "}


def _change_item(change: Change, doc_url: str) -> str:
    kind, tag = escape(change.kind), escape(change.importance)
    detail = ""
    if change.detail:
        words = _CHANGE_DETAIL.get(change.kind, "")
        detail = f' <span class="muted">{words}{escape(change.detail)}</span>'
    return (
        f'<li class="diff-{kind}"><span class="diff-kind">{kind}</span> '
        f"{_doc_link(doc_url, change.doc_id)}{_gold(change.grade)} "
        f'<span class="tag tag-{tag}">{tag}</span>{detail}</li>'
    )


@register.simple_tag
def change_items(changes: Iterable[Change], doc_url: str) -> SafeString:
    """<li> rows of a turn's typed diff: added, removed, evicted (for whom), retagged (from
    what), refused (why)."""
    return mark_safe("".join(_change_item(c, doc_url) for c in changes))  # each value escaped above


def _pool_item(row: PoolRow, doc_url: str) -> str:
    query = row.query if len(row.query) <= 60 else row.query[:59] + "…"
    return (
        f'<tr class="upto-turn{" is-gold" if row.grade else ""}" data-turn="{row.first_turn:d}">'
        f"<td>{_doc_link(doc_url, row.doc_id, row.title)}{_gold(row.grade)}"
        f"{_READ if row.read else ''}</td>"
        f'<td class="num">{row.score:.1f}</td><td class="num">{turn_number(row.first_turn)}</td>'
        f'<td class="muted small">{escape(row.source)}: {escape(query)}</td></tr>'
    )


@register.simple_tag
def pool_items(rows: Iterable[PoolRow], doc_url: str) -> SafeString:
    """<tr> rows of the pool, each dated by the turn it was first shown."""
    return mark_safe("\n".join(_pool_item(r, doc_url) for r in rows))  # each value escaped above
