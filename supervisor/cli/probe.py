"""`rsup probe`: the staged probe (and remedy ladder) from the command line, no daemon."""

from __future__ import annotations

import argparse
import asyncio
import sys

from rsup.supervisor.cli import show
from rsup.supervisor.probe.config import ProbeConfigError, load_timeouts, parse_timeout_overrides
from rsup.supervisor.probe.ladder import ProbeSetup, run_ladder
from rsup.supervisor.probe.run import format_report
from rsup.supervisor.recognize.remedies import RemedyError, load_remedies
from rsup.workers import constants as C
from rsup.workers.probe import normalize_device


def run_probe_command(args: argparse.Namespace) -> int:
    try:
        overrides = parse_timeout_overrides(args.timeout)
        setup = ProbeSetup(
            device=normalize_device(args.device),
            python=args.python,
            stage_files=tuple(args.stage_file),
            timeouts=load_timeouts(),
            overrides=overrides,
        )
        remedies = [] if args.no_remedies else load_remedies()
    except (ProbeConfigError, RemedyError, ValueError) as exc:
        print(f"rsup probe: {exc}", file=sys.stderr)
        return C.EXIT_USAGE
    report = asyncio.run(run_ladder(setup, remedies))
    if args.json:
        show.print_json(report.to_dict())
    else:
        print(format_report(report))
    trusted = report.usable or (setup.device == "cpu" and report.ok)
    return C.EXIT_OK if trusted else C.EXIT_FAILED
