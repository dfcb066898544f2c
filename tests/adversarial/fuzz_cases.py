"""Malformed frames and bodies for the fuzz test, each with the answer protocol.md promises.

A case is raw bytes to write to the daemon's stdin (whole frames, headers included) and
what must come back: an answer with a given code to a given id, an answer with ``"id":
null``, or nothing (notifications and client responses are never answered). Every case is
built to be invalid in one known way, so its answer is known without running anything. A case
that reaches the model brings the scripted model's replies with it.

Strings holding ``%`` (``PERCENT``) go into every string param, the method, the id, settings
and the model's error bodies: the logging of an answer must never format them (a ``%d`` that
raised once cost a request its answer).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.openai_stub import StubReply

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
REQUEST_FAILED = -32803


@dataclass
class Case:
    name: str
    data: bytes
    #: (id, code) answers that must come, each exactly once; code None means a result.
    answers: list[tuple[Any, int | None]] = field(default_factory=list)
    #: how many "id": null error answers must come (all of code ``null_code``).
    nulls: int = 0
    null_code: int = INVALID_REQUEST
    #: what the scripted model answers the case's requests that reach it, in order.
    model_replies: list[StubReply] = field(default_factory=list)


def frame(body: bytes, *, length: int | None = None, header: str | None = None) -> bytes:
    header = header if header is not None else f"Content-Length: {len(body) if length is None else length}"
    return f"{header}\r\n\r\n".encode() + body


def dumps(message: Any) -> bytes:
    return json.dumps(message).encode()


# -- what each imprint/* method accepts ------------------------------------------------------
# field -> (valid value, kind); kinds pick the wrong-typed values tried.
METHODS: dict[str, dict[str, tuple[Any, str]]] = {
    "imprint/chat": {
        "text": ("hi", "nonempty"),
        "sessionId": ("s", "str?"),
        "style": ("written", "style"),
        "persist": (False, "bool"),
        "workspace": ("/nowhere", "str?"),
        "workDoneToken": ("t", "token"),
    },
    "imprint/session": {"sessionId": ("missing", "nonempty")},
    "imprint/deleteSession": {"sessionId": ("missing", "nonempty")},
    "imprint/summary": {"sessionId": ("missing", "nonempty")},
    "imprint/read_chat_section": {
        "replyId": ("r", "nonempty"),
        "sourceId": ("s", "nonempty"),
        "start": (0, "nonneg"),
        "length": (5, "length"),
    },
    "imprint/conversation_history": {
        "sessionId": ("missing", "nonempty"),
        "query": ("q", "str?"),
        "offset": (0, "nonneg"),
    },
}
WRONG: dict[str, list[Any]] = {
    "nonempty": ["", 5, 1.5, True, None, [], {}, ["a"]],
    "str?": [5, 1.5, True, [], {}, ["a"]],
    "style": ["sung", "", 5, None, [], {}],
    "bool": [1, 0, "true", None, [], {}],
    "token": [1.5, True, [], {}, {"a": 1}],
    "nonneg": [-1, 1.5, "0", True, None, [], {}],
    "length": [0, 4001, -5, 2.5, "5", True, None, []],
}
#: Strings a %-format would read as directives, alone and inside text and paths.
PERCENT = ["%d", "%s", "%(x)s", "100%", "%", "%%", "%.99999f", "%n", "a%sb%d", "/no/such/%s/%(x)s", "100% of %d"]
NOT_PARAMS = [5, "x", True, 1.5]  # params that are neither an object nor an array: -32600
BAD_IDS = [True, False, 1.5, None, [], {}, [1], {"id": 1}, 1e400]
JUNK_VALUES = [0, -1, 2**70, 1.5, -0.0, "", "x" * 300, "é\u2028\u0000", True, None, [], {}, [[1]], {"a": {"b": [None]}}]


class CaseMaker:
    """Builds cases from a seeded ``random.Random``; ids come from one counter so none repeats."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.next_id = 1000

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def request(self, method: str, params: Any = None, **extra: Any) -> dict:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self.new_id(), "method": method, **extra}
        if params is not None:
            message["params"] = params
        return message

    def valid_params(self, method: str) -> dict:
        params = {name: value for name, (value, _) in METHODS[method].items()}
        if method == "imprint/conversation_history":
            params.pop("offset")
        return params

    # -- framing ----------------------------------------------------------------------------
    def no_content_length(self) -> Case:
        header = self.rng.choice(
            [
                "Content-Type: application/json",
                "X-Junk: 1",
                "Content-Lenght: 10",
                "Content-Length: -5",
                "Content-Length: 0x10",
                "Content-Length:",
            ]
        )
        return Case(f"header {header!r}", frame(b"", header=header), nulls=1)

    def empty_body(self) -> Case:
        return Case("Content-Length: 0", frame(b""), nulls=1, null_code=PARSE_ERROR)

    def odd_but_valid_header(self) -> Case:
        message = self.request("imprint/sessions", {})
        body = dumps(message)
        header = self.rng.choice(
            [
                f"content-length: {len(body)}",
                f"CONTENT-LENGTH:{len(body)}",
                f"Content-Length:   {len(body)}  ",
                f"Content-Length: 000{len(body)}",
                f"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\nContent-Length: {len(body)}",
            ]
        )
        return Case(f"header {header!r}", frame(body, header=header), answers=[(message["id"], None)])

    def odd_valid_id(self) -> Case:
        n = self.new_id()
        msg_id = self.rng.choice([-n, 2**62 + n, f"é中-{n}", f"{n}", f"{n} " + "x" * 500, f"😀{n}"])
        message = {"jsonrpc": "2.0", "id": msg_id, "method": "imprint/sessions"}
        return Case(f"id {msg_id!r:.30}", frame(dumps(message)), answers=[(msg_id, None)])

    def padded_length(self) -> Case:
        message = self.request("imprint/sessions", {})
        body = dumps(message) + b" " * self.rng.randint(1, 50)  # trailing white space is still JSON
        return Case("padded body", frame(body), answers=[(message["id"], None)])

    # -- bodies that are not JSON -----------------------------------------------------------
    def truncated(self) -> Case:
        body = dumps(self.request("imprint/chat", {"text": "hello there"}))
        cut = self.rng.randint(1, len(body) - 1)
        return Case(f"truncated at {cut}", frame(body[:cut]), nulls=1, null_code=PARSE_ERROR)

    def garbage(self) -> Case:
        size = self.rng.randint(1, 200)
        junk = bytes(self.rng.randrange(256) for _ in range(size))
        body = self.rng.choice([b"\xff", b"{\xfe", b"}", b"[,", b"nul!", b'"\\x"', b"{'a': 1}"]) + junk
        return Case("garbage", frame(body), nulls=1, null_code=PARSE_ERROR)

    def invalid_utf8(self) -> Case:
        body = b'{"jsonrpc": "2.0", "id": 1, "method": "imprint/chat", "params": {"text": "a\xff\xfeb"}}'
        return Case("invalid UTF-8", frame(body), nulls=1, null_code=PARSE_ERROR)

    def huge_integer(self) -> Case:
        body = b'{"jsonrpc": "2.0", "id": ' + b"9" * 5000 + b', "method": "imprint/sessions"}'
        return Case("5000-digit id", frame(body), nulls=1, null_code=PARSE_ERROR)

    # -- JSON that is not a JSON-RPC message -------------------------------------------------
    def not_an_object(self) -> Case:
        value = self.rng.choice([[], [self.request("imprint/sessions")], 42, "text", None, True, 1.5])
        return Case(f"top level {value!r:.40}", frame(dumps(value)), nulls=1)

    def bad_id(self) -> Case:
        bad = self.rng.choice(BAD_IDS)
        body = json.dumps({"jsonrpc": "2.0", "id": bad, "method": "imprint/sessions"}).replace("Infinity", "1e400")
        return Case(f"id {bad!r}", frame(body.encode()), nulls=1)

    def bad_version(self) -> Case:
        message = self.request("imprint/sessions", {})
        version = self.rng.choice([None, "1.0", 2.0, "2", "", [], "DROP"])
        if version == "DROP":
            message.pop("jsonrpc")
        else:
            message["jsonrpc"] = version
        return Case(f"jsonrpc {version!r}", frame(dumps(message)), answers=[(message["id"], INVALID_REQUEST)])

    def bad_method(self) -> Case:
        message = self.request("imprint/sessions", {})
        message["method"] = self.rng.choice([5, None, [], {}, True])
        return Case(f"method {message['method']!r}", frame(dumps(message)), answers=[(message["id"], INVALID_REQUEST)])

    def bad_params_container(self) -> Case:
        method = self.rng.choice([*METHODS, "imprint/sessions", "shutdown"])
        message = self.request(method, self.rng.choice(NOT_PARAMS))
        return Case(
            f"{method} params {message['params']!r}", frame(dumps(message)), answers=[(message["id"], INVALID_REQUEST)]
        )

    def neither_request_nor_response(self) -> Case:
        msg_id = self.new_id()
        return Case(
            "no method, no result", frame(dumps({"jsonrpc": "2.0", "id": msg_id})), answers=[(msg_id, INVALID_REQUEST)]
        )

    def stray_response(self) -> Case:
        message = {
            "jsonrpc": "2.0",
            "id": self.new_id(),
            self.rng.choice(["result", "error"]): self.rng.choice(JUNK_VALUES),
        }
        return Case("a response nobody asked for", frame(dumps(message)))

    def unknown_method(self) -> Case:
        method = self.rng.choice(["imprint/nope", "$/somethingNew", "textDocument/madeUp", "", "imprint/CHAT"])
        message = self.request(method, {})
        return Case(f"unknown {method!r}", frame(dumps(message)), answers=[(message["id"], METHOD_NOT_FOUND)])

    def unknown_notification(self) -> Case:
        method = self.rng.choice(["imprint/nope", "$/unknown", "textDocument/didOpen", "$/setTrace", "initialized"])
        params = self.rng.choice([{}, {"value": 5}, {"textDocument": 3}, {"x": JUNK_VALUES}])
        return Case(f"notification {method}", frame(dumps({"jsonrpc": "2.0", "method": method, "params": params})))

    def second_initialize(self) -> Case:
        message = self.request(
            "initialize", self.rng.choice([{"processId": None, "capabilities": {}}, {"processId": "x"}, {}])
        )
        expected = (
            INVALID_REQUEST
            if "processId" in message["params"] and message["params"]["processId"] is None
            else INVALID_PARAMS
        )
        return Case("second initialize", frame(dumps(message)), answers=[(message["id"], expected)])

    def bad_lsp_params(self) -> Case:
        method, params = self.rng.choice(
            [
                ("textDocument/hover", {"textDocument": 5}),
                ("textDocument/hover", {"position": {"line": "a"}}),
                ("initialize", {"processId": "not a number", "capabilities": {}}),
                ("textDocument/definition", []),
            ]
        )
        message = self.request(method, params)
        # A second initialize is refused as such only once its params are read.
        return Case(f"{method} {params!r:.40}", frame(dumps(message)), answers=[(message["id"], INVALID_PARAMS)])

    # -- params of the wrong shape, every method, every field --------------------------------
    def wrong_field(self) -> Case:
        method = self.rng.choice(list(METHODS))
        name = self.rng.choice(list(METHODS[method]))
        wrong = self.rng.choice(WRONG[METHODS[method][name][1]])
        params = {**self.valid_params(method), name: wrong}
        if method == "imprint/conversation_history" and name == "query" and wrong is None:
            params.pop("query")
        message = self.request(method, params)
        return Case(f"{method} {name}={wrong!r:.30}", frame(dumps(message)), answers=[(message["id"], INVALID_PARAMS)])

    def missing_field(self) -> Case:
        method = self.rng.choice([m for m in METHODS if m != "imprint/conversation_history"])
        required = [
            name
            for name, (_, kind) in METHODS[method].items()
            if kind in ("nonempty", "nonneg", "length") and not (method == "imprint/chat" and name != "text")
        ]
        params = self.valid_params(method)
        params.pop(self.rng.choice(required))
        message = self.request(method, params)
        return Case(f"{method} missing a field", frame(dumps(message)), answers=[(message["id"], INVALID_PARAMS)])

    def params_as_array(self) -> Case:
        method = self.rng.choice(list(METHODS))
        message = self.request(method, self.rng.choice([[], ["hi"], [{"text": "hi"}]]))
        return Case(f"{method} params as array", frame(dumps(message)), answers=[(message["id"], INVALID_PARAMS)])

    def unknown_session(self) -> Case:
        method = self.rng.choice(["imprint/session", "imprint/deleteSession", "imprint/summary"])
        message = self.request(method, {"sessionId": "".join(self.rng.choice("abc\u00e9\u4e2d ") for _ in range(12))})
        return Case(f"{method} unknown session", frame(dumps(message)), answers=[(message["id"], INVALID_PARAMS)])

    # -- nesting and encodings ---------------------------------------------------------------
    def deep_body(self) -> Case:
        depth = self.rng.choice([65, 200, 1000, 5000, 100_000])
        opener, closer = self.rng.choice([(b"[", b"]"), (b'{"a":', b"}")])
        return Case(f"{depth} nested", frame(opener * depth + b"1" + closer * depth), nulls=1)

    def deep_params(self) -> Case:
        depth = self.rng.choice([65, 100, 500])
        value: Any = 1
        for _ in range(depth):
            value = [value] if self.rng.random() < 0.5 else {"k": value}
        method = self.rng.choice([*METHODS, "imprint/sessions"])
        message = self.request(method, {**(self.valid_params(method) if method in METHODS else {}), "extra": value})
        return Case(
            f"{method} params nested {depth}", frame(dumps(message)), answers=[(message["id"], INVALID_REQUEST)]
        )

    def shallow_params(self) -> Case:
        value: Any = "leaf"
        for _ in range(self.rng.randint(1, 60)):
            value = [value]
        message = self.request("imprint/sessions", {"extra": value})
        return Case("sessions with nested extra", frame(dumps(message)), answers=[(message["id"], None)])

    def lone_surrogate_param(self) -> Case:
        method = self.rng.choice(list(METHODS))
        name = self.rng.choice(list(METHODS[method]))
        text = self.rng.choice(["\udc80", "a\ud800b", "\udfff tail", "x" * 50 + "\ud83d"])
        message = self.request(method, {**self.valid_params(method), name: text})
        data = dumps(message)
        if self.rng.random() < 0.5:  # the same as raw bytes, which json.loads reads with surrogatepass
            data = json.dumps(message, ensure_ascii=False).encode("utf-8", "surrogatepass")
        return Case(f"{method} {name} with a lone surrogate", frame(data), answers=[(message["id"], INVALID_PARAMS)])

    def lone_surrogate_elsewhere(self) -> Case:
        if self.rng.random() < 0.5:
            message = self.request("imprint/\udc80")
            return Case(
                "method with a lone surrogate", frame(dumps(message)), answers=[(message["id"], INVALID_REQUEST)]
            )
        return Case(
            "id with a lone surrogate",
            frame(dumps({"jsonrpc": "2.0", "id": "q\ud800", "method": "imprint/sessions"})),
            nulls=1,
        )

    def lone_surrogate_notification(self) -> Case:
        message = {
            "jsonrpc": "2.0",
            "method": "workspace/didChangeConfiguration",
            "params": {"settings": {"chat": {"model": "m\udc80"}}},
        }
        return Case("notification with a lone surrogate", frame(dumps(message)))

    def cancel_with_bad_id(self) -> Case:
        bad = self.rng.choice([{"a": 1}, [1], True, 1.5, None, "unknown", 123456789])
        return Case(
            f"cancel {bad!r}", frame(dumps({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": bad}}))
        )

    def editor_settings(self) -> Case:
        settings = self.rng.choice(
            [
                5,
                "x",
                [1],
                {"imprint": 5},
                {"imprint": [1]},
                {"imprint": {"chat": 5}},
                {"chat": {"n_ctx": "big"}},
                {"chat.nope": 1},
                None,
                {},
            ]
        )
        return Case(
            f"settings {settings!r}",
            frame(
                dumps(
                    {"jsonrpc": "2.0", "method": "workspace/didChangeConfiguration", "params": {"settings": settings}}
                )
            ),
        )

    # -- strings holding '%', in every string param and error path ------------------------------
    def percent(self) -> str:
        return self.rng.choice(PERCENT)

    def percent_in_every_param(self) -> Case:
        """One request per method with each of its string params holding '%'; all refused."""
        data, answers = b"", []
        for method, fields in METHODS.items():
            params = self.valid_params(method)
            for name, (value, _) in fields.items():
                if isinstance(value, str) and name != "style":
                    params[name] = self.percent()
            if method == "imprint/chat":  # a missing workspace and an unknown session: -32602 either way
                params["workspace"] = "/no/such/" + self.percent()
            message = self.request(method, params)
            data += frame(dumps(message))
            answers.append((message["id"], INVALID_PARAMS))
        style = self.request("imprint/chat", {"text": "hi", "style": self.percent()})
        data += frame(dumps(style))
        answers.append((style["id"], INVALID_PARAMS))
        return Case("'%' in every string param", data, answers=answers)

    def percent_in_method_and_id(self) -> Case:
        unknown = self.request("imprint/" + self.percent(), {})
        msg_id = f"{self.percent()}-{self.new_id()}"
        named = {"jsonrpc": "2.0", "id": msg_id, "method": "imprint/session", "params": {"sessionId": self.percent()}}
        hover = self.request("textDocument/hover", {"textDocument": self.percent(), "position": self.percent()})
        return Case(
            "'%' in the method, the id and an LSP param",
            frame(dumps(unknown)) + frame(dumps(named)) + frame(dumps(hover)),
            answers=[(unknown["id"], METHOD_NOT_FOUND), (msg_id, INVALID_PARAMS), (hover["id"], INVALID_PARAMS)],
        )

    def percent_in_notifications(self) -> Case:
        # Refused values (a base_url that is accepted would send later cases' chats elsewhere).
        settings = {"chat": {"n_ctx": self.percent(), "base_url": "ftp://u:" + self.percent() + "@h/v1"}}
        notifications = [
            {"method": "workspace/didChangeConfiguration", "params": {"settings": settings}},
            {"method": "textDocument/didOpen", "params": {"textDocument": self.percent()}},
            {"method": "$/cancelRequest", "params": {"id": self.percent()}},
            {"method": "imprint/" + self.percent(), "params": {"x": self.percent()}},
        ]
        data = b"".join(frame(dumps({"jsonrpc": "2.0", **n})) for n in notifications)
        return Case("'%' in settings and notifications", data)

    def percent_in_model_errors(self) -> Case:
        """A chat that reaches the model, whose text, answer or error holds '%'."""
        reply = self.rng.choice(
            [
                StubReply(
                    status=429,
                    body=json.dumps({"error": {"message": f"You used 100% of your quota {self.percent()}"}}),
                    headers={"Retry-After": "0"},  # retried at once: the test need not wait out the backoff
                ),
                StubReply(status=500, body=f"{self.percent()} upstream {self.percent()}", headers={"Retry-After": "0"}),
                StubReply(raw_events=[json.dumps({"choices": self.percent()})]),
                StubReply(raw_events=[f"{{{self.percent()}"]),
                StubReply(text=f"Sure: 100% {self.percent()}."),
            ]
        )
        message = self.request("imprint/chat", {"text": f"{self.percent()} {self.percent()}", "persist": False})
        code = None if reply.text else REQUEST_FAILED
        # A transient status is asked again (three retries), each retry answered the same way.
        tries = 4 if reply.status in (429, 500) else 1
        return Case(
            f"model answer {reply.status}",
            frame(dumps(message)),
            answers=[(message["id"], code)],
            model_replies=[reply] * tries,
        )

    def all_makers(self) -> list[Callable[[], Case]]:
        return [
            getattr(self, name)
            for name in (
                "no_content_length",
                "empty_body",
                "odd_but_valid_header",
                "odd_valid_id",
                "padded_length",
                "truncated",
                "garbage",
                "invalid_utf8",
                "huge_integer",
                "not_an_object",
                "bad_id",
                "bad_version",
                "bad_method",
                "bad_params_container",
                "neither_request_nor_response",
                "stray_response",
                "unknown_method",
                "unknown_notification",
                "second_initialize",
                "bad_lsp_params",
                "wrong_field",
                "missing_field",
                "params_as_array",
                "unknown_session",
                "deep_body",
                "deep_params",
                "shallow_params",
                "lone_surrogate_param",
                "lone_surrogate_elsewhere",
                "lone_surrogate_notification",
                "cancel_with_bad_id",
                "editor_settings",
                "percent_in_every_param",
                "percent_in_method_and_id",
                "percent_in_notifications",
                "percent_in_model_errors",
            )
        ]
