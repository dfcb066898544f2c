"""Secret shapes the summarizer used to read: Stripe and Hugging Face keys, Azure's
``AccountKey=``, ``mysql -p…`` and the rest of gitleaks' default rule set, redacted in what the
summarizer is sent and in the summary it writes; ordinary text, code, hashes and UUIDs in prose
left as they are."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from imprintd import messages as msg
from imprintd import secret_rules
from imprintd.context.summary import SUMMARIZER_SYSTEM, append_bullets, summarizer_request
from imprintd.redact import MARK, redact
from tests.conversations import FOLLOW_UPS, PASTE, PASTE_REPLY
from tests.helpers import ask, make_chat
from tests.standin import Request, StandInModel

# A made-up value of an Azure storage key's shape (base64 of 64 bytes), never a real key.
AZURE_KEY = "wwz7CtfXKs1BZxtxkmhie2R825tLGEOy6oDLvIv2eJDZVskC751XltrudiZZUpQ/bnz5jW1bAqCwZDTQhBfw2w=="

# (text as a user would paste it, the secret in it)
NAMED_SHAPES = [
    ("STRIPE_KEY=sk_live_4eC39HqLyjWDarjtT1zdp7dcXq8Rt2mB", "sk_live_4eC39HqLyjWDarjtT1zdp7dcXq8Rt2mB"),
    ("stripe.api_key = 'rk_prod_51OuEMLAlTWGaDypquDn9aZigaJOsa9NR1w1'", "rk_prod_51OuEMLAlTWGaDypquDn9aZigaJOsa9NR1w1"),
    ("huggingface-cli login --token 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", "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"),
    ("the org token 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 works", "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"),
    (
        f"DefaultEndpointsProtocol=https;AccountName=shopdata;AccountKey={AZURE_KEY};EndpointSuffix=core.windows.net",
        AZURE_KEY,
    ),
    ("mysql -h db.internal -u root -pS3cr3tPassw0rd shop", "S3cr3tPassw0rd"),
    ("mysqldump -u backup -p'Quokka 77!' shop > shop.sql", "Quokka 77!"),
    ("sshpass -p Tr0ub4dor ssh deploy@web1", "Tr0ub4dor"),
    ("psql --password Zx9pass --host db", "Zx9pass"),
    (
        "ANTHROPIC_API_KEY: sk-ant-api03-" + "a1B2c3D4e5F6g7H8i9J0" * 4 + "k1L2m3N4AA",
        "sk-ant-api03-" + "a1B2c3D4e5F6g7H8i9J0" * 4 + "k1L2m3N4AA",
    ),
    ("git clone https://oauth2:glpat-Xk9fQ2mN7pL4vR8tY3wB@gitlab.com/shop/app", "glpat-Xk9fQ2mN7pL4vR8tY3wB"),
    (
        "//registry.npmjs.org/:_authToken=npm_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
        "npm_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    ),
]

# True positives from gitleaks' own rule tests (cmd/generate/config/rules/*.go at v8.30.1,
# MIT licence): (text, the secret in it).
GITLEAKS_SAMPLES = [
    ("client_secret=bP88Q~rcBcYjzzOhg1Hnn76Wm3jGgakZiZ.8vMgR", "bP88Q~rcBcYjzzOhg1Hnn76Wm3jGgakZiZ.8vMgR"),
    ('cloudflare_api_key = "Bu0rrK-lerk6y0Suqo1qSqlDDajOk61wZchCkje4"', "Bu0rrK-lerk6y0Suqo1qSqlDDajOk61wZchCkje4"),
    ('facebook_app_secret = "6dca6432e45d933e13650d1882bd5e69"', "6dca6432e45d933e13650d1882bd5e69"),
    ("mailchimp_api_key: cefa780880ba5f5696192a34f6292c35-us18", "cefa780880ba5f5696192a34f6292c35-us18"),
    ('"oktaApiToken": "00ebObu4zSNkyc6dimLvUwq4KpTEop-PCEnnfSTpD3",', "00ebObu4zSNkyc6dimLvUwq4KpTEop-PCEnnfSTpD3"),
    (
        '"bot_token1": "xoxb-781236542736-2364535789652-GkwFDQoHqzXDVsC6GzqYUypD"',
        "xoxb-781236542736-2364535789652-GkwFDQoHqzXDVsC6GzqYUypD",
    ),
    (
        '"user_token1": "xoxp-41684372915-1320496754-45609968301-e708ba56e1517a99f6b5fb07349476ef"',
        "xoxp-41684372915-1320496754-45609968301-e708ba56e1517a99f6b5fb07349476ef",
    ),
    (
        'scalingo_api_token = "tk-us-loys7ib9yrxcys_ta2sq85mjar6lgcsspkd9x61s7h5epf_-"',
        "tk-us-loys7ib9yrxcys_ta2sq85mjar6lgcsspkd9x61s7h5epf_-",
    ),
    ("AGE-SECRET-KEY-1QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQ", "AGE-SECRET-KEY-1QQQQ"),
    (
        "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",
        "d91c558a2ba6b47f60f690efc20a33d28c252d5bed8400343246f3eb68f490d2",
    ),
    ("huggingface-cli login --token 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", "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"),
    ('CI_HUB_USER_TOKEN = "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"', "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"),
]

ORDINARY_TEXT = [
    "commit 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39 fixed the billing port",
    "the request id 123e4567-e89b-12d3-a456-426614174000 appears in the log twice",
    "sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "def key_for(session_id: str) -> str:\n    return hashlib.sha256(session_id.encode()).hexdigest()",
    "// the access token is refreshed every hour by getToken()",
    "mysql -u root -p shop   (it prompts for the password)",
    "pass -p to keep the output; stripe_sk is the Stripe plugin's name",
    "The key insight: the API returns 429 after 100 requests per minute.",
]


@pytest.mark.parametrize(("text", "secret"), NAMED_SHAPES + GITLEAKS_SAMPLES)
def test_each_shape_is_redacted(text, secret):
    redacted = redact(text)
    assert secret not in redacted and MARK in redacted, redacted
    assert redact(redacted) == redacted


@pytest.mark.parametrize("text", ORDINARY_TEXT)
def test_ordinary_text_is_not_redacted(text):
    assert redact(text) == text


def test_the_vendored_rule_set_is_gitleaks_own_and_every_rule_compiles():
    assert secret_rules.digest() == secret_rules.SHA256  # the file is as released; update both together
    rule_set = secret_rules.load()
    assert rule_set.untranslated == ()
    assert len(rule_set.rules) == 221  # v8.30.1: 222 rules, one of them path-only
    assert {"stripe-access-token", "huggingface-access-token", "generic-api-key"} <= {r.id for r in rule_set.rules}


def test_go_syntax_is_rewritten_for_python():
    assert secret_rules.compile_go(r"x(?i)ab").fullmatch("xAB")
    assert not secret_rules.compile_go(r"(?:x(?i)a)b").fullmatch("xAB")  # the flag ends with its group
    assert secret_rules.compile_go(r"a\z").search("a") and not secret_rules.compile_go(r"a\z").search("a\n")
    assert secret_rules.compile_go(r"[[:alnum:]]+").fullmatch("aZ9")
    # A flag holds through the later choices of its group, which stay choices of that group.
    choices = secret_rules.compile_go(r"""(?:"(?i)ab"|'(?i)cd')x""")
    assert choices.fullmatch("'CD'x") and choices.fullmatch('"AB"x') and not choices.fullmatch("\"'cd'x")
    top = secret_rules.compile_go(r"a(?i)b|c")
    assert top.fullmatch("C") and top.fullmatch("aB") and not top.fullmatch("aC")


@pytest.mark.parametrize("quote", ['"', "'"])
def test_a_curl_header_in_either_quote_is_found_by_gitleaks_rule(quote):
    # gitleaks' curl-auth-header rule takes a header in double or in single quotes, each choice
    # opening with its own "(?i)".
    header = f"{quote}Authorization: Basic dXNlcjpQYTU1dzByZFh5Wg=={quote}"
    text = f"curl -H {header} https://api.example.com"
    assert [(text[start:end], rule) for start, end, rule in secret_rules.find(text)] == [
        ("dXNlcjpQYTU1dzByZFh5Wg==", "curl-auth-header")
    ]


def test_the_rule_set_finds_nothing_in_imprintds_own_source():
    """The false-positive measure: every source file of the daemon, read as a message would be."""
    root = Path(__file__).resolve().parents[2]
    files = [
        root / name for name in subprocess.check_output(["git", "ls-files", "imprintd"], cwd=root, text=True).split()
    ]
    texts = [path.read_text(encoding="utf-8") for path in files if path.suffix in (".py", ".md") and path.is_file()]
    assert len(texts) > 40
    found = [(text[start:end], rule) for text in texts for start, end, rule in secret_rules.find(text)]
    assert found == []


def test_a_long_message_of_keywords_costs_the_summarizer_its_ends_only(monkeypatch):
    """Redaction reads what the summarizer keeps of a long message, not all of it."""
    from imprintd import redact as redact_mod
    from imprintd.context import summary as summary_mod

    read: list[int] = []

    def counted(text: str) -> str:
        read.append(len(text))
        return redact(text)

    monkeypatch.setattr(redact_mod, "redact", counted)  # what redact_head and redact_tail call
    monkeypatch.setattr(summary_mod, "redact", counted)
    hostile = "AccountKey=" * 100_000 + f"\npassword: {AZURE_KEY}"
    [_, request] = summarizer_request("", [msg.user(hostile, seq=1), msg.assistant("ok", seq=2)])
    assert AZURE_KEY not in request.content and "characters omitted" in request.content
    # Its two ends, their margins and the transcript around them: not the 1,100,000 characters.
    assert read and sum(read) < len(hostile) // 20, read


# -- through a reply: the summarizer's request and the summary it writes --------------------


def test_the_summarizer_request_and_the_summary_hold_none_of_them():
    secrets = [secret for _, secret in NAMED_SHAPES]
    to_cover = []
    for seq, (text, _) in enumerate(NAMED_SHAPES, start=1):
        to_cover.append(msg.user(f"Keep this for later: {text}", seq=2 * seq - 1))
        to_cover.append(msg.assistant("Noted.", seq=2 * seq))
    [_, request] = summarizer_request("", to_cover)
    assert [s for s in secrets if s in request.content] == []
    leaky = "\n".join(f"- (#{2 * i + 1}) The user gave {text}." for i, (text, _) in enumerate(NAMED_SHAPES))
    summary = append_bullets("", leaky)
    assert [s for s in secrets if s in summary] == []
    assert summary.count(MARK) >= len(NAMED_SHAPES)


async def test_a_reply_that_summarizes_sends_and_stores_no_secret(workspace):
    """The real reply path: an earlier exchange with every shape overflows a small context,
    the summarizer (a leaky one, repeating what it read) is asked, and neither its request
    nor the stored summary nor the next coordinator request holds a secret."""
    model = StandInModel()
    model.n_ctx = 2304
    chat = make_chat(model, **{"chat.max_tokens": 256})
    store = chat.store
    info = store.create_session(workspace=None)
    pasted = "Here are the credentials for staging:\n" + "\n".join(text for text, _ in NAMED_SHAPES)
    for question, reply in [(PASTE, PASTE_REPLY), (pasted, "Noted; I will not repeat them."), *FOLLOW_UPS[1:]]:
        store.append(info.id, msg.user(question))
        store.append(info.id, msg.assistant(reply))
    secrets = [secret for _, secret in NAMED_SHAPES]

    def reply(request: Request) -> str:
        if not request.tools and request.system == SUMMARIZER_SYSTEM:
            return "- (#1–#4) The user pasted the compose file and " + "; ".join(text for text, _ in NAMED_SHAPES)
        return "ok"

    model.replies[:] = [reply] * 20
    await ask(chat, "What did we decide about billing?", info.id, workspace=workspace)
    summarizer = [r for r in model.requests if not r.tools and r.system == SUMMARIZER_SYSTEM]
    assert summarizer, "the conversation must overflow for the summarizer to be asked"
    assert [s for s in secrets if s in summarizer[0].text] == []
    saved = store.summary(info.id)
    assert saved is not None and MARK in saved.text
    assert [s for s in secrets if s in saved.text] == []
    later = [r for r in model.requests if r.system != SUMMARIZER_SYSTEM]
    assert [s for s in secrets if any(s in (r.system or "") for r in later)] == []
    # What the user said is stored as they said it.
    assert all(secret in store.messages(info.id)[2].content for secret in secrets)
