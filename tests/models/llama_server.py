"""Runs llama-cpp-python's OpenAI-compatible server for the remote tests.

``python -m tests.models.llama_server --model X --port N ...`` is ``python -m llama_cpp.server``
with the same arguments, except that on llama.cpp builds that use AMX the model loads without
extra buffer types, as ``imprintd.models.local`` does: that build's AMX matmul segfaults on the
first multi-token batch (llama.cpp issue #20824), and the server offers no flag to turn it off.
"""

from __future__ import annotations


def main() -> None:
    from llama_cpp import llama_cpp as lib

    from imprintd.models.local import _has_amx

    if _has_amx():
        default_params = lib.llama_model_default_params

        def without_extra_buffers():
            params = default_params()
            params.use_extra_bufts = False
            return params

        # This process only serves tests; Llama.__init__ looks the function up on this module.
        lib.llama_model_default_params = without_extra_buffers

    from llama_cpp.server.__main__ import main as serve

    serve()


if __name__ == "__main__":
    main()
