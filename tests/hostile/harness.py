"""Running `kotonia` against hostile input, the way a user would, and judging what came out.

Every hostile input is run as a real `kotonia` process (a crash in llama.cpp kills only that
process, a hang is cut by a timeout) and judged the same way:

* crash: a Python traceback, a "--- Logging error ---" block, or an exit status other than 0
  and 1 (a signal such as SIGABRT shows as a negative status);
* hang: the command did not finish within its timeout;
* otherwise the error, if any, is one line on standard error.

The process is forked from a server that has imported the app once (tests/hostile/forking.py:
the same process boundary without starting Python again each time); a run that measures peak
memory, runs as a plain user or runs another version of the code is a new interpreter (`exec`).

Read-only data dirs are made with plain permissions; when the tests run as root (which ignores
permissions) the subprocess gives up CAP_DAC_OVERRIDE first, so root meets the same walls.

To measure another version of the app with the same corpus (the before/after figures of issue
18), set KOTONIA_HOSTILE_CODE to a folder holding its `kotonia_tui` package: the subprocesses
import it first. KOTONIA_HOSTILE_TIMEOUT_S shortens the hang timeout for such a run.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .forking import Timeout, run_forked

CLI = [sys.executable, "-m", "kotonia_tui.cli"]
# The same command, which tells its peak resident memory (VmHWM) on its last line of stderr.
# VmHWM, not ru_maxrss: the latter keeps the forking pytest's size across exec.
_PEAK = "kotonia-peak-kb "
MEASURED_CLI = [
    sys.executable,
    "-c",
    "import re, sys\n"
    "from kotonia_tui.cli import main\n"
    "try:\n"
    "    code = main(sys.argv[1:])\n"
    "finally:\n"
    "    status = open('/proc/self/status').read()\n"
    f"    print('{_PEAK}' + re.search(r'VmHWM:\\s+(\\d+)', status).group(1), file=sys.stderr)\n"
    "sys.exit(code)\n",
]
TIMEOUT_S = float(os.environ.get("KOTONIA_HOSTILE_TIMEOUT_S", 120))  # only a hang reaches it
_OTHER_CODE = os.environ.get("KOTONIA_HOSTILE_CODE")
_PR_CAPBSET_DROP = 24
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 1, 2


@dataclass(frozen=True)
class Run:
    args: tuple[str, ...]
    code: int
    out: str
    err: str
    seconds: float
    peak_mb: float | None = None  # the process's peak resident memory, when measured

    @property
    def errors(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.startswith("error: ")]


class Hang(AssertionError):
    """The command did not finish within its timeout."""


def _without_override() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "cannot drop the DAC override capability")


def code_under_test() -> tuple[dict[str, str], str | None]:
    """The environment and working folder for a subprocess that imports `kotonia_tui`."""
    environment = dict(os.environ)
    if _OTHER_CODE:
        environment["PYTHONPATH"] = _OTHER_CODE
    return environment, _OTHER_CODE  # `-m` and `-c` put the working folder first on the path


def kotonia(
    *args: str | Path,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    timeout: float | None = None,
    as_plain_user: bool = False,
    cwd: Path | None = None,
    measure_peak: bool = False,
    stdout_path: Path | None = None,
) -> Run:
    """Run `kotonia ARGS` (KOTONIA_HOME and the rest of the environment inherited); with
    `measure_peak`, `Run.peak_mb` is the process's peak resident memory; with `stdout_path`,
    standard output goes to that file or device (/dev/full) and `Run.out` is empty."""
    command = MEASURED_CLI if measure_peak else CLI
    argv = [*command, *(os.fsencode(a) if isinstance(a, Path) else a for a in args)]
    environment, folder = code_under_test()
    environment.update(env or {})
    started = time.perf_counter()
    # A capability dropped from the bounding set takes effect at `exec`: a plain user's run
    # is a new interpreter.
    plain_user = as_plain_user and os.geteuid() == 0
    if not measure_peak and not _OTHER_CODE and not plain_user:
        waited = min(timeout or TIMEOUT_S, TIMEOUT_S)
        try:
            code, out, err_bytes = run_forked(
                argv[len(command) :],
                env=environment,
                stdin=stdin if stdin is not None else b"",
                timeout=waited,
                cwd=cwd,
                stdout_path=stdout_path,
            )
        except Timeout:
            what = " ".join(map(str, args))
            raise Hang(f"kotonia {what} did not finish in {waited:g} s") from None
        return Run(
            tuple(map(str, args)),
            code,
            out.decode("utf-8", "replace"),
            err_bytes.decode("utf-8", "replace"),
            time.perf_counter() - started,
        )
    out_file = stdout_path.open("wb") if stdout_path is not None else None
    try:
        proc = subprocess.run(
            argv,
            input=stdin if stdin is not None else b"",
            stdout=out_file or subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=min(timeout or TIMEOUT_S, TIMEOUT_S),
            env=environment,
            cwd=cwd or folder,
            preexec_fn=_without_override if plain_user else None,
        )
    except subprocess.TimeoutExpired as exc:
        waited = min(timeout or TIMEOUT_S, TIMEOUT_S)
        raise Hang(f"kotonia {' '.join(map(str, args))} did not finish in {waited:g} s") from exc
    finally:
        if out_file is not None:
            out_file.close()
    err = proc.stderr.decode("utf-8", "replace")
    peak = None
    if measure_peak:
        err, _, told = err.rpartition(_PEAK)
        peak = int(told.split()[0]) / 1024
    return Run(
        tuple(map(str, args)),
        proc.returncode,
        (proc.stdout or b"").decode("utf-8", "replace"),
        err,
        time.perf_counter() - started,
        peak,
    )


def assert_no_crash(run: Run) -> None:
    """No traceback, no logging-error block, an exit status of 0 or 1."""
    what = f"kotonia {' '.join(run.args)}"
    assert "Traceback (most recent call last)" not in run.err, f"{what} crashed:\n{run.err}"
    assert "--- Logging error ---" not in run.err, f"{what} flooded stderr:\n{run.err[:2000]}"
    assert run.code in (0, 1), f"{what} exited with {run.code}:\n{run.err[-2000:]}"


def assert_refused(run: Run, *named: str) -> str:
    """Exit 1 with exactly one error line, which names every string in `named`."""
    assert_no_crash(run)
    assert run.code == 1, f"expected a refusal, got exit {run.code}:\n{run.out}\n{run.err}"
    assert len(run.errors) == 1, run.err
    line = run.errors[0]
    for part in named:
        assert part in line, f"{part!r} is not named in: {line}"
    return line


def assert_ok(run: Run) -> None:
    assert_no_crash(run)
    assert run.code == 0, f"kotonia {' '.join(run.args)} failed:\n{run.err}"


def count_files(folder: Path, patterns: Sequence[str] = ("*",)) -> int:
    return sum(1 for pattern in patterns for _ in folder.glob(pattern))
