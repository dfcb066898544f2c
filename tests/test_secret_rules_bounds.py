"""Hostile text costs redaction bounded work (SECURITY.md "Bounds"): the curl rules
read line breaks one way, and a session's covered material is redacted once, not every reply."""

from __future__ import annotations

import functools
import re
import re._constants as sre  # noqa: PLC2701 (the parse tree of a rule's pattern)
import re._parser as sre_parse  # noqa: PLC2701
from collections import Counter
from collections.abc import Callable

import pytest

from imprintd import go_regex, secret_rules

_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def _ways(items, text: str, start: int) -> Counter[int]:  # noqa: ANN001 (a parse tree: no public type)
    """For each end, the number of ways the pattern ``items`` reads ``text[start:end]``.

    Python's ``re`` tries every one of these ways before it gives up on a place: their count is
    the work a failed try does, counted instead of timed.
    """
    ends = Counter({start: 1})
    for op, av in items:
        following: Counter[int] = Counter()
        for position, count in ends.items():
            for end, more in _item_ways(op, av, text, position).items():
                following[end] += count * more
        ends = following
    return ends


def _item_ways(op, av, text: str, position: int) -> Counter[int]:  # noqa: ANN001, C901, PLR0911
    char = text[position] if position < len(text) else None
    if op is sre.LITERAL:
        return Counter({position + 1: 1}) if char is not None and ord(char) == av else Counter()
    if op is sre.ANY:
        return Counter({position + 1: 1}) if char is not None and char != "\n" else Counter()
    if op is sre.IN:
        if char is None:
            return Counter()
        negate = any(kind is sre.NEGATE for kind, _ in av)
        inside = any(
            (kind is sre.LITERAL and ord(char) == value) or (kind is sre.RANGE and value[0] <= ord(char) <= value[1])
            for kind, value in av
        )
        if not all(kind in (sre.LITERAL, sre.RANGE, sre.NEGATE) for kind, _ in av):
            raise NotImplementedError(av)
        return Counter({position + 1: 1}) if inside != negate else Counter()
    if op is sre.AT and av is sre.AT_BOUNDARY:
        before = position > 0 and text[position - 1] in _WORD
        return Counter({position: 1}) if before != (char is not None and char in _WORD) else Counter()
    if op is sre.SUBPATTERN:
        return _ways(av[3], text, position)
    if op is sre.BRANCH:
        total: Counter[int] = Counter()
        for branch in av[1]:
            total.update(_ways(branch, text, position))
        return total
    if op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
        low, high, inner = av
        total, ends, times = Counter(), Counter({position: 1}), 0
        while ends and (high is sre.MAXREPEAT or times < high):
            if times >= low:
                total.update(ends)
            following: Counter[int] = Counter()
            for at, count in ends.items():
                for end, more in _ways(inner, text, at).items():
                    following[end] += count * more
            ends, times = following, times + 1
        if times >= low:
            total.update(ends)
        return total
    raise NotImplementedError(op)


def _curl_rules() -> list[secret_rules.Rule]:
    return [rule for rule in secret_rules.load().rules if rule.id.startswith("curl")]


def _before_the_flag(rule: secret_rules.Rule):  # noqa: ANN202
    """The rule's pattern up to where its ``-H``/``-u`` flag starts: ``curl`` and the lines after it."""
    items = list(sre_parse.parse(rule.regex.pattern, rule.regex.flags))
    cut = next(index for index, (op, _) in enumerate(items) if op in (sre.SUBPATTERN, sre.BRANCH))
    return items[: cut + 1]


#: Line breaks of every mix: CR LF, CR alone, blank CR LF lines, lines of only CR, LF runs.
BREAKS = {
    "CR LF": "x\r\n",
    "CR LF twice": "\r\n\r\n",
    "CR alone": "x\r",
    "a line of CRs": "\r\r\r\r\r\r\r\r\n",
    "CRs on one line": "\r",
    "LF CR": "\n\r",
    "LF twice": "\n\n",
}


@pytest.mark.parametrize("name", BREAKS)
def test_the_curl_rules_read_line_breaks_a_bounded_number_of_ways(name: str) -> None:
    # gitleaks' "(?:.*|.*(?:[\r\n]{1,2}.*){1,5})" lets "." and "[\r\n]" both take a CR: a try
    # on "curl" and 40 CRs walked millions of ways (seconds; 80 CRs: hours). Read one way
    # (up to a run of LFs split in pairs), each try costs its text's length.
    for rule in _curl_rules():
        prefix = _before_the_flag(rule)
        most = []
        for repeat in (10, 40):
            ways = _ways(prefix, "curl " + BREAKS[name] * repeat + "-x", 0)
            assert ways, (rule.id, name)
            most.append(max(ways.values()))
        assert most[1] <= 2**5, (rule.id, name, most)  # 5 lines on, each "\n\n" or "\n", "\n"
        assert most[1] == most[0], (rule.id, name, most)  # 4 times the text: no more ways to an end


