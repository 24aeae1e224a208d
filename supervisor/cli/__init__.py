"""The rsup command line, and what runs without a daemon (run, diagnose, probe, demo)."""
