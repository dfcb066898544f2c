"""The repetition guard: which output counts as a loop, where it is cut, and what never trips it."""

from __future__ import annotations

import pytest

from imprintd.models import repetition
from imprintd.models.repetition import RepetitionGuard, cut_before_loop
from tests.models.real_model import needs_real_model


def feed_in_pieces(text: str, size: int = 3) -> RepetitionGuard:
    guard = RepetitionGuard()
    for start in range(0, len(text), size):
        if guard.feed(text[start : start + size]):
            break
    return guard


def fed_until_loop(text: str) -> int:
    """How many characters the guard took before it stopped the text."""
    guard = RepetitionGuard()
    for index, char in enumerate(text):
        if guard.feed(char):
            return index + 1
    return len(text)


# -- what loops ---------------------------------------------------------------------------------


def test_a_token_loop_inside_a_word_is_stopped_early():
    text = "The default salt is set in the constructor. It is named default" + "_json" * 400
    guard = feed_in_pieces(text)
    assert guard.looping
    taken = fed_until_loop(text)
    assert taken < 64 + repetition.PERIODIC_CHARS + 10  # stopped within the threshold, not at 2,000 chars
    assert cut_before_loop(guard.text, guard.loop_start) == "The default salt is set in the constructor."


def test_a_phrase_written_over_and_over_on_one_line_is_stopped():
    text = "Signer uses itsdangerous. " + "default_value default " * 60
    guard = feed_in_pieces(text, size=5)
    assert guard.looping
    assert cut_before_loop(guard.text, guard.loop_start) == "Signer uses itsdangerous."


def test_the_same_line_four_times_in_a_row_is_a_loop_and_the_first_stays():
    line = "The answer is in src/signer.py at line 12."
    text = "Here is what I found.\n" + (line + "\n") * 6
    guard = feed_in_pieces(text, size=7)
    assert guard.looping and len(guard.text) < len(text)  # stopped before the sixth line
    assert cut_before_loop(guard.text, guard.loop_start) == "Here is what I found.\n" + line


def test_a_paragraph_written_again_and_again_is_a_loop_blank_lines_between_or_not():
    paragraph = "The max_connections_allowed is 10, which means you can limit the connections you use."
    text = "The limit is 10.\n\n" + (paragraph + "\n\n") * 20
    guard = feed_in_pieces(text, size=4)
    assert guard.looping and len(guard.text) < len(text) // 3
    assert cut_before_loop(guard.text, guard.loop_start) == "The limit is 10.\n\n" + paragraph


def test_a_paragraph_of_several_lines_written_again_and_again_is_a_loop():
    # Too long for a periodic tail (its unit is past MAX_PERIOD), and no line repeats in a row.
    paragraph = (
        "The client's default timeout is five seconds, set by DEFAULT_TIMEOUT_CONFIG in _config.py.\n"
        "Every request made through it waits that long for a connection, a read, a write and the pool.\n"
        "Pass timeout=None to wait for ever, or an httpx.Timeout to set each of the four on its own.\n"
        "A pool timeout applies when every connection of the pool is in use and a request must wait.\n"
        "A read timeout applies between two chunks of the response, not to the whole response body.\n"
        "A write timeout applies between two chunks of the request, and a connect one to the socket.\n"
    )
    assert len(paragraph) > repetition.MAX_PERIOD
    text = "Here is the answer.\n\n" + (paragraph + "\n") * 12
    guard = feed_in_pieces(text, size=5)
    assert guard.looping and len(guard.text) < len(text) // 2
    assert cut_before_loop(guard.text, guard.loop_start) == "Here is the answer.\n\n" + paragraph.strip()


def test_a_numbered_block_written_again_and_again_is_a_loop():
    text = "Steps:\n" + "".join(
        f"{n}. Open the file httpx/_config.py\n   and read DEFAULT_TIMEOUT_CONFIG there.\n" for n in range(1, 30)
    )
    guard = feed_in_pieces(text, size=4)
    assert guard.looping
    kept = cut_before_loop(guard.text, guard.loop_start)
    assert kept == "Steps:\n1. Open the file httpx/_config.py\n   and read DEFAULT_TIMEOUT_CONFIG there."


def test_a_block_written_three_times_is_not_yet_a_loop():
    block = "First check the port in services/billing.yaml.\nThen restart the billing service.\n"
    assert not feed_in_pieces(block * (repetition.LINE_REPEATS - 1) + "Done.\n").looping


def test_a_loop_inside_a_code_block_is_cut_and_the_block_closed():
    # In code a repeat is a loop only past DATA_LOOP_CHARS: 80 repeats (960 characters) are data.
    assert not feed_in_pieces("Set the limit:\n\n```\n# Usage: httpx -c 1000" + " -maxkeepall" * 80).looping
    text = "Set the limit:\n\n```\n# Usage: httpx -c 1000" + " -maxkeepall" * 400
    guard = feed_in_pieces(text, size=6)
    assert guard.looping and len(guard.text) < len(text) * 3 // 4
    assert cut_before_loop(guard.text, guard.loop_start) == "Set the limit:\n\n```\n# Usage:\n```"


def test_three_identical_lines_are_not_yet_a_loop():
    line = "- check the billing port in services/billing.yaml"
    assert not feed_in_pieces((line + "\n") * (repetition.LINE_REPEATS - 1) + "Done.").looping


def test_a_loop_in_the_first_sentence_keeps_what_came_before_it():
    guard = feed_in_pieces("Use " + "the the " * 50)
    assert guard.looping
    assert cut_before_loop(guard.text, guard.loop_start) == "Use the"


