"""gitleaks' default rule set, run with RE2 (SECURITY.md, "Secrets").

``imprintd/data/gitleaks.toml`` is gitleaks' own ``config/gitleaks.toml``, unchanged, from
release v8.30.1 (commit 83d9cd684c87d95d656c1458ef04895a7f1cbd8e; MIT licence, in
``imprintd/data/gitleaks.LICENSE``). To update it, copy the file of a newer release over it
and set ``SHA256`` (a test checks the file against it and that every rule still compiles).

gitleaks writes its regexes for Go's RE2; ``google-re2`` runs them as written, in time linear
in the text whatever it holds (RE2 never backtracks). ``find(text)`` reports the span of each
secret gitleaks would report, by its rules:

- a rule runs only when one of its ``keywords`` occurs in the text (lower-cased), and only when
  the rule set's ``re2.Set`` (every rule's regex, one scan of the text) says it matches
  somewhere; it is then searched over the whole text, as gitleaks searches a fragment;
- the secret is the rule's ``secretGroup``, else its first non-empty group, else the match;
- it is dropped when its Shannon entropy is at most the rule's ``entropy``, or when the
  global or the rule's allowlists allow it (regexes on the secret, the match or the line;
  stopwords in the secret; ``condition = "AND"``), as gitleaks does. The line of a match is
  read at most ``WINDOW`` characters each side of it.

A text is read one byte a character (RE2's Latin-1 mode; a character past U+00FF is read as
``\\x80``, which no rule names), so a match's offsets are the text's own, and ``\\w``, ``\\s``,
``\\b`` and case folding are ASCII's, as in RE2's reading of gitleaks' ASCII patterns.

One departure: 150 provider rules end a token only at a quote, white space, ``;`` or the
end (their ``(?:[\\x60'"\\s;]|\\\\[nr]|$)``), so a token at the end of a sentence ("log in with
hf_….") or in brackets went unseen; here ``.``, ``,``, ``:``, ``!``, ``?`` and closing
brackets end one too (``_END_OF_TOKEN``). The generic rule keeps gitleaks' ending: its value
may itself hold dots.

Not taken over: rules with only a ``path`` (they name files, not text), path and commit
allowlists (the summarizer reads messages, not files), gitleaks' base64 and percent decoding
passes, and the ``gitleaks:allow`` comment.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import re2

VERSION = "v8.30.1"
COMMIT = "83d9cd684c87d95d656c1458ef04895a7f1cbd8e"
SHA256 = "e163e53b9e7e8a8511e77271e2b323ed057759542a6d988258afe3a1fa329caf"

#: Characters of a match's line read on each side of it by allowlists on the line; also the
#: length no secret the rules find in a message is expected to exceed (``redact.EXCERPT_MARGIN``).
WINDOW = 400

_DATA = Path(__file__).parent / "data" / "gitleaks.toml"

#: How gitleaks' provider rules end a token, and the ending used here (see the docstring).
_GITLEAKS_END_OF_TOKEN = r"""(?:[\x60'"\s;]|\\[nr]|$)"""
_END_OF_TOKEN = r"""(?:[\x60'"\s;.,:!?)\]}>]|\\[nr]|$)"""


def _options() -> re2.Options:
    options = re2.Options()
    options.encoding = re2.Options.Encoding.LATIN1
    # The rule set's Set holds 221 regexes: room for its DFA on text dense in their keywords.
    options.max_mem = 64 << 20
    options.log_errors = False
    return options


_OPTIONS = _options()
#: Every character past Latin-1, to be read as one byte that no rule names.
_PAST_LATIN1 = re.compile("[^\x00-\xff]")


def encoded(text: str) -> bytes:
    """``text`` as the rules read it: a byte a character (see the module's docstring)."""
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return _PAST_LATIN1.sub("\x80", text).encode("latin-1")


def compile_go(pattern: str) -> re2._Regexp:
    """A gitleaks (Go RE2) regex, compiled as written, to search ``encoded`` texts."""
    return re2.compile(pattern.encode("latin-1"), _OPTIONS)


def _any_of(patterns: tuple[str, ...] | list[str]) -> re2._Regexp | None:
    """One regex matching where any of ``patterns`` matches (each a group: its flags stay its own)."""
    return compile_go("|".join(f"(?:{pattern})" for pattern in patterns)) if patterns else None


@dataclass(frozen=True)
class Allowlist:
    regexes: tuple[str, ...] = ()
    stopwords: tuple[str, ...] = ()
    target: str = "secret"  # or "match", "line"
    all_of: bool = False  # condition = "AND"

    def allows(self, secret: str, match: bytes, line: bytes) -> bool:
        """Whether the allowlist allows a finding: ``secret`` as found, ``match`` and ``line`` encoded."""
        target = match if self.target == "match" else line if self.target == "line" else encoded(secret)
        by_regex = bool(target) and self._regex is not None and self._regex.search(target) is not None
        by_stopword = bool(secret) and self._stopword is not None and self._stopword.search(encoded(secret.lower()))
        if self.all_of:
            checks = ([by_regex] if self.regexes else []) + ([bool(by_stopword)] if self.stopwords else [])
            return bool(checks) and all(checks)
        return by_regex or bool(by_stopword)

    @functools.cached_property
    def _regex(self) -> re2._Regexp | None:
        return _any_of(self.regexes)

    @functools.cached_property
    def _stopword(self) -> re2._Regexp | None:
        words = [re.escape(word) for word in self.stopwords if word]
        if len(words) < len(self.stopwords):
            return compile_go("")  # an empty stopword is in every secret
        return _any_of(words)


@dataclass(frozen=True)
class Rule:
    id: str
    regex: re2._Regexp
    keywords: tuple[str, ...]
    entropy: float = 0.0
    secret_group: int = 0
    allowlists: tuple[Allowlist, ...] = field(default=())


@dataclass(frozen=True)
class RuleSet:
    rules: tuple[Rule, ...]
    allowlist: Allowlist
    #: Rules whose regex RE2 would not compile: (id, why). Empty for v8.30.1.
    untranslated: tuple[tuple[str, str], ...]

    @functools.cached_property
    def _keywords(self) -> tuple[str, ...]:
        return tuple(sorted({keyword for rule in self.rules for keyword in rule.keywords}))

    @functools.cached_property
    def _set(self) -> re2.Set:
        """Every keyword (ASCII case folded), then a regex that matches every text: RE2 answers
        a Set whose DFA ran out of memory with no match at all, which that one tells apart.

        The rules' own regexes are not in it: on text of random token characters (what a
        secret is made of) the DFA of 221 counted repetitions at once is rebuilt at every few
        characters, some 0.3 s a kilobyte."""
        found = re2.Set.SearchSet(_OPTIONS)
        for keyword in self._keywords:
            found.Add(b"(?i)" + re.escape(keyword).encode("latin-1"))
        found.Add(b"")
        found.Compile()
        return found

    def to_run(self, data: bytes) -> list[Rule]:
        """The rules with no keywords or one of whose keywords occurs in ``data``: one scan of
        the text by the Set, or, should the Set fail, a search for each keyword."""
        found = set(self._set.Match(data) or ())
        if len(self._keywords) in found:
            present = {self._keywords[index] for index in found if index < len(self._keywords)}
        else:
            lowered = data.lower()  # ASCII case only: keywords are ASCII
            present = {keyword for keyword in self._keywords if keyword.encode("latin-1") in lowered}
        return [rule for rule in self.rules if not rule.keywords or not present.isdisjoint(rule.keywords)]

    @functools.cached_property
    def _checks(self) -> dict[str, _Checks]:
        return {rule.id: _Checks((self.allowlist, *rule.allowlists)) for rule in self.rules}


class _Checks:
    """A rule's allowlists and the global one, as few searches: the regexes on each target of
    all of them one alternation, their stopwords another (an ``AND`` of regexes alone, or of
    stopwords alone, is their ``OR``); an ``AND`` of both is asked as itself."""

    def __init__(self, allowlists: tuple[Allowlist, ...]) -> None:
        self.general = tuple(a for a in allowlists if a.all_of and a.regexes and a.stopwords)
        either = [a for a in allowlists if a not in self.general]
        on = {target: _any_of([p for a in either if a.target == target for p in a.regexes]) for target in _TARGETS}
        self.on_secret, self.on_match, self.on_line = on["secret"], on["match"], on["line"]
        self.stopwords = Allowlist(stopwords=tuple(w for a in either for w in a.stopwords))._stopword

    def allows(self, secret: str, data: bytes, secret_span: tuple[int, int], match_span: tuple[int, int]) -> bool:
        if secret and self.on_secret is not None and self.on_secret.search(data[slice(*secret_span)]) is not None:
            return True
        if secret and self.stopwords is not None and self.stopwords.search(encoded(secret.lower())) is not None:
            return True
        matched = data[slice(*match_span)].strip(b"\n")
        if matched and self.on_match is not None and self.on_match.search(matched) is not None:
            return True
        if self.on_line is None and not self.general:
            return False
        line = data[slice(*_line(data, *match_span))]
        if line and self.on_line is not None and self.on_line.search(line) is not None:
            return True
        return any(a.allows(secret, matched, line) for a in self.general)


_TARGETS = ("secret", "match", "line")


def _allowlist(spec: dict) -> Allowlist:
    return Allowlist(
        regexes=tuple(spec.get("regexes", ())),
        stopwords=tuple(word.lower() for word in spec.get("stopwords", ())),
        target=spec.get("regexTarget", "secret"),
        all_of=spec.get("condition", "OR").upper() == "AND",
    )


@functools.cache
def load() -> RuleSet:
    """The vendored rule set, compiled once."""
    config = tomllib.loads(_DATA.read_bytes().decode("utf-8"))
    rules, untranslated = [], []
    for spec in config["rules"]:
        if "regex" not in spec:
            continue  # a path-only rule
        pattern = spec["regex"]
        if not spec["id"].startswith("generic"):
            pattern = pattern.replace(_GITLEAKS_END_OF_TOKEN, _END_OF_TOKEN)
        try:
            allowlists = tuple(_allowlist(a) for a in spec.get("allowlists", ()) if not _only_paths(a))
            for allowlist in allowlists:
                _ = allowlist._regex, allowlist._stopword  # compiled now: a bad one is reported here
            rules.append(
                Rule(
                    id=spec["id"],
                    regex=compile_go(pattern),
                    keywords=tuple(word.lower() for word in spec.get("keywords", ())),
                    entropy=float(spec.get("entropy", 0.0)),
                    secret_group=int(spec.get("secretGroup", 0)),
                    allowlists=allowlists,
                )
            )
        except re2.error as error:
            untranslated.append((spec["id"], str(error)))
    return RuleSet(tuple(rules), _allowlist(config.get("allowlist", {})), tuple(untranslated))


def _only_paths(spec: dict) -> bool:
    return not spec.get("regexes") and not spec.get("stopwords")


def digest() -> str:
    return hashlib.sha256(_DATA.read_bytes()).hexdigest()


# -- finding secrets --------------------------------------------------------------------------


def shannon_entropy(text: str) -> float:
    if not text:
        return 0.0
    total = len(text)
    # Each character counted in C, in the order Counter would hold them: the same float.
    return -sum(count / total * math.log2(count / total) for count in map(text.count, dict.fromkeys(text)))


def find(text: str, rule_set: RuleSet | None = None) -> Iterator[tuple[int, int, str]]:
    """``(start, end, rule id)`` of each secret the rules find in ``text``, in no set order."""
    rule_set = rule_set or load()
    data = encoded(text)
    for rule in rule_set.to_run(data):
        for match in rule.regex.finditer(data):
            found = _finding(rule, rule_set, text, data, match)
            if found is not None:
                yield found


def _finding(rule: Rule, rule_set: RuleSet, text: str, data: bytes, match: re2._Match) -> tuple[int, int, str] | None:
    """The secret of ``match``, unless it is not random enough or allowed."""
    start, end = match.span(_secret_group(rule, match))
    secret = text[start:end]
    if rule.entropy and shannon_entropy(secret) <= rule.entropy:
        return None
    if rule_set._checks[rule.id].allows(secret, data, (start, end), match.span()):
        return None
    return start, end, rule.id


def _line(data: bytes, match_start: int, match_end: int) -> tuple[int, int]:
    """Where the line of a match starts and ends, as far as WINDOW on each side: allowlists on
    a megabyte line are not read whole for each of its matches (that is quadratic)."""
    line_start = data.rfind(b"\n", max(0, match_start - WINDOW), match_start) + 1 or max(0, match_start - WINDOW)
    line_end = data.find(b"\n", match_end, match_end + WINDOW)
    return line_start, min(len(data), match_end + WINDOW) if line_end == -1 else line_end


def _secret_group(rule: Rule, match: re2._Match) -> int:
    groups = rule.regex.groups
    if rule.secret_group and rule.secret_group <= groups:
        return rule.secret_group
    for index in range(1, groups + 1):
        if match.group(index):
            return index
    return 0
