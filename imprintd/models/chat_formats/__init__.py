"""Chat formats: how each model family writes tool calls and reasoning, one definition per format.

- ``format.py``: what an entry is (``ChatFormat``: detection, parser, earlier calls and ids,
  call grammar, reasoning) and ``CallWatch``, which finishes a call under its grammar;
- ``table.py``: the entries in detection order, by name (the wire's ``chatFormat``), detection;
- one module per family: ``hermes.py`` (``hermes``, ``qwen-xml``), ``json_fallback.py``,
  ``llama3.py``, ``mistral.py`` (``mistral``, ``mistral-args``), ``granite.py``, ``phi4.py``,
  ``lfm2.py``, ``gemma4.py``, ``deepseek.py``;
- what they share: ``calls.py`` (the call parser, the stream filter, the prompt that asks for
  calls), ``grammar.py`` (the GBNF pieces), ``reasoning.py`` (markers and the splitter).
"""
