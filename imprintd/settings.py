"""One fully-defaulted Settings object, and where each value came from (README, "Settings").

Sources, lowest first: defaults, the user's TOML config file, the environment
(``IMPRINT_`` + key upper-cased with dots as underscores), CLI flags, then the editor
(initializationOptions and ``workspace/didChangeConfiguration``). A value that is
mistyped or out of range is reported, naming the key, the value and what is accepted,
and the previous value stays. A ``null`` value unsets the key for its source: the key
falls back to the highest source below that still sets it (the default at the bottom).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import msgspec.inspect
import platformdirs
from msgspec import Meta

from imprintd.mcp.config import ACCEPTED as MCP_ACCEPTED
from imprintd.mcp.config import McpServerConfig, as_editor_shape, parse_servers
from imprintd.redact import hide_url_passwords

APP_NAME = "imprint"


def _is_http_url(value: str) -> bool:
    """Whether httpx, which will send the requests, reads ``value`` as an http(s) URL with a host.

    Asked here so a URL it cannot parse (``http://[::1``) is refused as a setting, naming it,
    instead of failing every reply later.
    """
    import httpx  # only when a URL is checked: ``imprintd config`` need not load it otherwise

    try:
        url = httpx.URL(value)
    except (httpx.InvalidURL, TypeError, ValueError):
        return False
    # httpx parses a port past 65535, a host with a space and one like "%d", then fails to
    # connect on them (the last only once name resolution fails, naming no setting).
    return (
        url.scheme in ("http", "https")
        and _is_host(url.host, url.raw_host)
        and (url.port is None or 0 < url.port < 65536)
        and not any(character.isspace() for character in value)
    )


#: A host name as sent (IDNA-encoded): labels of letters, digits, hyphens and underscores.
_HOST_NAME = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*\.?")


def _is_host(host: str, raw_host: bytes) -> bool:
    """Whether an URL's host is an IP address or a name that can be looked up."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return _HOST_NAME.fullmatch(raw_host.decode("ascii", "replace")) is not None
    return True


class ChatSettings(msgspec.Struct, frozen=True, kw_only=True):
    """Every ``chat.*`` setting, declared once: type, default, range and a line of help.

    ``KEYS`` (what is accepted, how a refusal reads), ``imprintd config``, and the tests that
    check the README's table and protocol.md's list are all derived from these fields.
    """

    provider: Annotated[Literal["local", "openai"], Meta(description="where the chat model runs")] = "local"
    model: Annotated[
        str,
        Meta(
            description="the chat model; empty: the embedded SmolLM2-135M-Instruct",
            extra={"accepted": "a GGUF path (local) or a model name (openai); empty for the embedded default"},
        ),
    ] = ""
    base_url: Annotated[
        str,
        Meta(
            description="OpenAI-compatible server for provider openai",
            extra={"accepted": "an http(s) URL with a host, e.g. http://127.0.0.1:8080/v1", "check": _is_http_url},
        ),
    ] = "http://127.0.0.1:8080/v1"
    n_ctx: Annotated[int, Meta(ge=512, le=1_048_576, description="context window in tokens")] = 8192
    max_tokens: Annotated[int, Meta(ge=16, le=32_768, description="output allowance of each model turn in tokens")] = (
        1024
    )
    analysis_workers: Annotated[int, Meta(ge=0, le=8, description="section-analysis workers; 0 turns analysis off")] = 2
    analysis_context: Annotated[
        int,
        Meta(
            ge=1024,
            le=65_536,
            description="tokens of one section worker's context (at most chat.n_ctx); larger sections, fewer of them",
        ),
    ] = 4096
    research_token_budget: Annotated[
        int, Meta(ge=1024, le=16_777_216, description="tokens research may spend on one reply")
    ] = 65536
    index_max_files: Annotated[
        int,
        Meta(
            ge=1,
            le=10_000_000,
            description="files of a workspace the search index keeps: the first the walk finds, shallow folders first",
        ),
    ] = 20_000
    index_max_bytes: Annotated[
        int,
        Meta(
            ge=1024,
            le=68_719_476_736,
            description="bytes of workspace files the search index reads, all files together",
        ),
    ] = 268_435_456
    research_time_budget: Annotated[
        float,
        Meta(
            ge=1,
            le=86_400,
            description="seconds one reply's research may take (summary, rounds, section analysis); the final answer then has its own 120 s",
            extra={"unit": "seconds"},
        ),
    ] = 300.0
    state_cache_memory: Annotated[
        int,
        Meta(
            ge=0,
            le=1 << 40,
            description="bytes of local model state kept in memory per process for follow-ups; 0 turns it off",
        ),
    ] = 2 << 30
    state_cache_disk: Annotated[
        int,
        Meta(
            ge=0,
            le=1 << 40,
            description="bytes of local model state kept in the cache dir across restarts; 0 turns it off",
        ),
    ] = 4 << 30
    first_look: Annotated[
        bool, Meta(description="search the workspace with the question before the model's first round")
    ] = True
    reasoning: Annotated[
        Literal["auto", "on", "off"],
        Meta(
            description="whether a model that can think before answering does (enable_thinking); auto: "
            "only with a context of 32768 tokens or more"
        ),
    ] = "auto"
    remote_parallel: Annotated[
        int,
        Meta(
            ge=1,
            le=64,
            description="requests to the model server (provider openai) at once: sessions, section workers and "
            "summaries side by side",
        ),
    ] = 4

    models_dir: Annotated[
        str,
        Meta(
            description="a folder of GGUF models that imprint/models lists first (beside LM Studio, Hugging Face, Ollama)",
            extra={"accepted": "a folder path; empty: none"},
        ),
    ] = ""
    mcp_servers: Annotated[
        tuple[McpServerConfig, ...],
        Meta(
            description="MCP servers whose tools replies may use, by name, in the shape editors write them",
            extra={"accepted": MCP_ACCEPTED, "parse": parse_servers, "show": as_editor_shape},
        ),
    ] = ()


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    chat: ChatSettings = ChatSettings()

    def get(self, key: str) -> Any:
        section, name = key.split(".", 1)
        return getattr(getattr(self, section), name)

    def replace(self, key: str, value: Any) -> Settings:
        section, name = key.split(".", 1)
        return msgspec.structs.replace(
            self, **{section: msgspec.structs.replace(getattr(self, section), **{name: value})}
        )


@dataclass(frozen=True)
class Key:
    """One setting as read from its field: its type, what is accepted, and a line of help."""

    name: str
    type: type
    accepted: str
    help: str
    check: Callable[[Any], bool] = lambda value: True
    #: The accepted values or range in a few words (``512–1048576``, ``local, openai``); "" for free text.
    bounds: str = ""
    #: For a structured value (``chat.mcp_servers``): reads it, raising ValueError that says what is wrong.
    parse: Callable[[Any], Any] | None = None
    #: For a structured value: what ``imprintd config`` and a refusal show of it.
    show: Callable[[Any], Any] | None = None


def _key(section: str, field: msgspec.inspect.Field) -> Key:
    declared = field.type
    assert isinstance(declared, msgspec.inspect.Metadata), f"{field.name} needs a Meta with its description"
    kind, extra = declared.type, declared.extra or {}
    name, help_text = f"{section}.{field.name}", (declared.extra_json_schema or {})["description"]
    if isinstance(kind, msgspec.inspect.LiteralType):
        values = tuple(str(value) for value in kind.values)
        return Key(
            name, str, " or ".join(f'"{v}"' for v in values), help_text, lambda v: v in values, ", ".join(values)
        )
    if isinstance(kind, msgspec.inspect.BoolType):
        return Key(name, bool, "true or false", help_text, bounds="true, false")
    if isinstance(kind, msgspec.inspect.IntType | msgspec.inspect.FloatType):
        low, high = kind.ge, kind.le
        number = "an integer" if isinstance(kind, msgspec.inspect.IntType) else f"a number of {extra['unit']}"
        return Key(
            name,
            int if isinstance(kind, msgspec.inspect.IntType) else float,
            f"{number} from {low} to {high}",
            help_text,
            lambda v: low <= v <= high,
            f"{low}–{high}",
        )
    if "parse" in extra:
        return Key(name, tuple, extra["accepted"], help_text, parse=extra["parse"], show=extra.get("show"))
    return Key(name, str, extra["accepted"], help_text, extra.get("check", lambda value: True))


def _fields(struct: type[msgspec.Struct]) -> tuple[msgspec.inspect.Field, ...]:
    info = msgspec.inspect.type_info(struct)
    assert isinstance(info, msgspec.inspect.StructType)
    return info.fields


KEYS: dict[str, Key] = {key.name: key for key in (_key("chat", field) for field in _fields(ChatSettings))}

DEFAULTS = Settings()


#: How a yes/no setting may be written in the environment or on the command line.
_BOOL_WORDS = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False, "off": False}