#: Some of gitleaks' own samples for its curl rules (cmd/generate/config/rules/curl.go, v8.30.1:
#: true positives, then false positives), read here with each of their line-break styles.
CURL_FOUND = [
    "curl --cacert ca.crt -u elastic:P@ssw0rd$1 https://localhost:9200",
    "sh-5.0$ curl -k -X POST https://infinispan:11222/rest/v2/caches/default/hello \\\n  -H 'Content-type: text/plain' \\\n"
    "  -d 'world' \\\n  -u developer:yqDVtkqPECriaLRi",
    "curl -s --user 'api:d2LkV78zLx!t' \\\n    https://api.mailgun.net/v2/sandbox91d3515882ecfaa1c65be642.mailgun.org/messages",
    "$ curl https://api.dropbox.com/oauth2/token \\\n  --user c28wlsosanujy2z:qgsnai0xokrw4j1 --data grant_type=authorization_code",
    'curl -X POST -H "Content-Type: application/json" \\\n -H "Authorization: Basic '
    'MzUzYjMwMmM0NDU3NGY1NjUwNDU2ODdlNTM0ZTdkNmE6Mjg2OTI0Njk3ZTYxNWE2NzJhNjQ2YTQ5MzU0NTY0NmM=" \\\n'
    '  -d \'{"user":{"emailAddress":"test@example.com"}, "password":"password"}\' \\\n'
    "  'http://localhost:8080/oauth2-provider/v1.0/users'",
    'curl https://api.openai.com/v1/chat/completions \\\n  -H "Content-Type: application/json" \\\n'
    '  -H "Authorization: Bearer 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" \\',
    'curl -X GET "https://api.cloudflare.com/client/v4/user/tokens/verify" \\\n'
    '     -H "Authorization: Bearer _FXNljbSRYMWx3TWrd7lgKhLtVZX6iskC8Wcbb4b" \\\n     -H "Content-Type:application/json"',
    'curl -X GET \\\n     -H "apikey: c4ed6c21-9dd5-4a05-8e3f-c56d1151cce8" \\\n     -H "Accept: application/json" \\',
    'curl -X GET https://octopus.corp.net/\n     -H "X-Octopus-ApiKey: 3a16750d-d363-41a4-8ebd-035408f7730f" \\',
]
CURL_LEFT = [
    "curl -i -u 'test:test'",
    'curl \\\n  -H "Authorization: Bearer <Openverse API token>" \\\n  "https://api.openverse.org/v1/audio/?q=test"',
    'curl -X GET \\\n     -H "apikey: $API_KEY" \\\n     -H "Accept: $FORMAT" \\\n"$API_URL/rest/v1/stats_derniere_labellisation"',
    '   curl -X GET --insecure --user "username:password" \\',
]
LINE_ENDS = {"LF": "\n", "CR LF": "\r\n", "CR": "\r", "LF CR": "\n\r", "CR LF twice": "\r\n\r\n"}


@pytest.mark.parametrize("ends", LINE_ENDS)
def test_gitleaks_curl_samples_are_found_as_gitleaks_finds_them(ends: str) -> None:
    import dataclasses
    import tomllib

    rule_set = secret_rules.load()
    curls = tuple(_curl_rules())
    specs = {spec["id"]: spec for spec in tomllib.loads(secret_rules._DATA.read_text())["rules"]}
    as_gitleaks = dataclasses.replace(
        rule_set,
        rules=tuple(
            dataclasses.replace(rule, regex=secret_rules.compile_go(specs[rule.id]["regex"]), keywords=(), head=None)
            for rule in curls
        ),
    )
    only_curls = dataclasses.replace(rule_set, rules=curls)
    for sample in CURL_FOUND + CURL_LEFT:
        text = sample.replace("\n", LINE_ENDS[ends])
        found = sorted(secret_rules.find(text, only_curls))
        assert found == sorted(secret_rules.find(text, as_gitleaks)), (ends, text)
        if ends != "CR LF twice":  # a blank line between each: the flag may stand past the five lines
            assert bool(found) == (sample in CURL_FOUND), (ends, text)


def test_a_curl_try_matches_where_gitleaks_pattern_matches() -> None:
    # The same strings match: on random commands of flags, values and line breaks of every
    # mix, a try matches exactly where gitleaks' pattern does; the greedy "-u" rule's match is
    # the same, and the lazy "-H" rule's is one of its matches (see _over_lines_one_way).
    import random
    import tomllib

    specs = {spec["id"]: spec for spec in tomllib.loads(secret_rules._DATA.read_text())["rules"]}
    pieces = ["curl", " ", "x", "\r", "\n", "\r\n", "\n\n", "\r\r", " -u ", " -H ", "\n-u ", "\r-H ", " --user="]
    pieces += ["adm1n:Pa55w0rdXyZq ", "'svc:Zk9pQ2xBbm5Z' ", '"Authorization: Basic dXNlcjpQYTU1dzByZFh5Wg==" ']
    pieces += ["'X-Api-Key: abcdefgh1234' ", "u:p ", "a:bcd"]
    rng, matched = random.Random(35), 0
    for rule in _curl_rules():
        gitleaks = secret_rules.compile_go(specs[rule.id]["regex"])
        for _ in range(1500):
            text = "curl" + "".join(rng.choice(pieces) for _ in range(rng.randint(1, 24)))
            ours, theirs = rule.regex.match(text), gitleaks.match(text)
            assert (ours is None) == (theirs is None), (rule.id, text)
            if ours is not None and theirs is not None:
                matched += 1
                if rule.id == "curl-auth-user":
                    assert (ours.span(), ours.groups()) == (theirs.span(), theirs.groups()), text
    assert matched > 500


