"""gitleaks' Go (RE2) regexes read for Python's ``re``, and what a pattern's matches hold.

``compile_go`` compiles a Go regex for Python: ``to_python`` rewrites the three constructs
Python spells differently (a ``(?i)`` flag group that is not at the very start, which holds to
the end of its group through the group's later choices; ``\\z``; POSIX classes such as
``[[:alnum:]]``), with ASCII classes, as RE2's ``\\w``, ``\\s`` and ``\\b`` are.

The rest reads a compiled pattern's parse tree (CPython's ``re._parser``) for what every
match of it starts with (``starts_of``) or holds (``strings_held``, ``strings_needed``), and
builds searches from that: ``imprintd.secret_rules`` uses them to try a rule or an allowlist
only where it may match (tests hold each against the plain search).
"""

from __future__ import annotations

import functools
import re
import re._constants as sre  # noqa: PLC2701 (the parse tree of a pattern, to know where its matches start)
import re._parser as sre_parse  # noqa: PLC2701
import string
from collections.abc import Callable, Iterable, Iterator

#: Alternations of at least this many choices are searched only where one may start.
_MANY_CHOICES = 8


def search_where_it_may_start(regex: re.Pattern[str]) -> Callable[[str], bool]:
    """Whether ``regex`` matches somewhere in a text, tried only where one of its choices may
    start; ``regex.search`` itself unless it is a long alternation (ASCII) that allows it.

    gitleaks' generic allowlist on the match is 45 choices: ``re`` tries each at every
    character, some 25 us for each match of the generic rule. Most choices start with one of a
    few words (``access``, ``key…``): they are tried only where such a start stands (found in
    C); each of the others holds a string every match of it holds (``:jar:``, ``=\n``), and
    when the text holds one the whole search runs.
    """
    plan = starts_and_needs(regex)
    if plan is None:
        return lambda text: regex.search(text) is not None
    starts, needs = plan

    def found(text: str) -> bool:
        lowered = text.translate(ASCII_LOWER)  # ASCII case only: the regex is ASCII
        if any(need in lowered for need in needs):
            return regex.search(text) is not None
        return any(regex.match(text, start.start()) is not None for start in starts.finditer(lowered))

    return found


@functools.cache
def starts_and_needs(regex: re.Pattern[str]) -> tuple[re.Pattern[str], tuple[str, ...]] | None:
    """For a long alternation: a pattern that finds, in the lower-cased text, where a choice with
    literal starts may start (each start cut to the shortest); and one string each of the other
    choices holds, lower-cased. None when a choice has neither, or for other regexes."""
    if not regex.flags & re.ASCII:
        return None
    items = list(sre_parse.parse(regex.pattern, regex.flags))
    if len(items) != 1 or items[0][0] is not sre.BRANCH or len(items[0][1][1]) < _MANY_CHOICES:
        return None
    starts: set[str] = set()
    needs: set[str] = set()
    for choice in items[0][1][1]:
        heads, _ = starts_of(choice)
        if heads and all(heads):
            starts |= {head.translate(ASCII_LOWER) for head in heads}
            continue
        held = strings_held(choice)
        if not held:
            return None
        needs |= {word.translate(ASCII_LOWER) for word in held}
    if not starts:
        return None
    shortest = min(len(start) for start in starts)
    cut = {start[:shortest] for start in starts}
    return re.compile(f"(?=(?:{trie_pattern(cut)}))"), tuple(sorted(needs))


def strings_held(items) -> set[str] | None:  # noqa: ANN001 (a parse tree: no public type)
    """Strings one of which every match of the pattern ``items`` holds (its longest run of
    literals, or one such run from each choice of a group); None when none is known."""
    best: set[str] | None = None

    def consider(words: set[str] | None) -> None:
        nonlocal best
        if words and all(words) and (best is None or min(map(len, words)) > min(map(len, best))):
            best = words

    run: list[str] = []
    for op, av in items:
        if op is sre.LITERAL:
            run.append(chr(av))
            continue
        consider({"".join(run)} if run else None)
        run = []
        if op is sre.SUBPATTERN:
            consider(strings_held(av[3]))
        elif op is sre.BRANCH:
            each = [strings_held(branch) for branch in av[1]]
            consider(set().union(*each) if all(each) else None)  # type: ignore[arg-type]
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT) and av[0] >= 1:
            consider(strings_held(av[2]))
    consider({"".join(run)} if run else None)
    return best


