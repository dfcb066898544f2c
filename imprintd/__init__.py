"""imprintd: a chat daemon for editors, speaking JSON-RPC with LSP framing over stdio."""

__version__ = "0.1.0"