def _dense_corpora() -> dict[str, str]:
    keywords = sorted({keyword for rule in secret_rules.load().rules for keyword in rule.keywords})
    units = {
        "every keyword": " ".join(keywords) + " ",
        "every keyword, =": "=".join(keywords) + "=",
        "every keyword given a value": "".join(f"{k}=abcdefghijk123 " for k in keywords),
        "key=abc": "key=abc ",
    }
    return {name: (unit * (200_000 // len(unit) + 1))[:200_000] for name, unit in units.items()}


def _random_texts(pieces: list[str], count: int, seed: int) -> list[str]:
    import random

    rng = random.Random(seed)
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 16))) for _ in range(count)]


def _rewritten_alike(before: Callable[[str], str], after: Callable[[str], str], pieces: list[str], seed: int) -> int:
    """Asserts ``after`` gives ``before``'s output on the dense corpora and on 30,000 random mixes of
    ``pieces``; returns how many texts they changed (a check that the mixes reach the rule)."""
    changed = 0
    for text in [*_dense_corpora().values(), *_random_texts(pieces, 30_000, seed)]:
        expected = before(text)
        assert after(text) == expected, text[:200]
        changed += expected != text
    return changed


def test_assignments_tried_only_at_names_redact_as_the_whole_search_does() -> None:
    # redact's "name = value" pattern is tried where a secret word's name and "=" stand
    # (_assign_eq), no longer at every character: the same output on dense text and on
    # random mixes of names, leads, quotes, operators and non-ASCII letters that fold to ASCII.
    from imprintd import redact

    pieces = ["password", "PASS", "pass", "Pass", "db", "_", "-", "--", ".", "token", "api", "key", "api_key"]
    pieces += ["secret", "x", "1", "=", "==", '"', "'", " ", "\t", "\n", "?", "&", "é", "\u212a", "\u017f"]
    pieces += ["<a>", "${X}", "abc", "compass", "client", "Secret", "access-key", "privateKey"]
    whole_search = functools.partial(redact._ASSIGN_EQ.sub, redact._assignment)
    assert _rewritten_alike(whole_search, redact._assign_eq, pieces, 35) > 1_000


def test_name_characters_are_what_the_assignment_pattern_takes_for_them() -> None:
    import sys

    from imprintd import redact

    name = re.compile(r"[A-Za-z0-9_.\-]", re.IGNORECASE)
    assert {chr(c) for c in range(sys.maxunicode + 1) if name.fullmatch(chr(c))} == redact._NAME_CHARS


def test_key_shapes_with_the_boundary_after_their_start_find_what_they_found_before() -> None:
    from imprintd import redact

    boundary = r"(?<![A-Za-z0-9_\-])"
    before = re.compile(
        "|".join(
            (
                boundary + r"sk-(?=[A-Za-z0-9_\-]*\d)[A-Za-z0-9_\-]{20,}",
                boundary + r"gh[pousr]_[A-Za-z0-9]{20,}",
                boundary + r"github_pat_[A-Za-z0-9_]{20,}",
                boundary + r"xox[baprs]-[A-Za-z0-9\-]{10,}",
                r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b",
                boundary + r"AIza[0-9A-Za-z_\-]{30,}",
                boundary + r"eyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}",
            )
        )
    )
    pieces = ["sk-", "gh", "p_", "github_pat_", "xox", "b-", "AKIA", "ASIA", "AIza", "eyJ", ".", "a", "1", "_", "-"]
    pieces += [" ", "é", "\n", "ABCDEFGHIJ0123456789", "abcdefghij"]
    old, new = (functools.partial(rule.sub, redact.MARK) for rule in (before, redact._SHAPES))
    assert _rewritten_alike(old, new, pieces, 36) > 1_000


