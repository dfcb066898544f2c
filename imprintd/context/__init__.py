"""Keeping a small context useful: fitting (ADR 0140), section analysis (ADR 0093), and the
running summary and history search (ADR 0141). Import from the submodules."""
