"""Secrets out of everything the summarizer reads and writes (docs/decisions.md, "Running summary").

``redact(text)`` replaces what looks like a credential with a ``[REDACTED]`` marker and keeps
everything around it, so a summary can still say "the user pasted the compose file with the
database password" without repeating the password. It recognises:

- every secret gitleaks' default rule set finds (``imprintd.secret_rules``: 221 provider
  shapes such as Stripe, Hugging Face, Anthropic, GitLab and Azure AD, and gitleaks' generic
  rule, which takes a high-entropy value after a name like ``key``, ``token`` or ``secret``:
  Azure's ``AccountKey=…`` among them);
- password flags of command lines: ``mysql -pVALUE`` (and ``mysqldump``, ``mysqladmin``,
  ``mariadb``), ``sshpass -p VALUE``, ``--password VALUE``;
- provider keys and tokens by their shape (kept beside gitleaks' for the shorter or looser
  forms it leaves alone): OpenAI ``sk-…``, GitHub ``ghp_/gho_/ghu_/ghs_/ghr_…``
  and ``github_pat_…``, Slack ``xox[baprs]-…``, AWS access key ids ``AKIA…``/``ASIA…``, Google
  ``AIza…``, JSON Web Tokens, and ``Bearer``/``Basic`` credentials in headers;
- PEM private key blocks (``-----BEGIN … PRIVATE KEY-----`` to its ``END`` line);
- passwords in URLs (``scheme://user:PASSWORD@host`` keeps the user and the host);
- assignments whose name says secret (``password``, ``passwd``, ``passphrase``, ``secret``,
  ``token``, ``api_key``/``apikey``, ``access_key``, ``secret_key``, ``private_key``,
  ``client_secret``, and ``pass`` as a whole part of the name: ``DB_PASS``) in env, YAML,
  JSON, TOML and query-string forms, quoted or not, the value whole (``Tr0ub4dor&3x`` is one
  value; only in a query string does ``&`` end it); and "password: X" anywhere in a line (as
  a summary bullet may write it).

It is tuned against false positives that would make summaries useless: prose ("the token
budget is 65536", "password policy", "tokens per second"), library names ("sk-learn"), plain
config (``port: 8101``, ``max_tokens: 1024``), URLs without a password and git hashes stay as
they are. Redaction is idempotent.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import secrets
import string
import sys
import threading
from collections import OrderedDict
from collections.abc import Sequence

MARK = "[REDACTED]"
PRIVATE_KEY_MARK = "[REDACTED PRIVATE KEY]"

# -- PEM private keys -------------------------------------------------------------------------
# A clipped message may hold a BEGIN line without its END: then the base64 body that follows
# goes too, up to the first line that is not base64.
_PEM = re.compile(
    r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
    r"(?:.*?-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|(?:[ \t]*\r?\n[ \t]*[A-Za-z0-9+/=]{4,})*)",
    re.DOTALL,
)
# Likewise an END line whose BEGIN was clipped away takes the base64 lines before it (found
# by walking back from the END line: a regex that starts at every base64 run is quadratic).
_PEM_END = re.compile(r"-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_BASE64_LINE = re.compile(r"[A-Za-z0-9+/=]{16,}")
_BASE64_LAST_LINE = re.compile(r"[A-Za-z0-9+/=]+")

# -- provider keys by shape ---------------------------------------------------------------------
# Each needs a boundary before it, so that a key-shaped piece inside a longer word is left alone.
# The boundary is checked after the key's first letters (``_after``): a pattern that starts with
# a literal is searched for in C, one that starts with a lookbehind is tried at every character.
_B = r"(?<![A-Za-z0-9_\-])"


def _after(start: str) -> str:
    """``start``, not preceded by a key character: ``_B + start`` with the boundary checked after it."""
    return start + r"(?<![A-Za-z0-9_\-]" + start + ")"


_SHAPES = re.compile(
    "|".join(
        (
            # OpenAI (sk-, sk-proj-, sk-ant- …): long, and with a digit, so "sk-learn" stays.
            _after("sk-") + r"(?=[A-Za-z0-9_\-]*\d)[A-Za-z0-9_\-]{20,}",
            _after("gh") + r"[pousr]_[A-Za-z0-9]{20,}",
            _after("github_pat_") + r"[A-Za-z0-9_]{20,}",
            _after("xox") + r"[baprs]-[A-Za-z0-9\-]{10,}",
            r"(?:AKIA|ASIA)(?<!\w....)[A-Z0-9]{16}\b",  # "\bAKIA…", the boundary checked after
            _after("AIza") + r"[0-9A-Za-z_\-]{30,}",
            # JWT: header and payload are base64url JSON objects, so both start with "eyJ".
            _after("eyJ") + r"[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}",
        )
    )
)

#: How every one of ``_SHAPES``' keys starts.
_SHAPE_STARTS = ("sk-", "gh", "github_pat_", "xox", "AKIA", "ASIA", "AIza", "eyJ")

# "Bearer <token>": the token must hold a digit, so "Bearer authentication" in prose stays.
_BEARER = re.compile(r"(?P<lead>\bBearer\s+)(?P<value>(?=[A-Za-z0-9._~+/=\-]*\d)[A-Za-z0-9._~+/=\-]{8,})")
# "Authorization: Basic <base64>" (and any scheme) in a header line.
_AUTH_HEADER = re.compile(
    r"(?P<lead>\bAuthorization[\"']?\s*[:=]\s*[\"']?(?:Basic|Bearer|Token|Digest)\s+)(?P<value>[^\s\"',;]+)",
    re.IGNORECASE,
)

# -- password flags on command lines --------------------------------------------------------------
# MySQL's client tools take the password glued to "-p" ("-p" alone prompts, and the next word
# is the database); sshpass takes it as the next word; many tools take "--password VALUE".
# Each word's boundary is checked after its first letters, as ``_SHAPES``' are (``\bmysql`` is
# ``m(?<!\wm)ysql``): a search in C for where one may start.
_CLI_PASSWORD = re.compile(
    r"(?P<lead>m(?<!\wm)(?:ysql|ysqldump|ysqladmin|ysqlimport|ysqlshow|ysqlcheck|ariadb|ariadb-dump)\b"
    r"[^\n|;&]{0,200}?\s-p)(?P<value>\"[^\"\n]+\"|'[^'\n]+'|[^\s\"']+)"
    r"|(?P<lead2>s(?<!\ws)shpass\s+-p\s*|--password(?<![\w-]--password)[ \t]+)"
    r"(?P<value2>\"[^\"\n]+\"|'[^'\n]+'|[^\s\"'-][^\s\"']*)"
)

# -- passwords in URLs --------------------------------------------------------------------------
# scheme://user:PASSWORD@host — the password holds no "/" so "http://host:8080/a@b" stays.
# The scheme is bounded: an unbounded run starting at every word is quadratic on "sk-sk-…".
_URL_PASSWORD = re.compile(r"(?P<lead>\b[A-Za-z][A-Za-z0-9+.\-]{0,30}://[^\s:/@]*:)(?P<value>[^\s/@]+)(?=@[^\s@])")

# -- assignments whose name says secret ---------------------------------------------------------
# The name must END with one of these words (as a whole component of the identifier), so
# "max_tokens", "token_budget", "secret_name" and "password_policy" are not secrets.
_SECRET_WORDS = (
    r"(?:password|passwd|passphrase|secret|token|api[_\-]?key|access[_\-]?key"
    r"|secret[_\-]?key|private[_\-]?key|client[_\-]?secret)"
)
# An identifier whose last component is a secret word: "DB_PASSWORD", "apiKey", "github.token".
# Components end in a separator; the last may be camelCase ("githubToken"). Written without
# nested optional repeats, so a long word cannot make the regex backtrack exponentially.
# "pass" is a secret word only as a whole component ("DB_PASS", "smtp.pass", "dbPass"), so
# "compass" and "bypass" stay; the camelCase form is matched case-sensitively for that reason.
_PASS_NAME = r"(?:[A-Za-z0-9]+[_.\-])*pass|(?-i:[A-Za-z0-9]*[a-z0-9]Pass)"
_NAME = r"(?P<name>(?:[A-Za-z0-9]+[_.\-])*[A-Za-z0-9]*?" + _SECRET_WORDS + "|" + _PASS_NAME + r")"
# A value: quoted (kept quoted) or a bare run that does not end in punctuation of the syntax.
# The bare run is the whole run up to white space, "&" included: "Tr0ub4dor&3x" is one secret.
_VALUE = r"(?P<value>\"[^\"\n]*\"|'[^'\n]*'|<[^>\n]*>|[^\s'\"]*[^\s'\",;)}\]])"
# In a query string ("?api_key=X&user=me") "&" starts the next parameter instead.
_QUERY_VALUE = r"(?P<value>[^\s'\"&#]*[^\s'\",;&#)}\]])"

# Query-string parameters: after "?" or "&".
_ASSIGN_QUERY = re.compile(r"(?<=[?&])(?P<lead>)" + _NAME + r"(?P<sep>=)" + _QUERY_VALUE, re.IGNORECASE)
# Other "=" forms (env, TOML, CLI flags) may start anywhere after a boundary; "==" is a
# comparison, not an assignment.
_ASSIGN_EQ = re.compile(
    r"(?<![A-Za-z0-9_.\-?&])(?P<lead>(?:--)?[\"']?)" + _NAME + r"(?P<sep>[\"']?[ \t]*=(?!=)[ \t]*)" + _VALUE,
    re.IGNORECASE,
)
# ":" forms (YAML, JSON) only where a key can start: a line start (after indentation and a
# YAML list dash), or after "{" / "," in JSON. That keeps "here's the secret: use caching" in
# prose unchanged.
_ASSIGN_COLON = re.compile(
    r"(?P<lead>(?:^|(?<=[{,]))[ \t]*(?:-[ \t]+)?[\"']?)" + _NAME + r"(?P<sep>[\"']?[ \t]*:[ \t]*)" + _VALUE,
    re.IGNORECASE | re.MULTILINE,
)

# Mid-line "password: X" (in prose or a summary bullet) is a password too; "secret" and
# "token" mid-line are too often prose ("the secret: use caching") to follow suit.
_PASSWORD_COLON = re.compile(
    r"(?P<lead>(?<![A-Za-z0-9_\-]))(?P<name>pass(?:word|wd|phrase))(?P<sep>[ \t]*:[ \t]*)" + _VALUE,
    re.IGNORECASE,
)

# Values that name where a secret comes from rather than being one: "${DB_PASSWORD}",
# "$TOKEN", "<your key>", "os.environ['X']", "getpass()", and YAML/JSON empties.
_REFERENCE = re.compile(
    r"^(?:\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|<[^>]*>|\{\{.*\}\}|[A-Za-z_][\w.]*[(\[].*"
    r"|null|none|nil|true|false|~|\*+|\[REDACTED[^\]]*\]?)$",
    re.IGNORECASE,
)


#: Texts up to this long are redacted once and remembered (``_Remembered``).
REMEMBER_CHARS = 4_096


#: Bytes of redactions remembered (``_Remembered``), the least recently used going first.
REMEMBERED_BYTES = 2 << 20


def redact(text: str) -> str:
    """``text`` with every secret it recognises replaced by a ``[REDACTED]`` marker."""
    if len(text) <= REMEMBER_CHARS:
        return _REMEMBERED.redact(text)
    return _redact(text)


class _Remembered:
    """Short texts' redactions, remembered: every reply lists a session's covered material (a
    paste's first line, a tool call) and a summary attempt redacts the same clips up to four
    times, so without it a long session dense in keywords redacted the same text again on every
    reply. At most ``REMEMBERED_BYTES`` of redactions (of up to 4,096 characters) are kept.

    They are kept by a keyed hash of the text, never the text: what is remembered holds no
    secret (a redaction has none), so it may outlive the session the text came from, and the
    key, drawn once per process, keeps a short secret from being found by hashing guesses.
    """

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)
        self._lock = threading.Lock()
        self._kept: OrderedDict[bytes, str] = OrderedDict()
        self._bytes = 0

    def redact(self, text: str) -> str:
        digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), key=self._key, digest_size=32).digest()
        with self._lock:
            found = self._kept.get(digest)
            if found is not None:
                self._kept.move_to_end(digest)
                return found
        redacted = _redact(text)
        with self._lock:
            if digest not in self._kept:
                self._kept[digest] = redacted
                self._bytes += sys.getsizeof(redacted)
            while self._bytes > REMEMBERED_BYTES:
                self._bytes -= sys.getsizeof(self._kept.popitem(last=False)[1])
        return redacted


_REMEMBERED = _Remembered()


def _redact(text: str) -> str:
    if not text:
        return text
    # Each rule runs only when the text holds a string every one of its matches holds (a
    # search in C): prose pays for few of them.
    if "-----" in text:
        text = _PEM.sub(PRIVATE_KEY_MARK, text)
        text = _orphan_pem_ends(text)
    if "-p" in text:
        text = _CLI_PASSWORD.sub(_cli_password, text)
    if any(start in text for start in _SHAPE_STARTS):
        text = _SHAPES.sub(MARK, text)
    text = _AUTH_HEADER.sub(_keep_lead, text)
    if "Bearer" in text:
        text = _BEARER.sub(_keep_lead, text)
    if "://" in text:
        text = _URL_PASSWORD.sub(_keep_lead, text)
    if "=" in text:
        text = _ASSIGN_QUERY.sub(_assignment, text)
        text = _assign_eq(text)
    if ":" in text:
        text = _ASSIGN_COLON.sub(_assignment, text)
        text = _PASSWORD_COLON.sub(_assignment, text)
    # Last, so that a value the rules above took whole (quotes kept) is not taken again.
    return _rule_set_secrets(text)


#: Characters past an excerpt's edge that are redacted with it, so that a secret reaching
#: into the excerpt is seen whole (no rule finds a secret this long): twice
#: ``secret_rules.WINDOW``, written out so that the rules load on first use (a test holds the two together).
EXCERPT_MARGIN = 800


def redact_head(text: str, length: int) -> str:
    """At most the first ``length`` characters of ``redact(text)``, redacting only what they need.

    A message of megabytes that the summarizer clips to its ends costs what its ends cost.
    """
    if len(text) <= length + 2 * EXCERPT_MARGIN:
        return redact(text)[:length]
    redacted = redact(text[: length + EXCERPT_MARGIN])
    if len(redacted) < length + EXCERPT_MARGIN // 2:
        # Secrets took up much of the margin: the one cut at its end could reach the excerpt.
        return redact(text)[:length]
    return redacted[:length]


def redact_tail(text: str, length: int) -> str:
    """At most the last ``length`` characters of ``redact(text)``; see ``redact_head``."""
    if length <= 0:
        return ""
    if len(text) <= length + 2 * EXCERPT_MARGIN:
        return redact(text)[-length:]
    redacted = redact(text[len(text) - length - EXCERPT_MARGIN :])
    if len(redacted) < length + EXCERPT_MARGIN // 2:
        return redact(text)[-length:]
    return redacted[-length:]


def _rule_set_secrets(text: str) -> str:
    """``text`` with each secret gitleaks' rules find replaced; overlapping finds become one."""
    from imprintd import secret_rules  # the rule set loads on the first redaction, not when the daemon starts

    spans = sorted((start, end) for start, end, _ in secret_rules.find(text))
    if not spans:
        return text
    pieces, position = [], 0
    for start, end in spans:
        if end <= position:
            continue
        if start < position:
            start = position  # the part before was replaced with the finding it overlaps
        else:
            pieces.append(text[position:start])
            pieces.append(MARK)
        position = end
    pieces.append(text[position:])
    return "".join(pieces)


#: Where an ``_ASSIGN_EQ`` match's name may stand: a secret word's first letters, more name
#: characters, the operator. Searched for in C (it starts with letters); the match is then tried
#: only at the start of that name, so text dense in ``=`` does not try the name at every character.
_EQ_HIT = re.compile(r"(?:pass|secret|token|api|access|private|client)[A-Za-z0-9_\-]*[\"']?[ \t]*=(?!=)", re.IGNORECASE)
#: What ``[A-Za-z0-9_.\-]`` matches case-insensitively: ASCII, and four letters that fold to it.
_NAME_CHARS = frozenset(string.ascii_letters + string.digits + "_.-\u0130\u0131\u017f\u212a")
#: ``_ASSIGN_EQ``'s lead before a name: ``--`` and a quote.
_LEAD_CHARS = 3


def _assign_eq(text: str) -> str:
    """``_ASSIGN_EQ.sub(_assignment, text)``, trying the pattern only where ``_EQ_HIT`` finds a name.

    A match's name is one run of name characters ending in a secret word and its operator, so
    the leftmost match starts at the run of the first hit that has one (or at its lead), and no
    run is walked twice: runs end at the operator that ends a hit.
    """
    pieces: list[str] = []
    done = 0
    for hit in _EQ_HIT.finditer(text):
        start = hit.start()
        if start < done:
            continue  # inside the last match's value: the search from its end would not start here
        while start > done and text[start - 1] in _NAME_CHARS:
            start -= 1  # the lookbehind rules out any start inside the run
        for candidate in range(max(done, start - _LEAD_CHARS), start + 1):
            match = _ASSIGN_EQ.match(text, candidate)
            if match is not None:
                pieces += (text[done : match.start()], _assignment(match))
                done = match.end()
                break
    if not pieces:
        return text
    pieces.append(text[done:])
    return "".join(pieces)


def _cli_password(match: re.Match[str]) -> str:
    lead, value = (
        (match.group("lead"), match.group("value"))
        if match.group("lead")
        else (
            match.group("lead2"),
            match.group("value2"),
        )
    )
    if _REFERENCE.match(value.strip("'\"")):
        return match.group(0)
    quote = value[0] if value[:1] in ("'", '"') else ""
    return f"{lead}{quote}{MARK}{quote}"


def _orphan_pem_ends(text: str) -> str:
    """Redact ``-----END … PRIVATE KEY-----`` lines left by clipping, with the body above them."""
    position = 0
    while (match := _PEM_END.search(text, position)) is not None:
        before = text[: match.start()]
        line_start = before.rfind("\n") + 1
        if before[line_start:].strip():
            position = match.end()  # the marker sits inside a line of prose: leave it
            continue
        # Walk back over the base64 body lines directly above the END line.
        # The last body line may be short; the ones above it are full base64 lines.
        start = line_start
        pattern = _BASE64_LAST_LINE
        while start > 0:
            previous = before.rfind("\n", 0, start - 1) + 1
            if not pattern.fullmatch(before[previous : start - 1].strip()):
                break
            start, pattern = previous, _BASE64_LINE
        text = text[:start] + PRIVATE_KEY_MARK + text[match.end() :]
        position = start + len(PRIVATE_KEY_MARK)
    return text


def _keep_lead(match: re.Match[str]) -> str:
    return match.group("lead") + MARK


def _assignment(match: re.Match[str]) -> str:
    value = match.group("value")
    quote = value[0] if value[:1] in ("'", '"') and len(value) >= 2 else ""
    inner = value[1:-1] if quote else value
    if not _is_secret_value(match.group("name"), inner.strip()):
        return match.group(0)
    replaced = f"{quote}{MARK}{quote}"
    return match.group("lead") + match.group("name") + match.group("sep") + replaced


def _is_secret_value(name: str, value: str) -> bool:
    if not value or _REFERENCE.match(value):
        return False
    # "max_token = 1024", "token: 8192": a count of tokens, not a token.
    if name.lower().endswith("token") and value.isdigit():
        return False
    return True


def mask(text: str, *secrets: str | None) -> str:
    """``text`` with every occurrence of each given secret (the daemon's own API key) masked.

    Unlike ``redact``, which guesses secrets by their shape, this knows the exact value.
    """
    for secret in secrets:
        if secret:
            text = text.replace(secret, MARK)
    return text


def mask_json(text: str, secret: str | None) -> str:
    r"""JSON text with ``secret`` masked however its characters are written: as themselves or
    escaped (``\u0073k-…``, ``\/``), so the secret is gone once the text is decoded too."""
    if not secret:
        return text
    return _json_spelling(secret).sub(MARK, text)


#: JSON's two-character escapes, by the character they stand for.
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


@functools.lru_cache(maxsize=8)
def _json_spelling(secret: str) -> re.Pattern[str]:
    """A pattern matching ``secret`` in JSON text, each character written any way JSON may."""

    def forms(character: str) -> str:
        written = [re.escape(character)]
        if ord(character) < 0x10000:
            written.append(rf"\\u(?i:{ord(character):04x})")
        if character in _SHORT_ESCAPES:
            written.append(re.escape(_SHORT_ESCAPES[character]))
        return "(?:" + "|".join(written) + ")"

    return re.compile("".join(forms(character) for character in secret))


def hide_url_passwords(text: str) -> str:
    """``text`` with the password of every ``scheme://user:PASSWORD@host`` URL masked."""
    return _URL_PASSWORD.sub(_keep_lead, text)


class MaskSecrets(logging.Filter):
    """A log handler filter that masks known secret values in every record it passes on,
    tracebacks included (a server's error text can echo the API key it was sent), and the
    password of any ``scheme://user:PASSWORD@host`` URL (a ``chat.base_url`` may carry one)."""

    def __init__(self, secrets: Sequence[str]) -> None:
        super().__init__()
        self.secrets = [secret for secret in secrets if secret]

    def filter(self, record: logging.LogRecord) -> bool:
        # A filter runs inside whatever called the logger (pygls while it sends a response):
        # one that raised would cost that response, so a record that cannot format is logged
        # as its parts instead.
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            message = f"{record.msg} {record.args!r}"
        masked = self._mask(message)
        if masked != message or record.args:
            record.msg, record.args = masked, ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self._mask(record.exc_text)
        return True

    def _mask(self, text: str) -> str:
        return hide_url_passwords(mask(text, *self.secrets))
