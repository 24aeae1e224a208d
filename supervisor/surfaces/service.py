"""`rsup service install [--user]`: put rsupd's systemd unit in place with the real rsupd path.

The unit templates live in the source tree's systemd/ folder; their ExecStart names a
placeholder path that is replaced here by the `rsupd` next to this Python interpreter.
Nothing is started: the command prints the systemctl lines to run next.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rsup.supervisor.core.errors import RsupError
from rsup.supervisor.effects.configdir import config_file
from rsup.workers import constants as C

PLACEHOLDER = "/usr/local/bin/rsupd"
CONFIG_NAME = "rsupd.toml"
SYSTEM_UNIT_DIR = Path("/etc/systemd/system")
SYSUSERS = ("rsup.sysusers.conf", Path("/etc/sysusers.d/rsup.conf"))
TMPFILES = ("rsup.tmpfiles.conf", Path("/etc/tmpfiles.d/rsup.conf"))


class ServiceError(RsupError):
    """The unit cannot be rendered or written; the message says what to do."""


@dataclass(frozen=True)
class Planned:
    """One file to write."""

    path: Path
    text: str
    keep_existing: bool = False  # a config file the user may have edited is never replaced


def units_dir() -> Path:
    """The folder of unit templates: systemd/ next to supervisor/ in the source tree."""
    return Path(__file__).resolve().parents[2] / "systemd"


def rsupd_command() -> str:
    """How systemd should start rsupd: the console script beside sys.executable if present."""
    script = Path(sys.executable).parent / "rsupd"  # not resolved: a venv's python is a link
    if script.is_file() and os.access(script, os.X_OK):
        return _quote(str(script))
    return f"{_quote(sys.executable)} -m rsup.supervisor.daemon"


def _quote(word: str) -> str:
    # systemd splits ExecStart like a shell, and takes double quotes for paths with spaces.
    return word if shlex.quote(word) == word else '"' + word.replace('"', '\\"') + '"'


def render_unit(user: bool, command: str | None = None) -> str:
    """The unit file's text with ExecStart pointing at `command` (default: rsupd_command())."""
    name = "rsupd.user.service" if user else "rsupd.service"
    template = _read(units_dir() / name)
    lines = template.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith(f"ExecStart={PLACEHOLDER}")]
    if len(starts) != 1:
        raise ServiceError(f"{units_dir() / name}: expected one ExecStart={PLACEHOLDER} line")
    i = starts[0]
    lines[i] = (
        "ExecStart="
        + (command or rsupd_command())
        + lines[i][len("ExecStart=") + len(PLACEHOLDER) :]
    )
    return "".join(lines)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ServiceError(f"cannot read {path}: {exc.strerror or exc}; is rsup installed "
                           "from its source tree (pip install -e)?") from exc  # fmt: skip


def plan(user: bool, home: Path | None = None) -> list[Planned]:
    """Every file `install` writes, with its final path (before any --prefix)."""
    config = _read(config_file(CONFIG_NAME))
    if user:
        base = _user_config_home(home)
        return [
            Planned(base / "systemd" / "user" / "rsupd.service", render_unit(True)),
            Planned(base / "rsup" / CONFIG_NAME, config, keep_existing=True),
        ]
    return [
        Planned(SYSTEM_UNIT_DIR / "rsupd.service", render_unit(False)),
        Planned(SYSUSERS[1], _read(units_dir() / SYSUSERS[0])),
        Planned(TMPFILES[1], _read(units_dir() / TMPFILES[0])),
        Planned(Path("/etc/rsup") / CONFIG_NAME, config, keep_existing=True),
    ]


def _user_config_home(home: Path | None) -> Path:
    xdg = os.environ.get("XDG_CONFIG_HOME")
    if xdg and home is None:
        return Path(xdg)
    return (home or Path.home()) / ".config"


def install(user: bool, dry_run: bool, prefix: Path | None) -> int:
    """Write (or with dry_run, print) the unit and its companions; returns an exit code.

    `prefix` is a staging root put in front of every path, as DESTDIR is for `make install`.
    """
    try:
        files = plan(user)
    except ServiceError as exc:
        print(f"rsup service install: {exc}", file=sys.stderr)
        return C.EXIT_FAILED
    if dry_run:
        for item in files:
            print(f"# {_target(item.path, prefix)}\n{item.text}")
        return C.EXIT_OK
    if not user and prefix is None and os.geteuid() != 0:
        print("rsup service install: the system unit goes to /etc; run it as root "
              "(sudo), or add --user for a per-user daemon", file=sys.stderr)  # fmt: skip
        return C.EXIT_FAILED
    try:
        for item in files:
            _write(item, _target(item.path, prefix))
    except OSError as exc:
        print(f"rsup service install: {exc}", file=sys.stderr)
        return C.EXIT_FAILED
    print(next_steps(user, prefix is not None))
    return C.EXIT_OK


def _target(path: Path, prefix: Path | None) -> Path:
    return path if prefix is None else prefix / path.relative_to(path.anchor)


def _write(item: Planned, target: Path) -> None:
    if item.keep_existing and target.exists():
        print(f"kept {target} (already there)")
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    tmp.write_text(item.text, encoding="utf-8")
    tmp.chmod(0o644)
    os.replace(tmp, target)
    print(f"wrote {target}")


def next_steps(user: bool, staged: bool) -> str:
    """What to run after the files are in place."""
    if staged:
        return "staged; run these on the target machine after copying the files:" + (
            "\n  systemctl --user daemon-reload" if user else _system_steps()
        )
    if user:
        return ("next:\n  systemctl --user daemon-reload\n  systemctl --user enable --now rsupd\n"
                "  loginctl enable-linger $USER   # keep it running after you log out")  # fmt: skip
    return "next:" + _system_steps()


def _system_steps() -> str:
    return ("\n  systemd-sysusers /etc/sysusers.d/rsup.conf   # the group rsup"
            "\n  systemd-tmpfiles --create /etc/tmpfiles.d/rsup.conf"
            "\n  systemctl daemon-reload\n  systemctl enable --now rsupd"
            "\n  usermod -aG rsup NAME   # each user who may run jobs")  # fmt: skip


# CLI ---------------------------------------------------------------------------


def add_parser(subparsers: Any) -> None:
    """`rsup service install [--user] [--dry-run] [--prefix DIR]`."""
    parser = subparsers.add_parser("service", help="run rsupd as a systemd service")
    actions = parser.add_subparsers(dest="service_command", required=True, metavar="ACTION")
    p = actions.add_parser("install", help="write the unit file with this rsupd's path")
    p.add_argument("--user", action="store_true", help="per-user unit (systemctl --user)")
    p.add_argument("--dry-run", action="store_true", help="print the files, write nothing")
    p.add_argument("--prefix", type=Path, help="staging root put in front of every path")


def run(args: argparse.Namespace) -> int:
    if args.service_command == "install":
        return install(args.user, args.dry_run, args.prefix)
    print(f"rsup service: unknown action {args.service_command!r}", file=sys.stderr)
    return C.EXIT_USAGE
