"""``wellformed``: what both front doors (LSP-framed and ACP) refuse, and how they name it."""

from __future__ import annotations

import msgspec
import pytest

from imprintd import wellformed


class Block(msgspec.Struct):
    type: str
    text: str


class Prompt(msgspec.Struct):
    session_id: str
    prompt: list[Block]


def refusal_of(value) -> str:
    with pytest.raises(msgspec.ValidationError) as caught:
        msgspec.convert(value, Prompt)
    return wellformed.field_message(caught.value)


def test_a_missing_nested_field_is_named_by_its_path():
    assert refusal_of({"session_id": "s", "prompt": [{"type": "text"}]}) == "prompt[0].text: required field is missing"


def test_a_missing_top_level_field_and_a_wrong_type_are_named():
    assert refusal_of({"prompt": []}) == "session_id: required field is missing"
    assert refusal_of({"session_id": 5, "prompt": []}) == "session_id: expected `str`, got `int`"


def test_a_bad_param_is_invalid_params_and_a_deep_message_invalid_request():
    deep = wellformed.Malformed("params.x", "nested too deep", too_deep=True)
    bad_text = wellformed.Malformed("params.text", "contains a lone surrogate")
    bad_id = wellformed.Malformed("id", "contains a lone surrogate")
    request = {"jsonrpc": "2.0", "id": 3, "method": "imprint/chat"}
    assert wellformed.refusal(request, bad_text)[:2] == (3, -32602)
    assert wellformed.refusal(request, deep)[:2] == (3, -32600)
    assert wellformed.refusal(request, bad_id)[:2] == (None, -32600)
    assert wellformed.refusal({"jsonrpc": "2.0", "method": "x"}, bad_text) is None  # a notification: never answered
