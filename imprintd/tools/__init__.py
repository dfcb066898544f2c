"""Tools the coordinator may call, built for one reply (DESIGN.md, "Tools and scope")."""
