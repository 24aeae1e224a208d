"""The staged GPU probe: run as a child with per-stage timeouts, remedy ladder, verdict cache."""
