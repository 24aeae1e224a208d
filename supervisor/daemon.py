"""rsupd: the long-running daemon. One asyncio loop; signal handlers only record."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from rsup.supervisor.cli import logs
from rsup.supervisor.core.errors import StateError, UsageError
from rsup.supervisor.effects import retention
from rsup.supervisor.effects.configdir import config_file
from rsup.supervisor.effects.engine import Engine
from rsup.supervisor.effects.paths import Layout, default_socket, default_state_dir
from rsup.supervisor.surfaces import metrics, notifications, web_auth
from rsup.supervisor.surfaces.api import Api, ApiError
from rsup.supervisor.surfaces.journal import JournalBridge, JournalSender, under_systemd
from rsup.supervisor.surfaces.memreport import MemoryReport
from rsup.supervisor.surfaces.notifications import Notifications
from rsup.supervisor.surfaces.notify import Notifier, SystemdLink, job_environment
from rsup.supervisor.surfaces.web import Dashboard
from rsup.workers import constants as C

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML with the tomli backport
    import tomli as tomllib

log = structlog.get_logger("rsupd")
CONFIG_NAME = "rsupd.toml"


# configuration (rsupd.toml) ----------------------------------------------------


class ConfigError(UsageError):
    """rsupd.toml cannot be read or holds a bad value; the message names file and key."""


Switch = bool | str  # True, False or "auto" (decided by whether systemd started rsupd)


@dataclass(frozen=True)
class Config:
    journal_events: Switch = "auto"
    forward_output: Switch = "auto"
    status_debounce: float = 0.5
    metrics_listen: str | None = None  # "127.0.0.1:9464"; off by default
    metrics_allow_remote: bool = False
    metrics_textfile: Path | None = None  # node exporter's textfile collector
    probe_extra_stages: tuple[str, ...] = ()  # stage files every GPU probe runs
    keep_attempts: int = retention.DEFAULT_KEEP  # per job, besides the first; 0 keeps all
    web_listen: str = web_auth.DEFAULT_LISTEN  # "" turns the dashboard off
    web_allow_remote: bool = False
    web_control: bool = False  # stop and restart buttons
    notify_urls: tuple[str, ...] = ()  # Apprise URLs
    notify_on: tuple[str, ...] = notifications.KINDS

    def journal_switches(self) -> tuple[bool, bool]:
        """(events, output) with "auto" resolved: on when running under systemd."""
        return _resolve(self.journal_events), _resolve(self.forward_output)


def _resolve(switch: Switch) -> bool:
    return under_systemd() if switch == "auto" else bool(switch)


def _switch(where: str, value: Any) -> Switch:
    if isinstance(value, bool) or value == "auto":
        return value  # type: ignore[no-any-return]
    raise ConfigError(f'{where} must be true, false or "auto", not {value!r}')


def _seconds(where: str, value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    raise ConfigError(f"{where} must be a number of seconds (0 or more), not {value!r}")


# section -> key -> (Config field, check)
def _listen(where: str, value: Any) -> str:
    try:
        metrics.parse_listen(str(value))
    except metrics.MetricsError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return str(value)


def _web_listen(where: str, value: Any) -> str:
    if value == "":
        return ""
    try:
        web_auth.parse_listen(str(value))
    except web_auth.WebError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return str(value)


def _urls(where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and "://" in v for v in value):
        raise ConfigError(f"{where} must be a list of Apprise URLs (SCHEME://...), not {value!r}")
    return tuple(value)


def _kinds(where: str, value: Any) -> tuple[str, ...]:
    try:
        if not isinstance(value, list):
            raise notifications.NotifyError(f"a list of kinds, not {value!r}")
        return notifications.check_kinds(value)
    except notifications.NotifyError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _stage_files(where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where} must be a list of stage file paths, not {value!r}")
    missing = [v for v in value if not Path(v).is_file()]
    if missing:
        raise ConfigError(f"{where}: no such stage file: {', '.join(missing)}")
    return tuple(str(Path(v).resolve()) for v in value)


def _count(where: str, value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise ConfigError(f"{where} must be a whole number (0 or more), not {value!r}")


def _bool(where: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise ConfigError(f"{where} must be true or false, not {value!r}")


def _path(where: str, value: Any) -> Path:
    if isinstance(value, str) and value:
        return Path(value)
    raise ConfigError(f"{where} must be a file path, not {value!r}")


SCHEMA: dict[str, dict[str, tuple[str, Callable[[str, Any], Any]]]] = {
    "journal": {
        "events": ("journal_events", _switch),
        "forward_output": ("forward_output", _switch),
    },
    "status": {"debounce": ("status_debounce", _seconds)},
    "probe": {"extra_stages": ("probe_extra_stages", _stage_files)},
    "retention": {"attempts": ("keep_attempts", _count)},
    "metrics": {
        "listen": ("metrics_listen", _listen),
        "allow_remote": ("metrics_allow_remote", _bool),
        "textfile": ("metrics_textfile", _path),
    },
    "web": {
        "listen": ("web_listen", _web_listen),
        "allow_remote": ("web_allow_remote", _bool),
        "control": ("web_control", _bool),
    },
    "notify": {"urls": ("notify_urls", _urls), "on": ("notify_on", _kinds)},
}


def load_config(path: Path | None) -> Config:
    """Read rsupd.toml: `path`, else the default one in rsup's config folder, else defaults."""
    if path is None:
        path = config_file(CONFIG_NAME)
        if not path.exists():
            return Config()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    config = Config(**_fields(path, data))
    if config.metrics_listen:
        host = metrics.parse_listen(config.metrics_listen)[0]
        try:
            metrics.check_host(host, config.metrics_allow_remote)
        except metrics.MetricsError as exc:
            raise ConfigError(f"{path}: [metrics] listen: {exc}") from None
    if config.web_listen:
        host = web_auth.parse_listen(config.web_listen)[0]
        try:
            web_auth.check_host(host, config.web_allow_remote)
        except web_auth.WebError as exc:
            raise ConfigError(f"{path}: [web] listen: {exc}") from None
    return config


