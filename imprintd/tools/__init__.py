"""Tools the coordinator may call, built for one reply (docs/architecture.md, "tools/: what a reply
may look at")."""
