"""What a client is shown of a finished step's result: bounded, redacted, links it may open."""

from __future__ import annotations

from imprintd.research.preview import CUT, PREVIEW_CHARS, links, preview

KEY = "sk-proj-" + "Qx7" * 16


def test_a_short_result_is_shown_whole():
    assert preview("port: 8101\n") == "port: 8101\n"
    assert preview("") == ""


def test_a_long_result_is_cut_at_a_line_end_within_the_bound():
    lines = [f"line {number}: billing listens on 8101" for number in range(200)]
    text = "\n".join(lines)
    shown = preview(text)
    assert len(shown) <= PREVIEW_CHARS
    assert shown.endswith("\n" + CUT)
    kept = shown.removesuffix("\n" + CUT).split("\n")
    assert kept == lines[: len(kept)] and len(kept) > len(lines) // 8  # whole lines, most of the bound


def test_a_result_of_one_long_line_is_cut_inside_it():
    shown = preview("x" * 10_000)
    assert shown == "x" * (PREVIEW_CHARS - len(CUT) - 1) + CUT


def test_secrets_are_redacted_and_what_is_around_them_kept():
    shown = preview(f"billing:\n  OPENAI_API_KEY={KEY}\n  port: 8101\n")
    assert KEY not in shown and "port: 8101" in shown and "OPENAI_API_KEY=" in shown


def test_links_keep_only_uris_a_client_may_open_each_once_redacted():
    assert links(
        [
            "https://docs.example.com/billing",
            "command:workbench.action.terminal.new",
            "javascript:alert(1)",
            "FILE:///srv/notes.md",
            "https://docs.example.com/billing",
            "demo://resource/static/1",
            "https://ada:hunter2hunter2@docs.example.com/private",
        ]
    ) == (
        "https://docs.example.com/billing",
        "FILE:///srv/notes.md",
        "https://ada:[REDACTED]@docs.example.com/private",
    )
