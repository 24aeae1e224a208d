"""Talk to rsupd over its unix socket."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from rsup.supervisor.core.errors import RsupError
from rsup.workers import constants as C


class ClientError(RsupError):
    """A refused request or an unreachable daemon; `code` is the CLI exit code."""


class Client:
    def __init__(self, path: Path, timeout: float | None = None) -> None:
        self.path = path
        self.timeout = timeout

    def call(self, op: str, **fields: Any) -> Any:
        """Send one request, return its result or raise ClientError."""
        reply = self._roundtrip({"op": op, **fields})
        if not reply.get("ok"):
            raise ClientError(str(reply.get("error")), int(reply.get("code", C.EXIT_FAILED)))
        return reply.get("result")

    def _roundtrip(self, request: dict[str, Any]) -> dict[str, Any]:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(str(self.path))
        except (FileNotFoundError, ConnectionRefusedError, PermissionError) as exc:
            sock.close()
            raise ClientError(
                f"cannot reach rsupd at {self.path} ({exc.strerror or exc}). Start it with "
                f"`rsupd` (or `systemctl start rsupd`), or point --socket / $RSUP_SOCKET at it.",
                C.EXIT_UNREACHABLE,
            ) from None
        with sock, sock.makefile("rwb") as stream:
            stream.write(json.dumps(request).encode() + b"\n")
            stream.flush()
            line = stream.readline()
        if not line:
            raise ClientError("rsupd closed the connection without answering", C.EXIT_UNREACHABLE)
        reply = json.loads(line)
        if not isinstance(reply, dict):
            raise ClientError("rsupd sent a malformed reply", C.EXIT_FAILED)
        return reply
