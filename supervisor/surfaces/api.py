"""The unix-socket API: newline-delimited JSON requests, one response line each."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import structlog
from rsup.supervisor.core.errors import RsupError
from rsup.supervisor.core.spec import JobSpec, spec_from_json
from rsup.supervisor.effects.engine import Engine
from rsup.supervisor.effects.profiles import ProfileError, load_profile
from rsup.supervisor.surfaces import report, views

log = structlog.get_logger("rsupd")
MAX_REQUEST = 4 << 20  # a job spec is small; a bigger line is garbage or an attack
READ_TIMEOUT = 30.0  # a client that sends half a request and sleeps is dropped


class ApiError(RsupError):
    """A request refused by the API: code 1 (not yours, not found) unless given (2: usage)."""


Handler = Callable[[dict[str, Any], int], Awaitable[Any]]


class Api:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.server: asyncio.AbstractServer | None = None
        self.handlers: dict[str, Handler] = {
            "ping": self.ping,
            "start": self.start,
            "stop": self.stop,
            "restart": self.restart,
            "status": self.status,
            "events": self.events,
            "logs": self.logs,
            "remove": self.remove,
            "inject": self.inject,
            "report": self.report,
        }

    async def listen(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_socket():
            path.unlink()
        self.server = await asyncio.start_unix_server(
            self._serve, path=str(path), limit=MAX_REQUEST
        )
        os.chmod(path, 0o660)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        uid = _peer_uid(writer)
        try:
            while True:
                line = await asyncio.wait_for(reader.readline(), timeout=READ_TIMEOUT)
                if not line:
                    break
                writer.write(
                    json.dumps(await self._answer(line, uid), default=str).encode() + b"\n"
                )
                await writer.drain()
        except (TimeoutError, ValueError, ConnectionError, asyncio.LimitOverrunError):
            pass  # garbage, huge or slow client: drop it, the daemon goes on
        finally:
            writer.close()

    async def _answer(self, line: bytes, uid: int) -> dict[str, Any]:
        try:
            request = json.loads(line)
            if not isinstance(request, dict) or not isinstance(request.get("op"), str):
                raise ApiError('a request is a JSON object with an "op" field', 2)
            handler = self.handlers.get(request["op"])
            if handler is None:
                raise ApiError(f"unknown operation {request['op']!r}", 2)
            return {"ok": True, "result": await handler(request, uid)}
        except RsupError as exc:  # the one place a refusal becomes a reply and its code
            return {"ok": False, "error": str(exc), "code": exc.exit_code}
        except (ValueError, RecursionError) as exc:  # RecursionError: JSON nested too deep
            return {"ok": False, "error": f"bad request: {exc}", "code": 2}
        except Exception as exc:
            log.exception("request failed", line=line[:200])
            return {"ok": False, "error": f"internal error: {exc}", "code": 1}

    # operations ------------------------------------------------------------

    async def ping(self, request: dict[str, Any], uid: int) -> Any:
        return {"pid": os.getpid(), "uid": uid}

    async def start(self, request: dict[str, Any], uid: int) -> Any:
        if "spec" in request:
            spec = spec_from_json(request["spec"])
        else:
            spec = self._own(request, uid).spec
        if spec.env_profile:
            try:
                load_profile(spec.env_profile)
            except ProfileError as exc:
                raise ApiError(str(exc), 2) from None
        owner = _owner_for(spec, uid)
        return views.job_view(self.engine, self.engine.submit(spec, owner))

    async def stop(self, request: dict[str, Any], uid: int) -> Any:
        names = self._names(request, uid)
        for name in names:
            self.engine.stop(name, bool(request.get("force")))
        if request.get("wait", True):
            await asyncio.gather(*(self.engine.wait_terminal(n) for n in names))
        return [views.job_view(self.engine, self.engine.get(n)) for n in names]

    async def restart(self, request: dict[str, Any], uid: int) -> Any:
        job = self._own(request, uid)
        self.engine.stop(job.name)
        await self.engine.wait_terminal(job.name)
        return views.job_view(self.engine, self.engine.submit(job.spec, job.owner_uid))

    async def status(self, request: dict[str, Any], uid: int) -> Any:
        if request.get("name"):
            jobs = [self._own(request, uid)]
        else:
            jobs = [j for j in self.engine.store.jobs() if _may_see(j.owner_uid, uid)]
        return [views.job_view(self.engine, j) for j in jobs]

    async def events(self, request: dict[str, Any], uid: int) -> Any:
        job = self._own(request, uid)
        return self.engine.store.events(job.name, _count(request, "after") or 0)

    async def logs(self, request: dict[str, Any], uid: int) -> Any:
        job = self._own(request, uid)
        for key in ("attempt", "offset", "lines"):
            _count(request, key)
        return views.log_chunk(self.engine, job, request)

    async def remove(self, request: dict[str, Any], uid: int) -> Any:
        job = self._own(request, uid)
        await self.engine.remove(job.name)
        return {"removed": job.name}

    async def inject(self, request: dict[str, Any], uid: int) -> Any:
        job = self._own(request, uid)
        at_epoch = _count(request, "at_epoch")
        return self.engine.inject(job.name, str(request.get("kind")), at_epoch)

    async def report(self, request: dict[str, Any], uid: int) -> Any:
        job = self._own(request, uid)
        return report.report_data(self.engine.store, job.name)

    # access ------------------------------------------------------------------

    def _own(self, request: dict[str, Any], uid: int) -> Any:
        name = request.get("name")
        if not isinstance(name, str):
            raise ApiError("this operation needs a job name", 2)
        job = self.engine.get(name)
        if not _may_see(job.owner_uid, uid):
            raise ApiError(
                f"job {name} belongs to another user (uid {job.owner_uid}); "
                "not yours to see or control"
            )
        return job

    def _names(self, request: dict[str, Any], uid: int) -> list[str]:
        if request.get("all"):
            return [
                j.name
                for j in self.engine.store.jobs()
                if _may_see(j.owner_uid, uid) and not j.state.terminal
            ]
        return [self._own(request, uid).name]


def _count(request: dict[str, Any], key: str) -> int | None:
    """An optional whole number (0 .. 2**53) from the request; a usage error otherwise."""
    value = request.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**53:
        shown = json.dumps(value)[:40]
        raise ApiError(f"{key} must be a whole number from 0 to 2**53, got {shown}", 2)
    return value


def _peer_uid(writer: asyncio.StreamWriter) -> int:
    sock: socket.socket = writer.get_extra_info("socket")
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


def _may_see(owner: int, uid: int) -> bool:
    return uid == 0 or owner == uid


def _owner_for(spec: JobSpec, uid: int) -> int:
    user = spec.user
    if not user:
        return uid
    if uid != 0:
        raise ApiError("only root may run a job as another user (`user:` in the spec)", 2)
    import pwd

    try:
        return pwd.getpwnam(str(user)).pw_uid
    except KeyError:
        raise ApiError(
            f"user {user!r} named in the spec does not exist on this machine", 2
        ) from None
