"""Does a small local model answer questions about real code? An evaluation you can rerun offline.

Two question sets, each on the source of an installed package nobody on this project wrote,
copied into a temporary folder; each question is asked in a fresh session (persistence off),
with the embedded SmolLM2-135M unless ``--model`` names another GGUF:

- ``--questions tuning`` (the default): 23 questions on httpx, which imprintd depends on. The
  first look's constants were chosen on these, so their figure is in-sample.
- ``--questions held-out``: 22 questions on llama-cpp-python (``llama_cpp``: its server settings,
  sampling defaults, caches), which no constant was chosen on.

Every question has a known answer, a pattern the answer must contain, and the file that holds
it; a question whose fact the installed package no longer holds is skipped, named. The judge:

- reads the model's words only: the daemon's ``Sources:`` list, the findings it lists after a
  cut or when no answer was written, the lines it adds ("(The answer was cut off …)",
  "Research stopped early: …"), citation markers ``[n]`` and list numbers are removed first;
- counts a match only in a sentence that says more than the question did (a sentence whose
  every term is the question's, such as the question repeated, never answers it);
- misses an answer that states the opposite (``wrong``: "Yes, … enables HTTP/2"), and a
  negative answer needs a claim ("No", "not enabled", "disabled", "False"), not any "not".

It reports, per question and in all: answers judged right, whether the first look (the
workspace search made before the model's first round) held the answer's file, the tool calls
the model made, loops the repetition guard stopped, and time; ``--save`` writes every answer
and its sources (with the lines each names) as JSON. Not a test: a small model's answers are poor, and the figures go in docs/benchmarks.md.

    python bench/eval_workspace_qa.py [--questions tuning|held-out] [--only N] [--n-ctx 8192]
        [--max-tokens 1024] [--set chat.first_look=false] [--show] [--save answers.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import msgspec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from imprintd import settings as settings_mod  # noqa: E402
from imprintd.chat import Chat  # noqa: E402
from imprintd.events import ToolStep  # noqa: E402
from imprintd.messages import is_first_look  # noqa: E402
from imprintd.reply import ReplyRequest  # noqa: E402


@dataclass(frozen=True)
class Question:
    text: str
    answer: str  # a regular expression the answer must match (case-insensitive)
    path: str  # the file under the package's folder that holds the fact
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
        # A claim, not any "not" ("I could not find that" says nothing about HTTP/2).
        r"^\W*no\b|\bnot\s+(enabled|on|used)\b|\bdisabled\b|\bdoes(n't| not) (enable|use)\b|\bfalse\b",
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


#: The held-out set: the source of llama-cpp-python (installed with imprintd; the server's
#: settings come with the ``test`` extra's ``llama-cpp-python[server]``). No constant of the
#: daemon or of this judge was chosen on these questions: they report, they do not tune.
HELD_OUT = [
    Question(
        "What is the default context size (n_ctx) in llama_cpp's server settings?",
        r"\b2,?048\b",
        "server/settings.py",
        'n_ctx: int = Field(default=2048, ge=0, description="The context size.")',
    ),
    Question(
        "Which port does the llama_cpp server listen on by default?",
        r"\b8000\b",
        "server/settings.py",
        'port: int = Field(default=8000, description="Listen port")',
    ),
    Question(
        "Which host does the llama_cpp server listen on by default?",
        r"\blocalhost\b",
        "server/settings.py",
        'host: str = Field(default="localhost", description="Listen address")',
    ),
    Question(
        "What is the default batch size (n_batch) in llama_cpp's server settings?",
        r"\b512\b",
        "server/settings.py",
        'default=512, ge=1, description="The batch size to use per eval."',
    ),
    Question(
        "What is the default last_n_tokens_size in llama_cpp's server settings?",
        r"\b64\b",
        "server/settings.py",
        "default=64,",
    ),
    Question(
        "Which cache type does the llama_cpp server use by default (cache_type)?",
        r"\bram\b",
        "server/settings.py",
        'default="ram",',
        wrong=r"cache_type\W*(=|is|defaults? to)\W*disk\b",
    ),
    Question(
        "How many tokens does the llama_cpp server's draft model predict by default (draft_model_num_pred_tokens)?",
        r"\b10\b",
        "server/settings.py",
        "default=10,",
    ),
    Question(
        "Does the llama_cpp server use flash attention by default?",
        r"^\W*no\b|\bnot\s+(enabled|on|used)\b|\bdisabled\b|\bdoes(n't| not) use\b|\bfalse\b",
        "server/settings.py",
        'default=False, description="Whether to use flash attention."',
        wrong=r"\byes\b|\buses flash attention by default",
    ),
    Question(
        "What is the default temperature of llama_cpp's create_completion?",
        r"\b0?\.8\b",
        "llama.py",
        "temperature: float = 0.8",
    ),
    Question("What is the default top_k of llama_cpp's create_completion?", r"\b40\b", "llama.py", "top_k: int = 40"),
    Question(
        "What is the default top_p of llama_cpp's create_completion?", r"\b0?\.95\b", "llama.py", "top_p: float = 0.95"
    ),
    Question(
        "What is the default min_p of llama_cpp's create_completion?", r"\b0?\.05\b", "llama.py", "min_p: float = 0.05"
    ),
    Question(
        "What is the default max_tokens of llama_cpp's create_completion?",
        r"\b16\b",
        "llama.py",
        "max_tokens: Optional[int] = 16",
    ),
    Question(
        "What is the default repeat_penalty of llama_cpp's create_completion?",
        r"\b1\.0\b",
        "llama.py",
        "repeat_penalty: float = 1.0",
    ),
    Question(
        "What is the value of LLAMA_DEFAULT_SEED in llama_cpp?",
        r"0xffffffff|4,?294,?967,?295",
        "llama_cpp.py",
        "LLAMA_DEFAULT_SEED = 0xFFFFFFFF",
    ),
    Question(
        "What is LLAMA_SESSION_MAGIC set to in llama_cpp?",
        r"LLAMA_FILE_MAGIC_GGSN|0x6767736e|\bggsn\b",
        "llama_cpp.py",
        "LLAMA_SESSION_MAGIC = LLAMA_FILE_MAGIC_GGSN",
    ),
    Question(
        "What is the default capacity of llama_cpp's LlamaRAMCache, in bytes?",
        r"2\s*<<\s*30|2,?147,?483,?648|\b2\s*gi?b\b",
        "llama_cache.py",
        "capacity_bytes: int = (2 << 30)",
    ),
    Question(
        "Which directory does llama_cpp's LlamaDiskCache use by default?",
        r"\.cache/llama_cache",
        "llama_cache.py",
        'cache_dir: str = ".cache/llama_cache"',
    ),
    Question(
        "Does the llama_cpp server interrupt requests when a new request is received, by default?",
        r"^\W*yes\b|\btrue\b|\binterrupts\b",
        "server/settings.py",
        'description="Whether to interrupt requests when a new request is received."',
        wrong=r"^\W*no\b|interrupt_requests\W*(=|is|defaults? to)\W*false\b",
    ),
    Question(
        "What is the default yarn_beta_fast in llama_cpp's server settings?",
        r"\b32(\.0)?\b",
        "server/settings.py",
        "yarn_beta_fast: float = Field(default=32.0)",
    ),
    Question(
        "Does the llama_cpp server print debug information by default (verbose)?",
        r"^\W*yes\b|\btrue\b",
        "server/settings.py",
        'default=True, description="Whether to print debug information."',
        wrong=r"^\W*no\b|verbose\W*(=|is|defaults? to)\W*false\b",
    ),
    Question(
        "Which class does llama_cpp use for an in-memory cache of model states?",
        r"LlamaRAMCache",
        "llama_cache.py",
        "class LlamaRAMCache(BaseLlamaCache):",
    ),
]

#: Each question set: the installed package whose source is the workspace, and its questions.
SETS = {"tuning": ("httpx", QUESTIONS), "held-out": ("llama_cpp", HELD_OUT)}


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

    async def ask_permission(self, request) -> str:
        return "reject"  # no MCP servers in the evaluation; a tool that may act would not run

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
    sources: list[dict] = field(default_factory=list)

    def saved(self) -> dict:
        return {
            "question": self.question.text,
            "answered": self.answered,
            "stop": self.stop,
            "answer": self.answer,
            "sources": self.sources,
        }


def package_copy(package: str, into: Path) -> Path:
    """The installed ``package``'s source (its Python files) under ``into/<package>``."""
    spec = importlib.util.find_spec(package)
    assert spec and spec.origin, f"{package} is installed with imprintd's test extra and must be installed"
    source = Path(spec.origin).parent
    shutil.copytree(
        source, into / package, ignore=shutil.ignore_patterns("__pycache__", "lib", "*.so", "*.so.*", "*.dylib")
    )
    return into


