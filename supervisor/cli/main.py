"""rsup: the command line. Exit codes: 0 ok, 1 failed, 2 usage or invalid spec, 3 no daemon."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from rsup.supervisor.cli import show
from rsup.supervisor.cli.client import Client
from rsup.supervisor.core.errors import RsupError
from rsup.supervisor.core.spec import load_spec
from rsup.supervisor.effects.paths import default_socket
from rsup.supervisor.surfaces import service
from rsup.workers import constants as C

FOLLOW_POLL = 0.25


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rsup", description="Supervise GPU training jobs.")
    parser.add_argument("--socket", type=Path, help="rsupd socket (default: $RSUP_SOCKET, ...)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("start", help="submit JOB.yaml, or start a stored job again by NAME")
    p.add_argument("job")
    p = sub.add_parser("stop", help="stop a job (TERM, grace, KILL of its whole tree)")
    p.add_argument("name", nargs="?")
    p.add_argument("--all", action="store_true")
    p.add_argument("--force", action="store_true", help="SIGKILL the tree at once")
    p.add_argument("--no-wait", action="store_true", help="return without waiting for the stop")
    p = sub.add_parser("restart", help="stop a job and start it again")
    p.add_argument("name")
    p = sub.add_parser("status", help="jobs and their state")
    p.add_argument("name", nargs="?")
    p.add_argument("--json", action="store_true")
    p.add_argument("-w", "--watch", action="store_true", help="refresh in place")
    p = sub.add_parser("logs", help="a job's output (latest attempt by default)")
    p.add_argument("name")
    p.add_argument("-f", "--follow", action="store_true")
    p.add_argument("--attempt", type=int)
    p.add_argument("-n", "--lines", type=int, default=None, help="last LINES lines")
    p.add_argument("--journal", action="store_true", help="read it back from journald")
    p = sub.add_parser("events", help="what rsup saw and decided, oldest first")
    p.add_argument("name")
    p.add_argument("--json", action="store_true")
    forget = "forget a finished job: history, attempt logs, checkpoint copies (not its run folder)"
    p = sub.add_parser("remove", help=forget)
    p.add_argument("name")
    p = sub.add_parser("inject", help="fault drill: the real fault, to rehearse recovery")
    p.add_argument("name")
    p.add_argument("kind", choices=["kill", "hang", "oom"])
    p.add_argument("--at-epoch", type=int)
    p = sub.add_parser("run", help="supervise JOB.yaml in the foreground, without a daemon")
    p.add_argument("job")
    p.add_argument("--state-dir", type=Path)
    p.add_argument("--inject", action="append", default=[], metavar="KIND[@epoch=K]")
    p = sub.add_parser("probe", help="check a GPU in stages, each with its own timeout")
    p.add_argument("--device", default="cuda:0", help="cpu, 0, cuda:0 ... (default cuda:0)")
    p.add_argument("--python", help="the job's interpreter (default: this one)")
    p.add_argument("--stage-file", action="append", default=[], metavar="F")
    p.add_argument("--timeout", action="append", default=[], metavar="STAGE=SECONDS")
    p.add_argument("--no-remedies", action="store_true", help="one probe, no remedy ladder")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("demo-data", help="make the synthetic thermal data set (YOLO format)")
    p.add_argument("dir")
    p.add_argument("--train", type=int, default=64)
    p.add_argument("--val", type=int, default=16)
    p.add_argument("--size", type=int, default=160)
    p = sub.add_parser("report", help="one picture of a job's whole run (PNG and/or HTML)")
    p.add_argument("name")
    p.add_argument("--png", type=Path, help="picture (default: NAME-report.png)")
    p.add_argument("--html", type=Path, help="page with the picture and tables")
    p.add_argument("--state-dir", type=Path, help="read this state dir (rsup run) instead of rsupd")
    p = sub.add_parser("web", help="the dashboard's URL with your access token")
    p.add_argument("--open", action="store_true", help="open it in a browser")
    service.add_parser(sub)
    p = sub.add_parser("diagnose", help="classify a training log offline")
    p.add_argument("logfile")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--kind",
        choices=["command", "ultralytics", "torchrun"],
        default="command",
        help="the job's kind, for what rsup would do (default: command)",
    )
    p.add_argument("--batch", type=int, help="the job's batch size (rsup halves it after an OOM)")
    p.add_argument("--workers", type=int, help="the job's DataLoader workers")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except RsupError as exc:  # the one place an error becomes a message and an exit code
        print(f"rsup: {exc.what}{exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return C.EXIT_FAILED


def _client(args: argparse.Namespace, timeout: float | None = 60.0) -> Client:
    return Client(args.socket or default_socket(), timeout)


def cmd_start(args: argparse.Namespace) -> int:
    target = Path(args.job)
    if target.suffix in (".yaml", ".yml") or target.exists() or "/" in args.job:
        spec = load_spec(target, runnable=True)
        job = _client(args).call("start", spec=spec.model_dump(mode="json"))
    else:
        job = _client(args).call("start", name=args.job)
    print(f"{job['name']}: {job['state']} ({job['reason']})")
    return C.EXIT_OK


def cmd_stop(args: argparse.Namespace) -> int:
    if not args.name and not args.all:
        print("rsup stop: name a job, or use --all", file=sys.stderr)
        return C.EXIT_USAGE
    jobs = _client(args, None).call(
        "stop", name=args.name, all=args.all, force=args.force, wait=not args.no_wait
    )
    for job in jobs:
        print(f"{job['name']}: {job['state']}")
    return C.EXIT_OK


def cmd_restart(args: argparse.Namespace) -> int:
    job = _client(args, None).call("restart", name=args.name)
    print(f"{job['name']}: {job['state']} ({job['reason']})")
    return C.EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    client = _client(args)
    if args.json:
        show.print_json(client.call("status", name=args.name))
        return C.EXIT_OK
    console = show.console()
    if not args.watch:
        console.print(show.status_table(client.call("status", name=args.name), console.width))
        return C.EXIT_OK
    from rich.live import Live

    with Live(console=console, refresh_per_second=4) as live:
        while True:
            live.update(show.status_table(client.call("status", name=args.name), console.width))
            time.sleep(1.0)


def cmd_events(args: argparse.Namespace) -> int:
    events = _client(args).call("events", name=args.name)
    if args.json:
        for event in events:
            event.pop("id", None)
        show.print_json(events)
    else:
        for event in events:
            print(show.event_line(event))
    return C.EXIT_OK


def cmd_logs(args: argparse.Namespace) -> int:
    if args.journal:
        from rsup.supervisor.surfaces.journal import read_journal

        return read_journal(args.name, args.follow, args.lines)
    client = _client(args)
    chunk = client.call(
        "logs",
        name=args.name,
        attempt=args.attempt,
        lines=args.lines if args.lines is not None else (10 if args.follow else None),
    )
    _write(chunk["data"])
    while args.follow:
        chunk = _follow_step(client, args, chunk)
        if chunk is None:
            return C.EXIT_OK
    return C.EXIT_OK


def _follow_step(
    client: Client, args: argparse.Namespace, last: dict[str, Any]
) -> dict[str, Any] | None:
    if last["attempt"] is None:
        time.sleep(FOLLOW_POLL)
        return dict(client.call("logs", name=args.name, attempt=args.attempt))
    chunk = client.call("logs", name=args.name, attempt=last["attempt"], offset=last["offset"])
    _write(chunk["data"])
    if chunk["data"]:
        return dict(chunk)
    if chunk["ended"] and args.attempt is None and chunk["last_attempt"] > chunk["attempt"]:
        nxt = chunk["attempt"] + 1
        # a tqdm bar leaves the line open: the marker starts on a line of its own
        _write(("" if _AT_LINE_START[0] else "\n") + f"--- rsup: attempt {nxt} ---\n")
        return dict(client.call("logs", name=args.name, attempt=nxt, offset=0))
    if chunk["ended"] and chunk["job_state"] in ("succeeded", "failed", "stopped"):
        return None
    time.sleep(FOLLOW_POLL)
    return dict(chunk)


_AT_LINE_START = [True]  # whether the output so far ends a line


def _write(text: str) -> None:
    if text:
        _AT_LINE_START[0] = text.endswith("\n")
    sys.stdout.write(text)
    sys.stdout.flush()


def cmd_remove(args: argparse.Namespace) -> int:
    _client(args).call("remove", name=args.name)
    print(f"{args.name}: removed")
    return C.EXIT_OK


def cmd_inject(args: argparse.Namespace) -> int:
    drill = _client(args).call("inject", name=args.name, kind=args.kind, at_epoch=args.at_epoch)
    when = f"at epoch {drill['at_epoch']}" if drill.get("at_epoch") is not None else "now"
    print(f"{args.name}: {args.kind} drill {when}")
    return C.EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from rsup.supervisor.cli.foreground import run_foreground

    return run_foreground(Path(args.job), args.state_dir, args.inject)


def cmd_diagnose(args: argparse.Namespace) -> int:
    from rsup.supervisor.cli.diagnose import run_diagnose

    return run_diagnose(args.logfile, args.json, sys.stdout, args.kind, args.batch, args.workers)


def cmd_probe(args: argparse.Namespace) -> int:
    from rsup.supervisor.cli.probe import run_probe_command

    return run_probe_command(args)


def cmd_demo_data(args: argparse.Namespace) -> int:
    from rsup.workers import demodata

    return demodata.main(
        [args.dir, "--train", str(args.train), "--val", str(args.val), "--size", str(args.size)]
    )


def cmd_report(args: argparse.Namespace) -> int:
    from rsup.supervisor.surfaces import report

    try:
        if args.state_dir is not None:
            data = report.state_dir_data(args.state_dir, args.name)
        else:
            data = _client(args).call("report", name=args.name)
        written = report.write_report(data, args.png, args.html)
    except report.ReportError as exc:
        print(f"rsup report: {exc}", file=sys.stderr)
        return C.EXIT_FAILED
    for path in written:
        print(f"{args.name}: report written to {path}")
    return C.EXIT_OK


def cmd_web(args: argparse.Namespace) -> int:
    answer = _client(args).call("web")
    print(answer["url"])
    if args.open:
        import webbrowser

        webbrowser.open(answer["url"])
    return C.EXIT_OK


COMMANDS = {
    "start": cmd_start,
    "stop": cmd_stop,
    "restart": cmd_restart,
    "status": cmd_status,
    "logs": cmd_logs,
    "events": cmd_events,
    "remove": cmd_remove,
    "inject": cmd_inject,
    "run": cmd_run,
    "diagnose": cmd_diagnose,
    "probe": cmd_probe,
    "demo-data": cmd_demo_data,
    "service": service.run,
    "report": cmd_report,
    "web": cmd_web,
}

if __name__ == "__main__":
    sys.exit(main())
