"""The remote provider keeps a reasoning model's thoughts apart: ``reasoning_content``
(or ``reasoning``) deltas stream through ``on_reasoning`` into ``Completion.reasoning``, never into
the text; they count against the output allowance, and the model says it reasons once it has."""

from __future__ import annotations

from imprintd.messages import system, user
from imprintd.models.remote import OUTPUT_BYTES_PER_TOKEN, RemoteModel
from imprintd.models.remote_counts import estimate_tokens
from tests.models.scripted_server import ScriptedServer, chunk, stream_reply

MESSAGES = [system("You are terse."), user("Which port?")]


def thinking(text: str, field: str = "reasoning_content") -> dict:
    """A chunk whose delta carries only reasoning, under ``field``."""
    out = chunk()
    out["choices"][0]["delta"] = {field: text}
    return out


def model_for(server: ScriptedServer, **kwargs) -> RemoteModel:
    return RemoteModel(server.base_url, "test-model", n_ctx=4096, **kwargs)


async def test_reasoning_content_streams_apart_from_the_text():
    handler = stream_reply(
        thinking("The config"), thinking(" says 8101."), chunk("Port"), chunk(" 8101."), chunk(finish="stop")
    )
    with ScriptedServer(handler) as server:
        model = model_for(server)
        assert model.reasons is False  # not known before the server has sent any
        texts: list[str] = []
        thoughts: list[str] = []
        result = await model.complete(
            MESSAGES, max_tokens=64, timeout=60, on_text=texts.append, on_reasoning=thoughts.append
        )
    assert result.text == "".join(texts) == "Port 8101."
    assert result.reasoning == "".join(thoughts) == "The config says 8101."
    assert "config" not in result.text
    assert model.reasons is True
    # Thinking is output: it is in what the request generated (and so what the budget charges).
    assert result.usage.generated_tokens == estimate_tokens("The config says 8101.Port 8101.")
    # What the model thought is never sent back to it.
    assert "config says" not in str(server.requests[0].body)


async def test_the_newer_reasoning_field_is_read_too_and_a_duplicate_is_taken_once():
    both = chunk()
    both["choices"][0]["delta"] = {"reasoning_content": "Same thought.", "reasoning": "Same thought."}
    handler = stream_reply(thinking("First. ", "reasoning"), both, chunk("Answer."), chunk(finish="stop"))
    with ScriptedServer(handler) as server:
        result = await model_for(server).complete(MESSAGES, max_tokens=64, timeout=60)
    assert (result.reasoning, result.text) == ("First. Same thought.", "Answer.")


async def test_a_reply_without_reasoning_leaves_the_model_not_reasoning():
    with ScriptedServer(stream_reply(chunk("Hi."), chunk(finish="stop"))) as server:
        model = model_for(server)
        result = await model.complete(MESSAGES, max_tokens=8, timeout=60)
    assert (result.text, result.reasoning, model.reasons) == ("Hi.", "", False)


async def test_reasoning_counts_against_the_output_allowance():
    # A server that ignores max_tokens and thinks on: cut at the allowance, with nothing answered.
    endless = [thinking("x" * 100) for _ in range(50)]
    with ScriptedServer(stream_reply(*endless, chunk("never"), chunk(finish="stop"))) as server:
        result = await model_for(server).complete(MESSAGES, max_tokens=100, timeout=60)
    assert result.finish_reason == "length" and result.text == ""
    assert len(result.reasoning) == 100 * OUTPUT_BYTES_PER_TOKEN


async def test_the_api_key_is_masked_in_reasoning():
    handler = stream_reply(thinking("The key is sk-se"), thinking("cret-7 ok."), chunk("Done."), chunk(finish="stop"))
    with ScriptedServer(handler) as server:
        thoughts: list[str] = []
        result = await model_for(server, api_key="sk-secret-7").complete(
            MESSAGES, max_tokens=64, timeout=60, on_reasoning=thoughts.append
        )
    assert "sk-secret-7" not in result.reasoning and "sk-secret-7" not in "".join(thoughts)
    assert result.reasoning == "".join(thoughts) and result.reasoning.endswith(" ok.")


async def test_thoughts_a_server_leaves_in_the_content_after_think_are_kept_apart():
    # No reasoning parser on the server: the model's <think> block arrives as content, split anywhere.
    pieces = ["\n<th", "ink>The config", " says 8101.</thi", "nk>", "\n\n", "Port 8101."]
    with ScriptedServer(stream_reply(*[chunk(p) for p in pieces], chunk(finish="stop"))) as server:
        model = model_for(server)
        texts: list[str] = []
        thoughts: list[str] = []
        result = await model.complete(
            MESSAGES, max_tokens=64, timeout=60, on_text=texts.append, on_reasoning=thoughts.append
        )
    assert result.text == "".join(texts) == "Port 8101."
    assert result.reasoning == "".join(thoughts) == "The config says 8101."
    assert model.reasons is True


async def test_think_later_in_an_answer_is_the_answers_text_and_a_lone_angle_bracket_is_not_held():
    pieces = ["Use the ", "<think> tag", " to mark thoughts."]
    with ScriptedServer(stream_reply(*[chunk(p) for p in pieces], chunk(finish="stop"))) as server:
        result = await model_for(server).complete(MESSAGES, max_tokens=64, timeout=60)
    assert (result.text, result.reasoning) == ("Use the <think> tag to mark thoughts.", "")
    with ScriptedServer(stream_reply(chunk("<"), chunk(finish="stop"))) as server:
        result = await model_for(server).complete(MESSAGES, max_tokens=64, timeout=60)
    assert (result.text, result.reasoning) == ("<", "")


async def test_thinking_cut_off_before_it_closes_stays_reasoning():
    handler = stream_reply(chunk("<think>Let me see, the port"), chunk(finish="length"))
    with ScriptedServer(handler) as server:
        result = await model_for(server).complete(MESSAGES, max_tokens=64, timeout=60)
    assert (result.text, result.reasoning, result.finish_reason) == ("", "Let me see, the port", "length")
