"""Deltas between state snapshots round-trip exactly and stay small for appends."""

import json

from hypothesis import given
from hypothesis import strategies as st

from harness_app.harness.jsondelta import apply, diff

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=3), children, max_size=4)
    ),
    max_leaves=20,
)
json_objects = st.dictionaries(st.text(max_size=3), json_values, max_size=5)


@given(json_objects, json_objects)
def test_apply_of_diff_reproduces_the_new_snapshot(prev, cur):
    delta = diff(prev, cur)
    assert apply(prev, delta) == cur
    assert json.loads(json.dumps(delta)) == delta


def test_appends_and_nested_changes_store_only_what_changed():
    prev = {"turn": 3, "searches": [{"q": "a"}], "graph": {"docs": {"d1": {"turn": 1}}}}
    cur = {
        "turn": 4,
        "searches": [{"q": "a"}, {"q": "b"}],
        "graph": {"docs": {"d1": {"turn": 1}, "d2": {"turn": 4}}},
    }
    assert diff(prev, cur) == {
        "set": {"turn": 4},
        "app": {"searches": [{"q": "b"}]},
        "sub": {"graph": {"sub": {"docs": {"set": {"d2": {"turn": 4}}}}}},
    }
    assert diff(cur, cur) == {}


def test_removed_keys_and_rewritten_lists():
    prev = {"curated": {"a": 1, "b": 2}, "log": [1, 2, 3]}
    cur = {"curated": {"a": 1}, "log": [9]}
    delta = diff(prev, cur)
    assert delta == {"sub": {"curated": {"del": ["b"]}}, "set": {"log": [9]}}
    assert apply(prev, delta) == cur
    assert prev == {"curated": {"a": 1, "b": 2}, "log": [1, 2, 3]}  # base left untouched
