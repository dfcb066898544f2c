"""The local provider: a GGUF model run by llama-cpp-python in this process
(docs/architecture.md, "models/: one interface, two providers").

``chat.provider = "local"`` with ``chat.model`` a GGUF path (or the embedded default).

* **Exact counts.** Prompts are rendered with the GGUF's own chat template
  (``tokenizer.chat_template``) by ``templates.ChatTemplate`` (a Jinja sandbox as
  llama-cpp-python's), with the tool schemas and the generation prompt, and counted with the
  model's tokenizer. ``count_prompt`` is one tokenization of exactly what generation evaluates
  (a prompt the template refuses alone, a system prompt without a user turn, is counted with one
  after it, less that turn). ``count_message`` is cached by a keyed hash of the message's bytes
  (the text itself is not kept: a deleted session's messages are not held by the cache): a
  message's tokens are the difference of two whole renders with a lead-in the template accepts
  (see ``_message_tokens``), so a fitting pass tokenizes each message once.
* **Streaming under the inference lock.** Generation runs token by token in the model thread
  (``offload.in_model_thread``: one thread at a lower priority, so the event loop wins a core) while the process-wide ``inference_lock()`` is held. Between tokens (and between prompt
  batches) the worker checks a cancel flag and the deadline; cancelling the awaiting task sets
  the flag, waits for the worker to return (shielded), then re-raises. Text reaches ``on_text``
  on the event-loop thread, UTF-8 sequences split across tokens decoded whole.
* **Tool calls and reasoning.** The template's chat format (``chat_formats/``: Hermes,
  Qwen XML, Llama 3 JSON, Mistral, Granite, LFM2, Gemma 4, DeepSeek-R1, …) says how the model
  writes calls; a template that renders ``tools`` gets them natively, otherwise they are
  described in the system prompt and a JSON call is parsed too (``chat_formats/calls.py``). Tokens are
  decoded with their special tokens, so markers are seen; a reasoning model's thoughts are
  split off as they stream (``on_reasoning``, ``Completion.reasoning``), and ``chat.reasoning``
  decides the template's thinking switch. Once the model opens a call, the rest of it is
  generated under a grammar of the offered tools in the family's syntax
  (``chat_formats/grammar.py``): the opening token is sampled again from the tokens before it,
  constrained.
* **Prefix reuse.** ``Llama.generate`` keeps the evaluated prefix of the previous
  prompt and evaluates only the rest; ``Usage.evaluated_tokens`` is what llama.cpp actually
  evaluated for this prompt, measured at its ``eval`` call, and ``reusable_prefix`` says
  beforehand how much of a prompt it holds, which the research budget charges by. Rendering is deterministic (the
  template's ``strftime_now`` returns the date the model was loaded) so equal leading messages
  give equal leading tokens.
* **Per-session state** (``local_states.py``, stored by ``state_cache.py``). After a session's coordinator round or final
  answer, llama.cpp's context holds that session's state; it is copied (with the tokens it holds)
  only when another request is about to replace it (a summary, a section worker, another
  session) or the states are closed, never before a reply returns, and not at all when the
  session's own next round extends it. Before the session's next request the state sharing the
  longest prefix with the prompt is restored when that beats what the context holds, so whatever
  ran in between, or a restart, does not cost the session its prefix. ``reusable_prefix``
  counts a state it would restore.

The weights load lazily, once, on first use; a missing path or a file without the GGUF magic
raises ``ModelUnavailable`` naming the path.
"""

from __future__ import annotations

import asyncio
import codecs
import concurrent.futures
import copy
import ctypes
import functools
import hashlib
import logging
import math
import mmap
import os
import threading
import time
import weakref
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import msgspec

from imprintd.messages import Message, ToolSpec
from imprintd.models.base import (
    Completion,
    FinishReason,
    ModelError,
    ModelUnavailable,
    RequestScope,
    RetryCallback,
    StartHook,
    TextCallback,
    Usage,
    inference_lock,
    report_usage,
    request_scope,
)
from imprintd.models.chat_formats.calls import ParsedOutput
from imprintd.models.chat_formats.format import CallWatch
from imprintd.models.gguf_header import GGUF_MAGIC, read_gguf_string
from imprintd.models.local_states import SessionStates, fingerprint, live_reuse
from imprintd.models.repetition import RepetitionGuard, cut_before_loop
from imprintd.models.state_cache import SavedState, StateCache, StateData, common_prefix
from imprintd.models.templates import LEAD_USER, ChatTemplate, TemplateError
from imprintd.offload import ToLoop, in_model_thread, in_worker, to_model_thread

