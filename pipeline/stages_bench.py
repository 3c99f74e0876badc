"""Stage wiring for bench and report."""
