"""Tool arguments declared as Structs (``tools/base.py``): the schema offered and the refusals."""

from __future__ import annotations

from typing import Annotated

import msgspec
import pytest

from imprintd.tools.base import ToolError, accepted, parameters_schema, parse_arguments, tool_spec


class Lookup(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Docstring that is not the tool's description."""

    name: Annotated[str, msgspec.Meta(min_length=1, description="Who to look up.")]
    page: Annotated[int, msgspec.Meta(ge=1, le=9, description="Which page (default 1).")] = 1
    limit: msgspec.UnsetType | Annotated[int, msgspec.Meta(ge=1)] = msgspec.UNSET


class Loose(msgspec.Struct, frozen=True, kw_only=True):
    tag: msgspec.UnsetType | str = msgspec.UNSET


def test_the_schema_reads_as_a_hand_written_one():
    spec = tool_spec("lookup", "Look someone up.", Lookup)
    assert spec.name == "lookup" and spec.description == "Look someone up."
    assert spec.parameters == {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "description": "Who to look up."},
            "page": {"type": "integer", "minimum": 1, "maximum": 9, "description": "Which page (default 1)."},
            "limit": {"type": "integer", "minimum": 1},
        },
        "required": ["name"],
        "additionalProperties": False,
    }
    # Key order is what the model reads: type and limits, then the description.
    assert list(spec.parameters["properties"]["page"]) == ["type", "minimum", "maximum", "description"]
    assert parameters_schema(Loose) == {"type": "object", "properties": {"tag": {"type": "string"}}}


def test_good_arguments_become_the_struct():
    assert parse_arguments("lookup", {"name": "ada", "limit": 3}, Lookup) == Lookup(name="ada", page=1, limit=3)
    assert parse_arguments("loose", {"other": 1}, Loose) == Loose()  # unknown names are allowed unless forbidden


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"name": "ada", "colour": "red", "size": 2}, "lookup takes only name, page and limit, not colour, size"),
        ({}, "lookup needs name (a non-empty string)"),
        ({"name": ""}, "lookup: name must be a non-empty string, not ''"),
        ({"name": "ada", "page": 10}, "lookup: page must be an integer from 1 to 9, not 10"),
        ({"name": "ada", "page": "2"}, "lookup: page must be an integer from 1 to 9, not '2'"),
        ({"name": "ada", "page": False}, "lookup: page must be an integer from 1 to 9, not False"),
        ({"name": "ada", "limit": 0}, "lookup: limit must be an integer, 1 or more, not 0"),
    ],
)
def test_a_refusal_names_the_argument_and_what_it_accepts(arguments, message):
    with pytest.raises(ToolError) as refused:
        parse_arguments("lookup", arguments, Lookup)
    assert str(refused.value) == message


def test_what_is_accepted_is_worded_from_the_schema():
    assert accepted(str) == "a string"
    assert accepted(Annotated[int, msgspec.Meta(le=5)]) == "an integer, at most 5"
    assert accepted(float) == "a number"
    assert accepted(bool) == "true or false"