def first_look_paths(messages) -> list[str] | None:
    """The files the first look showed the model (from the stored exchange), or None without one."""
    for index, message in enumerate(messages):
        if message.role == "assistant" and any(is_first_look(c) for c in message.tool_calls):
            return re.findall(r"^\[[^\]\n]+\] (\S+?):\d+", messages[index + 1].content, re.MULTILINE)
    return None


#: A line the daemon adds to an answer (cut off, repeated itself, stopped early): not the model's words.
_DAEMON_LINE = re.compile(r"^(\(The (answer|model) .*\)|Research stopped early: .*)$", re.MULTILINE)
#: Where the daemon's own text starts and runs to the end: the findings it lists from its notes
#: when an answer was cut short or never written, and the Sources list.
_DAEMON_TAIL = re.compile(
    r"(^\(The answer was cut short\. The strongest findings of the research:\)"
    r"|^I couldn't write (a full answer|an answer)\b"
    r"|^Sources:\n\[\d+\] )",
    re.MULTILINE,
)
#: A citation marker the model wrote ("[5]", "[2, 3]"): a number, but not an answer.
_MARKER = re.compile(r"\[\d+(?:\s*[,\-–]\s*\d+)*\]")
#: A list item's or heading's number at the start of a line ("# 5. ", "3) "): not an answer.
_ITEM_NUMBER = re.compile(r"^[ \t]*#*[ \t]*\d+[.)][ \t]+", re.MULTILINE)
#: Where a sentence ends: ".", "!" or "?" before a space, or a line break.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_TERM = re.compile(r"[a-z0-9_]+(?:[./-][a-z0-9_]+)*")