def test_a_long_session_s_covered_material_is_redacted_once_not_every_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each reply lists the covered material (reply.py's summary block: each paste's first
    # line, each tool call, redacted); on a session dense in keywords that redaction grew with
    # every message. The second reply over the same messages redacts nothing again.
    import uuid

    from imprintd.context.summary import StoredSummary, covered_material, summary_block
    from imprintd.messages import Message, ToolCall

    unique = uuid.uuid4().hex  # texts no earlier test redacted
    dense = "".join(f"{k}=abcdefghijk123 " for k in sorted({k for r in secret_rules.load().rules for k in r.keywords}))
    messages: list[Message] = []
    for seq in range(1, 61, 3):
        call = ToolCall(id=f"c{seq}", name="search", arguments={"query": f"{unique} {seq} api_key=abc123 token"})
        messages += [
            Message(role="user", content=f"{unique} {seq} {dense}"[:3000], seq=seq),
            Message(role="assistant", content="", tool_calls=(call,), seq=seq + 1),
            Message(role="tool", content="r" * 120, tool_call_id=call.id, name="search", seq=seq + 2),
        ]
    state = StoredSummary(text="- (#1–#60) Pastes and searches.", first_seq=1, last_seq=60)
    searched: list[int] = []
    find = secret_rules.find
    monkeypatch.setattr(secret_rules, "find", lambda text, *rest: (searched.append(len(text)), find(text, *rest))[1])

    first_reply = summary_block(state, covered_material(messages))
    after_first = len(searched)
    second_reply = summary_block(state, covered_material(messages))
    assert second_reply == first_reply and "[REDACTED]" in first_reply
    assert after_first >= 40  # a paste's first line and a tool call for each of 20 exchanges
    assert len(searched) == after_first  # the second reply found them all redacted already


@pytest.mark.parametrize(
    "paste",
    [
        "services:\n  billing:\n" + "x" * 5000,
        "\n" * 5000 + "  first words  \nmore",
        " \r\n" * 1365 + "\r\nfirst\r\nsecond",  # a CR LF across the 4 KB that is read first
        "y" * 10_000 + "\nsecond",
        "\u2028 \x0c" * 3000 + "after other line breaks\u2029next",
        " \n\t\n",
    ],
)
def test_a_paste_s_first_line_is_read_from_its_start(paste: str) -> None:
    from imprintd.context import summary
    from imprintd.redact import redact_head

    line = next((line.strip() for line in paste.splitlines() if line.strip()), "")
    line = redact_head(line, 81)
    expected = line if len(line) <= 80 else line[:79].rstrip() + "…"
    assert summary._first_line(paste) == expected


def test_password_flags_with_the_boundary_after_their_start_find_what_they_found_before() -> None:
    from imprintd import redact

    before = re.compile(
        r"(?P<lead>\b(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlshow|mysqlcheck|mariadb|mariadb-dump)\b"
        r"[^\n|;&]{0,200}?\s-p)(?P<value>\"[^\"\n]+\"|'[^'\n]+'|[^\s\"']+)"
        r"|(?P<lead2>\bsshpass\s+-p\s*|(?<![\w-])--password[ \t]+)(?P<value2>\"[^\"\n]+\"|'[^'\n]+'|[^\s\"'-][^\s\"']*)"
    )
    pieces = ["mysql", "mysqldump", "mariadb", "mariadb-dump", "sshpass", "--password", "-p", " ", "\t", "\n", "x"]
    pieces += ["é", "-", "_", "'a b'", '"c d"', "hunter2", "|", ";", "${X}", "-u root", "a"]
    old, new = (functools.partial(rule.sub, redact._cli_password) for rule in (before, redact._CLI_PASSWORD))
    assert _rewritten_alike(old, new, pieces, 37) > 300


#: How much more a megabyte dense in keywords may cost than a megabyte of plain prose: about 3 to 7
#: times here; dense text once cost 12 to 32 s a megabyte, some 50 to 150 times prose.
DENSE_OVER_PROSE = 10.0


@pytest.mark.parametrize(
    "name", ["api.", "every keyword", "every keyword given a value", "key=", "curl", "key=, random values"]
)
def test_a_megabyte_dense_in_keywords_costs_a_few_times_plain_prose(name: str) -> None:
    """Redaction's cost does not grow with keyword density. Measured as the CPU the
    redacting thread spends (``time.thread_time``) against the same for a megabyte of plain
    prose, side by side: a bound in seconds failed on this shared machine when its host ran
    slower (the densest text took 0.7-0.8 s of CPU quiet, 1.0-1.4 s on another day, idle), while
    the ratio holds. Best of five pairs: noise only adds. The seconds are bench_redact's figures."""
    import random
    import time

    from imprintd.redact import redact
    from tests.test_redact import DENSE

    rng = random.Random(1)
    words = [
        "the",
        "of",
        "and",
        "a",
        "to",
        "in",
        "is",
        "that",
        "it",
        "was",
        "for",
        "on",
        "are",
        "as",
        "with",
        "they",
        "at",
        "be",
        "this",
        "from",
        "or",
        "one",
        "by",
        "not",
    ]
    prose = " ".join(rng.choice(words) for _ in range(400_000))[:1_000_000]
    dense = DENSE[name]()
    redact(prose)  # the rules compiled and warm before anything is timed

    def cpu(text: str) -> float:
        start = time.thread_time()
        redact(text)
        return time.thread_time() - start

    ratios = []
    for _ in range(5):
        ratios.append(cpu(dense) / cpu(prose))
        if ratios[-1] <= DENSE_OVER_PROSE:
            break
    assert min(ratios) <= DENSE_OVER_PROSE, f"{name}: {', '.join(f'{r:.1f}' for r in ratios)} times plain prose"


def test_stopwords_searched_as_a_trie_are_found_where_a_lookup_of_each_finds_them() -> None:
    # An allowlist's stopwords are one search of their trie (_trie_pattern), not a lookup of every
    # piece of the secret: the same answer on random mixes of stopwords, their pieces and other
    # characters, for every allowlist that has stopwords, and for none or an empty word.
    import random

    allowlists = [secret_rules.load().allowlist, *(a for r in secret_rules.load().rules for a in r.allowlists)]
    with_words = [a for a in allowlists if a.stopwords]
    assert max(len(a.stopwords) for a in with_words) > 1_000
    with_words += [secret_rules.Allowlist(stopwords=()), secret_rules.Allowlist(stopwords=("", "ab"))]
    rng, held = random.Random(38), 0
    for allowlist in with_words:
        words = list(allowlist.stopwords) or ["ab"]
        pieces = [*rng.sample(words, min(40, len(words))), "x", "1", ".", "-", "é", "\\", "(", "*"]
        pieces += [word[: rng.randint(0, len(word))] for word in rng.sample(words, min(40, len(words)))]
        for _ in range(3_000):
            secret = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 6)))
            expected = any(word in secret for word in allowlist.stopwords)
            assert allowlist._holds_stopword(secret) == expected, secret
            held += expected
    assert held > 3_000


