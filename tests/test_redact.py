"""Redaction (SECURITY.md, "Secrets"): secrets out of what the summarizer reads and writes."""

from __future__ import annotations

import sys
import tracemalloc

import pytest

from imprintd.redact import MARK, PRIVATE_KEY_MARK, redact

# (input, expected output): secrets are replaced, the text around them is kept.
TRUE_POSITIVES = [
    ("key sk-proj-abcdEFGH1234ijklMNOP5678qrst here", f"key {MARK} here"),
    ("OPENAI_API_KEY is sk-abc123def456ghi789jkl012", f"OPENAI_API_KEY is {MARK}"),
    ("push with ghp_abcdefghijklmnopqrstuvwxyz0123456789", f"push with {MARK}"),
    ("oauth gho_16C7e42F292c6912E7710c838347Ae178B4a", f"oauth {MARK}"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", MARK),
    ("slack xoxb-1234567890-abcdefghij works", f"slack {MARK} works"),
    ("id AKIAIOSFODNN7EXAMPLE in the log", f"id {MARK} in the log"),
    ("maps AIzaSyA1234567890abcdefghijklmnopqrstu.", f"maps {MARK}."),
    (
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U ok",
        f"jwt {MARK} ok",
    ),
    ("Authorization: Bearer abc.def123-ghi", f"Authorization: Bearer {MARK}"),
    ("curl -H 'Authorization: Basic dXNlcjpwYXNz'", f"curl -H 'Authorization: Basic {MARK}'"),
    ("postgres://admin:hunter2@db.internal:5432/app", f"postgres://admin:{MARK}@db.internal:5432/app"),
    ("redis://:s3cret@cache:6379", f"redis://:{MARK}@cache:6379"),
    (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\nabcd==\n-----END RSA PRIVATE KEY-----\nafter",
        f"{PRIVATE_KEY_MARK}\nafter",
    ),
    (
        "before\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n\nafter the clip",
        f"before\n{PRIVATE_KEY_MARK}\n\nafter the clip",
    ),
    ("tail\nMIIEowIBAAKCAQEAabcd\n-----END EC PRIVATE KEY-----\nmore", f"tail\n{PRIVATE_KEY_MARK}\nmore"),
    # env
    ("export DB_PASSWORD=hunter2", f"export DB_PASSWORD={MARK}"),
    ('DB_PASSWORD="hunter 2"', f'DB_PASSWORD="{MARK}"'),
    ("SECRET_KEY=django-insecure-abc", f"SECRET_KEY={MARK}"),
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", f"aws_secret_access_key = {MARK}"),
    # YAML
    ("db:\n  password: s3cr3t!\n  port: 5432", f"db:\n  password: {MARK}\n  port: 5432"),
    ("passwd: hunter2 # old", f"passwd: {MARK} # old"),
    ("- token: abcdef123", f"- token: {MARK}"),
    ("client_secret: 'xyz'", f"client_secret: '{MARK}'"),
    ("  githubToken: abc", f"  githubToken: {MARK}"),
    ("secret: swordfish", f"secret: {MARK}"),
    (
        "- (#4–#5) The user gave password: swordfish for staging.",
        f"- (#4–#5) The user gave password: {MARK} for staging.",
    ),
    ("Passphrase: correct-horse", f"Passphrase: {MARK}"),
    # JSON
    (
        '{"user": "bob", "password": "pw123", "apiKey": "abc"}',
        f'{{"user": "bob", "password": "{MARK}", "apiKey": "{MARK}"}}',
    ),
    ('"access_key": "Q2xvdWQ"', f'"access_key": "{MARK}"'),
    # TOML
    ("[db]\npassword = 'x y z'\nname = 'a'", f"[db]\npassword = '{MARK}'\nname = 'a'"),
    ('api_key = "AAAA-bbbb"', f'api_key = "{MARK}"'),
    ("apikey=abcdef", f"apikey={MARK}"),
    # query strings and flags
    ("curl https://x.com/?api_key=abc123&user=me", f"curl https://x.com/?api_key={MARK}&user=me"),
    ("mysql --password=hunter2 -u root", f"mysql --password={MARK} -u root"),
]

# Text that must come through unchanged.
FALSE_POSITIVES = [
    "the token budget is 65536",
    "password policy requires 12 characters",
    "the password policy: at least 12 characters",
    "pip install sk-learn",
    "port: 8101",
    "see https://example.com:8443/path?q=1 and ssh://git@github.com/org/repo",
    "https://user@example.com/path",
    "tokens per second: 40",
    "tokens per second is about 7",
    "Here's the secret: use caching",
    "the secret sauce is patience",
    "commit 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39",
    "max_tokens: 1024",
    "max_token = 2048",
    "token_budget = 65536",
    "secret_name: prod-db",
    "password_min_length: 12",
    "token: ${GITHUB_TOKEN}",
    "password: <your password>",
    "password: null",
    "api_key = os.environ['API_KEY']",
    "if token == None:",
    "Bearer authentication is used here",
    "the -----END RSA PRIVATE KEY----- marker in prose",
    "sk-",
    "",
]


@pytest.mark.parametrize(("text", "expected"), TRUE_POSITIVES)
def test_secrets_are_replaced_and_surroundings_kept(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize("text", FALSE_POSITIVES)
def test_ordinary_text_stays(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize("text", [t for t, _ in TRUE_POSITIVES] + FALSE_POSITIVES)
def test_redaction_is_idempotent(text: str) -> None:
    once = redact(text)
    assert redact(once) == once


def test_a_compose_file_keeps_everything_but_its_secrets() -> None:
    compose = (
        "services:\n"
        "  billing:\n"
        "    image: acme/billing:1.4\n"
        "    ports:\n"
        '      - "8101:8101"\n'
        "    environment:\n"
        "      DATABASE_URL: postgres://billing:Zx9-pass@db:5432/billing\n"
        "      STRIPE_API_KEY: sk-live-0123456789abcdefghijklmn\n"
        "      LOG_LEVEL: info\n"
    )
    out = redact(compose)
    assert "Zx9-pass" not in out and "sk-live-0123456789abcdefghijklmn" not in out
    assert "postgres://billing:[REDACTED]@db:5432/billing" in out
    assert '- "8101:8101"' in out and "LOG_LEVEL: info" in out and "image: acme/billing:1.4" in out


@pytest.mark.parametrize("text", ["x" * 200_000, "sk-" * 70_000, "ab_" * 70_000, "a=" * 100_000])
def test_long_runs_of_prefixes_and_assignments_are_no_secret(text: str) -> None:
    # What these cost, at this size and four times it: bench/bench_hostile_text.py.
    assert redact(text) == text


def _megabyte(unit: str) -> str:
    return (unit * (1_000_000 // len(unit) + 1))[:1_000_000]


def _keywords() -> list[str]:
    from imprintd import secret_rules

    return sorted({keyword for rule in secret_rules.load().rules for keyword in rule.keywords})


#: Text dense in what the rules look for: each once took 12 to 32 s a megabyte.
DENSE = {
    "api.": lambda: _megabyte("api. "),
    "every keyword": lambda: _megabyte(" ".join(_keywords()) + " "),
    "every keyword assigned": lambda: _megabyte("=".join(_keywords()) + "="),
    "every keyword given a value": lambda: _megabyte("".join(f"{k}=abcdefghijk123 " for k in _keywords())),
    "key=": lambda: _megabyte("key=abc "),
    "curl": lambda: _megabyte("curl "),
    # A finding of the generic rule every 21 characters, each checked against its allowlists.
    "key=, random values": lambda: _megabyte("".join(f"key={_random_value(16, seed)} " for seed in range(2_000))),
}


def _random_value(length: int, seed: int) -> str:
    import random
    import string

    rng = random.Random(seed)
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(length))


@pytest.mark.parametrize("name", DENSE)
def test_a_megabyte_dense_in_keywords_is_redacted_as_each_of_its_words_alone(name: str) -> None:
    # Density changes nothing found: the search that skips to where a keyword stands finds in a
    # megabyte of them what it finds in each space-separated word on its own. What it costs:
    # bench/bench_redact.py (seconds a megabyte) and tests/test_secret_rules_bounds.py.
    import functools

    text = DENSE[name]()
    alone = functools.cache(redact)
    redacted = redact(text)
    assert redacted == " ".join(alone(word) for word in text.split(" "))
    assert redact(redacted) == redacted


def test_rules_searched_from_their_keywords_find_what_a_full_search_finds() -> None:
    # The bounded search (lead taken off, tried only where a keyword stands) against each
    # rule's own regex searched over the whole text, on seeded assignments of every keyword.
    import dataclasses
    import random
    import tomllib

    from imprintd import secret_rules

    rule_set = secret_rules.load()
    specs = {spec["id"]: spec for spec in tomllib.loads(secret_rules._DATA.read_text())["rules"]}

    def whole(rule: secret_rules.Rule) -> secret_rules.Rule:
        pattern = specs[rule.id]["regex"]
        if not rule.id.startswith("generic"):
            pattern = pattern.replace(secret_rules._GITLEAKS_END_OF_TOKEN, secret_rules._END_OF_TOKEN)
        # Searched over the whole text (no keywords): what gitleaks does with a fragment.
        regex = secret_rules.compile_go(pattern)
        return dataclasses.replace(rule, regex=regex, keywords=(), lead=0, anchored=False, reach=0, head=None)

    reference = dataclasses.replace(rule_set, rules=tuple(whole(rule) for rule in rule_set.rules))
    assert sum(rule.anchored for rule in rule_set.rules) > 150 and sum(rule.lead > 0 for rule in rule_set.rules) > 90
    rng, keywords = random.Random(35), _keywords()
    token = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    found = 0
    for _ in range(800):
        lead = "".join(rng.choice(token + "_.-") for _ in range(rng.choice([0, 3, 30, 60])))
        value = "".join(rng.choice(token) for _ in range(rng.choice([8, 16, 20, 32, 36, 40, 43, 64])))
        operator = rng.choice(["=", ": ", " = '", '="', " => ", ":=", ",", ":"])
        text = f"x {lead}{rng.choice(keywords)}{rng.choice(['', '_id', ' token', '_secret_key'])}{operator}{value}"
        text += rng.choice(["", "'", '"', " ", ";", ". next"]) + rng.choice(["", f" {rng.choice(keywords)}={value}"])
        bounded = sorted(secret_rules.find(text, rule_set))
        assert bounded == sorted(secret_rules.find(text, reference)), text
        found += len(bounded)
    assert found > 150
    # curl commands, their flags far from them (past any window) or lines below, several a line.
    curls = [rule for rule in rule_set.rules if rule.id.startswith("curl")]
    assert all(rule.head is not None for rule in curls)
    reference_curls = dataclasses.replace(reference, rules=tuple(whole(rule) for rule in curls))
    only_curls = dataclasses.replace(rule_set, rules=tuple(curls))
    flags = [" -u ", " --user=", " -H ", " --header="]
    values = ["adm1n:Pa55w0rdXyZq ", "'svc:Zk9pQ2xBbm5Z' ", '"Authorization: Basic dXNlcjpQYTU1dzByZFh5Wg==" ', "x "]
    found = 0
    for _ in range(300):
        text = "".join(
            rng.choice(["curl", "xcurl", "curl -s"])
            + " "
            + "y" * rng.choice([0, 5, 150, 390, 450])
            + rng.choice(["", "\n", "\r\n", "\n\n"])
            + rng.choice(flags)
            + rng.choice(values)
            for _ in range(rng.randint(1, 6))
        )
        bounded = sorted(secret_rules.find(text, only_curls))
        assert bounded == sorted(secret_rules.find(text, reference_curls)), text
        found += len(bounded)
    assert found > 150


def test_the_excerpt_margin_is_twice_the_rule_window():
    # Written out in redact.py so that the rule set loads on first use; it must follow the window.
    from imprintd import redact, secret_rules

    assert redact.EXCERPT_MARGIN == 2 * secret_rules.WINDOW


def test_a_remembered_redaction_keeps_no_reference_to_the_raw_text():
    # Made at run time: a constant would be held by the code object too.
    text = "".join(["DB_PASSWORD=", "Tr0ub4dor", "x", str(len(__name__) * 7919)])
    before = sys.getrefcount(text)
    assert redact(text) == "DB_PASSWORD=[REDACTED]"
    assert redact(text) == "DB_PASSWORD=[REDACTED]"  # remembered, and the same
    # What is remembered is found by a keyed hash of the text: the secret is not kept alive.
    assert sys.getrefcount(text) == before


def test_remembered_redactions_stay_within_their_bytes(monkeypatch):
    from imprintd import redact as redaction

    monkeypatch.setattr(redaction, "REMEMBERED_BYTES", 8 << 10)
    tracemalloc.start()
    try:
        for index in range(100):
            text = f"note {index}: " + "plain words and nothing secret " * 20  # 600 characters
            assert redact(text) == text
        del text
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    # 100 texts were redacted, 60 KB: what stays is the newest within the bound.
    assert held <= (8 << 10) + (16 << 10)
