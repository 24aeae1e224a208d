"""Who may use the dashboard: one access token per user, kept in the state dir.

A token names its uid. Each lives in `web/token-<uid>` (mode 0600, owned by that uid when
rsupd runs as root), so it survives a restart of rsupd and a bookmarked URL keeps working.
A non-root rsupd serves only its own user; a root rsupd makes a token for any user who
asks over the socket (SO_PEERCRED says who asks).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
from pathlib import Path

from rsup.supervisor.core.errors import UsageError
from rsup.supervisor.surfaces import listen

COOKIE = "rsup_token"
CSRF_HEADER = "X-CSRF-Token"
DEFAULT_LISTEN = "127.0.0.1:8765"


class WebError(UsageError, ValueError):
    """A dashboard setting or request rsupd refuses; the message says what to change."""


def parse_listen(value: str) -> tuple[str, int]:
    """HOST:PORT -> (host, port): 127.0.0.1:8765, [::1]:8765, or :8765 for 127.0.0.1."""
    found = listen.split(value)
    if found is None:
        raise WebError(f"web listen address {value!r} is not HOST:PORT (e.g. {DEFAULT_LISTEN})")
    return found


def check_host(host: str, allow_remote: bool) -> None:
    """Refuse a listener reachable from the network unless it was asked for explicitly."""
    if not allow_remote and not listen.is_loopback(host):
        raise WebError(
            f"refusing to serve the dashboard on {host}: it would be reachable from the "
            "network. Listen on 127.0.0.1 and use an SSH tunnel (docs/web.md), or set "
            "allow_remote = true in [web]"
        )


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class Tokens:
    """The tokens of every user rsupd serves, looked up by their digest."""

    def __init__(self, folder: Path, rsupd_uid: int | None = None) -> None:
        self.folder = folder
        self.rsupd_uid = os.getuid() if rsupd_uid is None else rsupd_uid
        self._uids: dict[bytes, int] = {}
        self._tokens: dict[int, str] = {}

    def load(self) -> None:
        """Read the tokens kept by an earlier rsupd; make the folder where there is none."""
        self.folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o711)  # users reach their own file by name, list nothing
        for path in self.folder.glob("token-*"):
            uid = path.name.removeprefix("token-")
            with contextlib.suppress(OSError, ValueError):
                self._remember(int(uid), path.read_text().strip())

    def _remember(self, uid: int, token: str) -> None:
        if len(token) >= 32:
            self._tokens[uid] = token
            self._uids[_digest(token)] = uid

    def for_uid(self, uid: int) -> str:
        """This user's token, made (and stored, 0600) on first use."""
        if self.rsupd_uid != 0 and uid not in (self.rsupd_uid, 0):
            raise WebError(
                f"this rsupd runs as uid {self.rsupd_uid} and serves only that user's jobs"
            )
        if uid == 0 and self.rsupd_uid != 0:
            uid = self.rsupd_uid
        if uid not in self._tokens:
            token = secrets.token_urlsafe(32)
            self._write(uid, token)
            self._remember(uid, token)
        return self._tokens[uid]

    def _write(self, uid: int, token: str) -> None:
        path = self.folder / f"token-{uid}"
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        if self.rsupd_uid == 0 and uid != 0:
            os.chown(tmp, uid, -1)
        os.replace(tmp, path)

    def uid_of(self, token: str | None) -> int | None:
        """The uid a presented token names, or None for no token or a wrong one."""
        return None if not token else self._uids.get(_digest(token))

    def csrf(self, uid: int) -> str:
        """The anti-forgery token the page sends back on every POST (derived, not stored)."""
        key = self._tokens.get(uid, "")
        return hmac.new(key.encode(), b"rsup-csrf", hashlib.sha256).hexdigest()[:32]

    def csrf_ok(self, uid: int, presented: str | None) -> bool:
        return bool(presented) and hmac.compare_digest(self.csrf(uid), str(presented))
