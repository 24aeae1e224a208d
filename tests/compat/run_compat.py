"""The RDNA1 user's job-side stack under a real rsupd: Python 3.10, torch 1.13.1,
torchvision 0.14.1, Ultralytics 8.3.227, NumPy < 2 (and rsup.workers under Python 3.9).

A plain script (not pytest), run from the main venv: `make compat`, or
`.venv/bin/python tests/compat/run_compat.py`. It

1. builds the stack into its own venv (COMPAT_VENV, default .compat-venv in the repo) with
   pyenv's Python 3.10 (or COMPAT_PYTHON), reusing it when the versions are already right;
2. starts rsupd from the main venv and runs, with the compat venv as the job's `python:`,
   the probe, a YOLOv8n kill drill, a YOLOv8n OOM drill and a plain-PyTorch kill drill;
3. compiles and imports rsup.workers under pyenv's Python 3.9.

One line per check; exit 1 if any failed, 0 otherwise ("skipped" where no Python 3.10 is
found). Every process it starts is gone when it exits. See tests/compat/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
MAIN_VENV_PY = ROOT / ".venv" / "bin" / "python"
MAIN_PY = str(MAIN_VENV_PY) if MAIN_VENV_PY.exists() else sys.executable

# The stack of the issue: what `pip install` gets, and what the cached venv must report.
REQUIREMENTS = ["torch==1.13.1", "torchvision==0.14.1", "ultralytics==8.3.227", "numpy<2"]
WANT = {"python": "3.10", "torch": "1.13.1", "torchvision": "0.14.1", "ultralytics": "8.3.227"}

BUILD_TIMEOUT = 1800.0
YOLO_TIMEOUT = 900.0
PLAIN_TIMEOUT = 300.0
EPOCHS = 4
STAGES = 10


# ---------------------------------------------------------------- output and waiting


class Report:
    def __init__(self) -> None:
        self.results: list[tuple[str, str, str]] = []
        self.t0 = time.monotonic()

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.t0:6.1f}s] {text}", flush=True)

    def check(self, name: str, status: str, detail: str = "") -> None:
        self.results.append((name, status, detail))
        line = f"{status.upper():7} {name}" + (f": {detail}" if detail else "")
        self.say(line)

    @property
    def failed(self) -> list[str]:
        return [name for name, status, _ in self.results if status == "fail"]


class CheckFailed(Exception):
    pass


def need(condition: object, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def wait_for(cond: Callable[[], Any], timeout: float, what: str, every: float = 0.5) -> Any:
    """Poll until `cond` returns something truthy; CheckFailed at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise CheckFailed(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.splitlines()[-lines:])


# ---------------------------------------------------------------- interpreters


def pyenv_pythons(minor: str) -> list[Path]:
    """pyenv's CPython `minor` (e.g. "3.10") interpreters, newest patch first."""
    roots: list[Path] = []
    pyenv = shutil.which("pyenv")
    if pyenv:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pyenv, "root"], capture_output=True, text=True, timeout=30, check=True
            ).stdout.strip()
            if out:
                roots.append(Path(out))
    for guess in (os.environ.get("PYENV_ROOT"), str(Path.home() / ".pyenv")):
        if guess and Path(guess) not in roots:
            roots.append(Path(guess))
    found: list[tuple[tuple[int, ...], Path]] = []
    for root in roots:
        versions = root / "versions"
        if not versions.is_dir():
            continue
        for entry in versions.iterdir():
            match = re.fullmatch(re.escape(minor) + r"\.(\d+)", entry.name)
            exe = entry / "bin" / f"python{minor}"
            if match and exe.exists():
                found.append(((int(match.group(1)),), exe))
    found.sort(reverse=True)
    return [exe for _, exe in found]


def find_python(minor: str, env_var: str) -> Path | None:
    given = os.environ.get(env_var)
    if given:
        return Path(given)
    candidates = pyenv_pythons(minor)
    return candidates[0] if candidates else None