def trie_pattern(words: Iterable[str]) -> str:
    """A regex matching exactly ``words``, written as their trie: at each character ``re`` tries
    the few branches its next character allows, not every word."""
    trie: dict[str, dict] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}  # a word ends here

    def written(node: dict[str, dict]) -> str:
        branches = [re.escape(char) + written(node[char]) for char in sorted(node) if char]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        # A word ending here is a match already: the longer ones are optional.
        return f"(?:{body})?" if "" in node else body

    return written(trie) if trie else "(?!)"


_POSIX_CLASSES = {
    "alnum": "a-zA-Z0-9",
    "alpha": "a-zA-Z",
    "digit": "0-9",
    "xdigit": "0-9a-fA-F",
    "lower": "a-z",
    "upper": "A-Z",
    "word": "a-zA-Z0-9_",
    "space": r"\t\n\v\f\r ",
    "blank": r"\t ",
    "punct": r"!-/:-@\[-`{-~",
}
ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


_FLAG_GROUP = re.compile(r"\(\?([a-zA-Z-]+)\)")


def to_python(pattern: str) -> str:
    """``pattern`` (Go RE2 syntax) in Python's: the same language of strings."""
    out: list[str] = []
    # For each open group: the "(?flags:" groups we opened for its mid-pattern "(?flags)",
    # closed before its ")" and around each of its "|" (RE2's "(?i)" holds to the end of the
    # enclosing group, through its later choices, which a group opened once would join).
    closers: list[list[str]] = [[]]
    i, in_class = 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            escape = pattern[i : i + 2]
            out.append(r"\Z" if escape == r"\z" else escape)
            i += 2
            continue
        if in_class:
            posix = re.match(r"\[:(\^?)([a-z]+):\]", pattern[i:])
            if posix and posix.group(2) in _POSIX_CLASSES and not posix.group(1):
                out.append(_POSIX_CLASSES[posix.group(2)])
                i += posix.end()
                continue
            if char == "]" and not (out and out[-1] in ("[", "[^")):
                in_class = False
                out.append(char)
            elif char in "[&~|":
                out.append("\\" + char)  # literal in RE2; Python warns of set operations
            else:
                out.append(char)
            i += 1
            continue
        if char == "[":
            in_class = True
            if pattern.startswith("[^", i):
                out.append("[^")
                i += 2
            else:
                out.append("[")
                i += 1
            if i < len(pattern) and pattern[i] == "]":  # a leading "]" is a literal
                out.append(r"\]")
                i += 1
            continue
        flags = _FLAG_GROUP.match(pattern, i)
        if flags and i > 0:
            out.append(f"(?{flags.group(1)}:")
            closers[-1].append(flags.group(1))
            i = flags.end()
            continue
        if char == "(":
            closers.append([])
        elif char == ")":
            out.append(")" * len(closers.pop()))
            if not closers:
                closers.append([])
        elif char == "|" and closers[-1]:
            out.append(")" * len(closers[-1]) + "|" + "".join(f"(?{opened}:" for opened in closers[-1]))
            i += 1
            continue
        out.append(char)
        i += 1
    out.append(")" * sum(map(len, closers)))
    return "".join(out)


def compile_go(pattern: str) -> re.Pattern[str]:
    """A Go regex compiled for Python; ASCII classes, as RE2's ``\\w``, ``\\s`` and ``\\b`` are."""
    return re.compile(to_python(pattern), re.ASCII)


#: The most strings ``starts_of`` spells out before it gives up.
_MAX_HEADS = 512


def has_top_level_choice(pattern: str) -> bool:
    """Whether ``pattern`` is a choice at its top level: a ``|`` outside every group and class."""
    depth, i, in_class = 0, 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            i += 1 + pattern.startswith("^", i + 1)
            i += pattern.startswith("]", i)  # a leading "]" is a literal
            continue
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth <= 0:
            return True
        i += 1
    return False


def starts_with_one_of(regex: re.Pattern[str], keywords: tuple[str, ...]) -> bool:
    """Whether every match of ``regex`` starts, lower-cased, with one of ``keywords``."""
    heads, _ = starts_of(sre_parse.parse(regex.pattern, regex.flags & ~re.ASCII | re.ASCII))
    return bool(heads) and all(any(head.lower().startswith(word) for word in keywords) for head in heads)


def starts_at_boundary(regex: re.Pattern[str], keywords: tuple[str, ...]) -> bool:
    """Whether every match of ``regex`` starts with ``\b`` (ASCII), and every keyword with a word
    character: a match then starts only where no word character stands before it."""
    items = list(sre_parse.parse(regex.pattern, regex.flags))
    first = bool(items) and items[0] == (sre.AT, sre.AT_BOUNDARY)
    return first and bool(regex.flags & re.ASCII) and all(word[:1] in WORD_CHARS for word in keywords)