logger = logging.getLogger("imprintd.models.local")

#: The context from which ``chat.reasoning = "auto"`` lets a model think (docs/decisions.md, "Reasoning").
THINKING_CONTEXT = 32768
#: The clock deadlines are measured on (a module attribute so tests can move time on).
_clock = time.monotonic
#: Cached per-message counts kept (a conversation plus its research rounds fits many times over).
MESSAGE_CACHE_SIZE = 8192
#: Whole prompts whose tokens are kept by their text (``_Loaded.tokenize_prompt``): a reply's
#: fitting, budget and generation tokenize the same few prompts.
PROMPTS_KEPT = 8
#: Seconds between the event loop's looks at the text the model thread generated since (a timer
#: of the loop's: the model thread never wakes it): 66 updates a second, more than an editor
#: shows, where a wake-up a token took 3% of a short reply from the model thread (docs/benchmarks.md).
STREAM_EVERY_S = 0.015
#: End-of-turn markers of common templates; those the template uses stop generation too.
_END_OF_TURN_MARKERS = (
    "<|im_end|>",
    "<|eot_id|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "</s>",
    "<|return|>",
)


def default_threads() -> tuple[int, int]:
    """Threads for generation and for prompt processing.

    Token generation is memory-bound and gains nothing from SMT siblings, so it uses about one
    thread per physical core (half the logical CPUs this process may use); prompt processing
    is compute-bound and uses them all.
    """
    try:
        logical = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        logical = os.cpu_count() or 1
    return max(1, logical // 2), max(1, logical)


def check_gguf(path: Path) -> None:
    """Raise ModelUnavailable unless ``path`` is a readable file starting with the GGUF magic."""
    if not path.exists():
        raise ModelUnavailable(f"the chat model file {path} does not exist (chat.model)")
    if not path.is_file():
        raise ModelUnavailable(f"the chat model path {path} is not a file (chat.model)")
    try:
        with path.open("rb") as handle:
            magic = handle.read(4)
    except OSError as error:
        raise ModelUnavailable(f"the chat model file {path} cannot be read: {error.strerror or error}") from None
    if magic != GGUF_MAGIC:
        raise ModelUnavailable(f"the chat model file {path} is not a GGUF file (it does not start with 'GGUF')")


def thinking_for(reasoning: str, n_ctx: int) -> bool:
    """Whether ``chat.reasoning`` turns a template's reasoning switch on (docs/decisions.md,
    "Reasoning"): ``auto`` only where the context leaves room for thoughts (``THINKING_CONTEXT``)."""
    if reasoning == "auto":
        return n_ctx >= THINKING_CONTEXT
    return reasoning == "on"


def template_renders_tools(template: str) -> bool:
    """Whether a chat template shows the tool schemas it is given."""
    return ChatTemplate(template, model_name="the model").renders_tools


def _has_amx() -> bool:
    """Whether this llama.cpp build runs matmuls on AMX tiles.

    Its AMX path segfaults in ``ggml_backend_amx_mul_mat`` on the first multi-token batch
    (seen on Xeon with AMX_INT8 and llama-cpp-python 0.3.36; llama.cpp's https://github.com/ggml-org/llama.cpp/issues/20824), which
    would take the whole daemon down, so AMX builds load without extra buffer types.
    """
    from llama_cpp import llama_cpp as lib

    return "AMX_INT8 = 1" in lib.llama_print_system_info().decode("utf-8", "replace")


class _Interrupted(Exception):
    """Raised inside llama.cpp's eval to stop between prompt batches."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class _Run:
    """The control state of one generation, shared by the async side and the worker thread."""

    deadline: float
    stop: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)
    in_prompt: bool = True
    evaluated: int = 0
    #: The session this request serves (``base.session_requests``); None: nothing is kept.
    scope: RequestScope | None = None
    #: The compiled GBNF grammar the output must follow (a ``LlamaGrammar``), if any.
    grammar: Any = None

    def check(self) -> None:
        if self.stop.is_set():
            raise _Interrupted("cancelled")
        if _clock() >= self.deadline:
            raise _Interrupted("deadline")


@dataclass
class _Result:
    parsed: ParsedOutput
    finish: str
    evaluated: int
    generated: int
    #: Where the loop the repetition guard stopped starts in the visible text (finish "repetition").
    loop_start: int = 0
    #: What the model thought, its reasoning markers removed.
    reasoning: str = ""


class _Loaded:
    """The loaded model: llama.cpp, its chat template (``templates.ChatTemplate``), and its stop tokens."""

    def __init__(self, llama: Any, template: str, path: Path, *, thinking: bool = False) -> None:
        from llama_cpp import llama_cpp as lib

        self.llama = llama
        self.path = path
        self.template = template
        self._lib = lib
        self._vocab = llama._model.vocab
        bos_id, eos_id = llama.token_bos(), llama.token_eos()
        bos = llama._model.token_get_text(bos_id) if bos_id != -1 else ""
        eos = llama._model.token_get_text(eos_id) if eos_id != -1 else ""
        # Templates may print the date: the date the model was loaded, so the prefix stays reusable.
        self.chat = ChatTemplate(
            template, model_name=path.name, bos_token=bos, eos_token=eos, today=datetime.now(), thinking=thinking
        )
        self.stop_ids = self._end_of_turn_ids(template)
        self.native_tools = self.chat.native
        self.active: _Run | None = None
        self.generation_lock = threading.Lock()
        self._prompts: OrderedDict[str, array] = OrderedDict()
        self._prompts_lock = threading.Lock()
        self._install_eval_hook()

    def tokenize(self, text: str) -> list[int]:
        # The template writes any BOS itself, so none is added (as llama-cpp-python and HF do).
        return self.llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def tokenize_prompt(self, text: str) -> list[int]:
        """``tokenize(text)`` for a whole rendered prompt, the last ``PROMPTS_KEPT`` kept by their
        text: a reply measures the prompt it sends (fitting, the budget) before generating it."""
        with self._prompts_lock:
            kept = self._prompts.get(text)
            if kept is not None:
                self._prompts.move_to_end(text)
                return kept.tolist()
        tokens = self.tokenize(text)
        with self._prompts_lock:
            self._prompts[text] = array("i", tokens)
            if len(self._prompts) > PROMPTS_KEPT:
                self._prompts.popitem(last=False)
        return tokens

    def is_end(self, token: int) -> bool:
        return token in self.stop_ids or bool(self._lib.llama_vocab_is_eog(self._vocab, token))

    def detokenize(self, token: int) -> bytes:
        """A token's bytes, special tokens included (``[TOOL_CALLS]``, ``<think>``): the chat
        format's parser and reasoning splitter see them; they never reach the user."""
        return self.llama.detokenize([token], special=True)

    def held_tokens(self) -> array:
        """The tokens llama.cpp holds evaluated, in order."""
        tokens = array("i")
        tokens.frombytes(self.llama.input_ids[: self.llama.n_tokens].tobytes())
        return tokens

    def state_size(self) -> int:
        """Bytes a copy of the sequence held would take (``save_sequence``); 0 when nothing is held."""
        if self.llama.n_tokens == 0:
            return 0
        return self._lib.llama_state_seq_get_size(self.llama._ctx.ctx, 0)

    def save_sequence(self, spare: Callable[[int], mmap.mmap | None]) -> tuple[array, StateData] | None:
        """The tokens held and llama.cpp's state of their sequence (KV cache, no logits), copied into
        the memory ``spare(size)`` gives (readied ahead: ``StateCache.take_spare``) or else fresh."""
        size = self.state_size()
        if not size:
            return None
        # Anonymous memory, not a bytearray, which zeroes its pages with the interpreter lock held
        # (4-5 ms for the embedded model's 11 MB state, the loop and the workers stopped meanwhile).
        data = spare(size) or mmap.mmap(-1, size)
        view = (ctypes.c_uint8 * size).from_buffer(data)
        try:
            written = self._lib.llama_state_seq_get_data(self.llama._ctx.ctx, view, size, 0)
        finally:
            del view  # a mapping with a view on it cannot be cut down
        if not written:
            return None
        if written < len(data):
            try:
                data.resize(written)  # a spare larger than the state, or a state that came out smaller
            except (OSError, SystemError):  # no mremap here
                return self.held_tokens(), bytearray(data[:written])
        return self.held_tokens(), data

    def restore_sequence(self, state: SavedState) -> bool:
        """Make ``state`` what llama.cpp holds; False (the context then holds nothing) if refused."""
        llama = self.llama
        size = len(state.data)
        view = (ctypes.c_uint8 * size).from_buffer(state.data)
        try:
            read = self._lib.llama_state_seq_set_data(llama._ctx.ctx, view, size, 0)
        finally:
            del view
        if read != size:
            llama.reset()
            return False
        count = len(state.tokens)
        llama.input_ids[:count] = state.tokens
        llama.n_tokens = count
        llama._requires_eval = True  # logits come from the next evaluation, never from the state
        return True

    def _end_of_turn_ids(self, template: str) -> set[int]:
        ids = set()
        for marker in _END_OF_TURN_MARKERS:
            if marker in template:
                tokens = self.tokenize(marker)
                if len(tokens) == 1:
                    ids.add(tokens[0])
        return ids

    def _install_eval_hook(self) -> None:
        # Llama.generate calls self.eval(tokens) with the whole unevaluated prompt suffix, then
        # with one token per step. Wrapping it measures what was actually evaluated (prefix reuse
        # included) and lets a long prompt stop between batches on cancel or deadline.
        llama = self.llama
        original = llama.eval

        def eval_in_batches(tokens: Sequence[int]) -> None:
            run = self.active
            if run is None or not tokens:
                original(tokens)
                return
            for start in range(0, len(tokens), llama.n_batch):
                run.check()
                batch = tokens[start : start + llama.n_batch]
                original(batch)
                if run.in_prompt:
                    run.evaluated += len(batch)

        llama.eval = eval_in_batches


def _free_llama(llama: Any) -> None:
    """Free a ``Llama``'s weights, context and sampler now (``Llama.close``)."""
    llama.close()


class LocalModel:
    """A GGUF chat model run in-process by llama-cpp-python (implements ``Model``).

    Constructing it touches nothing; the file is checked and the weights load on first use.
    """

    exact_counts = True  # the GGUF's own template and tokenizer

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        n_threads_batch: int | None = None,
        n_batch: int = 512,
        temperature: float = 0.0,
        extra_buffers: bool | None = None,
        name: str | None = None,
        state_cache_memory: int = 0,
        state_cache_disk: int = 0,
        state_folder: str | os.PathLike[str] | None = None,
        tool_call_grammar: bool = True,
        reasoning: str = "auto",
    ) -> None:
        self.model_path = Path(model_path).expanduser()
        self.n_ctx = n_ctx
        self.model_id = f"local:{self.model_path}#n_ctx={n_ctx}"
        self.name = name or self.model_path.name
        generation_threads, batch_threads = default_threads()
        self._n_threads = n_threads or generation_threads
        self._n_threads_batch = n_threads_batch or batch_threads
        self._n_batch = n_batch
        self._temperature = temperature  # 0: greedy
        #: Whether a tool call the model opens is finished under the offered tools' grammar.
        self._tool_call_grammar = tool_call_grammar
        # llama.cpp's extra weight buffers (AMX, repacked layouts): None = on unless the build
        # uses AMX, whose matmul crashes the process in this llama.cpp (see _has_amx).
        self._extra_buffers = extra_buffers
        self._load_lock = threading.Lock()
        self._loaded: _Loaded | None = None
        #: ``chat.reasoning``: whether templates that can switch reasoning get it on.
        self._thinking = thinking_for(reasoning, n_ctx)
        self._metadata_template: ChatTemplate | None = None
        #: Counts by a keyed hash of the message (``_count_key``), never the message itself.
        self._counts: OrderedDict[bytes, int] = OrderedDict()
        self._counts_lock = threading.Lock()
        self._counts_key = os.urandom(32)
        #: Usage of the latest generation, cancelled ones included (a cancelled request
        #: returns nothing, so this is where its cost can be seen).
        self.last_usage: Usage | None = None
        # Per-session states (chat.state_cache_memory / chat.state_cache_disk bytes; 0 is off),
        # the cache created with the model, when its identity is known.
        self._sessions = SessionStates(
            memory_bytes=state_cache_memory,
            disk_bytes=state_cache_disk,
            folder=Path(state_folder).expanduser() if state_folder is not None else None,
        )
        #: Seconds the latest request took to its first token once it held the model (a state
        #: restored and the prompt evaluated), for the benchmark.
        self.last_first_token_s: float | None = None

    def __repr__(self) -> str:
        return f"LocalModel({str(self.model_path)!r}, n_ctx={self.n_ctx})"

    # -- loading ----------------------------------------------------------------------------
    def load(self) -> _Loaded:
        """Load the model once (thread-safe); later calls return it at once."""
        loaded = self._loaded
        if loaded is not None:
            return loaded
        with self._load_lock:
            if self._loaded is None:
                loaded = self._load()
                self._sessions.open(fingerprint(loaded, self.model_path, self._extra_buffers))
                self._loaded = loaded
                # llama.cpp's weights and context are freed when this model is: llama-cpp-python's
                # objects refer to themselves (its tokenizer, its free callbacks), so without an
                # explicit close they would wait for a full garbage collection, and a model
                # retired by a settings change (chat.n_ctx, chat.model) would stay in memory.
                # Nothing can be generating then: every request holds the model it runs on.
                freeing = weakref.finalize(self, _free_llama, loaded.llama)
                freeing.atexit = False  # at exit the model thread may still be generating
            return self._loaded

    # -- per-session state (local_states.py) ------------------------------------------------------
    @property
    def states(self) -> StateCache | None:
        """The states of the loaded model (None before it loads)."""
        return self._sessions.cache

    @property
    def last_restore(self) -> tuple[str, int, str] | None:
        """What the latest request restored: (session, tokens of the state, "memory" or "disk")."""
        return self._sessions.last_restore

    def set_state_limits(self, *, memory_bytes: int, disk_bytes: int) -> None:
        """Apply new ``chat.state_cache_memory`` / ``chat.state_cache_disk`` values."""
        self._sessions.set_limits(memory_bytes=memory_bytes, disk_bytes=disk_bytes)

    def forget_session(self, session_id: str) -> None:
        """Delete the session's states, in memory and on disk."""
        self._sessions.forget(session_id)

    def close_states(self, timeout: float = 10.0) -> None:
        """Keep the state the context holds, write the states still queued (each within
        ``timeout``), free the rest and stop the writer."""
        self._sessions.close(self._loaded, timeout)

    def save_context_state(self, timeout: float = 10.0) -> bool:
        """Copy the session state llama.cpp's context holds into the cache now, waiting up to
        ``timeout`` for a generation in progress; False if that did not end in time."""
        return self._sessions.save_context(self._loaded, timeout)

    def make_way(self, scope: RequestScope) -> None:
        """``scope``'s request comes next: copy the state of the session llama.cpp's context holds
        now if that request would replace it, as its generation would first (``displace``). Queued
        for the model thread and returned at once, so the copy runs while the reply stores its
        question (a commit waiting on the disk); the generation, queued after it, finds it done."""
        loaded = self._loaded
        unsaved = self._sessions.unsaved
        if loaded is None or unsaved is None or unsaved.session_id == scope.session_id:
            return  # nothing held to copy, or the request extends it (looked at again in the thread)

        def copy_away() -> None:
            with loaded.generation_lock, self._sessions.generating():
                self._sessions.displace(loaded, scope)

        to_model_thread(copy_away).add_done_callback(_log_copy_failure)

    def _restore_state(self, loaded: _Loaded, run: _Run, tokens: list[int]) -> None:
        """Before a session's request: restore its best state when it beats what the context holds."""
        self._sessions.restore(loaded, run.scope, tokens)

    def _load(self) -> _Loaded:
        check_gguf(self.model_path)
        try:
            from llama_cpp import Llama
        except ImportError as error:
            raise ModelUnavailable(
                f"llama-cpp-python is not installed ({error}); run: pip install llama-cpp-python"
            ) from None
        extra_buffers = self._extra_buffers
        if extra_buffers is None:
            extra_buffers = not _has_amx()

        class ConfiguredLlama(Llama):
            # Llama takes no argument for llama.cpp's model-level use_extra_bufts, so it is set
            # on the parameters as Llama.__init__ creates them, before the weights load.
            def __setattr__(self, name: str, value: Any) -> None:
                if name == "model_params" and not extra_buffers:
                    value.use_extra_bufts = False
                super().__setattr__(name, value)

        try:
            llama = ConfiguredLlama(
                model_path=str(self.model_path),
                n_ctx=self.n_ctx,
                n_batch=self._n_batch,
                n_threads=self._n_threads,
                n_threads_batch=self._n_threads_batch,
                verbose=False,  # llama.cpp logs nothing; stdout carries only the protocol
            )
        except (ValueError, RuntimeError, OSError) as error:
            raise ModelUnavailable(f"llama.cpp could not load the chat model {self.model_path}: {error}") from None
        template = llama.metadata.get("tokenizer.chat_template")
        if not template:
            llama.close()
            raise ModelUnavailable(
                f"the chat model {self.model_path} has no chat template (tokenizer.chat_template) in its GGUF metadata"
            )
        try:
            return _Loaded(llama, template, self.model_path, thinking=self._thinking)
        except TemplateError as error:
            llama.close()
            raise ModelUnavailable(str(error)) from None

    def _template(self) -> ChatTemplate | None:
        """The GGUF's chat template: the loaded one, else read from the metadata alone (a
        runtime Protocol check and ``imprintd config`` read these facts without the weights);
        None while the file is missing or unreadable, whose error comes at first use."""
        if self._loaded is not None:
            return self._loaded.chat
        if self._metadata_template is None:
            try:
                check_gguf(self.model_path)
                source = read_gguf_string(self.model_path, "tokenizer.chat_template")
                if not source:
                    return None
                self._metadata_template = ChatTemplate(source, model_name=self.model_path.name, thinking=self._thinking)
            except (ModelError, OSError, ValueError):
                return None
        return self._metadata_template

    @property
    def native_tools(self) -> bool:
        """Whether the GGUF's template renders tool schemas."""
        template = self._template()
        return template is not None and template.native

    @property
    def chat_format(self) -> str:
        """The detected call format (``chat_formats/table.py``); ``json-fallback`` until a template is read."""
        template = self._template()
        return template.format.name if template is not None else "json-fallback"

    @property
    def reasons(self) -> bool:
        """Whether the model thinks before it answers, with ``chat.reasoning`` applied."""
        template = self._template()
        return template is not None and template.reasons

    # -- rendering ----------------------------------------------------------------------------
    def render_prompt(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> str:
        """The fully formatted prompt generation would evaluate, generation prompt included."""
        return self.load().chat.render(messages, tools)

    def prompt_tokens(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> list[int]:
        return self.load().tokenize_prompt(self.render_prompt(messages, tools))

    # -- counting -------------------------------------------------------------------------------
    def count_prompt(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
        try:
            return len(self.prompt_tokens(messages, tools))
        except TemplateError as refused:
            # A prompt the daemon only counts (a system prompt alone, a conversation's prefix)
            # that the template refuses as a whole conversation (Qwen3.5 wants a user turn):
            # measured with a user turn after it, less what that turn adds.
            loaded = self.load()
            try:
                with_user = len(loaded.tokenize(loaded.chat.render([*messages, LEAD_USER], tools)))
            except TemplateError:
                raise refused from None
            return max(0, with_user - self.count_message(LEAD_USER))

    def reusable_prefix(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> tuple[int, int]:
        """(prompt tokens, how many of them llama.cpp holds evaluated already) for this prompt now.

        Mirrors ``Llama.generate``: the longest common prefix of the tokens it evaluated last
        and the prompt, less one when that is the whole prompt (one token is replayed to get
        fresh logits), or the prefix a state of this session (``request_scope``) would restore
        when that is longer. Generating the prompt now would evaluate the rest; the research budget
        charges that (docs/decisions.md, "Research budget"). Another request before this one changes the answer.
        """
        tokens = self.prompt_tokens(messages, tools)
        loaded = self.load()
        prompt = array("i", tokens)
        held = live_reuse(common_prefix(loaded.held_tokens(), prompt), len(prompt))
        candidate = self._sessions.best(loaded, request_scope(), prompt, held)
        return len(tokens), candidate.reused if candidate is not None else held

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        return len(self.load().llama.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def count_message(self, message: Message) -> int:
        key = hashlib.blake2b(
            msgspec.json.encode(msgspec.structs.replace(message, seq=None)), key=self._counts_key, digest_size=32
        ).digest()
        with self._counts_lock:
            cached = self._counts.get(key)
            if cached is not None:
                self._counts.move_to_end(key)
                return cached
        count = self._message_tokens(message)
        with self._counts_lock:
            self._counts[key] = count
            if len(self._counts) > MESSAGE_CACHE_SIZE:
                self._counts.popitem(last=False)
        return count

    def _message_tokens(self, message: Message) -> int:
        """Tokens the template adds for ``message``: the difference of two whole renders, with a
        lead-in the template accepts (``ChatTemplate.count_renders``).

        Where the shorter render is a prefix of the longer, the added text is tokenized once;
        otherwise the difference of the two token counts is used.
        """
        loaded = self.load()
        base, full = loaded.chat.count_renders(message)
        if full.startswith(base):
            return len(loaded.tokenize(full[len(base) :]))
        return max(0, len(loaded.tokenize(full)) - len(loaded.tokenize(base)))

    # -- generation -------------------------------------------------------------------------------
    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        *,
        max_tokens: int,
        timeout: float | None = None,
        on_text: TextCallback | None = None,
        on_start: StartHook | None = None,
        on_retry: RetryCallback | None = None,
        grammar: str | None = None,
        on_reasoning: TextCallback | None = None,
    ) -> Completion:
        deadline = math.inf if timeout is None else _clock() + timeout
        run = _Run(deadline=deadline, scope=request_scope())
        if grammar:
            run.grammar = _compiled_grammar(grammar)
        # Loading and tokenizing a long prompt block; neither needs the lock.
        loaded = await anyio.to_thread.run_sync(self.load)
        tokens = await in_worker(self.prompt_tokens, messages, tools)
        prompt_tokens = len(tokens)
        if prompt_tokens + max_tokens > self.n_ctx:
            raise ModelError(
                f"prompt of {prompt_tokens} tokens plus {max_tokens} output tokens "
                f"exceeds the {self.n_ctx}-token context"
            )
        lock = inference_lock()
        acquired = False
        with anyio.move_on_after(max(0.0, deadline - _clock())):
            await lock.acquire()
            acquired = True
        if not acquired:  # the deadline passed while other replies held the lock
            usage = Usage(prompt_tokens=prompt_tokens, evaluated_tokens=0, generated_tokens=0)
            return report_usage(self.model_id, Completion(text="", finish_reason="deadline", usage=usage))
        try:
            if on_start is not None:
                await on_start()  # e.g. the budget, measured against the prefix llama.cpp holds now
            result = await self._run_worker(loaded, run, tokens, tools, max_tokens, on_text, on_reasoning)
        finally:
            lock.release()
        finish: FinishReason = "stop"
        if result.finish in ("length", "deadline", "repetition"):
            finish = result.finish  # type: ignore[assignment]
        elif result.parsed.calls:
            finish = "tool_calls"
        cut = finish in ("deadline", "repetition")  # calls after the cut were never finished
        text = cut_before_loop(result.parsed.text, result.loop_start) if finish == "repetition" else result.parsed.text
        return report_usage(
            self.model_id,
            Completion(
                text=text,
                tool_calls=() if cut else result.parsed.calls,
                tool_call_error=None if cut else result.parsed.error,
                finish_reason=finish,
                wrote_tool_call=result.parsed.wrote_call,
                reasoning=result.reasoning,
                usage=Usage(
                    prompt_tokens=prompt_tokens, evaluated_tokens=result.evaluated, generated_tokens=result.generated
                ),
            ),
        )

    async def _run_worker(
        self,
        loaded: _Loaded,
        run: _Run,
        tokens: list[int],
        tools: Sequence[ToolSpec],
        max_tokens: int,
        on_text: TextCallback | None,
        on_reasoning: TextCallback | None = None,
    ) -> _Result:
        # Each piece reaches the loop in order without the model thread waiting for it, a few
        # tokens at a time; a callback that fails stops the generation, and its error is raised below.
        to_loop = ToLoop(asyncio.get_running_loop(), on_failure=run.stop.set, every=STREAM_EVERY_S)

        def deliver(callback: TextCallback, piece: str) -> None:
            # Runs on the event-loop thread; after a cancel nothing more reaches the caller.
            if not run.stop.is_set():
                callback(piece)

        # One each, so that pieces waiting for the same turn of the loop join into one call.
        text_out = functools.partial(deliver, on_text) if on_text is not None else None
        thoughts_out = functools.partial(deliver, on_reasoning) if on_reasoning is not None else None

        def emit(piece: str) -> None:
            if text_out is not None:
                to_loop.join(text_out, piece)

        def think(piece: str) -> None:
            if thoughts_out is not None:
                to_loop.join(thoughts_out, piece)

        def work() -> _Result:
            try:
                return self._generate(loaded, run, tokens, tools, max_tokens, emit, think)
            finally:
                run.finished.set()

        try:
            # The model thread, at a lower priority: the loop thread wins a core when it needs one.
            result = await in_model_thread(work)
            to_loop.run_pending()  # the pieces of the last interval
            if to_loop.failure is not None:
                raise to_loop.failure
            return result
        except anyio.get_cancelled_exc_class():
            # Stop the worker before its next token and wait for it, so the lock is released
            # only when llama.cpp is idle again; then let the cancellation go on.
            run.stop.set()
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(run.finished.wait)
            raise
        except (RuntimeError, ValueError, OSError) as error:
            to_loop.run_pending()  # what streamed before the failure, as it would have
            # What llama-cpp-python raises when a decode fails (out of context, memory, ...).
            raise ModelError(f"llama.cpp failed while generating: {error}") from error
        finally:
            to_loop.close()

    def _generate(
        self,
        loaded: _Loaded,
        run: _Run,
        tokens: list[int],
        tools: Sequence[ToolSpec],
        max_tokens: int,
        emit: Callable[[str], None],
        think: Callable[[str], None] = lambda piece: None,
    ) -> _Result:
        """The worker: evaluate the prompt, then sample token by token until a stop.

        Each token is decoded with its special tokens (a family's markers may be special), its
        reasoning split off and streamed through ``think``, and the answer text filtered of
        call markup (the chat format's syntax) before it is emitted.
        """
        llama = loaded.llama
        chat = loaded.chat
        visible = chat.reply_filter(tools)
        splitter = chat.reasoning_splitter()
        thoughts: list[str] = []
        guard = RepetitionGuard()
        # A call is finished under a grammar of the offered tools (chat_formats/grammar.py), unless the
        # whole output already has one.
        watch = CallWatch(tools, chat.call_format) if self._tool_call_grammar and run.grammar is None else None
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        kept: list[int] = []  # the tokens generated so far that stay in the reply
        generated = 0
        finish = "stop"
        # llama.cpp state is single-threaded whatever the event loop; the state writer holds off.
        with loaded.generation_lock, self._sessions.generating():
            started = time.perf_counter()
            self.last_first_token_s = None
            self._sessions.displace(loaded, run.scope)
            self._restore_state(loaded, run, tokens)
            loaded.active = run
            stream = self._stream(llama, tokens, run.grammar)
            try:
                while True:
                    run.check()  # before producing the next token: cancel and deadline
                    token = next(stream, None)
                    if run.in_prompt:
                        self.last_first_token_s = time.perf_counter() - started
                    run.in_prompt = False
                    if token is None or loaded.is_end(token):
                        break
                    generated += 1
                    before = decoder.getstate()
                    split_before = copy.copy(splitter)
                    thought, text = splitter.feed(decoder.decode(loaded.detokenize(token)))
                    call = watch.feed(text) if watch is not None and text else None
                    if call is not None and not before[0]:
                        # This token opened a call: generate it again, under the call's grammar,
                        # from the tokens before it (held evaluated; one is replayed for logits).
                        stream.close()
                        decoder.setstate(before)
                        splitter = split_before
                        stream = self._stream(llama, tokens + kept, _compiled_grammar(call))
                        continue
                    kept.append(token)
                    if thought:
                        thoughts.append(thought)
                        think(thought)
                    piece = visible.feed(text)
                    if piece:
                        emit(piece)
                        if guard.feed(piece):
                            finish = "repetition"
                            break
                    if generated >= max_tokens:
                        finish = "length"
                        break
            except _Interrupted as stop:
                finish = stop.reason
            finally:
                stream.close()
                loaded.active = None
            self._sessions.hold(loaded, run.scope)  # its session owns the context until another request
        thought, text = splitter.feed(decoder.decode(b"", final=True))
        more_thought, more_text = splitter.finish()
        thought += more_thought
        if thought:
            thoughts.append(thought)
            if finish != "cancelled":
                think(thought)
        tail = visible.feed(text + more_text)
        last, parsed = visible.finish()
        rest = tail + last
        if rest and finish != "cancelled":
            emit(rest)
        self.last_usage = Usage(prompt_tokens=len(tokens), evaluated_tokens=run.evaluated, generated_tokens=generated)
        return _Result(
            parsed=parsed,
            finish=finish,
            evaluated=run.evaluated,
            generated=generated,
            loop_start=guard.loop_start,
            reasoning="".join(thoughts).rstrip(),
        )

    def _stream(self, llama: Any, tokens: list[int], grammar: Any) -> Any:
        """llama.cpp's token stream for ``tokens``, greedy unless a temperature is set."""
        return llama.generate(
            tokens,
            temp=self._temperature,
            top_k=1 if self._temperature == 0 else 40,
            repeat_penalty=1.0,
            reset=True,
            grammar=grammar,
        )


def _log_copy_failure(copied: concurrent.futures.Future) -> None:
    """A state copied ahead of a request (``make_way``) that failed: the session it belonged to
    answers its next question from its messages; the request itself goes on."""
    error = copied.exception()
    if error is not None:
        logger.warning("could not keep the model state of the previous session: %s", error)


def _compiled_grammar(grammar: str) -> Any:
    """``grammar`` (GBNF) compiled for llama.cpp's sampler; ModelError naming the fault if it does not parse."""
    from llama_cpp import LlamaGrammar

    try:
        return LlamaGrammar.from_string(grammar, verbose=False)
    except (ValueError, RuntimeError) as error:
        raise ModelError(f"the output grammar does not parse: {error}") from None
