"""The trainer's sampling overrides: what a recorded agent's request becomes upstream."""

from __future__ import annotations

import pytest

from harness_app.wire.errors import ProtocolError
from harness_app.wire.sampling import SamplingOverrides, sampling_overrides_parse


def test_no_overrides_still_clamp_max_tokens_to_the_upstream_context():
    # Qwen Code asks 32,000 of a server with an 8,192-token context: refused without this.
    request = {"model": "qwen3-coder", "max_tokens": 32000, "temperature": 0.2}
    SamplingOverrides().apply(request, context_len=8192)
    assert request == {"model": "qwen3-coder", "max_tokens": 8192, "temperature": 0.2}


def test_the_clamp_lowers_both_max_token_fields_to_the_session_ceiling():
    request = {"max_tokens": 32000, "max_completion_tokens": 16384}
    SamplingOverrides(max_tokens=512).apply(request, context_len=8192)
    assert request == {"max_tokens": 512, "max_completion_tokens": 512}


def test_a_smaller_ask_is_left_alone_and_a_missing_one_gets_the_ceiling():
    request = {"max_tokens": 100}
    SamplingOverrides(max_tokens=512).apply(request, context_len=8192)
    assert request == {"max_tokens": 100}
    bare: dict[str, object] = {}
    SamplingOverrides(max_tokens=512).apply(bare, context_len=8192)
    assert bare == {"max_tokens": 512}
    # Without a session ceiling, vLLM's own default (what the prompt leaves) holds.
    unset: dict[str, object] = {}
    SamplingOverrides().apply(unset, context_len=8192)
    assert unset == {}


def test_with_the_clamp_off_the_agents_ask_goes_upstream():
    request = {"max_tokens": 32000}
    SamplingOverrides(clamp=False).apply(request, context_len=8192)
    assert request == {"max_tokens": 32000}


def test_the_trainers_temperature_top_p_and_model_replace_the_agents():
    overrides = sampling_overrides_parse(
        {
            "model_map": {"claude-haiku-4-5": "smollm2-small", "*": "smollm2"},
            "temperature": 1.0,
            "top_p": 0.95,
        }
    )
    main = {"model": "claude-sonnet-4-5", "temperature": 0.0}
    helper = {"model": "claude-haiku-4-5"}
    overrides.apply(main, context_len=None)
    overrides.apply(helper, context_len=None)
    assert main == {"model": "smollm2", "temperature": 1.0, "top_p": 0.95}
    assert helper == {"model": "smollm2-small", "temperature": 1.0, "top_p": 0.95}


def test_overrides_survive_their_json_form():
    overrides = sampling_overrides_parse(
        {"model_map": {"*": "smollm2"}, "temperature": 0.7, "max_tokens": 256, "clamp": True}
    )
    assert sampling_overrides_parse(overrides.as_json()) == overrides


@pytest.mark.parametrize(
    ("data", "param"),
    [
        ([], "sampling"),
        ({"temprature": 1.0}, "sampling.temprature"),
        ({"temperature": "hot"}, "sampling.temperature"),
        ({"temperature": 3.0}, "sampling.temperature"),
        ({"top_p": 0}, "sampling.top_p"),
        ({"max_tokens": 0}, "sampling.max_tokens"),
        ({"max_tokens": 1.5}, "sampling.max_tokens"),
        ({"clamp": "yes"}, "sampling.clamp"),
        ({"model_map": {"*": ""}}, "sampling.model_map"),
        ({"model_map": ["smollm2"]}, "sampling.model_map"),
    ],
)
def test_a_bad_override_is_refused_naming_its_field(data, param):
    with pytest.raises(ProtocolError) as refused:
        sampling_overrides_parse(data)
    assert refused.value.param == param
