"""Settings: every source in its place, refusals that name key, value and range."""

from __future__ import annotations

import pytest

from imprintd import settings as s


def test_defaults_are_the_records_numbers():
    chat = s.DEFAULTS.chat
    assert (
        chat.provider,
        chat.model,
        chat.n_ctx,
        chat.max_tokens,
        chat.analysis_workers,
        chat.research_token_budget,
        chat.research_time_budget,
    ) == ("local", "", 8192, 1024, 2, 65536, 300.0)


def test_sources_layer_in_order_and_each_value_says_where_it_came_from(monkeypatch, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("[chat]\nn_ctx = 4096\nmax_tokens = 512\nanalysis_workers = 3\n", encoding="utf-8")
    monkeypatch.setenv("IMPRINT_CONFIG", str(config))
    environ = {"IMPRINT_CHAT_MAX_TOKENS": "256", "IMPRINT_CHAT_ANALYSIS_WORKERS": "4"}
    resolved = s.load({"chat.analysis_workers": "5"}, environ=environ)
    resolved = resolved.apply({"chat": {"research_time_budget": 60}}, "editor")
    chat = resolved.settings.chat
    assert (chat.n_ctx, chat.max_tokens, chat.analysis_workers, chat.research_time_budget) == (4096, 256, 5, 60.0)
    assert resolved.origins["chat.n_ctx"].startswith("config file")
    assert resolved.origins["chat.max_tokens"] == "environment"
    assert resolved.origins["chat.analysis_workers"] == "command line"
    assert resolved.origins["chat.research_time_budget"] == "editor"
    assert resolved.origins["chat.provider"] == "default"
    assert resolved.errors == ()


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/v1",
        "https://[::1]:8443/v1",
        "http://localhost/v1",
        "http://gpu-box.local.:8080",
        "http://my_server:8000/v1",
        "https://bücher.example/v1",
    ],
)
def test_a_server_url_by_address_or_name_is_taken(url):
    resolved = s.load({}, environ={}).apply({"chat.base_url": url}, "editor")
    assert resolved.errors == () and resolved.settings.chat.base_url == url


@pytest.mark.parametrize(
    ("key", "value", "accepted"),
    [
        ("chat.analysis_workers", 9, "0 to 8"),
        ("chat.analysis_workers", -1, "0 to 8"),
        ("chat.n_ctx", "big", "512 to 1048576"),
        ("chat.provider", "ollama", '"local" or "openai"'),
        ("chat.max_tokens", True, "16 to 32768"),
        ("chat.research_time_budget", 0, "1 to 86400"),
        ("chat.base_url", "ftp://x", "http(s) URL"),
        # httpx parses these, then the request fails to resolve or connect, naming no setting.
        ("chat.base_url", "http://%d", "http(s) URL"),
        ("chat.base_url", "http://local host/v1", "http(s) URL"),
        ("chat.base_url", "http://127.0.0.1:70000/v1", "http(s) URL"),
        ("chat.first_look", "false", "true or false"),
        ("chat.first_look", 0, "true or false"),
    ],
)
def test_a_refused_value_names_key_value_and_range_and_the_previous_value_stays(key, value, accepted):
    before = s.load({}, environ={}).apply({"chat.analysis_workers": 3}, "editor")
    after = before.apply({key: value}, "editor")
    assert after.settings == before.settings
    [error] = after.errors
    assert key in error and repr(value) in error and accepted in error and "keeping" in error


