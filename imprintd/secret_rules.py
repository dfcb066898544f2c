"""gitleaks' default rule set, read for Python's ``re`` (SECURITY.md, "Secrets").

``imprintd/data/gitleaks.toml`` is gitleaks' own ``config/gitleaks.toml``, unchanged, from
release v8.30.1 (commit 83d9cd684c87d95d656c1458ef04895a7f1cbd8e; MIT licence, in
``imprintd/data/gitleaks.LICENSE``). To update it, copy the file of a newer release over it
and set ``SHA256`` (a test checks the file against it and that every rule still compiles).

``find(text)`` reports the span of each secret gitleaks would report, by its rules:

- a rule runs only where one of its ``keywords`` occurs in the text (lower-cased), so that
  cost stays linear whatever the density of keywords (SECURITY.md states the figures):
  gitleaks' lazy ``[\\w.-]{0,50}?`` lead before a keyword is taken off (``_without_lead``:
  the same secrets, and no longer 50 tries at every character); a rule whose every match
  starts with a keyword (199 of 221, read from its parse tree) is tried once per occurrence,
  anchored, reading at most ``WINDOW`` characters, and not at all when gitleaks' assignment
  follows its keyword and no operator stands within reach, or when the match must start at a
  ``\b`` and a word character stands before the keyword (``Rule.bounded``); the two ``curl`` rules (of those
  199), whose matches may run five lines on, are tried once a line (a failed try rules out
  the later ``curl`` of its line) and read as far as they reach, their lines read one way
  (``_over_lines_one_way``: gitleaks' form let a CR be read two ways); the rest are searched
  within ``WINDOW`` of each occurrence (the keyword lies inside the match, and no match is
  longer); allowlists on the line read at most ``WINDOW`` characters each side of the match;
- the secret is the rule's ``secretGroup``, else its first non-empty group, else the match;
- it is dropped when its Shannon entropy is at most the rule's ``entropy``, or when the
  global or the rule's allowlists allow it (regexes on the secret, the match or the line;
  stopwords in the secret; ``condition = "AND"``), as gitleaks does; for one text these are few
  searches a finding (``_Checks``), and the entropy is mostly told by how many of the secret's
  characters differ (``_random_enough``).

One departure: 150 provider rules end a token only at a quote, white space, ``;`` or the
end (their ``(?:[\\x60'"\\s;]|\\\\[nr]|$)``), so a token at the end of a sentence ("log in with
hf_….") or in brackets went unseen; here ``.``, ``,``, ``:``, ``!``, ``?`` and closing
brackets end one too (``_END_OF_TOKEN``). The generic rule keeps gitleaks' ending: its value
may itself hold dots.

Not taken over: rules with only a ``path`` (they name files, not text), path and commit
allowlists (the summarizer reads messages, not files), gitleaks' base64 and percent decoding
passes, and the ``gitleaks:allow`` comment. gitleaks writes Go (RE2) regexes;
``imprintd.go_regex`` compiles them for Python's ``re`` and reads their parse trees, and every
rule compiles (``RuleSet.untranslated`` lists any that would not, and why). RE2 never
backtracks; Python's ``re`` may, so the windows above also bound how much text one search can
walk (docs/decisions.md says why the rules do not run on RE2 itself).
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import heapq
import math
import re
import re._parser as sre_parse  # noqa: PLC2701 (the parse tree of a rule's head, to know its length)
import string
import tomllib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from imprintd import go_regex
from imprintd.go_regex import compile_go

VERSION = "v8.30.1"
COMMIT = "83d9cd684c87d95d656c1458ef04895a7f1cbd8e"
SHA256 = "e163e53b9e7e8a8511e77271e2b323ed057759542a6d988258afe3a1fa329caf"

#: Characters searched on each side of a keyword. gitleaks' longest matches (the generic
#: rule: a 50-character name, 20 of padding, a 150-character value) stay within it; a longer
#: token would only be found as far as it reaches.
WINDOW = 400

_DATA = Path(__file__).parent / "data" / "gitleaks.toml"


@dataclass(frozen=True)
class Allowlist:
    regexes: tuple[re.Pattern[str], ...] = ()
    stopwords: tuple[str, ...] = ()
    target: str = "secret"  # or "match", "line"
    all_of: bool = False  # condition = "AND"

    def allows(self, secret: str, match: str, line: str, possible: _Possible | None = None) -> bool:
        """Whether the allowlist allows the secret; ``possible`` knows which of its regexes the
        text they were all taken from could hold a match of (the others are not searched)."""
        target = match if self.target == "match" else line if self.target == "line" else secret
        searches = self._searches if possible is None else possible.searches(self)
        by_regex = bool(target) and any(found(target) for found in searches)
        by_stopword = bool(secret) and bool(self.stopwords) and self._holds_stopword(secret.lower())
        if self.all_of:
            checks = ([by_regex] if self.regexes else []) + ([by_stopword] if self.stopwords else [])
            return bool(checks) and all(checks)
        return by_regex or by_stopword

    @functools.cached_property
    def _searches(self) -> tuple[Callable[[str], bool], ...]:
        return tuple(go_regex.search_where_it_may_start(pattern) for pattern in self.regexes)

    @functools.cached_property
    def _stopword_pattern(self) -> re.Pattern[str]:
        return re.compile(go_regex.trie_pattern(self.stopwords))

    def _holds_stopword(self, lowered: str) -> bool:
        """Whether a stopword occurs in ``lowered``: one search in C of the stopwords as a trie
        (the generic rule has 1,500 stopwords: looking up each piece of the secret of each of
        their lengths was most of the cost of a finding)."""
        return self._stopword_pattern.search(lowered) is not None


@dataclass(frozen=True)
class Rule:
    id: str
    regex: re.Pattern[str]
    keywords: tuple[str, ...]
    entropy: float = 0.0
    secret_group: int = 0
    allowlists: tuple[Allowlist, ...] = field(default=())
    #: The longest lead (``[\w.-]{0,n}?``) gitleaks puts before the keyword, taken off ``regex``.
    lead: int = 0
    #: Every match of ``regex`` starts with one of ``keywords``: it is tried only where one stands.
    anchored: bool = False
    #: An anchored rule whose matches start at a word boundary (``\b``) and whose keywords start
    #: with a word character: it is tried only where its keyword follows no word character.
    bounded: bool = False
    #: An anchored rule whose keyword gitleaks' assignment (``_ASSIGNMENT``) follows: its
    #: operator stands within this many characters of the keyword's start (0: no such rule).
    reach: int = 0
    #: The part of ``regex`` before "anything, over up to five lines" (``_ANY_LINES``), when
    #: it has one: a match from a later keyword on the same line is then one from this one.
    head: re.Pattern[str] | None = None
    #: The part of ``regex`` after that "anything": every match ends with one of its matches, no
    #: more than ``_LINE_BREAKS_READ`` line breaks past the keyword.
    tail: re.Pattern[str] | None = None


@dataclass(frozen=True)
class RuleSet:
    rules: tuple[Rule, ...]
    allowlist: Allowlist
    #: Rules that could not be read for Python's ``re``: (id, why). Empty for v8.30.1.
    untranslated: tuple[tuple[str, str], ...]


# -- reading the rule set ----------------------------------------------------------------------

#: How gitleaks' provider rules end a token, and the ending used here (see the docstring).
_GITLEAKS_END_OF_TOKEN = r"""(?:[\x60'"\s;]|\\[nr]|$)"""
_END_OF_TOKEN = r"""(?:[\x60'"\s;.,:!?)\]}>]|\\[nr]|$)"""
#: gitleaks' lazy lead before a rule's keyword, and a character it may take.
_LEAD = re.compile(r"^(\(\?i\)|\(\?i:)?\[\\w\.-\]\{0,(\d+)\}\?(?!\\b|\(\?<)")
_LEAD_CHARS = frozenset(string.ascii_letters + string.digits + "_.-")


def _allowlist(spec: dict) -> Allowlist:
    return Allowlist(
        regexes=tuple(compile_go(p) for p in spec.get("regexes", ())),
        stopwords=tuple(word.lower() for word in spec.get("stopwords", ())),
        target=spec.get("regexTarget", "secret"),
        all_of=spec.get("condition", "OR").upper() == "AND",
    )


@functools.cache
def load() -> RuleSet:
    """The vendored rule set, compiled once."""
    data = _DATA.read_bytes()
    config = tomllib.loads(data.decode("utf-8"))
    rules, untranslated = [], []
    for spec in config["rules"]:
        if "regex" not in spec:
            continue  # a path-only rule
        pattern = spec["regex"]
        if not spec["id"].startswith("generic"):
            pattern = pattern.replace(_GITLEAKS_END_OF_TOKEN, _END_OF_TOKEN)
        try:
            regex, lead = _without_lead(compile_go(pattern))
            regex, head, tail = _over_lines_one_way(regex)
            keywords = tuple(word.lower() for word in spec.get("keywords", ()))
            anchored = go_regex.starts_with_one_of(regex, keywords)
            rules.append(
                Rule(
                    id=spec["id"],
                    regex=regex,
                    lead=lead,
                    anchored=anchored,
                    bounded=anchored and go_regex.starts_at_boundary(regex, keywords),
                    reach=_assignment_reach(regex),
                    head=head,
                    tail=tail,
                    keywords=keywords,
                    entropy=float(spec.get("entropy", 0.0)),
                    secret_group=int(spec.get("secretGroup", 0)),
                    allowlists=tuple(_allowlist(a) for a in spec.get("allowlists", ()) if not _only_paths(a)),
                )
            )
        except re.error as error:
            untranslated.append((spec["id"], str(error)))
    return RuleSet(tuple(rules), _allowlist(config.get("allowlist", {})), tuple(untranslated))


def _without_lead(regex: re.Pattern[str]) -> tuple[re.Pattern[str], int]:
    """``regex`` without gitleaks' lazy ``[\\w.-]{0,50}?`` lead, and the lead's length (0: none).

    Searched with the lead, a regex tries up to 50 places for its keyword at every character:
    on text dense in keywords that is most of redaction's time. Without it the search starts
    at the keyword (a first-character skip in C), and finds the same secrets: the lazy lead
    takes nothing a later part needs, so a match with it holds the same keyword and groups.
    The lead is put back into the matched text by ``_lead_start``, for allowlists on the match.
    """
    pattern, lead = regex.pattern, 0
    # Some rules repeat it inside a flag group ("[\\w.-]{0,50}?(?i:[\\w.-]{0,50}?…"): one lead of both.
    while (found := _LEAD.match(pattern)) is not None:
        pattern, lead = (found.group(1) or "") + pattern[found.end() :], lead + int(found.group(2))
    return (re.compile(pattern, regex.flags), lead) if lead else (regex, 0)


#: What follows the keyword in most of gitleaks' rules: a few name characters, then an
#: assignment operator, one of whose characters ``_OPERATOR`` finds.
_ASSIGNMENT = r"""(?:[ \t\w.-]{0,20})[\s'"]{0,3}(?:=|>|:{1,3}=|\|\||:|=>|\?=|,)"""
_ASSIGNMENT_CHARS = 20 + 3 + 1
_OPERATOR = re.compile(r"[=>:|?,]")


#: "Anything, then up to five more lines of anything" after a word, as the curl rules have it
#: (greedy or lazy): the costliest tries, each reading its whole window.
_ANY_LINES = re.compile(r"(\\b\w+\\b)\(\?:\.\*(\??)\|\.\*\2\(\?:\[\\r\\n\]\{1,2\}\.\*\2\)\{1,5\}\)")
#: The same lines read one way: "." takes every CR, a line break is one LF or two.
_LINES_ONE_WAY = r"(?:.*{lazy}|.*{lazy}(?:\n\n?.*{lazy}){{1,5}})"


def _over_lines_one_way(
    regex: re.Pattern[str],
) -> tuple[re.Pattern[str], re.Pattern[str] | None, re.Pattern[str] | None]:
    """``regex`` with its "anything over up to five lines" read one way, and the parts before
    and after it (``Rule.head``, ``Rule.tail``); ``regex`` and None twice when it has no such part.

    gitleaks' ``(?:.*|.*(?:[\r\n]{1,2}.*){1,5})`` lets both ``.`` and ``[\r\n]`` take a CR, so
    a try over n CRs walks on the order of n**5 ways to split them before it fails: "curl" and
    40 CRs took 4 s, 80 took hours (RE2 never backtracks; Python's ``re`` does). Rewritten, the
    same strings match (a break of one or two characters holding a LF is a LF or two, its CRs
    taken by ``.``), and each end of the part is reached in at most 2**5 ways. A try finds
    the same match as before, except that of two flags on later lines the lazy ``-H`` rule may
    now report the earlier where a CR made gitleaks' order report the later (both are found).
    """
    found = _ANY_LINES.match(regex.pattern)
    if found is None:
        return regex, None, None
    tail = regex.pattern[found.end() :]
    one_way = found.group(1) + _LINES_ONE_WAY.format(lazy=found.group(2)) + tail
    return re.compile(one_way, regex.flags), re.compile(found.group(1), regex.flags), re.compile(tail, regex.flags)


#: The most line breaks (LF characters) between a keyword and the tail of a match from it: five
#: breaks of one or two LFs, and the tail's own first character.
_LINE_BREAKS_READ = 11


def _assignment_reach(regex: re.Pattern[str]) -> int:
    """How far from a match's start its assignment operator stands, when the rule is a few
    literal heads (its keywords) and then ``_ASSIGNMENT``; 0 otherwise."""
    pattern = regex.pattern.removeprefix("(?i)").removeprefix("(?i:")
    if pattern.count(_ASSIGNMENT) != 1 or go_regex.has_top_level_choice(pattern):
        # A choice at the top ("name = value|ATATT3…"): a match of another choice needs no
        # assignment, and the rule must be tried at every keyword.
        return 0
    try:
        head = sre_parse.parse(pattern[: pattern.index(_ASSIGNMENT)], regex.flags)
    except re.error:
        return 0
    heads, whole = go_regex.starts_of(head)
    return max(len(each) for each in heads) + _ASSIGNMENT_CHARS if whole and heads else 0


def _lead_start(rule: Rule, text: str, start: int, floor: int) -> int:
    """Where the match starting at ``start`` would start with its lead: as far back as the lead
    may reach over its characters, not before ``floor`` (the search's start or the last match's end)."""
    reach = max(floor, start - rule.lead)
    while start > reach and text[start - 1] in _LEAD_CHARS:
        start -= 1
    return start


def _only_paths(spec: dict) -> bool:
    return not spec.get("regexes") and not spec.get("stopwords")


def digest() -> str:
    return hashlib.sha256(_DATA.read_bytes()).hexdigest()


# -- finding secrets --------------------------------------------------------------------------


def shannon_entropy(text: str) -> float:
    if not text:
        return 0.0
    total = len(text)
    if total > _REMEMBERED_TERMS:
        return -sum(count / total * math.log2(count / total) for count in Counter(text).values())
    # The same terms summed in the same order (the same float to the last bit), looked up; each
    # character counted in C in the order Counter would hold it (first occurrences), for a
    # short secret cheaper than building a Counter.
    return -sum(map(_entropy_terms(total).__getitem__, map(text.count, dict.fromkeys(text))))


#: Texts up to this long have their entropy's terms looked up (``_entropy_terms``).
_REMEMBERED_TERMS = 1_024


@functools.lru_cache(maxsize=256)
def _entropy_terms(total: int) -> tuple[float, ...]:
    """For each count, its term of the entropy of a text of ``total`` characters."""
    return (0.0, *(count / total * math.log2(count / total) for count in range(1, total + 1)))


def _random_enough(secret: str, threshold: float) -> bool:
    """``shannon_entropy(secret) > threshold``, mostly told by how many characters of the secret
    differ (a set in C): n characters, d of them distinct, have an entropy of at most log2(d) and
    at least that of one character n - d + 1 times and the others once."""
    total = len(secret)
    if total <= _REMEMBERED_TERMS:
        above, not_above = _distinct_bounds(total, threshold)
        distinct = len(set(secret))
        if distinct >= above:
            return True
        if distinct <= not_above:
            return False
    return shannon_entropy(secret) > threshold


#: How far from a threshold a bound must lie to tell the float summed: far more than its rounding.
_MARGIN = 1e-9


@functools.lru_cache(maxsize=1_024)
def _distinct_bounds(total: int, threshold: float) -> tuple[int, int]:
    """For a text of ``total`` characters: from how many distinct ones its entropy is surely above
    ``threshold``, and up to how many surely not."""

    def least(distinct: int) -> float:
        most = (total - distinct + 1) / total
        return -(most * math.log2(most) + (distinct - 1) / total * math.log2(1 / total))

    above = next((d for d in range(1, total + 1) if least(d) > threshold + _MARGIN), total + 1)
    not_above = max((d for d in range(1, total + 1) if math.log2(d) < threshold - _MARGIN), default=0)
    return above, not_above


def find(text: str, rule_set: RuleSet | None = None) -> Iterator[tuple[int, int, str]]:
    """``(start, end, rule id)`` of each secret the rules find in ``text``, in no set order."""
    rule_set = rule_set or load()
    lowered = text.translate(go_regex.ASCII_LOWER)  # keywords are ASCII; str.lower() may change lengths
    possible = _Possible(lowered)
    windows_by_keyword: dict[str, list[tuple[int, int]]] = {}
    places_by_keyword: dict[str, list[int]] = {}
    bounded_by_keyword: dict[str, list[int]] = {}
    for rule in rule_set.rules:
        if not rule.keywords:
            yield from _matches(rule, rule_set, text, 0, len(text), possible)
            continue
        if rule.anchored:
            for keyword in rule.keywords:
                if keyword not in places_by_keyword:
                    places_by_keyword[keyword] = _places(lowered, keyword)
                if rule.bounded and keyword not in bounded_by_keyword:
                    bounded_by_keyword[keyword] = _after_no_word(lowered, places_by_keyword[keyword])
            known = bounded_by_keyword if rule.bounded else places_by_keyword
            places = [known[keyword] for keyword in rule.keywords if known[keyword]]
            if places:
                yield from _anchored_matches(
                    rule, rule_set, text, places[0] if len(places) == 1 else heapq.merge(*places), possible
                )
            continue
        found = []
        for keyword in rule.keywords:
            if keyword not in windows_by_keyword:
                windows_by_keyword[keyword] = list(_windows(lowered, keyword))
            if windows_by_keyword[keyword]:
                found.append(windows_by_keyword[keyword])
        windows = found[0] if len(found) == 1 else _merged(w for each in found for w in each)
        for start, end in windows:
            yield from _matches(rule, rule_set, text, start, end, possible)


def _windows(lowered: str, keyword: str) -> Iterator[tuple[int, int]]:
    """The text around each occurrence of ``keyword``, occurrences closer than that merged.

    Each step jumps to the last occurrence within reach, so a text that is the keyword over
    and over costs a step per ``WINDOW`` characters, not one per occurrence.
    """
    size, reach = len(keyword), 2 * WINDOW + len(keyword)
    first = lowered.find(keyword)
    while first != -1:
        last = first
        while (nearer := lowered.rfind(keyword, last + 1, last + reach + size)) != -1:
            last = nearer
        yield max(0, first - WINDOW), min(len(lowered), last + size + WINDOW)
        first = lowered.find(keyword, last + 1)


def _places(lowered: str, keyword: str) -> list[int]:
    """Where ``keyword`` occurs, overlapping occurrences included."""
    # str.find's search is some times faster than re's for a literal, and a step per occurrence
    # costs less than a match object.
    places, find = [], lowered.find
    place = find(keyword)
    while place != -1:
        places.append(place)
        place = find(keyword, place + 1)
    return places


def _after_no_word(lowered: str, places: list[int]) -> list[int]:
    """Of ``places``, those after no word character (ASCII) or at the start: jwt's ``ey`` stands
    in every ``key``, where its ``\b`` fails (a try each cost as much as a finding; a look at
    the character before costs a tenth of a try)."""
    return [place for place in places if not place or lowered[place - 1] not in go_regex.WORD_CHARS]


def _merged(windows: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(windows):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _matches(
    rule: Rule, rule_set: RuleSet, text: str, start: int, end: int, possible: _Possible
) -> Iterator[tuple[int, int, str]]:
    floor = start
    for match in rule.regex.finditer(text, start, end):
        match_start, floor = _lead_start(rule, text, match.start(), floor) if rule.lead else match.start(), match.end()
        if match.end() == match_start:
            continue
        found = _finding(rule, rule_set, text, match, match_start, possible)
        if found is not None:
            yield found


def _finding(
    rule: Rule, rule_set: RuleSet, text: str, match: re.Match[str], match_start: int, possible: _Possible
) -> tuple[int, int, str] | None:
    """The secret of ``match`` (its matched text starting at ``match_start``), unless it is
    not random enough or allowed."""
    group = _secret_group(rule, match)
    secret = match.group(group)
    if rule.entropy and not _random_enough(secret, rule.entropy):
        return None
    if possible.checks(rule, rule_set).allows(secret, text, match_start, match.end()):
        return None
    return match.start(group), match.end(group), rule.id


def _line(text: str, match_start: int, match_end: int) -> tuple[int, int]:
    """Where the line of a match starts and ends, as far as WINDOW on each side: allowlists on
    a megabyte line are not read whole for each of its matches (that is quadratic)."""
    line_start = text.rfind("\n", max(0, match_start - WINDOW), match_start) + 1 or max(0, match_start - WINDOW)
    line_end = text.find("\n", match_end, match_end + WINDOW)
    return line_start, min(len(text), match_end + WINDOW) if line_end == -1 else line_end


def _anchored_matches(
    rule: Rule, rule_set: RuleSet, text: str, places: Iterable[int], possible: _Possible
) -> Iterator[tuple[int, int, str]]:
    """The rule's matches found by trying it only where its keywords stand: each try is one
    anchored match, bounded by the rule, so text dense in keywords costs a try per keyword."""
    floor, tried_line_end, next_tail = 0, 0, -1
    newlines: list[int] | None = None
    for place in places:
        if place < floor:
            continue  # inside the last match, as a search from its end would skip it
        if rule.reach and _OPERATOR.search(text, place, place + rule.reach) is None:
            continue  # no assignment: the rule cannot match here (a test for each rule, in C)
        end = place + WINDOW  # no match is longer
        if rule.head is not None:
            # "curl … -u": a match from this curl would be one from an earlier curl on its
            # line, so a failed try there rules this one out; tries read the whole text, as
            # such a match may reach lines past any window.
            if rule.head.match(text, place) is None:
                continue
            if place < tried_line_end:
                continue
            end = len(text)
            if rule.tail is not None and next_tail < place:
                # Where the next match of the rule's tail ("-u user:password") starts: a try
                # fails unless one starts within reach of its keyword (found once per tail, in C).
                found_tail = rule.tail.search(text, place)
                next_tail = len(text) + 1 if found_tail is None else found_tail.start()
            if next_tail > len(text):
                end = place  # no tail left: the try below fails at once, as the full one would
            elif rule.tail is not None:
                newlines = _newlines(text) if newlines is None else newlines
                last = bisect.bisect_left(newlines, place) + _LINE_BREAKS_READ - 1
                if last < len(newlines) and next_tail > newlines[last]:
                    end = place  # the tail lies past the lines a match may read: likewise
        match = rule.regex.match(text, place, end)
        if match is None:
            if rule.head is not None:
                line_end = text.find("\n", place)
                tried_line_end = len(text) if line_end == -1 else line_end
            continue
        match_start, floor = _lead_start(rule, text, place, floor), max(match.end(), place + 1)
        if match.end() == match_start:
            continue
        found = _finding(rule, rule_set, text, match, match_start, possible)
        if found is not None:
            yield found


class _Possible:
    """Of an allowlist's regex, whether a text could hold a match of it: not when the text holds
    none of the strings each match holds (``go_regex.strings_held``). A secret, its match and its line are all
    parts of the text, so a regex ruled out for the text is not searched for each finding
    (gitleaks' global allowlist is 13 regexes, most needing a ``$``, ``{``, ``%``, ``@`` or ``/``)."""

    def __init__(self, lowered: str) -> None:
        self.lowered = lowered
        self.known: dict[int, tuple[Callable[[str], bool], ...]] = {}
        self.rules: dict[str, _Checks] = {}
        self.found: dict[str, list[int]] = {}

    def searches(self, allowlist: Allowlist) -> tuple[Callable[[str], bool], ...]:
        """The searches of the allowlist's regexes the text could hold a match of."""
        known = self.known.get(id(allowlist))  # the rule set holds each allowlist: ids stay theirs
        if known is None:
            pairs = zip(allowlist.regexes, allowlist._searches, strict=True)
            known = self.known[id(allowlist)] = tuple(found for pattern, found in pairs if self(pattern))
        return known

    def checks(self, rule: Rule, rule_set: RuleSet) -> _Checks:
        """The rule's allowlists and the global one as few searches for this text."""
        checks = self.rules.get(rule.id)
        if checks is None:
            checks = self.rules[rule.id] = _Checks((rule_set.allowlist, *rule.allowlists), self)
        return checks

    def places(self, needs: tuple[str, ...] | None) -> tuple[tuple[int, list[int]], ...] | None:
        """Where each of ``needs`` occurs in the text, with its length; None for None."""
        if needs is None:
            return None
        return tuple((len(need), self.occurrences(need)) for need in needs)

    def occurrences(self, need: str) -> list[int]:
        found = self.found.get(need)
        if found is None:
            found = self.found[need] = _places(self.lowered, need)
        return found

    def __call__(self, pattern: re.Pattern[str]) -> bool:
        needs = go_regex.strings_needed(pattern)
        return needs is None or any(need in self.lowered for need in needs)


class _Checks:
    """Whether a finding's secret is allowed by a rule's allowlists and the global one, as
    ``any(a.allows(...))`` says, for one text, in few calls: a text dense in findings (``key=``
    and a random value, one every 21 characters) paid some 35 us of Python for each, most of it
    a call per allowlist and regex. The regexes on the secret that the text could match (of
    every allowlist but an ``AND`` of regexes and stopwords) are one alternation, searched once;
    their stopwords one trie; a regex on the line is searched only where one of the strings
    each of its matches holds (``go_regex.strings_needed``) lies within the line, so the line is mostly never cut.
    """

    def __init__(self, allowlists: tuple[Allowlist, ...], possible: _Possible) -> None:
        # An AND of regexes alone or of stopwords alone is their OR: one check, all of it.
        self.general = tuple(a for a in allowlists if a.all_of and a.regexes and a.stopwords)
        either = [a for a in allowlists if not (a.all_of and a.regexes and a.stopwords)]
        searches = {id(a): set(map(id, possible.searches(a))) for a in either}
        pairs = [(a, pattern, found) for a in either for pattern, found in zip(a.regexes, a._searches, strict=True)]
        pairs = [(a, pattern, found) for a, pattern, found in pairs if id(found) in searches[id(a)]]
        on_secret = tuple(pattern for a, pattern, _ in pairs if a.target == "secret")
        stopwords = tuple(sorted({w for a in either for w in a.stopwords}))
        self.on_secret = go_regex.any_search(on_secret)
        self.stopwords = go_regex.stopword_search(stopwords)
        self.on_match = tuple(
            _match_search(pattern, found, possible) for a, pattern, found in pairs if a.target == "match"
        )
        self.on_line = tuple(
            (found, possible.places(go_regex.strings_needed(pattern)))
            for a, pattern, found in pairs
            if a.target == "line"
        )
        self.possible = possible

    def allows(self, secret: str, text: str, match_start: int, match_end: int) -> bool:
        if secret:
            if self.on_secret is not None and self.on_secret(secret):
                return True
            if self.stopwords is not None and self.stopwords(secret.lower()) is not None:
                return True
        matched = None
        for starts, found in self.on_match:
            if starts is not None and starts(self.possible.lowered, match_start, match_end) is None:
                continue
            matched = text[match_start:match_end].strip("\n") if matched is None else matched
            if matched and found(matched):
                return True
        if self.general:
            line_start, line_end = _line(text, match_start, match_end)
            line, matched = text[line_start:line_end], text[match_start:match_end].strip("\n")
            if any(a.allows(secret, matched, line, self.possible) for a in self.general):
                return True
        return bool(self.on_line) and self._allowed_by_line(text, match_start, match_end)

    def _allowed_by_line(self, text: str, match_start: int, match_end: int) -> bool:
        # The line lies within WINDOW of the match: most matches have nothing a line regex
        # needs that near, and their line is never looked for.
        near = max(0, match_start - WINDOW), match_end + WINDOW
        on_line = [(found, places) for found, places in self.on_line if _any_within(*near, places)]
        if not on_line:
            return False
        line_start, line_end = _line(text, match_start, match_end)
        line = text[line_start:line_end]
        return bool(line) and any(found(line) for found, places in on_line if _any_within(line_start, line_end, places))


def _any_within(start: int, end: int, places: tuple[tuple[int, list[int]], ...] | None) -> bool:
    """Whether one of the strings whose ``places`` are given (None: unknown) lies within ``start``-``end``."""
    return places is None or any(_within(start, end, size, starts) for size, starts in places)


def _match_search(
    pattern: re.Pattern[str], found: Callable[[str], bool], possible: _Possible
) -> tuple[Callable[[str, int, int], object] | None, Callable[[str], bool]]:
    """``found`` (``go_regex.search_where_it_may_start``'s search of ``pattern``), and a search that
    must find something in the lower-cased text between a match's ends for ``found`` to: when
    the text holds none of the strings the plan's other choices need, no match does, and
    ``found`` tries only where a literal start stands (none of which holds a line break, which
    a match is stripped of). Most matches have no start: one search in C, no match cut."""
    plan = go_regex.starts_and_needs(pattern)
    if plan is None or any(need in possible.lowered for need in plan[1]) or "\n" in plan[0].pattern:
        return None, found
    return plan[0].search, found


def _within(start: int, end: int, size: int, places: list[int]) -> bool:
    """Whether one of ``places`` (sorted) starts a string of ``size`` within ``start``-``end``."""
    index = bisect.bisect_left(places, start)
    return index < len(places) and places[index] + size <= end


def _newlines(text: str) -> list[int]:
    """Where each LF of ``text`` stands."""
    newlines, find = [], text.find
    place = find("\n")
    while place != -1:
        newlines.append(place)
        place = find("\n", place + 1)
    return newlines


def _secret_group(rule: Rule, match: re.Match[str]) -> int:
    if rule.secret_group and rule.secret_group <= (match.re.groups or 0):
        return rule.secret_group
    for index in range(1, (match.re.groups or 0) + 1):
        if match.group(index):
            return index
    return 0
