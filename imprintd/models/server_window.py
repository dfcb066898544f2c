"""What context window a model server really has, and what its refusals and usage say of it.

``chat.provider = "openai"`` reaches Ollama, LM Studio, llama.cpp's ``llama-server``, vLLM and
hosted APIs alike; each serves a model with a window of its own, often smaller than ``chat.n_ctx``.
Each says what it has through its own endpoint, asked once per model (``probe``), all at once,
each with a short timeout and a bounded read:

* llama-server: ``GET /props`` → ``default_generation_settings.n_ctx`` (one slot's window);
* vLLM: ``GET /v1/models`` → the model's ``max_model_len``;
* LM Studio: ``GET /api/v0/models`` → the model's ``loaded_context_length`` (once loaded),
  else ``max_context_length``;
* Ollama: ``GET /api/ps`` → the loaded model's ``context_length``; ``POST /api/show`` → the
  model's ``num_ctx`` parameter, else Ollama's default (``OLLAMA_DEFAULT_CTX``, a guess: the
  server's ``OLLAMA_CONTEXT_LENGTH`` is not visible), capped by the model's own
  ``<arch>.context_length``.

A server that answers none of them keeps ``chat.n_ctx``. Whatever a server says, what it
does counts too: a refusal for length (``context_exceeded`` knows the words of llama-server,
llama-cpp-python's server, vLLM, Ollama, LM Studio and OpenAI) names the window, and a reply
whose ``usage.prompt_tokens`` leaves no room for the output allowance shows a server that cut
the prompt to fit (Ollama does, silently, from the front).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx
import msgspec

from imprintd.models.server_http import BoundedRequestError, Bounds, request_json

logger = logging.getLogger(__name__)

#: Seconds each window question may take, connection included: a server that does not know
#: the path answers 404 at once, and one that is down refuses at once.
PROBE_TIMEOUT_S = 3.0
#: Bytes of one answer read at most: a model list or a props object is a few KiB (llama-server's
#: props carry the chat template); a larger one is not read on (its window stays unknown).
MAX_PROBE_BYTES = 1 << 20
#: Ollama's default window when neither the model's parameters nor ``/api/ps`` say one.
OLLAMA_DEFAULT_CTX = 4096

#: How each kind of server is told to give a model a larger window, for the notice and errors.
HOW_TO_RAISE = {
    "llama-server": "start llama-server with a larger -c (--ctx-size); with --parallel N each slot gets a 1/N share",
    "llama-cpp-python": "start the server with a larger --n_ctx",
    "vllm": "start vLLM with a larger --max-model-len",
    "lmstudio": "load the model in LM Studio with a larger context length (the model's load settings)",
    "ollama": "set OLLAMA_CONTEXT_LENGTH for the Ollama server, or num_ctx in a Modelfile (PARAMETER num_ctx 8192)",
}
GENERIC_RAISE = (
    "give the model a larger context window on the server (llama-server -c, llama-cpp-python --n_ctx, "
    "vLLM --max-model-len, Ollama OLLAMA_CONTEXT_LENGTH or num_ctx, LM Studio's context length)"
)


class ServerWindow(msgspec.Struct, frozen=True, kw_only=True):
    """A window a server said it has (or showed it has), and where that was read."""

    tokens: int
    #: Where it came from, in words: "llama-server /props n_ctx", "the server's error", ….
    source: str
    #: Which kind of server it is, a ``HOW_TO_RAISE`` key; "" when not known.
    server: str = ""
    #: True when it is a guess (Ollama's default for a model not loaded yet): asked again later.
    provisional: bool = False

    def how_to_raise(self) -> str:
        return HOW_TO_RAISE.get(self.server, GENERIC_RAISE)


Getter = Callable[[str, str, Any], Awaitable[Any]]


async def read_json(client: httpx.AsyncClient, method: str, url: str, body: Any, headers: dict[str, str]) -> Any:
    """The JSON a short request answers, or None: any failure, status other than 200, a body
    over ``MAX_PROBE_BYTES`` (as sent or decoded), nested too deep, or not JSON; asked within
    ``PROBE_TIMEOUT_S`` in all (``server_http.request_json``)."""
    content = None
    if body is not None:
        content = json.dumps(body).encode()
        headers = {**headers, "Content-Type": "application/json"}
    try:
        bounds = Bounds(timeout_s=PROBE_TIMEOUT_S, max_bytes=MAX_PROBE_BYTES)
        return await request_json(client, method, url, bounds, content=content, headers=headers)
    except BoundedRequestError as error:
        # Most servers know few of the paths asked (a 404) or are down: only a refused body is told.
        (logger.info if error.answered else logger.debug)("%s; not read on", error)
        return None


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _listed(answer: Any, model: str, key: str = "data") -> dict | None:
    """The entry for ``model`` in a ``{"data": [{"id": …}, …]}`` list (the only one if one)."""
    if not isinstance(answer, dict) or not isinstance(answer.get(key), list):
        return None
    entries = [entry for entry in answer[key] if isinstance(entry, dict)]
    for entry in entries:
        if model in (entry.get("id"), entry.get("name"), entry.get("model")):
            return entry
    return entries[0] if len(entries) == 1 else None


def from_llama_server(props: Any) -> ServerWindow | None:
    """llama-server's ``GET /props``: one slot's window (``-c`` shared among ``--parallel`` slots)."""
    if not isinstance(props, dict):
        return None
    settings = props.get("default_generation_settings")
    tokens = _positive(settings.get("n_ctx")) if isinstance(settings, dict) else None
    tokens = tokens or _positive(props.get("n_ctx"))
    return ServerWindow(tokens=tokens, source="llama-server /props n_ctx", server="llama-server") if tokens else None


def from_vllm(models: Any, model: str) -> ServerWindow | None:
    """vLLM's ``GET /v1/models``: the model's ``max_model_len``."""
    entry = _listed(models, model)
    tokens = _positive(entry.get("max_model_len")) if entry else None
    return ServerWindow(tokens=tokens, source="vLLM /v1/models max_model_len", server="vllm") if tokens else None


def from_lmstudio(models: Any, model: str) -> ServerWindow | None:
    """LM Studio's ``GET /api/v0/models``: the loaded context length, else the model's maximum."""
    entry = _listed(models, model)
    if entry is None:
        return None
    loaded = _positive(entry.get("loaded_context_length"))
    if loaded:
        return ServerWindow(tokens=loaded, source="LM Studio loaded_context_length", server="lmstudio")
    largest = _positive(entry.get("max_context_length"))
    if largest:
        # Not loaded yet: LM Studio loads it with the length set for it, often less. Asked again.
        return ServerWindow(tokens=largest, source="LM Studio max_context_length", server="lmstudio", provisional=True)
    return None


_NUM_CTX = re.compile(r"^\s*num_ctx\s+(\d+)\s*$", re.MULTILINE)


def from_ollama(show: Any, running: Any, model: str) -> ServerWindow | None:
    """Ollama's ``GET /api/ps`` (the loaded model's window) or ``POST /api/show`` (its ``num_ctx``,
    else Ollama's default), never more than the model's own ``context_length``."""
    loaded = _listed(running, model, "models")
    if loaded is not None and _positive(loaded.get("context_length")):
        return ServerWindow(tokens=loaded["context_length"], source="Ollama /api/ps context_length", server="ollama")
    if not isinstance(show, dict):
        return None
    info = show.get("model_info")
    trained = None
    if isinstance(info, dict):
        trained = next((_positive(v) for k, v in info.items() if k.endswith(".context_length") and _positive(v)), None)
    parameters = show.get("parameters")
    found = _NUM_CTX.search(parameters) if isinstance(parameters, str) else None
    if found:
        tokens, source, provisional = int(found.group(1)), "Ollama num_ctx parameter", False
    elif trained or "parameters" in show or "template" in show:
        tokens, source, provisional = OLLAMA_DEFAULT_CTX, "Ollama's default num_ctx", True
    else:
        return None
    if trained:
        tokens = min(tokens, trained)
    return ServerWindow(tokens=tokens, source=source, server="ollama", provisional=provisional) if tokens > 0 else None


def server_root(base_url: str) -> str:
    """``http://host:port`` for ``http://host:port/v1``: where llama-server, LM Studio and Ollama
    keep their own endpoints."""
    base = base_url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


async def probe(client: httpx.AsyncClient, base_url: str, model: str, headers: dict[str, str]) -> ServerWindow | None:
    """What the server at ``base_url`` says ``model``'s window is; None when it says nothing.

    Every endpoint is asked at once, so a server that knows none of them costs one round trip.
    """
    root = server_root(base_url)
    asks = {
        "props": ("GET", f"{root}/props", None),
        "models": ("GET", f"{base_url.rstrip('/')}/models", None),
        "lmstudio": ("GET", f"{root}/api/v0/models", None),
        "ps": ("GET", f"{root}/api/ps", None),
        "show": ("POST", f"{root}/api/show", {"model": model}),
    }
    answers: dict[str, Any] = {}

    async def ask(name: str, method: str, url: str, body: Any) -> None:
        answers[name] = await read_json(client, method, url, body, headers)

    async with anyio.create_task_group() as group:
        for name, (method, url, body) in asks.items():
            group.start_soon(ask, name, method, url, body)
    return (
        from_llama_server(answers.get("props"))
        or from_vllm(answers.get("models"), model)
        or from_lmstudio(answers.get("lmstudio"), model)
        or from_ollama(answers.get("show"), answers.get("ps"), model)
    )


# -- what a refusal for length says ----------------------------------------------------------------
class Exceeded(msgspec.Struct, frozen=True, kw_only=True):
    """A server refused a prompt as too long for its window."""

    #: The window it named; None when its words name none (llama-server's older text, Ollama's).
    window: int | None = None
    #: The prompt's tokens as the server counted them, when it said (with or without the output).
    prompt_tokens: int | None = None
    server: str = ""


_NUMBER = r"(\d[\d,]*)"
#: What a refusal for length says, by server: (its words, which server, the window they name).
_EXCEEDED: tuple[tuple[re.Pattern[str], str], ...] = (
    # llama-cpp-python's server: "Requested tokens (2745) exceed context window of 1024"
    (re.compile(rf"exceed context window of {_NUMBER}", re.I), "llama-cpp-python"),
    # vLLM and OpenAI: "This model's maximum context length is 4096 tokens. However, you
    # requested 5000 tokens (4000 in the messages, 1000 in the completion)."
    (re.compile(rf"maximum context length is {_NUMBER} tokens", re.I), ""),
    # vLLM, newer: "… is longer than the maximum model length of 4096"
    (re.compile(rf"maximum model length of {_NUMBER}", re.I), "vllm"),
    # LM Studio: "… the model is loaded with context length of only 4096 tokens, which is not enough"
    (re.compile(rf"loaded with context length of only {_NUMBER}", re.I), "lmstudio"),
    # llama-server: "the request exceeds the available context size, try increasing it" (its
    # body carries n_ctx and n_prompt_tokens, read apart)
    (re.compile(r"exceeds the available context size", re.I), "llama-server"),
    # Ollama: "the input length exceeds the context length"
    (re.compile(r"input length exceeds (?:the |maximum )?context length", re.I), "ollama"),
    # OpenAI's code, and other servers' plain words
    (
        re.compile(
            r"context_length_exceeded|context window exceeded|exceeds? (?:the )?context (?:window|length|size)", re.I
        ),
        "",
    ),
)
#: The prompt's own tokens, where a refusal names them.
_PROMPT_TOKENS = (
    re.compile(rf"Requested tokens \({_NUMBER}\)", re.I),
    re.compile(rf"{_NUMBER} in the messages", re.I),
    re.compile(rf"(?:messages|input|prompt) resulted in {_NUMBER} tokens", re.I),
)


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def context_exceeded(text: str, body: Any = None) -> Exceeded | None:
    """What a server's refusal says about its window, when it is a refusal for length; else None.

    ``body`` is the refusal's JSON, when it had one: llama-server puts ``n_ctx`` and
    ``n_prompt_tokens`` beside its words.
    """
    for pattern, server in _EXCEEDED:
        found = pattern.search(text)
        if found is None:
            continue
        window = _int(found.group(1)) if found.groups() else None
        prompt = next((_int(m.group(1)) for p in _PROMPT_TOKENS if (m := p.search(text))), None)
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict):
            window = window or _positive(error.get("n_ctx"))
            prompt = prompt or _positive(error.get("n_prompt_tokens"))
        return Exceeded(window=window, prompt_tokens=prompt, server=server)
    return None
