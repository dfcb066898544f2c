"""The embedded model's own answers go through numbering, the citation filter, the check and
the Sources list without error, on both paths.

The research rounds are scripted (a read of the billing deployment, so the prompt surely holds
a numbered result: SmolLM2 rarely calls a tool first, and then often calls them again and
again); the answer is the real model's. ``direct``: after the read the model is asked with no
tools, so it writes the answer to the numbered result. ``from-notes``: the read is repeated
until research stops for lack of new evidence, and the real model writes the final answer
from the numbered notes.

Whatever SmolLM2 writes, what the user gets must hold together: the answer part streamed is
the result's text, every number its body cites is one of its sources, every cited source is
cited in it, the answer ends with the daemon's list, and it is stored with its sources.
"""

from __future__ import annotations

import pytest

from imprintd.models.base import Completion
from imprintd.research.citations import cited_numbers, sources_block
from tests.helpers import ask, make_chat
from tests.models.real_model import needs_real_model
from tests.standin import call


class ScriptedRounds:
    """The real model, except for research rounds: ``reads`` rounds read the deployment (the
    same call each time), then, in ``direct``, the real model answers with no tools offered."""

    def __init__(self, model, reads: int) -> None:
        self._model, self._reads = model, reads

    def __getattr__(self, name):
        return getattr(self._model, name)

    async def complete(self, messages, tools=(), **kwargs):
        if tools and self._reads > 0:
            self._reads -= 1
            return Completion(text="", tool_calls=(call("read_file", "r1", path="services/billing.yaml"),))
        return await self._model.complete(messages, (), **kwargs)


@needs_real_model
@pytest.mark.parametrize(("reads", "stop"), [(1, "answer"), (3, "no_new_evidence")], ids=["direct", "from-notes"])
async def test_the_real_models_answer_passes_through_citations(local_model, workspace, reads, stop):
    chat = make_chat(ScriptedRounds(local_model, reads), **{"chat.n_ctx": 2048, "chat.max_tokens": 96})
    outcome, events = await ask(chat, "Which port does the billing service listen on?", workspace=workspace)
    print(f"\n[real citations] {outcome.stop_reason}: {outcome.text!r}; sources {outcome.sources}")
    assert outcome.stop_reason in (stop, "length")

    # Text a round wrote before calling tools again is preamble; the answer part is the result.
    assert [text for kind, text in events.parts if kind == "answer"] == [outcome.text]
    body = outcome.text.split("\n\nSources:\n", 1)[0]
    assert set(cited_numbers(body)) <= {source.number for source in outcome.sources}
    assert outcome.sources, "the read is a source: cited, or listed as read"
    for source in outcome.sources:
        assert source.kind == "file" and source.path == "services/billing.yaml" and "read_file" not in source.label
        if source.cited:
            assert source.number in cited_numbers(body)
        else:
            assert source.supported is None
    assert outcome.text.endswith("\n\n" + sources_block(outcome.sources))
    assert chat.session(outcome.session_id).messages[-1].sources == outcome.sources