# -- what never trips it ------------------------------------------------------------------------

TABLE = "| Service | Port | Replicas |\n| --- | --- | --- |\n" + "".join(
    f"| svc-{n} | {8100 + n} | {n % 3 + 1} |\n" for n in range(60)
)
NUMBERED_LIST = "".join(f"{n}. Read the file src/module_{n}.py and check its imports.\n" for n in range(1, 40))
BULLETS = "".join(f"- (#{n}) The user asked about port {8000 + n}; the answer named it.\n" for n in range(1, 40))
CODE = (
    "```python\n"
    + "".join(f"    value_{n} = config.get('key_{n}', default=None)\n" for n in range(40))
    + "        \n" * 10
    + "```\n"
)
RULE = "Results\n" + "=" * 300 + "\nAll good.\n"
INDENTED = "def f():\n" + " " * 200 + "return 1\n"
SHORT_LINES = "}\n" * 30 + "---\n" * 30 + "\n" * 30
#: Blocks of lines that repeat a shape: each differs from the last in a value.
RECORDS = "".join(f"name: service-{n}\nport: {8100 + n}\nreplicas: 2\n\n" for n in range(40))


@pytest.mark.parametrize(
    "text",
    [TABLE, NUMBERED_LIST, BULLETS, CODE, RULE, INDENTED, SHORT_LINES, RECORDS],
    ids=["table", "numbered-list", "bullets", "code", "rule", "indentation", "short-lines", "records"],
)
def test_legitimate_repetition_is_not_a_loop(text):
    assert not feed_in_pieces(text).looping
    assert not feed_in_pieces(text, size=1).looping


def test_a_sentence_written_over_and_over_on_one_line_is_a_loop():
    sentence = "I can assist with tasks that involve multiple steps, provide guidance, and offer support. "
    guard = feed_in_pieces("Sure. " + sentence * 10, size=5)
    assert guard.looping
    assert cut_before_loop(guard.text, guard.loop_start) in ("Sure.", "Sure. " + sentence.strip())


def test_a_long_answer_without_loops_streams_to_its_end():
    prose = " ".join(f"Sentence {n} names the setting chat.n_ctx and the value {n * 7}." for n in range(300))
    guard = feed_in_pieces(prose, size=11)
    assert not guard.looping and guard.text == prose


# -- in the providers ---------------------------------------------------------------------------


async def test_a_remote_stream_that_loops_is_closed_and_cut_back_to_the_last_sentence():
    import threading

    from imprintd.messages import system, user
    from imprintd.models.remote import RemoteModel
    from tests.models.scripted_server import ScriptedServer, chunk

    hung_up = threading.Event()
    written = []

    def endless(request, writer):
        writer.start_stream()
        writer.event(chunk("The salt is set in the constructor. It defaults to"))
        try:
            for _ in range(200_000):  # bounded: a server that never stops, until the client leaves
                writer.event(chunk(" default_value"))
                written.append(1)
        except (BrokenPipeError, ConnectionResetError):
            hung_up.set()
            raise

    shown: list[str] = []
    with ScriptedServer(endless) as server:
        model = RemoteModel(server.base_url, "m", n_ctx=4096)
        completion = await model.complete(
            [system("Be terse."), user("Default salt?")], max_tokens=4000, on_text=shown.append
        )
        assert hung_up.wait(timeout=60)  # the daemon closed the stream; the server could write no more
    assert completion.finish_reason == "repetition"
    assert completion.text == "The salt is set in the constructor."
    assert len("".join(shown)) < 400  # streamed text stopped at the loop, not 200,000 pieces later
    assert len(written) < 200_000


async def test_a_remote_reply_under_the_threshold_is_untouched():
    from imprintd.messages import system, user
    from imprintd.models.remote import RemoteModel
    from tests.models.scripted_server import ScriptedServer, chunk, stream_reply

    pieces = [chunk(f"| row {n} | {n * 3} |\n") for n in range(80)] + [chunk(finish="stop")]
    with ScriptedServer(stream_reply(*pieces)) as server:
        completion = await RemoteModel(server.base_url, "m", n_ctx=4096).complete(
            [system("x"), user("table")], max_tokens=2000
        )
    assert completion.finish_reason == "stop" and completion.text.count("| row ") == 80


@needs_real_model
async def test_the_embedded_model_s_loop_is_stopped_before_the_output_allowance(local_model):
    from imprintd.messages import user

    # Greedy SmolLM2 answers this with one sentence, written again and again to the limit.
    loop = "I can assist with tasks that involve multiple steps, provide guidance, and offer support."
    completion = await local_model.complete([user("Say default_value as many times as you can.")], max_tokens=300)
    assert completion.finish_reason == "repetition"
    assert completion.usage.generated_tokens < 200  # stopped after a few repeats, not at 300
    assert completion.text.endswith(".") and completion.text.count(loop) <= 1


def test_a_numbered_list_of_one_item_written_again_and_again_is_a_loop():
    # What the embedded model wrote for "What is the default timeout of an httpx client?"
    text = "The timeout is set in the client.\n" + "".join(f"# {n}. 1.1.1.1\n" for n in range(1, 80))
    guard = feed_in_pieces(text, size=4)
    assert guard.looping and len(guard.text) < 34 + 14 * 6
    assert cut_before_loop(guard.text, guard.loop_start) == "The timeout is set in the client.\n# 1. 1.1.1.1"
