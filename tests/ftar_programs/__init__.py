"""Replica programs of FTAR's end-to-end tests (run with cwd tests/)."""