def python_version(exe: Path) -> str | None:
    try:
        out = subprocess.run(
            [str(exe), "-c", "import platform; print(platform.python_version())"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


# ---------------------------------------------------------------- the compat venv

VERSIONS_CODE = """
import json, platform
import numpy, torch, torchvision, ultralytics
print(json.dumps({"python": platform.python_version(), "torch": torch.__version__,
                  "torchvision": torchvision.__version__, "ultralytics": ultralytics.__version__,
                  "numpy": numpy.__version__,
                  "oom_error": hasattr(torch.cuda, "OutOfMemoryError")}))
"""


def venv_versions(python: Path) -> dict[str, Any] | None:
    if not python.exists():
        return None
    try:
        out = subprocess.run(
            [str(python), "-c", VERSIONS_CODE],
            capture_output=True,
            text=True,
            timeout=180,
            env={**os.environ, "YOLO_OFFLINE": "1"},
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    try:
        return dict(json.loads(out.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return None


def versions_problem(found: dict[str, Any] | None) -> str | None:
    if found is None:
        return "torch, torchvision, ultralytics or numpy does not import"
    if not str(found["python"]).startswith(WANT["python"] + "."):
        return f"Python {found['python']}, want {WANT['python']}"
    for key in ("torch", "torchvision", "ultralytics"):
        if str(found[key]).split("+")[0] != WANT[key]:
            return f"{key} {found[key]}, want {WANT[key]}"
    if int(str(found["numpy"]).split(".")[0]) >= 2:
        return f"numpy {found['numpy']}, want < 2"
    return None


def remove_venv(venv: Path) -> None:
    """Remove an old compat venv; never a folder that is not a venv (a wrong COMPAT_VENV)."""
    if not venv.exists() and not venv.is_symlink():
        return
    plain_dir = venv.is_dir() and not venv.is_symlink()
    if plain_dir and ((venv / "pyvenv.cfg").exists() or not any(venv.iterdir())):
        shutil.rmtree(venv)
        return
    raise CheckFailed(f"{venv} exists and is not a venv; not removing it (set COMPAT_VENV)")


def build_venv(
    report: Report, base: Path, venv: Path, rebuild: bool
) -> tuple[Path, dict[str, Any]]:
    """The compat venv's python, built unless the cached one has the right versions."""
    python = venv / "bin" / "python"
    if python.exists() and not rebuild:
        found = venv_versions(python)
        problem = versions_problem(found)
        if problem is None and found is not None:
            report.say(f"reusing the cached compat venv {venv}")
            return python, found
        report.say(f"cached compat venv {venv} is not right ({problem}); rebuilding")
    remove_venv(venv)
    report.say(f"building the compat venv {venv} with {base}")
    run_logged([str(base), "-m", "venv", str(venv)], 300, "python -m venv")
    # Keep the venv out of git's untracked files wherever it lies (as virtualenv does).
    (venv / ".gitignore").write_text("# made by tests/compat/run_compat.py\n*\n")
    pip = [str(python), "-m", "pip", "--disable-pip-version-check"]
    report.say("  pip install " + " ".join(f'"{r}"' for r in REQUIREMENTS))
    run_logged([*pip, "install", "-q", *REQUIREMENTS], BUILD_TIMEOUT, "pip install")
    found = venv_versions(python)
    problem = versions_problem(found)
    if problem is not None or found is None:
        raise CheckFailed(f"the new compat venv is not right: {problem}")
    return python, found


def run_logged(argv: list[str], timeout: float, what: str) -> None:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CheckFailed(f"{what} took longer than {timeout:.0f} s") from None
    if out.returncode != 0:
        raise CheckFailed(f"{what} exited {out.returncode}:\n{tail(out.stdout + out.stderr)}")


# ---------------------------------------------------------------- rsupd


class Rsupd:
    """A real rsupd from the main venv, its state dir and socket under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.state = root / "state"
        self.socket = root / "rsupd.sock"
        self.log = root / "rsupd.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [MAIN_PY, "-m", "rsup.supervisor.daemon", "--state-dir", str(self.state),
                 "--socket", str(self.socket)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

        def answers() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise CheckFailed(f"rsupd exited {self.proc.returncode}: {self.log_tail()}")
            return self.cli("status", "--json", timeout=30).returncode == 0

        wait_for(answers, 60, "rsupd to answer on its socket")

    def log_tail(self) -> str:
        return tail(self.log.read_text(errors="replace")) if self.log.exists() else ""

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [MAIN_PY, "-m", "rsup.supervisor.cli.main", "--socket", str(self.socket), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def ok(self, *args: str, timeout: float = 60) -> str:
        out = self.cli(*args, timeout=timeout)
        need(out.returncode == 0, f"rsup {' '.join(args)} exited {out.returncode}: "
                                  f"{tail(out.stdout + out.stderr, 15)}")  # fmt: skip
        return out.stdout

    def status(self, name: str) -> dict[str, Any]:
        return dict(json.loads(self.ok("status", name, "--json"))[0])

    def events(self, name: str) -> list[dict[str, Any]]:
        return list(json.loads(self.ok("events", name, "--json")))

    def wait_done(self, name: str, timeout: float) -> dict[str, Any]:
        def done() -> dict[str, Any] | None:
            status = self.status(name)
            return status if status["state"] in ("succeeded", "failed", "stopped") else None

        return dict(wait_for(done, timeout, f"job {name} to end", every=1.0))

    def explain(self, name: str) -> str:
        """The last events and log lines of a job, for a failure message."""
        parts = []
        with contextlib.suppress(Exception):
            for event in self.events(name)[-8:]:
                parts.append(json.dumps(event)[:400])
        with contextlib.suppress(Exception):
            parts.append(tail(self.cli("logs", name).stdout, 20))
        return "\n".join(parts)

    def shutdown(self) -> None:
        """Stop every job and the daemon, then kill what is left of its state dir."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self.cli("stop", "--all", "--force", timeout=90)
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(20)
        kill_leftovers(self.root)


def kill_leftovers(root: Path) -> None:
    """Kill any process (shim, job, dataloader worker) that still names `root`."""
    import psutil

    mine = os.getpid()
    for proc in psutil.process_iter(["pid", "cmdline", "environ"]):
        try:
            if proc.pid == mine:
                continue
            cmdline = " ".join(proc.info["cmdline"] or [])
            env = proc.info["environ"] or {}
        except (psutil.Error, TypeError):
            continue
        if str(root) in cmdline or str(root) in env.get("RSUP_ATTEMPT_DIR", ""):
            with contextlib.suppress(psutil.Error):
                proc.kill()


def write_spec(folder: Path, spec: dict[str, Any]) -> Path:
    import yaml

    path = folder / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def of_kind(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e.get("event") == kind]


# ---------------------------------------------------------------- the checks


def check_probe(rsupd: Rsupd, python: Path) -> str:
    out = rsupd.cli("probe", "--python", str(python), "--device", "cpu", "--json", timeout=600)
    need(out.stdout.strip(), f"no output (exit {out.returncode}): {tail(out.stderr)}")
    report = json.loads(out.stdout)
    stages = report.get("stages") or []
    names = [s["name"] for s in stages]
    need(len(stages) == STAGES, f"{len(stages)} stages, want {STAGES}: {names}")
    bad = [f"{s['name']}={s['status']} ({s.get('error')})" for s in stages
           if s["status"] not in ("ok", "skipped")]  # fmt: skip
    need(not bad, "stages not ok: " + "; ".join(bad))
    need(report.get("verdict"), f"no verdict: {report.get('verdict')!r}")
    need(out.returncode == 0, f"exit {out.returncode} although every stage passed")
    details = stages[0].get("details") or {}
    need(str(details.get("torch", "")).startswith(WANT["torch"]),
         f"the probe imported torch {details.get('torch')}, want {WANT['torch']}")  # fmt: skip
    need(str(details.get("python", "")).startswith(WANT["python"] + "."),
         f"the probe ran Python {details.get('python')}, want {WANT['python']}")  # fmt: skip
    ok = sum(s["status"] == "ok" for s in stages)
    return (f"{ok}/{STAGES} ok, {STAGES - ok} skipped, verdict {report['verdict']}, "
            f"python {details.get('python')}, torch {details.get('torch')}")  # fmt: skip


def yolo_spec(work: Path, name: str, python: Path, data: Path) -> Path:
    config = work / "yolo-config"
    config.mkdir(exist_ok=True)
    return write_spec(work, {
        "name": name,
        "kind": "ultralytics",
        "python": str(python),
        "cwd": str(work),
        "env": {"YOLO_OFFLINE": "1", "YOLO_CONFIG_DIR": str(config)},
        "train": {
            "model": "yolov8n.yaml", "data": str(data), "epochs": EPOCHS, "imgsz": 128,
            "batch": 8, "workers": 0, "seed": 0, "plots": False,
            "project": str(work / "runs"),  # absolute: rsup handles it
        },
        "restart": {"backoff": {"initial": 1, "max": 5}},
        "hang": {"timeout": 300, "startup_timeout": 600},
    })  # fmt: skip


def results_epochs(run: Path) -> list[int]:
    with (run / "results.csv").open() as handle:
        rows = list(csv.reader(handle))
    need(rows and rows[0] and rows[0][0].strip() == "epoch", f"odd results.csv header {rows[:1]}")
    return [int(float(row[0])) for row in rows[1:] if row]


def ultralytics_banner(rsupd: Rsupd, name: str, attempt: int) -> str:
    """Ultralytics' own banner line of one attempt: the stack that really ran the job."""
    log = rsupd.ok("logs", name, "--attempt", str(attempt))
    want = (f"Ultralytics {WANT['ultralytics']}", f"Python-{WANT['python']}.",
            f"torch-{WANT['torch']}")  # fmt: skip
    lines = [line for line in log.splitlines() if "Ultralytics" in line and "torch-" in line]
    need(lines, f"attempt {attempt} printed no Ultralytics banner")
    need(all(w in lines[0] for w in want), f"attempt {attempt} ran {lines[0].strip()!r}")
    return re.sub(r"\s+", " ", lines[0].strip())


def check_yolo_kill(rsupd: Rsupd, work: Path, python: Path, data: Path) -> str:
    name = "compat-yolo-kill"
    rsupd.ok("start", str(yolo_spec(work, name, python, data)))
    rsupd.ok("inject", name, "kill", "--at-epoch", "2")
    status = rsupd.wait_done(name, YOLO_TIMEOUT)
    need(status["state"] == "succeeded", f"ended {status['state']}\n{rsupd.explain(name)}")
    events = rsupd.events(name)
    fired = [(e.get("kind"), e.get("at_epoch")) for e in of_kind(events, "drill_fired")]
    need(fired == [("kill", 2)], f"drills fired {fired}, want [('kill', 2)]")
    started = of_kind(events, "run_started")
    resumed = [bool(e.get("resumed")) for e in started]
    need(resumed == [False, True], f"run_started resumed={resumed}, want [False, True]")
    epochs = results_epochs(work / "runs" / name)
    need(epochs == list(range(1, EPOCHS + 1)), f"results.csv epochs {epochs}")
    weights = work / "runs" / name / "weights"
    need((weights / "last.pt").exists() and (weights / "best.pt").exists(), "no last/best.pt")
    ultralytics_banner(rsupd, name, 1)
    banner = ultralytics_banner(rsupd, name, 2)
    return (f"succeeded in {status.get('attempts')} attempts, resumed at epoch "
            f"{started[1].get('start_epoch')}, results.csv epochs {epochs}; "
            f"banner: {banner}")  # fmt: skip


def check_yolo_oom(rsupd: Rsupd, work: Path, python: Path, data: Path) -> str:
    import yaml

    name = "compat-yolo-oom"
    rsupd.ok("start", str(yolo_spec(work, name, python, data)))
    rsupd.ok("inject", name, "oom", "--at-epoch", "2")
    status = rsupd.wait_done(name, YOLO_TIMEOUT)
    need(status["state"] == "succeeded", f"ended {status['state']}\n{rsupd.explain(name)}")
    events = rsupd.events(name)
    restarts = [e for e in of_kind(events, "decision") if e.get("action") == "restart"]
    need(restarts, "no restart decision")
    category = (restarts[0].get("evidence") or {}).get("category")
    need(category == "oom", f"restart decided on {category!r}, want 'oom'")
    need(restarts[0].get("overrides") == {"batch": 4},
         f"overrides {restarts[0].get('overrides')}, want {{'batch': 4}}")  # fmt: skip
    run = work / "runs" / name
    batch = yaml.safe_load((run / "args.yaml").read_text()).get("batch")
    need(batch == 4, f"args.yaml of the resumed run has batch {batch}, want 4")
    epochs = results_epochs(run)
    need(epochs == list(range(1, EPOCHS + 1)), f"results.csv epochs {epochs}")
    ultralytics_banner(rsupd, name, 2)
    return f"oom at epoch 2 -> restart with batch 8 -> {batch}, results.csv epochs {epochs}"


def check_plain(rsupd: Rsupd, work: Path, python: Path) -> str:
    name = "compat-plain"
    job = work / name
    job.mkdir()
    script = HERE / "plain_resume.py"
    path = write_spec(work, {
        "name": name,
        "kind": "command",
        "python": str(python),
        "cwd": str(job),
        "command": ["python", str(script), "--save", "last.pt", "--epochs", "5",
                    "--batch", "{batch}", "--resume", "{checkpoint}"],
        "checkpoint": "last.pt",
        "batch": 8,
        "restart": {"backoff": {"initial": 0}},
        "hang": {"timeout": 60, "startup_timeout": 120},
    })  # fmt: skip
    rsupd.ok("start", str(path))
    rsupd.ok("inject", name, "kill", "--at-epoch", "2")
    status = rsupd.wait_done(name, PLAIN_TIMEOUT)
    need(status["state"] == "succeeded", f"ended {status['state']}\n{rsupd.explain(name)}")
    events = rsupd.events(name)
    fired = [(e.get("kind"), e.get("attempt")) for e in of_kind(events, "drill_fired")]
    need(fired == [("kill", 1)], f"drills fired {fired}, want [('kill', 1)]")
    argvs = [e.get("argv") or [] for e in of_kind(events, "attempt_started")]
    need(len(argvs) == 2, f"{len(argvs)} attempts, want 2")
    need("--resume" not in argvs[0], f"attempt 1 was given a checkpoint: {argvs[0]}")
    need("--resume" in argvs[1] and argvs[1][-1].endswith("last.pt"),
         f"attempt 2 was not given {{checkpoint}}: {argvs[1]}")  # fmt: skip
    check = (
        "import json, sys, torch; s = torch.load(sys.argv[1]); "
        "print(json.dumps({'done': s['epochs_done'], 'ran_by': s['ran_by']}))"
    )
    out = subprocess.run([str(python), "-c", check, str(job / "last.pt")],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    need(out.returncode == 0, f"cannot read last.pt: {tail(out.stderr)}")
    saved = json.loads(out.stdout)
    need(saved["done"] == [1, 2, 3, 4, 5], f"epochs done {saved['done']}, want each once")
    stacks = {(r["python"].rsplit(".", 1)[0], r["torch"].split("+")[0]) for r in saved["ran_by"]}
    need(stacks == {(WANT["python"], WANT["torch"])}, f"epochs ran under {stacks}")
    return f"succeeded in 2 attempts, epochs {saved['done']} each once, under {sorted(stacks)}"


IMPORT_ALL = """
import importlib, json, pkgutil, sys
import rsup.workers as pkg
assert pkg.__path__[0].endswith("workers"), pkg.__path__
result = {"ok": [], "needs_torch": [], "failed": {}}
for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
    name = "rsup.workers." + info.name
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] in ("torch", "torchvision", "ultralytics", "numpy"):
            result["needs_torch"].append(info.name)
        else:
            result["failed"][info.name] = repr(err)
    except Exception as err:
        result["failed"][info.name] = repr(err)
    else:
        result["ok"].append(info.name)
print(json.dumps(result))
"""


def check_py39(tmp: Path) -> tuple[str, str]:
    python = find_python("3.9", "COMPAT_PYTHON39")
    if python is None or not python.exists():
        return "skip", "no Python 3.9 found (pyenv install 3.9, or set COMPAT_PYTHON39)"
    version = python_version(python) or "?"
    need(version.startswith("3.9."), f"{python} is Python {version}, not 3.9")
    # rsupd's pylib layout: a folder where rsup/workers links to the workers/ folder.
    pylib = tmp / "pylib"
    (pylib / "rsup").mkdir(parents=True)
    (pylib / "rsup" / "workers").symlink_to(ROOT / "workers", target_is_directory=True)
    # Byte code goes to a folder of our own: nothing is written under workers/.
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PYTHON")},
        "PYTHONPATH": str(pylib),
        "PYTHONPYCACHEPREFIX": str(tmp / "pycache39"),
        "PYTHONNOUSERSITE": "1",
    }
    out = subprocess.run([str(python), "-m", "compileall", "-q", str(ROOT / "workers")],
                         capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    need(out.returncode == 0, f"compileall under {version}:\n{tail(out.stdout + out.stderr)}")
    out = subprocess.run([str(python), "-c", IMPORT_ALL], cwd=str(tmp),
                         capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    need(out.returncode == 0, f"import run exited {out.returncode}:\n{tail(out.stderr)}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    need(not result["failed"], f"imports failed under {version}: {result['failed']}")
    need(result["ok"], "no module imported")
    return "pass", (f"Python {version}: compileall of workers/ ok; {len(result['ok'])} modules "
                    f"import ({', '.join(result['ok'])}); need torch: "
                    f"{', '.join(result['needs_torch']) or 'none'}")  # fmt: skip


# ---------------------------------------------------------------- main


def run_check(report: Report, name: str, fn: Callable[[], str]) -> bool:
    report.say(f"running: {name}")
    try:
        report.check(name, "pass", fn())
        return True
    except CheckFailed as err:
        report.check(name, "fail", str(err))
    except Exception:
        report.check(name, "fail", tail(traceback.format_exc(), 15))
    return False


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """SIGTERM and SIGHUP end the run as Ctrl-C does: through every `finally`."""

    def stop(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    old = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the temp folder, pass or fail")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the compat venv")
    args = parser.parse_args(argv)

    report = Report()
    venv = Path(os.environ.get("COMPAT_VENV") or ROOT / ".compat-venv").absolute()
    report.say(f"rsup compat suite: job side {', '.join(REQUIREMENTS)} under Python 3.10")
    report.say(f"rsupd and the CLI run from {MAIN_PY}")

    base = find_python("3.10", "COMPAT_PYTHON")
    base_version = python_version(base) if base is not None else None
    if base is None or base_version is None or not base_version.startswith("3.10."):
        if base is None:
            where = "none found by pyenv"
        elif base_version is None:
            where = f"{base} does not run"
        else:
            where = f"{base} is Python {base_version}"
        report.say(f"no Python 3.10 to build the compat venv with ({where}); "
                   "install it with `pyenv install 3.10` or set COMPAT_PYTHON")  # fmt: skip
        print("compat: skipped (no Python 3.10)", flush=True)
        return 0
    report.say(f"Python 3.10: {base} ({base_version})")

    tmp = Path(tempfile.mkdtemp(prefix="rsup-compat-"))
    report.say(f"work folder {tmp}")
    rsupd: Rsupd | None = None
    try:
        with signals_raise():
            built: dict[str, Any] = {}

            def build() -> str:
                started = time.monotonic()
                python, found = build_venv(report, base, venv, args.rebuild)
                built.update(found, exe=str(python))
                took = time.monotonic() - started
                need(found["oom_error"], "torch.cuda.OutOfMemoryError is missing")
                return (f"{venv} in {took:.0f} s: python {found['python']}, "
                        f"torch {found['torch']}, torchvision {found['torchvision']}, "
                        f"ultralytics {found['ultralytics']}, numpy {found['numpy']}")  # fmt: skip

            if run_check(report, "compat venv", build):
                python = Path(built["exe"])
                rsupd = Rsupd(tmp)
                report.say("starting rsupd")
                if run_check(report, "rsupd starts", lambda: rsupd.start() or "answers"):
                    data = tmp / "data"
                    demo = subprocess.run(
                        [MAIN_PY, "-m", "rsup.workers.demodata", str(data),
                         "--train", "16", "--val", "8", "--size", "128"],
                        capture_output=True, text=True, timeout=300,
                    )  # fmt: skip
                    data_yaml = data / "data.yaml"
                    report.say(f"synthetic data set: {data_yaml} (exit {demo.returncode})")
                    checks: list[tuple[str, Callable[[], str]]] = [
                        ("probe (10 stages, cpu)", lambda: check_probe(rsupd, python)),
                        ("yolov8n kill drill at epoch 2",
                         lambda: check_yolo_kill(rsupd, tmp, python, data_yaml)),
                        ("yolov8n oom drill at epoch 2",
                         lambda: check_yolo_oom(rsupd, tmp, python, data_yaml)),
                        ("plain torch kill drill at epoch 2",
                         lambda: check_plain(rsupd, tmp, python)),
                    ]  # fmt: skip
                    for name, fn in checks:
                        run_check(report, name, fn)
            report.say("running: python 3.9 import of rsup.workers")
            try:
                status, detail = check_py39(tmp)
                report.check("python 3.9 import of rsup.workers", status, detail)
            except CheckFailed as err:
                report.check("python 3.9 import of rsup.workers", "fail", str(err))
    except KeyboardInterrupt as err:
        report.check("interrupted", "fail", str(err) or "Ctrl-C")
    finally:
        if rsupd is not None:
            report.say("stopping rsupd and every job")
            rsupd.shutdown()
            if rsupd.proc is not None and rsupd.proc.returncode not in (0, None):
                report.say(f"rsupd exited {rsupd.proc.returncode}; its log: {rsupd.log}")
        kill_leftovers(tmp)
        if report.failed or args.keep:
            report.say(f"kept {tmp} (rsupd.log, state/, runs/) to look at")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    passed = sum(s == "pass" for _, s, _ in report.results)
    skipped = sum(s == "skip" for _, s, _ in report.results)
    failed = len(report.failed)
    report.say(f"done in {time.monotonic() - report.t0:.0f} s")
    print(f"compat: {passed} passed, {failed} failed, {skipped} skipped", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
