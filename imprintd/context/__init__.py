"""Keeping a small context useful: fitting, section analysis, the running summary and history
search (docs/architecture.md, "context/: what the model sees"). Import from the submodules."""
