"""How ``bench/eval_workspace_qa.py`` judges an answer: the figures in docs/benchmarks.md rest on it."""

from __future__ import annotations

import pytest

from tests.bench import load_bench

evaluation = load_bench("eval_workspace_qa")


def question(start: str):
    return next(q for q in evaluation.QUESTIONS if q.text.startswith(start))


@pytest.mark.parametrize(
    ("start", "answer", "judged"),
    [
        ("What is the default timeout", "The default timeout of an httpx client is 5.0 seconds.", True),
        # A looping numbered list's numbers are not the model's answer.
        ("What is the default timeout", "# 4. 1.1.1.1\n# 5. 1.1.1.1", False),
        # Nor is the line the daemon adds after a loop.
        ("What is the default timeout", "The timeout is\n(The model started repeating itself here, 5)", False),
        ("Does httpx's Client enable HTTP/2", "No, HTTP/2 is off unless http2=True.", True),
        # The opposite stated first, a matching word later: missed.
        ("Does httpx's Client enable HTTP/2", "Yes, httpx's Client enables HTTP/2 by default. It is not slow.", False),
        ("What does trust_env default to", "The default value of `trust_env` is `True`.", True),
        ("What does trust_env default to", "def f(proxy, verify=True, trust_env=False): ...", False),
        ("What does httpx do with the method of a 303", "It changes the method to GET.", True),
        # GET as part of a name, or "get" in another word's sense, is not the method.
        ("What does httpx do with the method of a 303", "It calls httpx.request.GET.\n# Get all users", False),
    ],
)
def test_an_answer_is_judged_on_the_models_own_words(start, answer, judged):
    assert evaluation.answers(question(start), answer) is judged


@pytest.mark.parametrize(
    ("start", "answer"),
    [
        # The daemon's Sources list and the model's citation markers are not the model's answer.
        ("What is the default timeout", "It is set by DEFAULT_TIMEOUT_CONFIG [5]."),
        ("What is the default timeout", "It is in the config.\n\nSources:\n[5] httpx/_config.py:1-5"),
        # "read, not cited" in the Sources list, or any "not", is no claim about HTTP/2.
        ("Does httpx's Client enable HTTP/2", "I could not find that."),
        (
            "Does httpx's Client enable HTTP/2",
            "It is in _client.py.\n\nSources:\n[1] httpx/_client.py:1-9 (read, not cited)",
        ),
        # Repeating the question does not answer it, though the question holds the word.
        (
            "Which hash function does httpx's DigestAuth use for the MD5",
            "Which hash function does httpx's DigestAuth use for the MD5 algorithm?",
        ),
        # The findings the daemon lists after a cut are the files' words, not the model's.
        (
            "What is the default timeout",
            "The timeout is\n\n(The answer was cut short. The strongest findings of the research:)\n"
            "- httpx/_config.py:1–9: DEFAULT_TIMEOUT_CONFIG = Timeout(timeout=5.0) [1]",
        ),
        (
            "What is the default timeout",
            "I couldn't write a full answer. The strongest findings of the research:\n- timeout=5.0 [1]",
        ),
    ],
)
def test_the_judge_is_not_fooled_by_daemon_text_markers_or_the_question(start, answer):
    assert evaluation.answers(question(start), answer) is False


@pytest.mark.parametrize(
    ("start", "answer"),
    [
        ("Does httpx's Client enable HTTP/2", "HTTP/2 is not enabled unless you pass http2=True [1]."),
        ("Does httpx's Client enable HTTP/2", "It is disabled by default."),
        ("Which hash function does httpx's DigestAuth use for the MD5", "It uses hashlib.md5 [2]."),
        (
            "What is the default timeout",
            "The default timeout is 5.0 seconds [1].\n\nSources:\n[1] httpx/_config.py:1-9",
        ),
    ],
)
def test_the_judge_still_passes_a_claim_in_the_models_words(start, answer):
    assert evaluation.answers(question(start), answer) is True
