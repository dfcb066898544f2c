"""MCP servers as research tools: their configuration, their lifecycle, their tools.

``config.py`` reads the editor shape of a server list, ``servers.py`` starts and keeps the
servers (``McpServers``, one per ``Chat``), ``tools.py`` offers their tools to the model (each
as ``server__tool``, or behind ``find_tools``/``call_tool`` when their schemas would not fit),
``results.py`` turns an MCP result into a ``ToolResult``. Built on the official ``mcp`` SDK:
no MCP wire code of our own.
"""