@pytest.mark.parametrize("text", ["eyeyeyey key", "aaaa", "keykeykey", "api.api..api", "", "sk-sk-ssk"])
def test_keyword_places_are_every_occurrence_overlaps_included(text: str) -> None:
    for keyword in ["ey", "a", "aa", "aaa", "key", "keykey", "api.", "sk", "sk-sk", "s", "ssk", "zz"]:
        expected = [found.start() for found in re.finditer(f"(?={re.escape(keyword)})", text)]
        assert secret_rules._places(text, keyword) == expected, keyword


def test_curl_tries_skipped_where_no_flag_is_within_reach_find_what_every_try_finds() -> None:
    # A curl rule is not tried where the next match of its tail ("-u user:pass", "-H '…'") lies
    # past the line breaks a match may read (Rule.tail): the same findings as trying every curl,
    # on mixes of curls, flags, values and runs of line breaks around the reach of 11 LFs.
    import dataclasses
    import random

    rule_set = secret_rules.load()
    curls = tuple(rule for rule in rule_set.rules if rule.head is not None)
    assert len(curls) == 2 and all(rule.tail is not None for rule in curls)
    with_tails = dataclasses.replace(rule_set, rules=curls)
    every_try = dataclasses.replace(rule_set, rules=tuple(dataclasses.replace(rule, tail=None) for rule in curls))
    pieces = ["curl", "curl ", "xcurl ", " -u ", " --user=", " -H ", "\t--header=", "adm1n:Pa55w0rdXyZq ", "x", " "]
    pieces += ["'svc:Zk9pQ2xBbm5Z' ", '"Authorization: Basic dXNlcjpQYTU1dzByZFh5Wg==" ', "'X-Api-Key: Zk9pQ2xBbm5Z' "]
    pieces += ["\n", "\n\n", "\n\n\n", "\r", "\r\n", "\n" * 9, "\n" * 10, "\n" * 11, "\n" * 12]
    rng, found = random.Random(39), 0
    for _ in range(4_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 30)))
        expected = sorted(secret_rules.find(text, every_try))
        assert sorted(secret_rules.find(text, with_tails)) == expected, text
        found += len(expected)
    assert found > 250


def test_entropy_with_its_terms_looked_up_is_the_same_float() -> None:
    # A secret's entropy sums terms looked up by count (_entropy_terms): the very float of the
    # formula summed in Counter's order, as a rule's threshold compares it with <=.
    import math
    import random

    def formula(text: str) -> float:
        total = len(text)
        return -sum(count / total * math.log2(count / total) for count in Counter(text).values()) if text else 0.0

    rng = random.Random(40)
    for _ in range(20_000):
        text = "".join(rng.choice("aab0Z9_-éxyzQ") for _ in range(rng.choice([0, 1, 2, 5, 16, 40, 300, 1_024, 1_025])))
        assert secret_rules.shannon_entropy(text) == formula(text), text


def test_long_allowlist_alternations_tried_where_a_choice_may_start_find_what_a_search_finds() -> None:
    # gitleaks' generic allowlist on the match (45 choices) is tried only where one of its
    # choices' literal starts stands, and searched whole when the text holds what its other
    # choices need (``:jar:``, ``=\n``): the same answer as ``search`` on random mixes of its
    # words, cases, separators and letters that fold to ASCII ones outside ASCII.
    import random

    allowlists = [secret_rules.load().allowlist, *(a for r in secret_rules.load().rules for a in r.allowlists)]
    planned = [p for a in allowlists for p in a.regexes if go_regex.starts_and_needs(p) is not None]
    assert planned, "the generic rule's allowlist on the match is searched where its choices may start"
    rng, held = random.Random(41), 0
    for pattern in planned:
        found = go_regex.search_where_it_may_start(pattern)
        pieces = re.findall(r"[A-Za-z]{2,}", pattern.pattern) + ["_", "-", ".", ":", " ", "=", "\n", "x", "1"]
        pieces += [":jar:", "=\n", "K", "\u212a", "\u0130", "\u017f", "é"]
        for _ in range(40_000):
            text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 7)))
            text = rng.choice([text, text.upper(), text.swapcase()])
            expected = pattern.search(text) is not None
            assert found(text) == expected, text
            held += expected
    assert held > 5_000


def test_an_allowlist_regex_ruled_out_for_the_text_could_not_match_any_part_of_it() -> None:
    # An allowlist regex is not searched for a finding when the text holds none of the strings
    # every match of it holds (_needs): on random mixes of the allowlists' own words and
    # characters, wherever a regex matches, one of its strings stands in the text.
    import random

    rule_set = secret_rules.load()
    patterns = [p for a in (rule_set.allowlist, *(a for r in rule_set.rules for a in r.allowlists)) for p in a.regexes]
    needing = [p for p in patterns if go_regex.strings_needed(p) is not None]
    assert len(needing) > 30
    pieces = sorted({word for p in patterns for word in re.findall(r"[A-Za-z_]{2,}", p.pattern)})
    pieces += list("$%@{}/=:._- \n\t\"'1x") + ["\u212a", "\u0130", "${{", "{{", "}}", "/Users/", "/usr/", "="]
    rng, matched = random.Random(42), 0
    for _ in range(20_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 8)))
        text = rng.choice([text, text.upper(), text.lower()])
        possible = secret_rules._Possible(text.translate(go_regex.ASCII_LOWER))
        for pattern in needing:
            if pattern.search(text) is not None:
                matched += 1
                assert possible(pattern), (pattern.pattern, text)
    assert matched > 3_000