def _fields(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for section, table in data.items():
        keys = SCHEMA.get(section)
        if keys is None or not isinstance(table, dict):
            known = ", ".join(f"[{s}]" for s in SCHEMA)
            raise ConfigError(f"{path}: unknown section [{section}] (known: {known})")
        for key, value in table.items():
            if key not in keys:
                raise ConfigError(f"{path}: unknown key {key!r} in [{section}] "
                                  f"(known: {', '.join(keys)})")  # fmt: skip
            name, check = keys[key]
            fields[name] = check(f"{path}: [{section}] {key}", value)
    return fields


# the daemon --------------------------------------------------------------------


class Daemon:
    def __init__(self, state_dir: Path, socket_path: Path, config_path: Path | None = None,
                 config: Config | None = None) -> None:  # fmt: skip
        self.layout = Layout(state_dir)
        self.socket_path = socket_path
        self.config_path = config_path
        self.config = config or Config()
        self.signals: asyncio.Queue[signal.Signals] = asyncio.Queue()
        self.memory: MemoryReport | None = None
        self.dashboard: Dashboard | None = None
        self.notifications: Notifications | None = None

    async def run(self) -> int:
        engine = Engine(self.layout, base_env=job_environment())
        engine.probe_stages = self.config.probe_extra_stages
        engine.keep_attempts = self.config.keep_attempts
        api = Api(engine)
        link = SystemdLink(Notifier(), lambda: [j.state for j in engine.store.jobs()],
                           self.config.status_debounce)  # fmt: skip
        journal = JournalBridge(JournalSender(), *self.config.journal_switches())
        engine.listeners.append(link.changed)
        engine.store.listeners.append(journal.on_event)
        engine.output_listeners.append(journal.on_output)
        notes = self._notifications(engine)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR2):
            loop.add_signal_handler(sig, self.signals.put_nowait, sig)
        exporter = metrics.Exporter()
        try:
            await engine.recover()
            await api.listen(self.socket_path)
            exporter = await self._metrics(engine)
            await self._web(api)
            link.start()
            link.ready()  # only now: the socket accepts and every stored job is picked up
            self.memory = MemoryReport(self.layout.root / "memory-report.txt")
            log.info("rsupd ready", socket=str(self.socket_path), state_dir=str(self.layout.root),
                     pid=os.getpid(), journal_events=journal.events,
                     journal_output=journal.output)  # fmt: skip
            return await self._serve(engine, link, journal)
        finally:
            if self.dashboard is not None:
                await self.dashboard.close()
            await notes.close()
            await exporter.close()
            await link.close()
            await api.close()
            await engine.close()
            journal.sender.close()

    async def _metrics(self, engine: Engine) -> metrics.Exporter:
        """Prometheus metrics when configured; a failure here never stops supervision."""
        config = self.config
        try:
            exporter = await metrics.Exporter.start(engine.store, config.metrics_listen,
                                                    config.metrics_textfile,
                                                    config.metrics_allow_remote)  # fmt: skip
        except (OSError, metrics.MetricsError) as exc:
            log.error("metrics not started; jobs are supervised as usual", error=str(exc))
            return metrics.Exporter()
        engine.listeners.append(exporter.changed)
        return exporter

    def _notifications(self, engine: Engine) -> Notifications:
        """[notify] and each spec's notify:, heard from every committed event."""
        config = self.config
        notes = Notifications(engine.store, config.notify_urls, config.notify_on,
                              link=self._job_link)  # fmt: skip
        engine.store.listeners.append(notes.on_event)
        self.notifications = notes
        return notes

    def _job_link(self, name: str) -> str | None:
        return self.dashboard.job_link(name) if self.dashboard is not None else None

    async def _web(self, api: Api) -> None:
        """The dashboard when [web] listen is set; a failure here never stops supervision."""
        api.handlers["web"] = self._web_off
        config = self.config
        if not config.web_listen:
            return
        try:
            dashboard = Dashboard(api, self.layout.root, config.web_listen,
                                  allow_remote=config.web_allow_remote,
                                  control=config.web_control)  # fmt: skip
            await dashboard.start()
        except (OSError, web_auth.WebError) as exc:
            log.error("dashboard not started; jobs are supervised as usual",
                      listen=config.web_listen, error=str(exc))  # fmt: skip
            return
        self.dashboard = dashboard
        api.handlers["web"] = dashboard.socket_op

    async def _web_off(self, request: dict[str, Any], uid: int) -> Any:
        raise ApiError("the dashboard is off: set [web] listen in rsupd.toml (e.g. "
                       f'listen = "{web_auth.DEFAULT_LISTEN}") and restart rsupd, or see its log '
                       "for why it did not start")  # fmt: skip

    async def _serve(self, engine: Engine, link: SystemdLink, journal: JournalBridge) -> int:
        while True:
            sig = await self.signals.get()
            if sig == signal.SIGHUP:
                self.handle_hup(engine, link, journal)
                continue
            if sig == signal.SIGUSR2:
                self.report_memory()
                continue
            link.stopping()
            sender = journal.sender
            log.info("rsupd stopping; jobs keep running under their shims", signal=sig.name,
                     journal_sent=sender.sent, journal_dropped=sender.dropped)  # fmt: skip
            return C.EXIT_OK

    def report_memory(self) -> None:
        """SIGUSR2: write what grew in memory since the last report (see memreport)."""
        if self.memory is None:  # a signal before ready waits in the queue; never here
            return
        try:
            log.info("memory report written", **self.memory.write())
        except Exception as exc:  # a diagnostic must never take the daemon down
            log.error("memory report not written", error=repr(exc))

    def handle_hup(self, engine: Engine, link: SystemdLink, journal: JournalBridge) -> None:
        """SIGHUP: re-read rsupd.toml; a bad file keeps the running configuration."""
        link.reloading()
        try:
            self.config = load_config(self.config_path)
        except ConfigError as exc:
            log.error("configuration not reloaded; the previous one stays in force", error=str(exc))
        else:
            journal.events, journal.output = self.config.journal_switches()
            engine.keep_attempts = self.config.keep_attempts
            link.debounce = self.config.status_debounce
            self._reload_surfaces()
            source = self.config_path or config_file(CONFIG_NAME)
            log.info("configuration reloaded", config=str(source),
                     journal_events=journal.events, journal_output=journal.output)  # fmt: skip
        link.ready()

    def _reload_surfaces(self) -> None:
        """[notify] and [web] control apply at once; a new [web] listen needs a restart."""
        config = self.config
        if self.notifications is not None:
            self.notifications.route = notifications.Route(config.notify_urls, config.notify_on)
        if self.dashboard is not None:
            self.dashboard.control = config.web_control


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rsupd", description="rsup daemon (in the foreground)")
    parser.add_argument(
        "--config", type=Path, help=f"{CONFIG_NAME} (default: config/{CONFIG_NAME})"
    )
    parser.add_argument("--state-dir", type=Path, default=None)
    parser.add_argument("--socket", type=Path, default=None)
    parser.add_argument("--log-level", default="info")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logs.configure(args.log_level)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"rsupd: {exc}", file=sys.stderr)
        return C.EXIT_USAGE
    state_dir = args.state_dir or default_state_dir()
    socket_path = args.socket or default_socket()
    try:
        return asyncio.run(Daemon(state_dir, socket_path, args.config, config).run())
    except StateError as exc:
        print(f"rsupd: {exc}", file=sys.stderr)
        return C.EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
