"""Notifications through Apprise (ntfy, Slack, e-mail, JSON webhooks...), from stored events.

Each committed event is matched to one of six kinds; a message says job, attempt, what
happened and what rsup decided (the reason `rsup events` shows). Sending happens on a
small thread pool with a deadline: a slow or dead endpoint costs a thread for a while,
never rsupd's loop, and a failure is logged, never raised.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import structlog
from rsup.supervisor.effects.store import Store

log = structlog.get_logger("rsupd")

KINDS = ("failed", "gave_up", "fallback_cpu", "hang_detected", "budget_stopped", "succeeded")
TIMEOUT = 15.0  # seconds one message may take, all its URLs together
MAX_PENDING = 32  # messages waiting or sending; past it new ones are dropped (and logged)
WHAT = {
    "failed": "failed",
    "gave_up": "rsup gave up",
    "fallback_cpu": "falls back to the CPU",
    "hang_detected": "hung",
    "budget_stopped": "stopped by its budget",
    "succeeded": "succeeded",
}

Link = Callable[[str], "str | None"]  # job name -> its dashboard page, or None


class NotifyError(ValueError):
    """A `notify` setting that cannot be used; the message names the bad value."""


def check_kinds(kinds: Iterable[Any]) -> tuple[str, ...]:
    """The `on` list, checked against the six kinds."""
    kinds = tuple(kinds)
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise NotifyError(f"unknown notification kind(s) {bad}; known: {', '.join(KINDS)}")
    return tuple(str(k) for k in kinds)


def kind_of(record: Mapping[str, Any]) -> str | None:
    """Which notification a committed event is, if any."""
    event = record.get("event")
    if event == "state_changed" and record.get("new") in ("failed", "succeeded"):
        return str(record["new"])
    if event == "decision":
        if "gave up" in str(record.get("reason", "")):
            return "gave_up"
        if (record.get("overrides") or {}).get("device") == "cpu":
            return "fallback_cpu"
    if event == "hang_detected":
        return "hang_detected"
    if event == "limit_stop":
        return "budget_stopped"
    return None


def compose(record: Mapping[str, Any], kind: str, attempt: int | None,
            link: str | None) -> tuple[str, str]:  # fmt: skip
    """(title, body): job and attempt, what happened, what rsup decided, the page."""
    job = record.get("job")
    at = f", attempt {attempt}" if attempt is not None else ""
    title = f"rsup: {job}{at} {WHAT[kind]}"
    if kind == "hang_detected":
        said = f"{record.get('message') or 'no progress'}; rsup stops the attempt and decides"
    else:
        said = str(record.get("reason") or "")
    body = f"job {job}{at}: {WHAT[kind]}. rsup: {said}"
    if record.get("event") == "decision" and record.get("action"):
        body += f" (decision: {record['action']})"
    if link:
        body += f"\n{link}"
    return title, body


@dataclass(frozen=True)
class Route:
    urls: tuple[str, ...]
    on: tuple[str, ...]


def spec_route(spec: Any, default_on: tuple[str, ...]) -> Route | None:
    """A job spec's own `notify:` (a model or a mapping with urls and on), if it has one."""
    notify = getattr(spec, "notify", None)
    if notify is None:
        return None
    urls = tuple(str(u) for u in (_field(notify, "urls") or ()))
    on = _field(notify, "on")
    return Route(urls, tuple(on) if on else default_on) if urls else None


def _field(notify: Any, key: str) -> Any:
    return notify.get(key) if isinstance(notify, Mapping) else getattr(notify, key, None)


def send_apprise(urls: tuple[str, ...], title: str, body: str, timeout: float) -> bool:
    """Blocking: one message to every URL (run on a worker thread)."""
    import apprise

    sender = apprise.Apprise()
    for url in urls:
        sender.add(_with_timeouts(url, timeout))
    return bool(sender.notify(title=title, body=body))


def _with_timeouts(url: str, timeout: float) -> str:
    """Apprise's connect (cto) and read (rto) timeouts, unless the URL sets its own."""
    if "cto=" in url or "rto=" in url:
        return url
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}cto={max(1, int(timeout / 3))}&rto={max(1, int(timeout / 2))}"


Sender = Callable[[tuple[str, ...], str, str, float], bool]


class Notifications:
    """A store listener that sends what `[notify]` and each spec's `notify:` ask for."""

    def __init__(self, store: Store, urls: tuple[str, ...] = (), on: tuple[str, ...] = KINDS,
                 link: Link | None = None, send: Sender = send_apprise,
                 timeout: float = TIMEOUT) -> None:  # fmt: skip
        self.store = store
        self.route = Route(tuple(urls), tuple(on))
        self.link = link
        self.send = send
        self.timeout = timeout
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="rsup-notify")
        self.tasks: set[asyncio.Task[None]] = set()
        self.sent = self.failed = self.dropped = 0

    def on_event(self, record: dict[str, Any]) -> None:
        """Called with every committed event, on rsupd's loop: match, compose, hand off."""
        try:
            self._on_event(record)
        except Exception as exc:  # a notification must never take supervision down
            log.error("notification not sent", job=record.get("job"), error=repr(exc))

    def _on_event(self, record: dict[str, Any]) -> None:
        kind = kind_of(record)
        if kind is None:
            return
        job = self.store.get_job(str(record.get("job")))
        routes = [self.route, spec_route(job.spec, self.route.on) if job else None]
        urls = tuple(u for r in routes if r is not None and kind in r.on for u in r.urls)
        if not urls:
            return
        attempt = record.get("attempt")
        if attempt is None and job is not None:
            attempt = job.attempts or None
        link = self.link(str(record.get("job"))) if self.link else None
        title, body = compose(record, kind, attempt, link)
        self._submit(tuple(dict.fromkeys(urls)), title, body, str(record.get("job")))

    def _submit(self, urls: tuple[str, ...], title: str, body: str, job: str) -> None:
        if len(self.tasks) >= MAX_PENDING:
            self.dropped += 1
            log.warning("notification dropped: too many still being sent", job=job, title=title)
            return
        task = asyncio.get_running_loop().create_task(self._deliver(urls, title, body, job))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _deliver(self, urls: tuple[str, ...], title: str, body: str, job: str) -> None:
        loop = asyncio.get_running_loop()
        call = loop.run_in_executor(self.pool, self.send, urls, title, body, self.timeout)
        try:
            ok = await asyncio.wait_for(call, self.timeout)
        except TimeoutError:
            ok, why = False, f"no answer within {self.timeout:g} s"
        except Exception as exc:
            ok, why = False, repr(exc)
        else:
            why = "an endpoint refused it or could not be reached (see the log above)"
        if ok:
            self.sent += 1
            log.info("notification sent", job=job, title=title, urls=len(urls))
        else:
            self.failed += 1
            log.warning("notification failed; supervision goes on", job=job, title=title,
                        error=why)  # fmt: skip

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.pool.shutdown(wait=False, cancel_futures=True)
