"""Does a small local model answer questions about real code? An evaluation you can rerun offline.

The workspace is the source of httpx, which imprintd depends on, so it is on every machine
after install and nobody on this project wrote it: it is copied into a temporary folder and
each question is asked in a fresh session (persistence off), with the embedded SmolLM2-135M
unless ``--model`` names another GGUF. Every question has a known answer, a pattern the
answer must contain, and the file that holds it; a question whose fact the installed httpx no
longer holds is skipped, named.

It reports, per question and in all: answers that state the fact (an answer that also states
its opposite, "Yes, … enables HTTP/2" before a "not", does not), whether the first look
(the workspace search made before the model's first round) held the answer's file, the tool
calls the model made, loops the repetition guard stopped, and time. Not a test: a small model's
answers are poor, and the figures go in the README.

    python bench/eval_workspace_qa.py [--only N] [--n-ctx 8192] [--max-tokens 1024] [--set chat.first_look=false]
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from imprintd import settings as settings_mod  # noqa: E402
from imprintd.chat import Chat  # noqa: E402
from imprintd.events import ToolStep  # noqa: E402
from imprintd.reply import ReplyRequest  # noqa: E402
from imprintd.research import first_look  # noqa: E402


@dataclass(frozen=True)
class Question:
    text: str
    answer: str  # a regular expression the answer must match (case-insensitive)
    path: str  # the file under httpx/ that holds the fact
    evidence: str  # text that file must contain for the question to stand
    #: A regular expression an answer stating the opposite matches ("Yes, … enables HTTP/2 by
    #: default"); such an answer is missed even where it also matches ``answer`` further on.
    wrong: str = ""


QUESTIONS = [
    Question(
        "What is the default timeout of an httpx client, in seconds?",
        r"\b5(\.0)?\b",
        "_config.py",
        "DEFAULT_TIMEOUT_CONFIG = Timeout(timeout=5.0)",
    ),
    Question(
        "How many redirects does httpx follow at most by default?",
        r"\b20\b",
        "_config.py",
        "DEFAULT_MAX_REDIRECTS = 20",
    ),
    Question(
        "What is the default maximum number of connections in httpx's connection pool limits?",
        r"\b100\b",
        "_config.py",
        "max_connections=100",
    ),
    Question(
        "How many keep-alive connections does httpx keep by default?",
        r"\b20\b",
        "_config.py",
        "max_keepalive_connections=20",
    ),
    Question(
        "What is the default keepalive_expiry of httpx Limits?",
        r"\b5(\.0)?\b",
        "_config.py",
        "keepalive_expiry: float | None = 5.0",
    ),
    Question(
        "What is the longest URL httpx accepts (MAX_URL_LENGTH)?", r"65,?536", "_urlparse.py", "MAX_URL_LENGTH = 65536"
    ),
    Question(
        "Which headers does httpx treat as sensitive and hide in repr?",
        r"authorization",
        "_models.py",
        'SENSITIVE_HEADERS = {"authorization", "proxy-authorization"}',
    ),
    Question(
        "What value replaces a sensitive header when httpx prints headers?", r"\[secure\]", "_models.py", '"[secure]"'
    ),
    Question(
        "What does follow_redirects default to in httpx's Client?",
        r"\bfalse\b",
        "_client.py",
        "follow_redirects: bool = False",
        wrong=r"follow_redirects\W*(=|is|defaults? to)\W*true\b",
    ),
    Question(
        "Does httpx's Client enable HTTP/2 by default?",
        r"\b(no|false|disabled|not)\b",
        "_client.py",
        "http2: bool = False",
        wrong=r"\byes\b|\benables? http/?2 by default",
    ),
    Question(
        "What is the default number of retries of httpx's HTTPTransport?",
        r"\b(0|zero|no retries)\b",
        "_transports/default.py",
        "retries: int = 0",
    ),
    Question(
        "What is the default encoding httpx uses for a response's text (default_encoding)?",
        r"utf-?8",
        "_models.py",
        'default_encoding: str | typing.Callable[[bytes], str] = "utf-8"',
    ),
    Question(
        "Which exception does httpx raise when there are too many redirects?",
        r"TooManyRedirects",
        "_client.py",
        "raise TooManyRedirects(",
    ),
    Question(
        "Which content decoders does httpx support (SUPPORTED_DECODERS)?",
        r"gzip",
        "_decoders.py",
        '"gzip": GZipDecoder',
    ),
    Question("What is the default port httpx assumes for the ftp scheme?", r"\b21\b", "_urlparse.py", '"ftp": 21'),
    Question(
        "Which hash function does httpx's DigestAuth use for the MD5 algorithm?",
        r"md5",
        "_auth.py",
        '"MD5": hashlib.md5',
    ),
    Question(
        "Which algorithm does httpx's DigestAuth assume when the challenge names none?",
        r"md5",
        "_auth.py",
        'header_dict.get("algorithm", "MD5")',
    ),
    Question(
        "What is the reason phrase of status code 418 in httpx's codes?",
        r"teapot",
        "_status_codes.py",
        "IM_A_TEAPOT = 418",
    ),
    Question(
        "What does trust_env default to in httpx's Client?",
        r"\btrue\b",
        "_client.py",
        "trust_env: bool = True",
        wrong=r"trust_env\W*(=|is|defaults? to)\W*false\b",
    ),
    Question(
        "What does the verify argument default to in httpx?",
        r"\btrue\b",
        "_config.py",
        "verify: ssl.SSLContext | str | bool = True",
        wrong=r"verify\W*(=|is|defaults? to)\W*false\b",
    ),
    Question(
        "What user agent does httpx send by default?",
        r"python-httpx",
        "_client.py",
        'USER_AGENT = f"python-httpx/{__version__}"',
    ),
    Question(
        "Which error does httpx raise for a URL that is too long?",
        r"InvalidURL",
        "_urlparse.py",
        'raise InvalidURL("URL too long")',
    ),
    Question(
        "What does httpx do with the method of a 303 See Other redirect (other than HEAD)?",
        r"(?<![\w.])(?-i:GET)\b(?!\.?\w|\()",  # the method, in capitals, not part of a name (httpx.request.GET)
        "_client.py",
        'codes.SEE_OTHER and method != "HEAD"',
    ),
]


@dataclass
class Recorder:
    """The reply's events; only its tool steps matter here (the first look is one)."""

    steps: list[ToolStep] = field(default_factory=list)

    def begin(self, session_id: str, reply_id: str) -> None: ...

    def text(self, delta: str) -> None: ...

    def reasoning(self, delta: str) -> None: ...

    def text_was_preamble(self) -> None: ...

    def progress(self, message: str, percentage: int | None = None) -> None: ...

    def tool_step(self, step: ToolStep) -> None:
        self.steps.append(step)

    def summary(self, text: str, first_seq: int, last_seq: int) -> None: ...

    def context_usage(self, usage) -> None: ...


