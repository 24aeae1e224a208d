"""The dashboard: an aiohttp server on rsupd's own loop, answering with what the socket does.

aiohttp because it runs inside a loop that already exists (an AppRunner and a TCPSite, no
second server process, no thread) and streams server-sent events with a plain
StreamResponse. Every answer comes from the socket API's own handlers (`Api.status`,
`Api.events`, `Api.logs`, `Api.report`, `Api.stop`, `Api.restart`) called with the uid the
token names, so the dashboard shows and does exactly what `rsup` would for that user.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
from rsup.supervisor.core.errors import RsupError
from rsup.supervisor.surfaces import listen, web_auth
from rsup.supervisor.surfaces.api import Api, ApiError, _may_see
from rsup.supervisor.surfaces.web_auth import COOKIE, CSRF_HEADER, Tokens, WebError
from rsup.supervisor.surfaces.web_page import page
from rsup.supervisor.surfaces.web_stream import KEEPALIVE, Client, Hub, frame

if TYPE_CHECKING:
    from aiohttp import web

log = structlog.get_logger("rsupd")

SHUTDOWN_GRACE = 2.0
HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",  # no clickjacking of the stop button
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'self'; script-src 'unsafe-inline'; "
    "style-src 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'",
}

Handler = Callable[["web.Request"], Awaitable["web.StreamResponse"]]


class Dashboard:
    """`[web]` of rsupd.toml: the page, its JSON API and its event stream."""

    def __init__(self, api: Api, state_dir: Path, listen: str, *, allow_remote: bool = False,
                 control: bool = False) -> None:  # fmt: skip
        self.api = api
        self.host, self.port = web_auth.parse_listen(listen)
        web_auth.check_host(self.host, allow_remote)
        self.control = control
        self.tokens = Tokens(state_dir / "web")
        self.hub = Hub(self._status, self._visible)
        self.runner: web.AppRunner | None = None

    # lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Bind and serve; OSError when the address is taken (rsupd goes on without it)."""
        from aiohttp import web

        self.tokens.load()
        app = web.Application(middlewares=[self._guard])
        app.add_routes([
            web.get("/", self._page), web.get("/jobs/{name}", self._page),
            web.get("/api/me", self._me), web.get("/api/jobs", self._jobs),
            web.get("/api/jobs/{name}", self._job),
            web.get("/api/jobs/{name}/events", self._events),
            web.get("/api/jobs/{name}/report", self._report),
            web.get("/api/jobs/{name}/logs", self._logs), web.get("/api/stream", self._stream),
            web.post("/api/jobs/{name}/stop", self._stop),
            web.post("/api/jobs/{name}/restart", self._restart),
        ])  # fmt: skip
        self.runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_GRACE)
        await self.runner.setup()
        await web.TCPSite(self.runner, self.host, self.port).start()
        engine = self.api.engine
        engine.listeners.append(self.hub.jobs_changed)
        engine.store.listeners.append(self.hub.on_event)
        engine.output_listeners.append(self.hub.on_output)
        if not listen.is_loopback(self.host):
            log.warning("dashboard reachable from the network (allow_remote = true); "
                        "anyone who can reach it needs a token, but prefer an SSH tunnel",
                        listen=f"{self.host}:{self.port}")  # fmt: skip
        log.info("dashboard serving", url=self.base_url, control=self.control)

    async def close(self) -> None:
        self.hub.close()
        engine = self.api.engine
        for listeners, fn in ((engine.listeners, self.hub.jobs_changed),
                              (engine.store.listeners, self.hub.on_event),
                              (engine.output_listeners, self.hub.on_output)):  # fmt: skip
            if fn in listeners:
                listeners.remove(fn)  # type: ignore[arg-type]
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    @property
    def base_url(self) -> str:
        host = self.host
        if host in ("0.0.0.0", "::"):
            host = socket.gethostname()
        elif ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def job_link(self, name: str) -> str:
        return f"{self.base_url}/jobs/{name}"

    async def socket_op(self, request: dict[str, Any], uid: int) -> dict[str, Any]:
        """`rsup web`: the URL with the caller's token (made on first use)."""
        try:
            token = self.tokens.for_uid(uid)
        except WebError as exc:
            raise ApiError(str(exc)) from None
        return {"url": f"{self.base_url}/?token={token}", "base": self.base_url,
                "uid": uid, "control": self.control}  # fmt: skip

    # access ----------------------------------------------------------------------

    async def _status(self, uid: int) -> list[dict[str, Any]]:
        return list(await self.api.status({}, uid))

    def _visible(self, name: str, uid: int) -> bool:
        job = self.api.engine.store.get_job(name)
        return job is not None and _may_see(job.owner_uid, uid)

    def _token(self, request: web.Request) -> tuple[str | None, bool]:
        """(token, came in the query): Bearer header, then ?token=, then the cookie."""
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            return auth[7:].strip(), False
        if "token" in request.query:
            return request.query["token"], True
        return request.cookies.get(COOKIE), False

    async def _guard_inner(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        from aiohttp import web

        token, in_query = self._token(request)
        uid = self.tokens.uid_of(token)
        if uid is None:
            return _error(401, "no valid token: open the URL `rsup web` prints")
        request["uid"] = uid
        if in_query and request.method == "GET":  # once: then the cookie, out of the URL
            response = web.HTTPSeeOther(
                request.rel_url.with_query(
                    [(k, v) for k, v in request.query.items() if k != "token"]
                )
            )
            response.set_cookie(COOKIE, str(token), httponly=True, samesite="Strict",
                                path="/", max_age=30 * 86400)  # fmt: skip
            return response
        if request.method == "POST" and not self.tokens.csrf_ok(
            uid, request.headers.get(CSRF_HEADER)
        ):
            return _error(403, f"missing or wrong {CSRF_HEADER} header (reload the page)")
        return await handler(request)

    @property
    def _guard(self) -> Any:
        from aiohttp import web

        @web.middleware
        async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
            response = await self._guard_inner(request, handler)
            if not response.prepared:
                response.headers.update(HEADERS)
            return response

        return guard

    async def _call(self, op: str, request: web.Request, **fields: Any) -> Any:
        """One socket API operation as this request's user; refusals become HTTP errors."""
        try:
            return await self.api.handlers[op](fields, request["uid"])
        except RsupError as exc:
            text = str(exc)
            code = 404 if text.startswith("no job named") else 403
            code = 400 if exc.exit_code == 2 else code
            code = 409 if "already" in text else code
            raise _http(code, text) from None

    # pages and data ----------------------------------------------------------------

    async def _page(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        html = page(self.tokens.csrf(request["uid"]), self.control)
        return web.Response(text=html, content_type="text/html")

    async def _me(self, request: web.Request) -> web.StreamResponse:
        uid = request["uid"]
        return _json({"uid": uid, "csrf": self.tokens.csrf(uid), "control": self.control})

    async def _jobs(self, request: web.Request) -> web.StreamResponse:
        return _json(await self._call("status", request))

    async def _job(self, request: web.Request) -> web.StreamResponse:
        return _json((await self._call("status", request, name=_name(request)))[0])

    async def _events(self, request: web.Request) -> web.StreamResponse:
        events = await self._call("events", request, name=_name(request),
                                  after=_int(request, "after"))  # fmt: skip
        for event in events:
            event.pop("id", None)  # as `rsup events --json` shows them
        return _json(events)

    async def _report(self, request: web.Request) -> web.StreamResponse:
        return _json(await self._call("report", request, name=_name(request)))

    async def _logs(self, request: web.Request) -> web.StreamResponse:
        chunk = await self._call("logs", request, name=_name(request),
                                 attempt=_int(request, "attempt"), offset=_int(request, "offset"),
                                 lines=_int(request, "lines"))  # fmt: skip
        chunk.pop("path", None)
        return _json(chunk)

    async def _stop(self, request: web.Request) -> web.StreamResponse:
        self._controls_on()
        jobs = await self._call("stop", request, name=_name(request), wait=False)
        return _json(jobs[0])

    async def _restart(self, request: web.Request) -> web.StreamResponse:
        self._controls_on()
        return _json(await self._call("restart", request, name=_name(request)))

    def _controls_on(self) -> None:
        if not self.control:
            raise _http(403, "controls are off: set control = true in [web] of rsupd.toml")

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        job = request.query.get("job") or None
        if job is not None:
            await self._call("status", request, name=job)  # 404/403 before any stream
        client = Client(request["uid"], job)
        response = web.StreamResponse(headers={**HEADERS, "Content-Type": "text/event-stream",
                                               "X-Accel-Buffering": "no"})  # fmt: skip
        await response.prepare(request)
        self.hub.add(client)
        try:
            await response.write(frame("jobs", await self._status(client.uid)))
            await _pump(client, response)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self.hub.drop(client)
        return response


async def _pump(client: Client, response: web.StreamResponse) -> None:
    while True:
        try:
            message = await asyncio.wait_for(client.queue.get(), KEEPALIVE)
        except TimeoutError:
            message = b": keepalive\n\n"
        if message is None:
            return
        await response.write(message)


def _json(data: Any) -> web.Response:
    from aiohttp import web

    return web.Response(text=json.dumps(data, default=str), content_type="application/json")


def _error(status: int, message: str) -> web.Response:
    from aiohttp import web

    body = json.dumps({"error": message})
    return web.Response(status=status, text=body, content_type="application/json")


def _http(status: int, message: str) -> web.HTTPException:
    from aiohttp import web

    kinds: dict[int, type[web.HTTPException]] = {
        400: web.HTTPBadRequest, 403: web.HTTPForbidden, 404: web.HTTPNotFound,
        409: web.HTTPConflict,
    }  # fmt: skip
    return kinds[status](text=json.dumps({"error": message}), content_type="application/json")


def _name(request: web.Request) -> str:
    return request.match_info["name"]


def _int(request: web.Request, key: str) -> int | None:
    value = request.query.get(key)
    if value is None or value == "":
        return None
    if not value.isdigit():
        raise _http(400, f"{key} must be a whole number, not {value[:40]!r}")
    return int(value)