def _plainly_allowed(allowlists: tuple, text: str, match: re.Match[str], secret: str) -> bool:
    """What ``_finding`` asked before ``_Checks``: each allowlist on the secret, the match and
    its line (WINDOW each side), every regex searched."""
    line_start, line_end = secret_rules._line(text, match.start(), match.end())
    matched = text[match.start() : match.end()].strip("\n")
    return any(a.allows(secret, matched, text[line_start:line_end]) for a in allowlists)


def test_allowlists_checked_as_few_searches_allow_what_each_allowlist_allows() -> None:
    # _Checks: the regexes on the secret as one alternation, stopwords as one trie, the generic
    # allowlist on the match tried only where the text has a start between the match's ends, a
    # line regex only where what it needs is within the line: the same answer as every allowlist
    # asked in turn, for every rule with allowlists and one whose allowlists take each other way
    # (an AND of regexes and stopwords, a line regex needing nothing, a flag group after the start).
    import dataclasses
    import random

    rule_set = secret_rules.load()
    generic = next(rule for rule in rule_set.rules if rule.id == "generic-api-key")
    odd = (
        secret_rules.Allowlist(regexes=(re.compile(r"x\d+y", re.ASCII),), stopwords=("zz",), all_of=True),
        secret_rules.Allowlist(regexes=(re.compile(r"^\s*#", re.ASCII | re.MULTILINE),), target="line"),
        secret_rules.Allowlist(regexes=(secret_rules.compile_go(r"ab(?i)cd"), re.compile("Q", re.I)), target="match"),
        secret_rules.Allowlist(regexes=(re.compile(r"q{3}"), secret_rules.compile_go(r"(?i)^k9")), stopwords=("é",)),
    )
    rules = [rule for rule in rule_set.rules if rule.allowlists and rule.head is None]
    rules.append(dataclasses.replace(generic, id="odd", allowlists=(*generic.allowlists, *odd)))
    patterns = [p.pattern for a in (rule_set.allowlist, *generic.allowlists) for p in a.regexes]
    words = sorted({w for p in patterns for w in re.findall(r"[A-Za-z_]{2,}", p)})
    pieces = [*words, *random.Random(0).sample(generic.allowlists[1].stopwords, 60), "key=", "api_key = ", "token: "]
    pieces += ["AKIA", "AIza", "hvs.", "password=", "x12y", "zz", "abCD", "Qq", "qqq", "K9", "é", "\u212a", ":jar:"]
    pieces += ["=\n", "\n", " ", "\t", "#", "'", '"', "=", "/usr/", "${", "$", "%", "{{", "}}", "@", "-", "_", "."]
    pieces += ["import { a } from 'b'", 'LICENSE = "MIT"', "--mount=type=secret,", "true", "aaaa", "AbCdEf0123456789"]
    token = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

    def piece() -> str:
        if rng.random() < 0.4:  # a value random enough to be a secret, mostly given a name
            name = rng.choice(["key=", "api_key = ", "token: ", "password=", "secret='", "AKIA", ""])
            value = "".join(rng.choice(token) for _ in range(rng.randint(8, 24)))
            return name + rng.choice(["", *pieces[-20:]]) + value + rng.choice(["", " ", "\n", "'", ";"])
        return rng.choice(pieces) + rng.choice(["", " "])

    rng, allowed, kept = random.Random(43), 0, 0
    for _ in range(1_500):
        text = "".join(piece() for _ in range(rng.randint(1, 60)))
        text = rng.choice([text, text.upper(), text.lower()])
        possible = secret_rules._Possible(text.translate(go_regex.ASCII_LOWER))
        for rule in rules:
            allowlists = (rule_set.allowlist, *rule.allowlists)
            checks = secret_rules._Checks(allowlists, possible)
            for match in rule.regex.finditer(text):
                secret = match.group(secret_rules._secret_group(rule, match))
                expected = _plainly_allowed(allowlists, text, match, secret)
                assert checks.allows(secret, text, match.start(), match.end()) == expected, (rule.id, text)
                allowed, kept = allowed + expected, kept + (not expected)
    assert allowed > 2_000 and kept > 2_000, (allowed, kept)


def test_allowlist_regexes_searched_as_one_alternation_find_what_each_search_finds() -> None:
    # _any_search: the regexes on a secret as one alternation (a leading (?i) made a group),
    # or each in turn where they cannot be one: the same answer as any of their searches.
    import random

    rule_set = secret_rules.load()
    patterns = [p for a in (rule_set.allowlist, *(a for r in rule_set.rules for a in r.allowlists)) for p in a.regexes]
    patterns += [re.compile(r"x\d+y"), re.compile("Q", re.I | re.ASCII), secret_rules.compile_go(r"(?i)^k9")]
    pieces = sorted({w for p in patterns for w in re.findall(r"[A-Za-z_]{2,}", p.pattern)})
    pieces += list("$%@{}/=:._- \n\t\"'1xQqK9") + ["${{", "{{", "}}", "/Users/", "/usr/", "x12y", "\u212a", "é"]
    rng, matched = random.Random(44), 0
    for _ in range(4_000):
        group = tuple(rng.sample(patterns, rng.randint(1, 6)))
        search = go_regex.any_search(group)
        assert search is not None
        for _ in range(5):
            text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 6)))
            text = rng.choice([text, text.upper(), text.lower()])
            expected = any(p.search(text) for p in group)
            assert bool(search(text)) == expected, ([p.pattern for p in group], text)
            matched += expected
    assert matched > 800