class SettingsError(ValueError):
    """A value was refused; the message names the key, the value and what is accepted."""


def known_key(key: str) -> Key:
    """The declared key named ``key``, or SettingsError naming the known ones."""
    spec = KEYS.get(key)
    if spec is None:
        known = ", ".join(KEYS)
        raise SettingsError(f"unknown setting {key!r}; known settings: {known}")
    return spec


def coerce(key: str, value: Any, *, from_text: bool = False) -> Any:
    """Check ``value`` for ``key`` and return it in the key's type, or raise SettingsError."""
    spec = known_key(key)
    if spec.parse is not None:
        return _parsed(key, spec, value, from_text=from_text)
    converted = value
    try:
        if from_text and isinstance(value, str) and spec.type is bool:
            converted = _BOOL_WORDS[value.strip().lower()]
        elif from_text and isinstance(value, str) and spec.type is not str:
            converted = spec.type(value.strip())
        elif spec.type is float and isinstance(value, int) and not isinstance(value, bool):
            converted = float(value)
        if not isinstance(converted, spec.type) or (isinstance(converted, bool) and spec.type is not bool):
            raise TypeError
        if not spec.check(converted):
            raise ValueError
    except (TypeError, ValueError, KeyError):
        raise SettingsError(f"{key} = {_shown(value)} is not accepted: expected {spec.accepted}") from None
    return converted