WORD_CHARS = frozenset(string.ascii_letters + string.digits + "_")


def starts_of(items) -> tuple[set[str], bool]:  # noqa: ANN001 (a parse tree: no public type)
    """The strings a pattern's matches start with, as far as they are a few literals; and
    whether that is the whole of what the pattern matches."""
    heads = {""}
    for op, av in items:
        if op is sre.AT:
            choices, whole = {""}, True  # "\\b", "^": they take no characters
        elif op is sre.LITERAL:
            choices, whole = {chr(av)}, True
        elif op is sre.IN and all(kind is sre.LITERAL for kind, _ in av):
            choices, whole = {chr(value) for _, value in av}, True
        elif op is sre.SUBPATTERN:
            choices, whole = starts_of(av[3])
        elif op is sre.BRANCH:
            choices, whole = set(), True
            for branch in av[1]:
                more, complete = starts_of(branch)
                choices, whole = choices | more, whole and complete
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT) and av[1] <= 2:
            inner, whole = starts_of(av[2])
            choices = {"".join(parts) for count in range(av[0], av[1] + 1) for parts in _product(inner, count)}
        else:
            return heads, False
        heads = {head + choice for head in heads for choice in choices}
        if len(heads) > _MAX_HEADS or not whole:
            return heads, False
    return heads, True


def _product(choices: set[str], count: int) -> Iterator[tuple[str, ...]]:
    if count == 0:
        yield ()
        return
    for rest in _product(choices, count - 1):
        for choice in choices:
            yield (choice, *rest)


_FLAGS_FIRST = re.compile(r"\(\?[a-zA-Z-]+\)")


@functools.cache
def any_search(patterns: tuple[re.Pattern[str], ...]) -> Callable[[str], object] | None:
    """Whether any of ``patterns`` matches somewhere in a text: those whose matches all start at
    the text's start (a leading ``^``) one alternation tried there alone, the others one
    searched; each in turn where they cannot be written as one (ASCII, no flags but a leading
    ``(?i)``). One alternation searched would try the ``^`` ones at every character, which ``re``
    spares a lone ``^`` pattern: 7 us instead of 0.2 for a 150-character secret."""
    if not patterns:
        return None
    at_start = tuple(p for p in patterns if _at_start(p))
    elsewhere = tuple(p for p in patterns if p not in at_start)
    calls: list[Callable[[str], object]] = []
    for each, anchored in ((at_start, True), (elsewhere, False)):
        one = _alternation(each)
        if one is not None:
            calls.append(one.match if anchored else one.search)
        else:
            calls += [pattern.search for pattern in each]
    if len(calls) == 1:
        return calls[0]
    return lambda text: any(call(text) for call in calls)


def _at_start(pattern: re.Pattern[str]) -> bool:
    """Whether every match of ``pattern`` starts at the text's start (``^``, not multi-line)."""
    if pattern.flags & re.MULTILINE:
        return False
    items = list(sre_parse.parse(pattern.pattern, pattern.flags))
    return bool(items) and items[0] in ((sre.AT, sre.AT_BEGINNING), (sre.AT, sre.AT_BEGINNING_STRING))


def _alternation(patterns: tuple[re.Pattern[str], ...]) -> re.Pattern[str] | None:
    """``patterns`` as one alternation (ASCII), a leading ``(?i)`` made a group; None when there
    are none, or one cannot be written so."""
    if not patterns:
        return None
    if len(patterns) == 1:
        return patterns[0]
    parts = []
    for pattern in patterns:
        if pattern.flags == re.ASCII and not _FLAGS_FIRST.match(pattern.pattern):
            parts.append(f"(?:{pattern.pattern})")
        elif pattern.flags == re.ASCII | re.IGNORECASE and pattern.pattern.startswith("(?i)"):
            parts.append(f"(?i:{pattern.pattern[4:]})")
        else:
            return None
    return re.compile("|".join(parts), re.ASCII)


@functools.cache
def stopword_search(stopwords: tuple[str, ...]) -> Callable[[str], object] | None:
    return re.compile(trie_pattern(stopwords)).search if stopwords else None


@functools.cache
def strings_needed(pattern: re.Pattern[str]) -> tuple[str, ...] | None:
    """Strings, lower-cased, one of which every match of ``pattern`` holds; None when none is known."""
    if not pattern.flags & re.ASCII:
        return None  # its case-insensitive letters may fold to others than ASCII ones
    held = strings_held(list(sre_parse.parse(pattern.pattern, pattern.flags)))
    return tuple(sorted(word.translate(ASCII_LOWER) for word in held)) if held else None
