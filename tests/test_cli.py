"""The ``imprintd`` command as a user runs it: real processes, the embedded model for ``ask``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from imprintd.models.embedded import find_embedded_model


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    environment = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "imprintd", *args], capture_output=True, text=True, env=environment, timeout=timeout
    )


@pytest.mark.parametrize(
    "command", [(), ("serve",), ("ask",), ("sessions",), ("search",), ("export",), ("models",), ("mcp",), ("config",)]
)
def test_every_command_has_help(command):
    result = run(*command, "--help")
    assert result.returncode == 0 and "usage: imprintd" in result.stdout


def test_ask_help_says_how_tools_that_may_act_are_allowed():
    result = run("ask", "--help")
    assert "--allow-tools" in result.stdout and "refused when stdin is not one" in " ".join(result.stdout.split())


def test_config_shows_values_their_sources_and_the_model():
    result = run("config", "--set", "chat.n_ctx=4096", env={"IMPRINT_CHAT_MAX_TOKENS": "512"})
    assert result.returncode == 0
    assert "chat.n_ctx" in result.stdout and "4096" in result.stdout and "(command line)" in result.stdout
    assert "512" in result.stdout and "(environment)" in result.stdout
    assert "model in use" in result.stdout


def test_a_refused_setting_is_an_error_exit_naming_it():
    result = run("config", "--set", "chat.analysis_workers=12")
    assert result.returncode == 2
    assert "chat.analysis_workers = '12' is not accepted: expected an integer from 0 to 8" in result.stderr


def test_a_missing_gguf_is_reported_by_name(tmp_path):
    missing = tmp_path / "nope.gguf"
    result = run("ask", "hello", "--model", str(missing))
    assert result.returncode == 1 and str(missing) in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.skipif(find_embedded_model() is None, reason="the embedded model (imprintd[embedded]) is not installed")
def test_ask_answers_with_the_embedded_model_and_the_session_continues(isolated_dirs):
    env = {"IMPRINT_CHAT_N_CTX": "2048", "IMPRINT_CHAT_MAX_TOKENS": "48"}
    first = run("ask", "What is the capital of France?", env=env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip()  # the answer, on stdout
    session_line = [line for line in first.stderr.splitlines() if line.startswith("session ")][-1]
    session_id = session_line.split()[1]

    second = run("ask", "And of Italy?", "--session", session_id, env=env)
    assert second.returncode == 0, second.stderr

    listed = run("sessions")
    assert session_id in listed.stdout and "4 messages" in listed.stdout


def test_ask_with_a_missing_workspace_names_it_without_a_traceback(tmp_path):
    missing = tmp_path / "nowhere"
    result = run("ask", "hello", "--workspace", str(missing))
    assert result.returncode == 2 and str(missing) in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.skipif(find_embedded_model() is None, reason="the embedded model (imprintd[embedded]) is not installed")
def test_ask_that_cannot_be_answered_says_why_without_a_traceback():
    result = run(
        "ask",
        "word " * 3000,
        "--set",
        "chat.analysis_workers=0",
        "--set",
        "chat.n_ctx=512",
        "--set",
        "chat.max_tokens=16",
    )
    assert result.returncode == 1 and "chat.analysis_workers = 0" in result.stderr
    assert "Traceback" not in result.stderr


def test_config_says_the_chat_format_and_whether_the_model_reasons():
    local = run("config")
    assert local.returncode == 0, local.stderr
    [line] = [line for line in local.stdout.splitlines() if line.startswith("chat format")]
    if find_embedded_model() is not None:
        assert line.endswith("; the model answers without reasoning")  # SmolLM2 does not think
    remote = run("config", "--provider", "openai", "--model", "qwen3.5-4b")
    assert (
        "openai (the server parses tool calls; reasoning it sends as reasoning_content is kept apart)" in remote.stdout
    )
    missing = run("config", "--model", "/nowhere/model.gguf")
    assert "unknown (the model cannot be read; see the model in use)" in missing.stdout


def test_ask_keeps_a_reasoning_models_thoughts_off_stdout(capsys):
    from imprintd.cli import DIM, _PrintEvents

    shown = _PrintEvents(live=True, thoughts=True)
    shown.reasoning("The port is in the config.")
    shown.text("Port 8101.")
    out, err = capsys.readouterr()
    assert out == "Port 8101."
    assert err.startswith(f"{DIM}Thinking…\n") and "The port is in the config." in err

    piped = _PrintEvents(live=False, thoughts=False)  # stderr not a terminal: thoughts left out
    piped.reasoning("The port is in the config.")
    piped.text("Port 8101.")
    out, err = capsys.readouterr()
    assert (out, err) == ("", "")


def test_ask_prints_only_the_answer_of_a_reasoning_model_and_stores_its_thoughts(daemon_env, stub):
    from pathlib import Path

    from imprintd.store import Store
    from tests.openai_stub import StubReply

    stub.queue(StubReply(reasoning="PONDERING the capital of France.", text="Paris."))
    result = subprocess.run(
        [sys.executable, "-m", "imprintd", "ask", "What is the capital of France?"],
        capture_output=True,
        text=True,
        env=daemon_env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Paris.\n"
    assert "PONDERING" not in result.stderr  # not a terminal: the thoughts are left out
    session_id = [line for line in result.stderr.splitlines() if line.startswith("session ")][-1].split()[1]
    with Store.open(Path(daemon_env["IMPRINT_DATA_DIR"]) / "imprint.sqlite3") as store:
        answer = store.messages(session_id)[-1]
    assert (answer.content, answer.reasoning) == ("Paris.", "PONDERING the capital of France.")


def test_search_prints_one_line_per_hit_and_json_on_request(isolated_dirs):
    import json

    from imprintd.messages import assistant, user
    from imprintd.store import Store

    with Store.open() as db:
        info = db.create_session(workspace="/home/me/shop")
        db.extend(info.id, [user("Which port does billing use?"), assistant("Billing listens on port 8101.")])
        db.extend(db.create_session().id, [user("Unrelated weather talk")])

    lines = run("search", "billing port").stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith(f"{info.id}  #") for line in lines)
    assert any("#2" in line and "assistant" in line and "[Billing] listens on [port] 8101." in line for line in lines)
    assert all("Which port does billing use?" in line for line in lines)  # the title

    printed = json.loads(run("search", "8101", "--json").stdout)
    assert len(printed["hits"]) == 1 and printed["nextOffset"] is None
    [hit] = printed["hits"]
    assert (hit["sessionId"], hit["seq"], hit["role"]) == (info.id, 2, "assistant")
    assert [part["text"] for part in hit["snippet"] if part["match"]] == ["8101"]


def test_search_with_nothing_found_or_bad_input_says_so(isolated_dirs):
    nothing = run("search", "zebra")
    assert nothing.returncode == 1 and "Nothing stored matches 'zebra'" in nothing.stderr
    bad = run("search", "x", "--since", "last week")
    assert bad.returncode == 2
    assert "since: 'last week' is not a date; expected YYYY-MM-DD" in bad.stderr and "Traceback" not in bad.stderr


def test_export_writes_markdown_or_json_to_stdout_or_a_file(isolated_dirs, tmp_path):
    import json

    from imprintd.messages import assistant, user
    from imprintd.store import Store

    with Store.open() as db:
        info = db.create_session()
        db.extend(info.id, [user("Which port does billing use?"), assistant("Billing listens on port 8101.")])

    md = run("export", info.id)
    assert md.returncode == 0 and md.stdout.startswith("# Which port does billing use?\n")
    assert "## Imprint (#2)\n\nBilling listens on port 8101." in md.stdout

    target = tmp_path / "out.json"
    written = run("export", info.id, "--format", "json", "-o", str(target))
    assert written.returncode == 0 and written.stdout == "" and str(target) in written.stderr
    stored = json.loads(target.read_text(encoding="utf-8"))
    assert [(m["seq"], m["content"]) for m in stored["messages"]] == [
        (1, "Which port does billing use?"),
        (2, "Billing listens on port 8101."),
    ]

    missing = run("export", "nope")
    assert missing.returncode == 1 and "no session with id 'nope'" in missing.stderr
    unwritable = run("export", info.id, "-o", str(tmp_path / "no" / "such" / "dir.md"))
    assert unwritable.returncode == 1 and "cannot write" in unwritable.stderr and "Traceback" not in unwritable.stderr


#: Characters a terminal takes as commands: clear the screen, ring, back up, overwrite the line,
#: a C1 control sequence introducer, DEL.
TERMINAL_COMMANDS = "\x1b[2J\x07\b\r\x9b\x7f\x00"


def _raw_controls(text: str) -> list[str]:
    return sorted({char for char in text if (ord(char) < 32 and char not in "\n") or 0x7F <= ord(char) <= 0x9F})


def test_stored_text_is_printed_without_control_characters(isolated_dirs):
    # A title and messages stored with control characters (a store written before titles were
    # cleaned, a pasted log): `sessions`, `search` and `export` print them as text.
    from imprintd.messages import assistant, user
    from imprintd.store import Store

    with Store.open() as db:
        info = db.create_session()
        db.extend(
            info.id, [user(f"billing {TERMINAL_COMMANDS}port?"), assistant(f"Billing\tport {TERMINAL_COMMANDS}8101.")]
        )
        db.rename_session(info.id, f"Billing{TERMINAL_COMMANDS}\tnotes")  # as stored, not as a rename cleans it

    sessions = run("sessions")
    assert sessions.returncode == 0 and _raw_controls(sessions.stdout) == []
    assert f"{info.id}" in sessions.stdout and "Billing[2J notes" in sessions.stdout

    found = run("search", "billing port")
    assert found.returncode == 0 and _raw_controls(found.stdout) == [] and "Billing[2J notes" in found.stdout
    assert "[Billing] [port] [2J 8101." in found.stdout  # a snippet is one line: the CR was a space

    exported = run("export", info.id)
    assert exported.returncode == 0 and _raw_controls(exported.stdout.replace("\t", "")) == []
    assert "Billing\tport [2J8101." in exported.stdout  # lines and tabs kept: a document


def test_ask_titles_the_session_from_the_question_without_control_characters(daemon_env, stub):
    from pathlib import Path

    from imprintd.store import Store
    from tests.openai_stub import StubReply

    stub.queue(StubReply(text=f"Paris{TERMINAL_COMMANDS}."))
    result = subprocess.run(
        # (no NUL: an argument cannot hold one)
        [sys.executable, "-m", "imprintd", "ask", f"\u200b\u200d\n\tWhat is the {TERMINAL_COMMANDS[:-1]}capital?"],
        capture_output=True,
        text=True,
        env=daemon_env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Paris[2J.\n"  # the answer streamed as text
    session_id = [line for line in result.stderr.splitlines() if line.startswith("session ")][-1].split()[1]
    with Store.open(Path(daemon_env["IMPRINT_DATA_DIR"]) / "imprint.sqlite3") as store:
        # The zero-width first line shows nothing: the title is the next line (up to its CR), as text.
        assert store.session(session_id).title == "What is the [2J"
        assert store.messages(session_id)[-1].content == f"Paris{TERMINAL_COMMANDS}."  # stored as given
