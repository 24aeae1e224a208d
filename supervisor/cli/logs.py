"""structlog setup: JSON lines when stdout is not a terminal, readable console otherwise."""

from __future__ import annotations

import logging
import sys

import structlog


def configure(level: str = "info", json_lines: bool | None = None) -> None:
    if json_lines is None:
        json_lines = not sys.stdout.isatty()
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json_lines else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(sys.stdout),
        cache_logger_on_first_use=False,
    )


def quiet() -> None:
    """For the CLI's foreground mode: only warnings and worse reach the terminal."""
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