def test_entropy_told_by_distinct_characters_is_what_the_sum_says() -> None:
    # _random_enough decides most secrets by how many of their characters differ: the same answer
    # as the entropy's float against every threshold of the rule set and ones the bounds reach
    # exactly (log2 of a count: "abcd" * 4 has an entropy of exactly 2.0).
    import math
    import random

    thresholds = sorted({rule.entropy for rule in secret_rules.load().rules if rule.entropy} | {1.5, 2.0, 3.0, 4.0})
    thresholds += [math.log2(d) for d in range(2, 40)] + [3.7004397181410926, 3.5 + 1e-12, 3.5 - 1e-12]
    rng, told = random.Random(45), {True: 0, False: 0}
    alphabets = [
        "ab",
        "abcd",
        "abcdefgh",
        string_letters := "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
    ]
    for _ in range(20_000):
        length = rng.choice([0, 1, 2, 3, 8, 12, 16, 17, 20, 32, 64, 150, 1_024, 1_025])
        alphabet = rng.choice(alphabets)[: rng.randint(1, len(string_letters))]
        text = "".join(rng.choice(alphabet) for _ in range(length))
        if rng.random() < 0.1 and length:
            text = (alphabet * length)[:length]  # evenly spread: an entropy of log2 of a count
        threshold = rng.choice(thresholds)
        expected = secret_rules.shannon_entropy(text) > threshold
        assert secret_rules._random_enough(text, threshold) == expected, (text, threshold)
        told[expected] += 1
    assert min(told.values()) > 2_000, told


@pytest.mark.parametrize(
    "text", ["key ey -ey _ey 9ey", "eyey eyeyey", "aaaa a-a-a-a", "", "ey", "é-ey\ney", "sk-sk-sk"]
)
def test_keyword_places_after_no_word_character_are_where_a_boundary_stands(text: str) -> None:
    for keyword in ["ey", "eyey", "a", "aa", "a-a", "sk-", "sk-sk", "zz", "ey-"]:
        boundary = re.compile(r"\b", re.ASCII)
        expected = [place for place in secret_rules._places(text, keyword) if boundary.match(text, place)]
        assert secret_rules._after_no_word(text, secret_rules._places(text, keyword)) == expected, keyword


def test_rules_starting_at_a_boundary_tried_only_after_no_word_character_find_what_every_try_finds() -> None:
    # A rule whose matches start with \b (jwt, 60 others) is not tried where its keyword follows
    # a word character (Rule.bounded): the same findings as trying every place, on mixes of
    # those rules' keywords and values after word characters, separators and line starts.
    import dataclasses
    import random

    rule_set = secret_rules.load()
    bounded = tuple(rule for rule in rule_set.rules if rule.bounded)
    assert len(bounded) > 50 and any(rule.id == "jwt" for rule in bounded)
    every_place = dataclasses.replace(rule_set, rules=tuple(dataclasses.replace(r, bounded=False) for r in bounded))
    only_bounded = dataclasses.replace(rule_set, rules=bounded)
    keywords = sorted({keyword for rule in bounded for keyword in rule.keywords})
    token = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    rng, found = random.Random(46), 0
    for _ in range(3_000):
        pieces = []
        for _ in range(rng.randint(1, 12)):
            keyword = rng.choice(keywords)
            keyword = rng.choice([keyword, keyword.upper(), keyword.capitalize()])
            value = "".join(rng.choice(token) for _ in range(rng.choice([20, 40, 64, 80])))
            pieces.append(rng.choice(["", " ", "k", "_", "-", "\n", "é", "9", "ey", "."]) + keyword + value)
            if keyword.lower() == "ey":  # a JWT: three parts
                pieces[-1] += ".ey" + value + "." + value[:12]
        text = "".join(pieces)
        expected = sorted(secret_rules.find(text, every_place))
        assert sorted(secret_rules.find(text, only_bounded)) == expected, text
        found += len(expected)
    assert found > 100, found


# -- real-shaped tokens of every rule ------------------------------------------------------------

_TOKEN_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _class_choices(av) -> list[str]:  # noqa: ANN001 (a parse tree: no public type)
    """The characters a class (``IN``) takes, of the printable ASCII ones."""
    negate = any(kind is sre.NEGATE for kind, _ in av)
    categories = {
        sre.CATEGORY_DIGIT: str.isdigit,
        sre.CATEGORY_WORD: lambda c: c.isalnum() or c == "_",
        sre.CATEGORY_SPACE: str.isspace,
        sre.CATEGORY_NOT_SPACE: lambda c: not c.isspace(),
        sre.CATEGORY_NOT_WORD: lambda c: not (c.isalnum() or c == "_"),
        sre.CATEGORY_NOT_DIGIT: lambda c: not c.isdigit(),
    }

    def inside(char: str) -> bool:
        for kind, value in av:
            if (kind is sre.LITERAL and ord(char) == value) or (
                kind is sre.RANGE and value[0] <= ord(char) <= value[1]
            ):
                return True
            if kind is sre.CATEGORY and categories[value](char):
                return True
        return False

    printable = [chr(c) for c in range(32, 127)] + ["\t"]
    return [char for char in printable if inside(char) != negate]


