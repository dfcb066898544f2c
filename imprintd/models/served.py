"""The models an OpenAI-compatible server offers (``GET {chat.base_url}/models``), for
``imprint/models`` and the ACP model picker.

A server is not trusted to answer sensibly: the list is asked with ``server_http``'s bounded
request, which gives up after ``TIMEOUT_S`` in all (connecting, waiting and reading together,
not per read), reads at most ``MAX_BODY_BYTES`` as sent and as decoded (a gzip bomb stops
there) and refuses JSON nested deeper than ``MAX_NESTING``; ``served_models`` keeps the first
``MAX_IDS`` ids of at most ``MAX_ID_LENGTH`` characters. Each refusal is a ``ModelError`` naming
what was wrong; the API key goes in the Authorization header as the chat sends it, and is never
in a message.
"""

from __future__ import annotations

import logging
import os

from imprintd.models import server_http
from imprintd.models.api_key import API_KEY_ENV, request_headers, usable_api_key
from imprintd.models.base import ModelError
from imprintd.models.server_http import BoundedRequestError, Bounds, request_json_sync

logger = logging.getLogger(__name__)

#: A whole request, from connecting to the body's last byte.
TIMEOUT_S = 10.0
#: Bytes of a body, both as sent and once decoded (gzip, deflate).
MAX_BODY_BYTES = 8 << 20
#: Arrays and objects nested deeper than this are refused (a model list nests 3 or 4 levels).
MAX_NESTING = server_http.MAX_NESTING
#: Ids kept from one list, and the longest id kept.
MAX_IDS = 1_000
MAX_ID_LENGTH = 256


def served_models(base_url: str, *, timeout_s: float | None = None) -> list[str]:
    """The ids the server lists, in its order (the first ``MAX_IDS``), asked within ``timeout_s``
    (``TIMEOUT_S``); ModelError naming what went wrong."""
    headers = request_headers(usable_api_key(os.environ.get(API_KEY_ENV)), "application/json")
    url = base_url.rstrip("/") + "/models"
    try:
        bounds = Bounds(timeout_s=timeout_s or TIMEOUT_S, max_bytes=MAX_BODY_BYTES, max_nesting=MAX_NESTING)
        answer = request_json_sync("GET", url, bounds, headers=headers)
    except BoundedRequestError as error:
        if error.status is not None:
            raise ModelError(f"the model server answered {error.status} to GET /models") from None
        raise ModelError(f"the model server at {base_url} could not be asked for its models: {error.problem}") from None
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list):
        raise ModelError(f"the model server at {base_url} did not answer GET /models with an OpenAI model list")
    ids = [item["id"] for item in data if isinstance(item, dict) and isinstance(item.get("id"), str)]
    kept = [name for name in ids if 0 < len(name) <= MAX_ID_LENGTH]
    if len(kept) > MAX_IDS:
        logger.info("the model server at %s lists %d models: the first %d are offered", base_url, len(kept), MAX_IDS)
    return kept[:MAX_IDS]