@dataclass
class Row:
    question: Question
    answered: bool
    first_look_file: bool | None  # None: no first look was made
    tool_calls: int
    looped: bool
    seconds: float
    stop: str
    answer: str


def httpx_copy(into: Path) -> Path:
    spec = importlib.util.find_spec("httpx")
    assert spec and spec.origin, "httpx is a dependency of imprintd and must be installed"
    source = Path(spec.origin).parent
    target = into / "httpx"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    return into


def first_look_paths(messages) -> list[str] | None:
    """The files the first look showed the model (from the stored exchange), or None without one."""
    for index, message in enumerate(messages):
        if message.role == "assistant" and any(first_look.is_first_look(c.id) for c in message.tool_calls):
            return re.findall(r"^\[[^\]\n]+\] (\S+?):\d+", messages[index + 1].content, re.MULTILINE)
    return None


#: A line the daemon adds to an answer (cut off, repeated itself): not the model's words.
_DAEMON_LINE = re.compile(r"^\(The (answer|model) .*\)$", re.MULTILINE)
#: A list item's or heading's number at the start of a line ("# 5. ", "3) "): not an answer.
_ITEM_NUMBER = re.compile(r"^[ \t]*#*[ \t]*\d+[.)][ \t]+", re.MULTILINE)


def model_words(answer: str) -> str:
    """What an answer is judged on: the model's own words, without list numbers (a looping list
    "# 1. … # 5. …" does not answer "5 seconds") or the lines the daemon adds."""
    return _ITEM_NUMBER.sub("", _DAEMON_LINE.sub("", answer))


