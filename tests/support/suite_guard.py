"""Nothing outlives the suite, and a stopped suite still says why its tests failed.

**Every process the suite starts ends with it.** Tests start real servers in sessions of their own (vLLM,
Prometheus, PostgreSQL, nginx, HAProxy, Chromium, observers, proxies), so a signal to pytest's process group
does not reach them, and Python's default SIGTERM skips the `finally` blocks that stop them: a suite stopped by
a CI time limit left three ~6 GB vLLM servers running under init. So the pytest process (the xdist controller
when there are workers) becomes a child subreaper (`PR_SET_CHILD_SUBREAPER`): whatever a test starts, however
it detaches (a new session, a double fork like `pg_ctl`), stays its descendant. On SIGTERM, SIGINT or SIGHUP
each pytest process stops every descendant (SIGTERM, then SIGKILL after a grace period) and then stops as
Ctrl-C does, so pytest still prints what failed; on a normal exit anything a test left running is named and
stopped the same way.

**Each outcome is written as it happens.** With `OBSERVER_TEST_LOG=FILE` the controller appends one line per
test and the full failure text of each failure or error to FILE, flushed at once, so a suite killed by a time
limit leaves a log that names every failed test with its failure text.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import TextIO

import psutil
import pytest

PR_SET_CHILD_SUBREAPER = 36
GRACE_SECONDS = 10.0
LOG_ENV = "OBSERVER_TEST_LOG"
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def become_subreaper() -> bool:
    """Orphaned descendants re-parent to this process instead of init (Linux); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0


def descendants() -> list[psutil.Process]:
    """Every live (not zombie) descendant of this process."""
    return [p for p in psutil.Process().children(recursive=True) if alive(p.pid)]


def stop_descendants(grace: float = GRACE_SECONDS) -> list[str]:
    """SIGTERM every descendant, SIGKILL those still alive after `grace` seconds, reap what is ours; the
    command lines of what was running."""
    procs = descendants()
    found = [f"{p.pid}: {_command(p)}" for p in procs]
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    deadline = time.monotonic() + grace
    while procs and time.monotonic() < deadline:
        _reap()
        procs = [p for p in procs if alive(p.pid)]
        time.sleep(0.1)
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()
    _reap()
    return found


def _command(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline()) or p.name()
    except psutil.Error:
        return "?"


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _reap() -> None:
    """Collect exited children that re-parented here (never one a Popen still waits on: those are reaped
    by their own wait, and this only runs once the suite is ending)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


_stopped: list[str] = []  # set once a signal stopped the suite: what was said about it
_logs: list[OutcomeLog] = []


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if _stopped:  # a second signal while stopping: stop now
        os._exit(128 + signum)
    stopped = stop_descendants()
    _stopped.append(f"[suite] {signal.Signals(signum).name}: stopped {len(stopped)} process(es) the suite had "
                    f"started" + "".join(f"\n  {p}" for p in stopped))
    for log in _logs:
        log.note(_stopped[0])
    raise KeyboardInterrupt  # pytest ends the session and still reports what failed


class OutcomeLog:
    """One line per test outcome, the failure text of each failure, flushed as it comes."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: TextIO = path.open("a", encoding="utf-8")
        self._write(f"# session started {time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()}\n")

    def note(self, text: str) -> None:
        self._write(f"# {text}\n")

    def _write(self, text: str) -> None:
        self._file.write(text)
        self._file.flush()

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or report.outcome != "passed":
            what = "ERROR" if report.failed and report.when != "call" else report.outcome.upper()
            self._write(f"{what} {report.nodeid} ({report.when}, {report.duration:.1f} s)\n")
            if report.failed:
                self._write(f"{report.longreprtext}\n" + "-" * 80 + "\n")

    def pytest_unconfigure(self) -> None:
        self._write(f"# session ended {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        self._file.close()


def pytest_configure(config: pytest.Config) -> None:
    if threading_main():
        become_subreaper()
        for sig in SIGNALS:
            signal.signal(sig, _on_signal)
    log = os.environ.get(LOG_ENV)
    if log and not hasattr(config, "workerinput"):  # xdist forwards every report to the controller
        _logs.append(OutcomeLog(Path(log)))
        config.pluginmanager.register(_logs[-1], "observer-outcome-log")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _stopped:  # said here: while a test runs, pytest captures what the handler prints
        print("\n" + _stopped[0], file=sys.stderr, flush=True)
        return
    left = stop_descendants(grace=5.0)
    if left and not hasattr(config, "workerinput"):
        print("\n[suite] stopped what tests left running:\n  " + "\n  ".join(left), file=sys.stderr, flush=True)


def threading_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