def model_words(answer: str) -> str:
    """What an answer is judged on: the model's own words, without the daemon's (the Sources
    list, the findings after a cut, the lines it adds), citation markers, or list numbers (a
    looping list "# 1. … # 5. …" does not answer "5 seconds")."""
    tail = _DAEMON_TAIL.search(answer)
    words = answer[: tail.start()] if tail else answer
    return _ITEM_NUMBER.sub("", _MARKER.sub("", _DAEMON_LINE.sub("", words)))


def _copies_question(sentence: str, question: str) -> bool:
    """Whether ``sentence`` says nothing the question did not: every term of it is the question's."""
    terms = set(_TERM.findall(sentence.lower()))
    return bool(terms) and terms <= set(_TERM.findall(question.lower()))


def answers(question: Question, answer: str) -> bool:
    """Whether ``answer`` states the question's fact (and not also its opposite), in a sentence
    of the model's own that says more than the question did."""
    words = model_words(answer)
    if question.wrong and re.search(question.wrong, words, re.IGNORECASE):
        return False
    return any(
        re.search(question.answer, sentence, re.IGNORECASE) and not _copies_question(sentence, question.text)
        for sentence in _SENTENCE_END.split(words)
    )


def _with_text(source: dict, workspace: Path) -> dict:
    """A saved source with the lines it names (what the model read there, near enough to label by)."""
    if source.get("path") and source.get("start_line"):
        lines = (workspace / source["path"]).read_text("utf-8").splitlines()
        source["text"] = "\n".join(lines[source["start_line"] - 1 : source["end_line"]])
    return source


async def ask(chat: Chat, workspace: Path, question: Question) -> Row:
    started = time.perf_counter()
    outcome = await chat.reply(ReplyRequest(text=question.text, persist=False, workspace=str(workspace)), Recorder())
    seconds = time.perf_counter() - started
    stored = chat.session(outcome.session_id).messages
    seen = first_look_paths(stored)
    calls = [c for m in stored for c in m.tool_calls if not is_first_look(c)]
    return Row(
        question=question,
        answered=answers(question, outcome.text),
        first_look_file=None if seen is None else any(path.endswith(question.path) for path in seen),
        tool_calls=len(calls),
        looped=outcome.stop_reason == "repetition",
        seconds=seconds,
        stop=outcome.stop_reason,
        answer=outcome.text,
        sources=[_with_text(msgspec.to_builtins(source), workspace) for source in outcome.sources],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", type=int, default=0, help="ask only the first N questions")
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--model", default="", help="a GGUF path (default: the embedded SmolLM2-135M)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="another setting")
    parser.add_argument("--show", action="store_true", help="print each answer")
    parser.add_argument(
        "--questions", choices=sorted(SETS), default="tuning", help="httpx (tuning) or llama_cpp (held out)"
    )
    parser.add_argument("--save", default="", metavar="FILE", help="write each answer and its sources as JSON")
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
        package, asked = SETS[args.questions]
        workspace = package_copy(package, Path(home) / "workspace")
        questions = [q for q in asked if q.evidence in (workspace / package / q.path).read_text("utf-8")]
        for skipped in set(asked) - set(questions):
            print(f"skipped (the installed {package} no longer says {skipped.evidence!r}): {skipped.text}")
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
            if args.save:
                Path(args.save).write_text(json.dumps([row.saved() for row in rows], indent=1), encoding="utf-8")

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