def _parsed(key: str, spec: Key, value: Any, *, from_text: bool) -> Any:
    """A structured value read by its key's parser; from text (the environment, ``--set``) as JSON."""
    assert spec.parse is not None
    try:
        if from_text and isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as error:
                raise ValueError(f"not JSON ({error}); expected {spec.accepted}") from None
        return spec.parse(value)
    except ValueError as error:
        raise SettingsError(f"{key} is not accepted: {error}") from None


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"chat": {"n_ctx": 1}}`` and ``{"chat.n_ctx": 1}`` both become ``{"chat.n_ctx": 1}``.

    A key whose value is itself an object (``chat.mcp_servers``) stops the flattening there.
    """
    flat: dict[str, Any] = {}
    for name, value in values.items():
        key = f"{prefix}{name}"
        if isinstance(value, Mapping) and not (key in KEYS and KEYS[key].parse is not None):
            flat.update(flatten(value, f"{key}."))
        else:
            flat[key] = value
    return flat


@dataclass(frozen=True)
class Resolved:
    """Effective settings, the source of each value, and the values that were refused.

    ``layers`` keeps, per key, the value each source set, lowest source first, so that a source
    unsetting a key (``null``) uncovers what the sources below it say.
    """

    settings: Settings
    origins: Mapping[str, str]
    errors: tuple[str, ...] = ()
    layers: Mapping[str, tuple[tuple[str, Any], ...]] = field(default_factory=dict)

    def apply(self, values: Mapping[str, Any], source: str, *, from_text: bool = False) -> Resolved:
        """Layer ``values`` from ``source`` on top; refused values keep the previous one.

        A key whose value is None is unset for ``source``: it takes the value of the highest
        source below that sets it, else the default. ``values`` that are not an object at all
        (an editor sending ``{"imprint": 5}``) are refused as a whole, named; None means
        nothing was sent.
        """
        if values is None:
            return self
        if not isinstance(values, Mapping):
            error = (
                f'settings from {source} must be an object such as {{"chat": {{"n_ctx": 4096}}}}, '
                f"got {_shown(values, 80)}; all of them were ignored"
            )
            return Resolved(self.settings, self.origins, self.errors + (error,), self.layers)
        settings, origins, errors = self.settings, dict(self.origins), list(self.errors)
        layers = dict(self.layers)
        for key, value in flatten(values).items():
            try:
                below = tuple(layer for layer in layers.get(key, ()) if layer[0] != source)
                if value is None:
                    known_key(key)
                    origin, restored = below[-1] if below else ("default", DEFAULTS.get(key))
                    layers[key] = below
                    settings, origins[key] = settings.replace(key, restored), origin
                    continue
                converted = coerce(key, value, from_text=from_text)
                layers[key] = below + ((source, converted),)
                settings, origins[key] = settings.replace(key, converted), source
            except SettingsError as error:
                errors.append(
                    f"{error} (from {source}; keeping {_shown_setting(key, settings.get(key))})"
                    if key in KEYS
                    else f"{error} (from {source})"
                )
        return Resolved(settings, origins, tuple(errors), layers)


def _shown(value: Any, limit: int | None = None) -> str:
    """``value`` as a refusal or ``imprintd config`` quotes it: the password of a URL masked."""
    text = hide_url_passwords(repr(value))
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


def _shown_setting(key: str, value: Any) -> str:
    """A setting's value as ``imprintd config`` and a refusal show it (servers in the editor shape)."""
    spec = KEYS.get(key)
    if spec is not None and spec.show is not None:
        return _shown(spec.show(value)) if value else "empty"
    return _shown(value)


