"""One fully-defaulted Settings object, and where each value came from (DESIGN.md, "Settings").

Sources, lowest first: defaults, the user's TOML config file, the environment
(``IMPRINT_`` + key upper-cased with dots as underscores), CLI flags, then the editor
(initializationOptions and ``workspace/didChangeConfiguration``). A value that is
mistyped or out of range is reported, naming the key, the value and what is accepted,
and the previous value stays.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import platformdirs

APP_NAME = "imprint"


class ChatSettings(msgspec.Struct, frozen=True, kw_only=True):
    provider: str = "local"
    model: str = ""
    base_url: str = "http://127.0.0.1:8080/v1"
    n_ctx: int = 8192
    max_tokens: int = 1024
    analysis_workers: int = 2
    analysis_context: int = 4096
    research_token_budget: int = 65536
    research_time_budget: float = 300.0


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
    """One setting: its type, what is accepted, and a line of help."""

    name: str
    type: type
    accepted: str
    help: str
    check: Callable[[Any], bool] = lambda value: True


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
    # httpx parses a port past 65535 and a host with a space, then fails to connect on them.
    return (url.scheme in ("http", "https") and bool(url.host) and (url.port is None or 0 < url.port < 65536)
            and not any(character.isspace() for character in value))


def _between(low: float, high: float) -> Callable[[Any], bool]:
    return lambda value: low <= value <= high


KEYS: dict[str, Key] = {
    key.name: key
    for key in (
        Key("chat.provider", str, '"local" or "openai"', "where the chat model runs",
            lambda v: v in ("local", "openai")),
        Key("chat.model", str, "a GGUF path (local) or a model name (openai); empty for the embedded default",
            "the chat model"),
        Key("chat.base_url", str, "an http(s) URL with a host, e.g. http://127.0.0.1:8080/v1",
            "OpenAI-compatible server for provider openai", lambda v: _is_http_url(v)),
        Key("chat.n_ctx", int, "an integer from 512 to 1048576", "context window in tokens",
            _between(512, 1_048_576)),
        Key("chat.max_tokens", int, "an integer from 16 to 32768", "output allowance of a reply in tokens",
            _between(16, 32_768)),
        Key("chat.analysis_workers", int, "an integer from 0 to 8", "section-analysis workers; 0 turns analysis off",
            _between(0, 8)),
        Key("chat.analysis_context", int, "an integer from 1024 to 65536",
            "tokens of one section worker's context (at most chat.n_ctx); larger sections, fewer of them",
            _between(1024, 65_536)),
        Key("chat.research_token_budget", int, "an integer from 1024 to 16777216",
            "tokens research may spend on one reply", _between(1024, 16_777_216)),
        Key("chat.research_time_budget", float, "a number of seconds from 1 to 86400",
            "seconds one reply may take, section analysis and the final answer included", _between(1, 86_400)),
    )
}

DEFAULTS = Settings()


class SettingsError(ValueError):
    """A value was refused; the message names the key, the value and what is accepted."""


def coerce(key: str, value: Any, *, from_text: bool = False) -> Any:
    """Check ``value`` for ``key`` and return it in the key's type, or raise SettingsError."""
    spec = KEYS.get(key)
    if spec is None:
        known = ", ".join(KEYS)
        raise SettingsError(f"unknown setting {key!r}; known settings: {known}")
    converted = value
    try:
        if from_text and isinstance(value, str) and spec.type is not str:
            converted = spec.type(value.strip())
        elif spec.type is float and isinstance(value, int) and not isinstance(value, bool):
            converted = float(value)
        if not isinstance(converted, spec.type) or isinstance(converted, bool):
            raise TypeError
        if not spec.check(converted):
            raise ValueError
    except (TypeError, ValueError):
        raise SettingsError(f"{key} = {value!r} is not accepted: expected {spec.accepted}") from None
    return converted


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"chat": {"n_ctx": 1}}`` and ``{"chat.n_ctx": 1}`` both become ``{"chat.n_ctx": 1}``."""
    flat: dict[str, Any] = {}
    for name, value in values.items():
        key = f"{prefix}{name}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{key}."))
        else:
            flat[key] = value
    return flat


@dataclass(frozen=True)
class Resolved:
    """Effective settings, the source of each value, and the values that were refused."""

    settings: Settings
    origins: Mapping[str, str]
    errors: tuple[str, ...] = ()

    def apply(self, values: Mapping[str, Any], source: str, *, from_text: bool = False) -> Resolved:
        """Layer ``values`` from ``source`` on top; refused values keep the previous one.

        ``values`` that are not an object at all (an editor sending ``{"imprint": 5}``) are
        refused as a whole, named; None means nothing was sent.
        """
        if values is None:
            return self
        if not isinstance(values, Mapping):
            error = (f"settings from {source} must be an object such as {{\"chat\": {{\"n_ctx\": 4096}}}}, "
                     f"got {_shown(values)}; all of them were ignored")
            return Resolved(self.settings, self.origins, self.errors + (error,))
        settings, origins, errors = self.settings, dict(self.origins), list(self.errors)
        for key, value in flatten(values).items():
            try:
                settings = settings.replace(key, coerce(key, value, from_text=from_text))
                origins[key] = source
            except SettingsError as error:
                errors.append(f"{error} (from {source}; keeping {settings.get(key)!r})"
                              if key in KEYS else f"{error} (from {source})")
        return Resolved(settings, origins, tuple(errors))


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:79] + "…"


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
        try:
            resolved = resolved.apply(tomllib.loads(path.read_text(encoding="utf-8")), f"config file {path}")
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as error:
            resolved = Resolved(resolved.settings, resolved.origins,
                                resolved.errors + (f"config file {path} could not be read: {error}",))
    resolved = resolved.apply(from_environment(environ), "environment", from_text=True)
    if cli_values:
        resolved = resolved.apply(cli_values, "command line", from_text=True)
    return resolved


def describe(resolved: Resolved, extra: Iterable[tuple[str, str]] = ()) -> str:
    """The effective settings and where each came from, as ``imprintd config`` prints them."""
    width = max(len(key) for key in KEYS)
    lines = [f"{key:<{width}}  {resolved.settings.get(key)!r:<28}  ({resolved.origins[key]})" for key in KEYS]
    lines.extend(f"{name:<{width}}  {value}" for name, value in extra)
    return "\n".join(lines)
