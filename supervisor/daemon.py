"""rsupd: the long-running daemon. One asyncio loop; signal handlers only record."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path

import structlog

from rsup.supervisor import logs
from rsup.supervisor.api import Api
from rsup.supervisor.engine import Engine
from rsup.supervisor.paths import Layout, default_socket, default_state_dir
from rsup.supervisor.store import StateError
from rsup.workers import constants as C

log = structlog.get_logger("rsupd")


class Daemon:
    def __init__(self, state_dir: Path, socket_path: Path) -> None:
        self.layout = Layout(state_dir)
        self.socket_path = socket_path
        self.signals: asyncio.Queue[signal.Signals] = asyncio.Queue()

    async def run(self) -> int:
        engine = Engine(self.layout)
        api = Api(engine)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, self.signals.put_nowait, sig)
        await engine.recover()
        await api.listen(self.socket_path)
        log.info("rsupd ready", socket=str(self.socket_path), state_dir=str(self.layout.root),
                 pid=os.getpid())  # fmt: skip
        try:
            while True:
                sig = await self.signals.get()
                if sig == signal.SIGHUP:
                    log.info("reload requested (SIGHUP); nothing to re-read yet")
                    continue
                log.info("rsupd stopping; jobs keep running under their shims", signal=sig.name)
                return 0
        finally:
            await api.close()
            await engine.close()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rsupd", description="rsup daemon (runs in the foreground)")
    parser.add_argument("--config", type=Path, help="rsupd.toml (default: none)")
    parser.add_argument("--state-dir", type=Path, default=None)
    parser.add_argument("--socket", type=Path, default=None)
    parser.add_argument("--log-level", default="info")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logs.configure(args.log_level)
    state_dir = args.state_dir or default_state_dir()
    socket_path = args.socket or default_socket()
    try:
        return asyncio.run(Daemon(state_dir, socket_path).run())
    except StateError as exc:
        print(f"rsupd: {exc}", file=sys.stderr)
        return C.EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
