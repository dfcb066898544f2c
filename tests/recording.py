"""ReplyEvents that record everything, in order, for assertions."""

from __future__ import annotations

from dataclasses import dataclass, field

from imprintd.events import PermissionAnswer, PermissionRequest, ToolStep


@dataclass
class RecordingEvents:
    #: Every event as (kind, payload), in the order it came.
    log: list[tuple[str, object]] = field(default_factory=list)
    #: What ``ask_permission`` answers (a front door that cannot ask says "reject").
    permission: PermissionAnswer = "reject"

    async def ask_permission(self, request: PermissionRequest) -> PermissionAnswer:
        self.log.append(("permission", request))
        return self.permission

    def begin(self, session_id: str, reply_id: str) -> None:
        self.log.append(("begin", (session_id, reply_id)))

    def text(self, delta: str) -> None:
        self.log.append(("text", delta))

    def reasoning(self, delta: str) -> None:
        self.log.append(("reasoning", delta))

    def text_was_preamble(self) -> None:
        self.log.append(("preamble", None))

    def progress(self, message: str, percentage: int | None = None) -> None:
        self.log.append(("progress", message))

    def tool_step(self, step: ToolStep) -> None:
        self.log.append(("tool_step", step))

    def summary(self, text: str, first_seq: int, last_seq: int) -> None:
        self.log.append(("summary", (text, first_seq, last_seq)))

    def context_usage(self, usage) -> None:
        self.log.append(("context_usage", usage))

    def notice(self, message: str) -> None:
        self.log.append(("notice", message))

    @property
    def streamed(self) -> str:
        return "".join(payload for kind, payload in self.log if kind == "text")

    @property
    def parts(self) -> list[tuple[str, str]]:
        """The streamed text by part, each as ("preamble" or "answer", its text); empty parts left out."""
        parts, current = [], ""
        for kind, payload in self.log:
            if kind == "text":
                current += payload
            elif kind == "preamble":
                if current:
                    parts.append(("preamble", current))
                current = ""
        return parts + ([("answer", current)] if current else [])

    @property
    def thought(self) -> str:
        """Every piece of reasoning streamed, joined."""
        return "".join(payload for kind, payload in self.log if kind == "reasoning")

    @property
    def progress_messages(self) -> list[str]:
        return [payload for kind, payload in self.log if kind == "progress"]

    @property
    def steps(self) -> list[ToolStep]:
        return [payload for kind, payload in self.log if kind == "tool_step"]

    @property
    def usages(self) -> list:
        return [payload for kind, payload in self.log if kind == "context_usage"]

    @property
    def summaries(self) -> list[tuple[str, int, int]]:
        return [payload for kind, payload in self.log if kind == "summary"]

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.log]