def _generated(items, rng, case_insensitive: bool) -> str:  # noqa: ANN001, C901
    """A string the pattern ``items`` matches, its free characters drawn at random (mostly letters and
    digits, as a real token's are), repeats a few past their least."""
    out: list[str] = []
    for op, av in items:
        if op is sre.LITERAL:
            out.append(chr(av))
        elif op is sre.NOT_LITERAL:
            out.append(rng.choice([c for c in _TOKEN_CHARS if ord(c) != av]))
        elif op is sre.ANY:
            out.append(rng.choice(_TOKEN_CHARS))
        elif op is sre.IN:
            choices = _class_choices(av)
            tokenish = [c for c in choices if c in _TOKEN_CHARS]
            out.append(rng.choice(tokenish if tokenish and rng.random() < 0.9 else choices))
        elif op is sre.AT:
            continue
        elif op is sre.SUBPATTERN:
            out.append(_generated(av[3], rng, case_insensitive))
        elif op is sre.BRANCH:
            out.append(_generated(rng.choice(av[1]), rng, case_insensitive))
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
            low, high, inner = av
            high = low + 8 if high is sre.MAXREPEAT else high
            count = rng.randint(low, min(high, max(low + 12, 2 * low)))
            out.extend(_generated(inner, rng, case_insensitive) for _ in range(count))
        else:
            raise NotImplementedError(op)
    return "".join(out)


def _rule_samples(rule: secret_rules.Rule, count: int, seed: int) -> list[str]:
    """Up to ``count`` distinct whole matches of the rule's regex, real-shaped (random characters)."""
    import random

    rng = random.Random(seed)
    tree = sre_parse.parse(rule.regex.pattern, rule.regex.flags)
    samples: list[str] = []
    for _ in range(count * 4):
        sample = _generated(tree, rng, bool(rule.regex.flags & re.IGNORECASE)).rstrip("\n")
        # Longer than WINDOW, a token is found only as far as it reaches (the module's docstring).
        if len(sample) < secret_rules.WINDOW and rule.regex.search(sample) and sample not in samples:
            samples.append(sample)
        if len(samples) == count:
            break
    return samples


def _plain_find(text: str, rule_set: secret_rules.RuleSet) -> list[tuple[int, int, str]]:
    """The findings of gitleaks' plain form: a rule runs where one of its keywords occurs anywhere
    in the text, its regex searched over the whole text (no keyword places or windows, no anchored
    tries, no assignment reach, no boundary skips)."""
    import dataclasses

    lowered = text.lower()
    found: list[tuple[int, int, str]] = []
    for rule in rule_set.rules:
        if rule.keywords and not any(keyword in lowered for keyword in rule.keywords):
            continue
        plain = dataclasses.replace(rule, keywords=(), anchored=False, bounded=False, reach=0, head=None, tail=None)
        found += secret_rules.find(text, dataclasses.replace(rule_set, rules=(plain,)))
    return sorted(found)


def test_real_shaped_tokens_of_every_rule_are_found_as_the_plain_form_finds_them() -> None:
    # For each rule, whole matches drawn from its own regex (gitleaks' config holds no example
    # secrets), and each match's secret alone: on a line of their own, after an assignment, in
    # quotes. The fast engine (keyword places, anchored tries, assignment reach) must report what
    # searching every rule over the whole text reports.
    rule_set = secret_rules.load()
    tried, found, unsampled = 0, 0, []
    for number, rule in enumerate(rule_set.rules):
        samples = _rule_samples(rule, 6, seed=number)
        unsampled += [] if samples else [rule.id]
        for sample in samples:
            match = rule.regex.search(sample)
            assert match is not None
            groups = [g for g in range(1, rule.regex.groups + 1) if match.group(g)]
            secret = match.group(rule.secret_group or (groups[0] if groups else 0))
            for shown in {sample, secret}:
                for text in (f"notes\n{shown}\nmore", shown, f"token = {shown}", f'export X="{shown}"'):
                    expected = _plain_find(text, rule_set)
                    assert sorted(secret_rules.find(text, rule_set)) == expected, (rule.id, text)
                    tried += 1
                    found += bool(expected)
    # A Kubernetes secret's YAML runs longer than WINDOW: no sample of it fits.
    assert unsampled == ["kubernetes-secret-yaml"]
    assert tried > 3_000 and found > tried // 3, (tried, found)


def test_a_bare_atlassian_token_alone_on_a_line_is_found() -> None:
    # An Atlassian API token as Atlassian shows it, alone on a line: no assignment near "atatt3".
    token = "ATATT3xFfGF0" + "aB3dE5gH7jK9mN1pQ3rS5tU7vW9xY1zA2cD4eF6gH8iJ0kL2mN4oP6qR8sT0uV2wX4yZ6" * 3
    token = token[:192]
    text = f"here it is:\n{token}\nthanks"
    assert [(text[s:e], rule) for s, e, rule in secret_rules.find(text)] == [(token, "atlassian-api-token")]