def config_file() -> Path:
    """The user's config file: ``$IMPRINT_CONFIG`` or ``config.toml`` in the platform config dir."""
    explicit = os.environ.get("IMPRINT_CONFIG")
    if explicit:
        return Path(explicit)
    return Path(platformdirs.user_config_dir(APP_NAME)) / "config.toml"


def data_dir() -> Path:
    """Where the database lives: ``$IMPRINT_DATA_DIR`` or the platform data dir."""
    explicit = os.environ.get("IMPRINT_DATA_DIR")
    return Path(explicit) if explicit else Path(platformdirs.user_data_dir(APP_NAME))


def cache_dir() -> Path:
    """Where rebuildable data lives (the workspace index): ``$IMPRINT_CACHE_DIR`` or the platform cache dir.

    Kept apart from the data dir on purpose: the data dir holds only what was said, so a
    session with persistence off leaves it untouched even while it searches the workspace.
    """
    explicit = os.environ.get("IMPRINT_CACHE_DIR")
    return Path(explicit) if explicit else Path(platformdirs.user_cache_dir(APP_NAME))


def env_name(key: str) -> str:
    return "IMPRINT_" + key.upper().replace(".", "_")


def from_environment(environ: Mapping[str, str]) -> dict[str, str]:
    return {key: environ[env_name(key)] for key in KEYS if env_name(key) in environ}


def load(cli_values: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> Resolved:
    """Defaults, then the config file, the environment and CLI flags, in that order."""
    environ = os.environ if environ is None else environ
    resolved = Resolved(DEFAULTS, {key: "default" for key in KEYS})
    path = config_file()
    if path.is_file():
        import tomllib  # only with a config file: most settings come from the editor

        try:
            resolved = resolved.apply(tomllib.loads(path.read_text(encoding="utf-8")), f"config file {path}")
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as error:
            resolved = Resolved(
                resolved.settings,
                resolved.origins,
                resolved.errors + (f"config file {path} could not be read: {error}",),
                resolved.layers,
            )
    resolved = resolved.apply(from_environment(environ), "environment", from_text=True)
    if cli_values:
        resolved = resolved.apply(cli_values, "command line", from_text=True)
    return resolved


def describe(resolved: Resolved, extra: Iterable[tuple[str, str]] = ()) -> str:
    """The effective settings and where each came from, as ``imprintd config`` prints them."""
    width = max(len(key) for key in KEYS)
    lines = [
        f"{key:<{width}}  {_shown_setting(key, resolved.settings.get(key)):<28}  ({resolved.origins[key]})"
        for key in KEYS
    ]
    lines.extend(f"{name:<{width}}  {value}" for name, value in extra)
    return "\n".join(lines)
