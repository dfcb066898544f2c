"""The models an OpenAI-compatible server offers (``GET {chat.base_url}/models``), for ``imprint/models``
when ``chat.provider`` is ``openai`` (issue 34).

One short request (``TIMEOUT_S``), the API key in the Authorization header as the chat sends it; a
server that cannot be reached or answers something else is named in the error, never the key.
"""

from __future__ import annotations

import os

import httpx

from imprintd.models.base import ModelError
from imprintd.models.remote import API_KEY_ENV, tls_context, usable_api_key

TIMEOUT_S = 10.0


def served_models(base_url: str) -> list[str]:
    """The ids the server lists, in its order; ModelError naming what went wrong."""
    headers = {"Accept": "application/json"}
    key = usable_api_key(os.environ.get(API_KEY_ENV))
    if key:
        headers["Authorization"] = f"Bearer {key}"
    url = base_url.rstrip("/") + "/models"
    try:
        response = httpx.get(url, headers=headers, timeout=TIMEOUT_S, verify=tls_context())
    except httpx.HTTPError as error:
        raise ModelError(
            f"the model server at {base_url} could not be asked for its models: {type(error).__name__}"
        ) from None
    if response.status_code != 200:
        raise ModelError(f"the model server answered {response.status_code} to GET /models")
    try:
        data = response.json().get("data", [])
        return [str(item["id"]) for item in data if isinstance(item, dict) and "id" in item]
    except (ValueError, AttributeError, TypeError):
        raise ModelError("the model server's /models answer is not an OpenAI model list") from None
