"""Chat models: the interface (``base``) and its providers (``local``, ``remote``)."""

from imprintd.models.base import Completion, Model, ModelError, ModelUnavailable, Usage

__all__ = ["Completion", "Model", "ModelError", "ModelUnavailable", "Usage"]
