"""The API key sent to a model server (``IMPRINT_CHAT_API_KEY``): checked before it goes into
an ``Authorization`` header, and put there, for the remote model and the served model list.
"""

from __future__ import annotations

from imprintd.models.base import ModelUnavailable

#: Where the key comes from.
API_KEY_ENV = "IMPRINT_CHAT_API_KEY"

#: What an API key may hold: printable ASCII, as HTTP headers carry it (RFC 9110 field values).
_KEY_CHARACTERS = frozenset(chr(code) for code in range(0x21, 0x7F))


def usable_api_key(key: str | None) -> str | None:
    """``key`` when an ``Authorization`` header can carry it; None for none.

    Raises ``ModelUnavailable`` naming ``IMPRINT_CHAT_API_KEY`` and what is accepted, without
    repeating the key: a line break or a character outside printable ASCII cannot go into a
    header, and the HTTP library's refusal would quote it.
    """
    if not key:
        return None
    bad = set(key) - _KEY_CHARACTERS
    if not bad:
        return key
    if bad & {"\r", "\n"}:
        what = "a line break (CR or LF; a file written on Windows ends its lines with CR LF)"
    elif bad & {" ", "\t"}:
        what = "a space or tab"
    elif any(ord(character) > 0x7E for character in bad):
        what = "a character outside ASCII"
    else:
        what = "a control character"
    raise ModelUnavailable(
        f"{API_KEY_ENV} holds {what}; an API key is accepted as printable ASCII (letters, digits "
        "and punctuation) without spaces or line breaks. Set it to the key alone."
    )


def request_headers(key: str | None, accept: str) -> dict[str, str]:
    """What a request to a model server carries: ``Accept: accept``, and the key (one that
    ``usable_api_key`` let through) as a bearer token when there is one."""
    headers = {"Accept": accept}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return headers