def test_null_unsets_a_key_for_its_source_uncovering_command_line_environment_config_then_default(
    monkeypatch, tmp_path
):
    config = tmp_path / "config.toml"
    config.write_text('[chat]\nn_ctx = 4096\nmax_tokens = 512\nprovider = "openai"\n', encoding="utf-8")
    monkeypatch.setenv("IMPRINT_CONFIG", str(config))
    loaded = s.load({"chat.analysis_workers": "5"}, environ={"IMPRINT_CHAT_MAX_TOKENS": "256"})
    edited = loaded.apply(
        {"chat": {"n_ctx": 2048, "max_tokens": 64, "analysis_workers": 1, "provider": "local", "model": "m"}}, "editor"
    )
    assert edited.settings.chat.provider == "local" and edited.origins["chat.provider"] == "editor"

    unset = edited.apply(
        {"chat": {"n_ctx": None, "max_tokens": None, "analysis_workers": None, "provider": None, "model": None}},
        "editor",
    )
    chat = unset.settings.chat
    assert (chat.n_ctx, chat.max_tokens, chat.analysis_workers, chat.provider, chat.model) == (
        4096,
        256,
        5,
        "openai",
        "",
    )
    assert unset.origins["chat.n_ctx"].startswith("config file")
    assert unset.origins["chat.max_tokens"] == "environment"
    assert unset.origins["chat.analysis_workers"] == "command line"
    assert unset.origins["chat.model"] == "default"
    assert unset.errors == ()
    # Unsetting again, or a key the editor never set, changes nothing; setting it again works.
    assert unset.apply({"chat.n_ctx": None, "chat.base_url": None}, "editor").settings == unset.settings
    assert unset.apply({"chat.n_ctx": 1024}, "editor").settings.chat.n_ctx == 1024


def test_null_for_an_unknown_key_is_refused_naming_it():
    resolved = s.load({}, environ={}).apply({"chat.n_context": None}, "editor")
    assert "unknown setting 'chat.n_context'" in resolved.errors[0] and resolved.settings == s.DEFAULTS


def test_environment_values_are_text_and_are_checked_too():
    resolved = s.load({}, environ={"IMPRINT_CHAT_N_CTX": "12", "IMPRINT_CHAT_RESEARCH_TOKEN_BUDGET": "70000"})
    assert resolved.settings.chat.n_ctx == 8192 and resolved.settings.chat.research_token_budget == 70000
    assert "chat.n_ctx = '12'" in resolved.errors[0] and "environment" in resolved.errors[0]


def test_unknown_keys_are_named_with_the_known_ones():
    resolved = s.load({}, environ={}).apply({"chat.n_context": 4096}, "editor")
    assert "unknown setting 'chat.n_context'" in resolved.errors[0] and "chat.n_ctx" in resolved.errors[0]


def test_an_unreadable_config_file_is_reported_not_fatal(monkeypatch, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("[chat\nn_ctx = ", encoding="utf-8")
    monkeypatch.setenv("IMPRINT_CONFIG", str(config))
    resolved = s.load({}, environ={})
    assert resolved.settings == s.DEFAULTS and "could not be read" in resolved.errors[0]


def test_dirs_follow_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("IMPRINT_DATA_DIR", str(tmp_path / "d"))
    monkeypatch.setenv("IMPRINT_CACHE_DIR", str(tmp_path / "c"))
    assert s.data_dir() == tmp_path / "d" and s.cache_dir() == tmp_path / "c"


def test_describe_lists_every_key_with_its_origin():
    text = s.describe(s.load({"chat.n_ctx": "4096"}, environ={}))
    for key in s.KEYS:
        assert key in text
    assert "4096" in text and "(command line)" in text


@pytest.mark.parametrize(
    ("text", "value"), [("false", False), ("Off", False), ("0", False), ("true", True), (" yes ", True)]
)
def test_a_yes_no_setting_reads_the_usual_words_from_the_environment(text, value):
    resolved = s.load({}, environ={"IMPRINT_CHAT_FIRST_LOOK": text})
    assert resolved.settings.chat.first_look is value and resolved.errors == ()


def test_a_yes_no_setting_refuses_other_words_naming_what_it_accepts():
    resolved = s.load({}, environ={"IMPRINT_CHAT_FIRST_LOOK": "maybe"})
    [error] = resolved.errors
    assert "chat.first_look" in error and "'maybe'" in error and "true or false" in error
    assert resolved.settings.chat.first_look is True
