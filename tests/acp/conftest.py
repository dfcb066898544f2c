"""Fixtures for ACP tests: the scripted OpenAI-compatible model and an ``imprintd acp`` peer."""

from __future__ import annotations

import pytest
import pytest_asyncio

from tests.acp.peer import RawAgent, acp_agent


@pytest.fixture
def workspace(tmp_path):
    root = tmp_path / "workspace"
    root.mkdir()
    return root


@pytest_asyncio.fixture
async def agent(daemon_env, tmp_path):
    async with acp_agent(daemon_env, tmp_path) as peer:
        yield peer


@pytest.fixture
def raw_agent(daemon_env):
    """``imprintd acp`` on raw pipes (``RawAgent``), killed after the test if still running."""
    agent = RawAgent(daemon_env)
    yield agent
    if agent.process.poll() is None:
        agent.process.kill()
