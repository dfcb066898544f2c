"""Section analysis on the real embedded model (docs/decisions.md, "Section analysis", checked on a real model).

A question with a ~5,700-character pasted config goes through the whole reply
(``Chat.reply``) on the embedded SmolLM2 GGUF with a 1,535-token context, no workspace:
it does not fit, so note-taking workers read it in sections one at a time, then the
coordinator answers from their notes. Checked: the reply completes with text, at least two
worker requests come before the coordinator's, every worker prompt leaves room for its
output tokens by the model's exact count (a small window's eighth, 191 tokens, here; the full
384 beside a 2,048-token context in the deadline test, whose first worker runs whole), and
progress names every section. A context just under ``SMALL_WORKER_CONTEXT`` keeps the notes
small (three workers write 191 tokens each, where 2,048 tokens takes three of 384 and a
coordinator prompt of 1,860 tokens) while the coordinator still has room for the reread tool.
The figures (sections, input tokens, coordinator prompt tokens, seconds, answer) are
printed; run with ``-s`` to see them. The answer's quality is not the test: the model has 135M
parameters.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from imprintd import settings as settings_mod
from imprintd.chat import Chat, ReplyRequest
from imprintd.context import sections as sec
from imprintd.messages import Message, ToolSpec
from imprintd.models.base import Completion
from imprintd.models.embedded import embedded_model_path
from imprintd.models.local import LocalModel
from tests.models.real_model import needs_real_model
from tests.recording import RecordingEvents

N_CTX = 2048
#: The multi-section test's context: a small window, whose notes are an eighth of it, yet room
#: enough for the coordinator's reread tool beside three sections' notes.
SMALL_N_CTX = sec.SMALL_WORKER_CONTEXT - 1
#: The coordinator's and the final answer's output: what they say is not checked, that they run is.
MAX_TOKENS = 32


@dataclass
class Request:
    messages: list[Message]
    tools: list[ToolSpec]
    max_tokens: int
    prompt_tokens: int
    completion: Completion | None = None
    seconds: float = 0.0


@dataclass
class RecordingModel:
    """The real model, recording each request with its exact prompt count and completion."""

    model: LocalModel
    requests: list[Request] = field(default_factory=list)

    @property
    def model_id(self) -> str:
        return self.model.model_id

    @property
    def n_ctx(self) -> int:
        return self.model.n_ctx

    @property
    def native_tools(self) -> bool:
        return self.model.native_tools

    @property
    def exact_counts(self) -> bool:
        return self.model.exact_counts

    def count_prompt(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
        return self.model.count_prompt(messages, tools)

    def count_message(self, message: Message) -> int:
        return self.model.count_message(message)

    def count_text(self, text: str) -> int:
        return self.model.count_text(text)

    def reusable_prefix(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> tuple[int, int]:
        return self.model.reusable_prefix(messages, tools)

    async def complete(self, messages, tools=(), *, max_tokens, **options) -> Completion:
        # Every other option (callbacks, grammar, timeout) goes to the model as given, so a new
        # one in the Model interface reaches the real model here too.
        request = Request(list(messages), list(tools), max_tokens, self.model.count_prompt(messages, tools))
        self.requests.append(request)
        started = time.monotonic()
        request.completion = await self.model.complete(messages, tools, max_tokens=max_tokens, **options)
        request.seconds = time.monotonic() - started
        return request.completion


def is_worker(request: Request) -> bool:
    return not request.tools and request.messages[0].content == sec.WORKER_SYSTEM_PROMPT


SERVICES = [
    ("gateway", "routes every public request to the services behind it"),
    ("billing", "charges customers and sends invoices to the payment provider"),
    ("orders", "keeps the state of every order from cart to delivery"),
    ("catalog", "serves product names, prices and pictures to the shop"),
    ("search", "answers product searches from a nightly index"),
    ("mailer", "sends receipts, password resets and newsletters"),
    ("reports", "builds the weekly sales reports for the finance team"),
    ("auth", "signs users in and issues their session tokens"),
    ("inventory", "counts what is left in each warehouse"),
    ("shipping", "books couriers and tracks parcels until they arrive"),
    ("audit", "records who changed what and when"),
    ("metrics", "collects counters and latencies from every service"),
    ("pricing", "applies discounts, coupons and regional taxes"),
    ("cart", "remembers what each visitor wants to buy"),
    ("notify", "pushes order updates to phones and browsers"),
    ("export", "writes the nightly data export for our warehouse partners"),
    ("reviews", "stores customer reviews and flags abusive ones"),
    ("returns", "handles refunds and returned parcels"),
    ("loyalty", "counts reward points for regular customers"),
    ("media", "resizes and stores product pictures"),
    ("fraud", "scores risky payments before they are charged"),
    ("support", "keeps the help desk tickets and chat logs"),
]
OWNERS = ["platform team", "payments team", "shop team", "data team"]


def pasted_config(services: int = len(SERVICES)) -> str:
    """A commented config, one block per service of the first ``services``, billing's port
    changed at the end: about 7,800 characters for all 22. Commented prose keeps it near 3.6
    characters per token, so with a 2,048-token context all 22 take three sections, and with
    1,535 tokens the first 16 (about 5,700 characters) do: enough to test, few enough to run
    quickly."""
    blocks = []
    for index, (name, purpose) in enumerate(SERVICES[:services]):
        blocks.append(
            f"# The {name} service {purpose}. It is owned by the {OWNERS[index % 4]}, who should be\n"
            f"# asked before anything below is changed. When it restarts, the services that depend on\n"
            f"# it wait for its health check to pass before they send it any more work.\n"
            f"[services.{name}]\n"
            f'image = "shop/{name}:{2 + index % 3}.{index}"\n'
            f"port = {8100 + index}\n"
            f"replicas = {1 + index % 3}\n\n"
        )
    return "".join(blocks) + "# Changed on 30 October: billing moved from port 8101 to 9443 for TLS.\n"


@needs_real_model
async def test_a_multi_section_paste_is_analyzed_and_answered_on_the_embedded_model(tmp_path):
    model = RecordingModel(LocalModel(embedded_model_path(), n_ctx=SMALL_N_CTX))
    # A generous time budget: on a busy 2-core machine the workers alone may take minutes, and
    # a time stop would add a final-answer request rather than test anything more.
    resolved = settings_mod.load({}, environ={}).apply(
        {"chat.n_ctx": SMALL_N_CTX, "chat.max_tokens": MAX_TOKENS, "chat.research_time_budget": 1800}, "test"
    )
    chat = Chat(resolved, model_factory=lambda chat_settings: model, data_dir=tmp_path / "data")
    config = pasted_config(16)
    assert 5_000 <= len(config) <= 6_500
    text = f"Here is our config file:\n\n{config}\nWhich port does the billing service use now?"
    events = RecordingEvents()

    started = time.monotonic()
    outcome = await chat.reply(ReplyRequest(text=text, persist=False), events)
    seconds = time.monotonic() - started

    workers = [r for r in model.requests if is_worker(r)]
    later = model.requests[len(workers) :]
    coordinator = later[0] if later else None
    sections = len(workers)
    input_tokens = model.count_text(text)
    print(
        f"\n[real analysis] sections: {sections}; input: {len(text)} characters, {input_tokens} tokens; "
        f"worker prompts: {[r.prompt_tokens for r in workers]} tokens; coordinator prompt: "
        f"{coordinator.prompt_tokens if coordinator else None} tokens; requests: {len(model.requests)}; "
        f"stop: {outcome.stop_reason}; {seconds:.1f} s"
    )
    for r in model.requests:
        usage = r.completion.usage if r.completion else None
        kind = "worker" if is_worker(r) else "coordinator" if r.tools else "final answer"
        print(
            f"[real analysis] {kind}: prompt {r.prompt_tokens}, "
            f"evaluated {usage and usage.evaluated_tokens}, generated {usage and usage.generated_tokens} "
            f"tokens, {r.seconds:.1f} s, finish {r.completion and r.completion.finish_reason}"
        )
    print(f"[real analysis] answer: {outcome.text!r}")

    assert input_tokens + MAX_TOKENS > SMALL_N_CTX  # it could not have been answered directly
    assert outcome.text.strip()
    assert sections >= 2
    assert model.requests[:sections] == workers  # every section is read before the coordinator
    assert coordinator is not None and not is_worker(coordinator)
    # No workspace: the reread, beside conversation_history (offered from a session's first reply on).
    assert [tool.name for tool in coordinator.tools] == ["conversation_history", "read_chat_section"]
    assert coordinator.messages[-1].content.startswith("[Section analysis]")
    assert all(not is_worker(r) for r in later)
    assert coordinator.prompt_tokens + MAX_TOKENS <= SMALL_N_CTX
    assert text not in coordinator.messages[-1].content  # it got notes, not the original
    allowance = sec.notes_tokens(SMALL_N_CTX)
    assert allowance == SMALL_N_CTX // 8 < sec.NOTES_MAX_TOKENS  # a small window's notes: an eighth of it
    for request in workers:
        assert request.max_tokens == allowance
        assert model.count_prompt(request.messages) + allowance <= SMALL_N_CTX
        assert request.completion is not None and request.completion.text.strip()
    assert [m for m in events.progress_messages if m.startswith("Analyzing section")] == [
        f"Analyzing section {n} of {sections}" for n in range(1, sections + 1)
    ]
    assert "Analyzing section" not in events.streamed


@needs_real_model
async def test_a_worker_past_its_deadline_on_the_embedded_model_ends_in_an_answer_from_the_sections_read(
    tmp_path, monkeypatch
):
    """The second section's worker runs past its own deadline (shortened to 1 ms once the first
    section is read, as a slow CPU or a long wait for the inference lock would): the reply does
    not fail, the answer is written from section 1's notes and says what was not read and why.
    The first section gets 20 minutes: on a loaded 2-core machine it can take more than 120 s."""
    monkeypatch.setattr(sec, "WORKER_TIMEOUT_S", 1200.0)

    class SlowAfterTheFirstSection(RecordingModel):
        async def complete(self, messages, tools=(), **kwargs) -> Completion:
            completion = await super().complete(messages, tools, **kwargs)
            if is_worker(self.requests[-1]):
                monkeypatch.setattr(sec, "WORKER_TIMEOUT_S", 0.001)
            return completion

    model = SlowAfterTheFirstSection(LocalModel(embedded_model_path(), n_ctx=N_CTX))
    resolved = settings_mod.load({}, environ={}).apply(
        {"chat.n_ctx": N_CTX, "chat.max_tokens": MAX_TOKENS, "chat.research_time_budget": 1800}, "test"
    )
    chat = Chat(resolved, model_factory=lambda chat_settings: model, data_dir=tmp_path / "data")
    text = f"Here is our config file:\n\n{pasted_config()}\nWhich port does the billing service use now?"
    events = RecordingEvents()
    outcome = await chat.reply(ReplyRequest(text=text), events)
    print(f"\n[real timeout] stop: {outcome.stop_reason}; answer: {outcome.text!r}")

    workers = [r for r in model.requests if is_worker(r)]
    assert len(workers) == 2  # section 1 read, section 2 timed out, nothing after it
    for request in workers:  # each leaves room for the full notes allowance beside 2,048 tokens
        assert request.max_tokens == sec.NOTES_MAX_TOKENS
        assert model.count_prompt(request.messages) + sec.NOTES_MAX_TOKENS <= N_CTX
    assert workers[0].completion is not None and workers[0].completion.finish_reason != "deadline"
    assert workers[1].completion is not None and workers[1].completion.finish_reason == "deadline"
    assert outcome.stop_reason == "model_error"
    final = model.requests[-1]
    assert final.tools == [] and "Research notes:" in final.messages[-1].content
    assert workers[0].completion.text.strip()[:40] in final.messages[-1].content  # section 1's notes
    assert re.search(
        r"Characters [\d,]+–[\d,]+ of your message \([\d,]+ characters\) were not read: a note-taking worker "
        r"ran past its own deadline \(worker 2 on section 2, after 0\.001 s\) after 1 of \d+ sections\. "
        r"A smaller chat\.analysis_context \(1,024:",
        outcome.text,
    )
    assert events.streamed == outcome.text
    assert [(m.role, m.content) for m in chat.store.messages(outcome.session_id)] == [
        ("user", text),
        ("assistant", outcome.text),
    ]