def answers(question: Question, answer: str) -> bool:
    """Whether ``answer`` states the question's fact (and not also its opposite)."""
    words = model_words(answer)
    if question.wrong and re.search(question.wrong, words, re.IGNORECASE):
        return False
    return re.search(question.answer, words, re.IGNORECASE) is not None


async def ask(chat: Chat, workspace: Path, question: Question) -> Row:
    started = time.perf_counter()
    outcome = await chat.reply(ReplyRequest(text=question.text, persist=False, workspace=str(workspace)), Recorder())
    seconds = time.perf_counter() - started
    stored = chat.session(outcome.session_id).messages
    seen = first_look_paths(stored)
    calls = [c for m in stored for c in m.tool_calls if not first_look.is_first_look(c.id)]
    return Row(
        question=question,
        answered=answers(question, outcome.text),
        first_look_file=None if seen is None else any(path.endswith(question.path) for path in seen),
        tool_calls=len(calls),
        looped=outcome.stop_reason == "repetition",
        seconds=seconds,
        stop=outcome.stop_reason,
        answer=outcome.text,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", type=int, default=0, help="ask only the first N questions")
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--model", default="", help="a GGUF path (default: the embedded SmolLM2-135M)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="another setting")
    parser.add_argument("--show", action="store_true", help="print each answer")
    args = parser.parse_args()

    values = {"chat.n_ctx": str(args.n_ctx), "chat.max_tokens": str(args.max_tokens), "chat.model": args.model}
    for item in args.set:
        key, _, value = item.partition("=")
        values[key] = value
    with tempfile.TemporaryDirectory() as home:
        import os

        os.environ.update(
            {
                "IMPRINT_DATA_DIR": f"{home}/data",
                "IMPRINT_CACHE_DIR": f"{home}/cache",
                "IMPRINT_CONFIG": f"{home}/none.toml",
            }
        )
        resolved = settings_mod.load(values, environ={})
        assert not resolved.errors, resolved.errors
        workspace = httpx_copy(Path(home) / "workspace")
        questions = [q for q in QUESTIONS if q.evidence in (workspace / "httpx" / q.path).read_text("utf-8")]
        for skipped in set(QUESTIONS) - set(questions):
            print(f"skipped (the installed httpx no longer says {skipped.evidence!r}): {skipped.text}")
        if args.only:
            questions = questions[: args.only]
        chat = Chat(resolved)
        rows = []
        try:
            for number, question in enumerate(questions, 1):
                row = anyio.run(ask, chat, workspace, question)
                rows.append(row)
                look = "-" if row.first_look_file is None else ("yes" if row.first_look_file else "no")
                print(
                    f"{number:2}. {'ANSWERED' if row.answered else 'missed  '} first look has file: {look:3}  "
                    f"tool calls: {row.tool_calls}  loop stopped: {'yes' if row.looped else 'no '}  "
                    f"{row.seconds:5.1f} s  ({row.stop})  {question.text}"
                )
                if args.show:
                    print("    " + row.answer.replace("\n", "\n    "))
        finally:
            chat.close()

    count = len(rows)
    looks = [row.first_look_file for row in rows if row.first_look_file is not None]
    print()
    print(f"questions:                     {count}")
    print(f"answers containing the fact:   {sum(row.answered for row in rows)} of {count}")
    print(
        f"first look held the file:      {sum(looks)} of {len(looks)}"
        if looks
        else "first look held the file:      (no first look made)"
    )
    print(
        f"tool calls made by the model:  {sum(row.tool_calls for row in rows)} in all, in {sum(row.tool_calls > 0 for row in rows)} replies"
    )
    print(f"loops stopped:                 {sum(row.looped for row in rows)}")
    print(
        f"time:                          {sum(row.seconds for row in rows):.0f} s in all, {max(row.seconds for row in rows):.0f} s at most"
    )


if __name__ == "__main__":
    main()
