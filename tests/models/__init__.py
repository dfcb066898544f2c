"""Tests of the model providers (local llama.cpp, remote OpenAI-compatible) and tool-call parsing."""
