"""The forked `kotonia` runs of the hostile tests (tests/hostile/forking.py) answer as a new
interpreter does: the same exit status, standard output and standard error, with the
environment, working folder and arguments of the run; a run past its timeout is killed and the
next run still works."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .forking import Timeout, run_forked
from .harness import CLI


def _exec(args: list[str | bytes], env: dict[str, str], cwd: Path) -> tuple[int, bytes, bytes]:
    done = subprocess.run(
        [*CLI, *args], input=b"", capture_output=True, env=env, cwd=cwd, timeout=120
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["conversations", "--json"],
        ["export", "99"],  # refused: exit 1, one line on stderr
        ["rename", "1", b"caf\xe9"],  # an argument that is not UTF-8
        ["chat"],  # wrong usage: exit 2 and the usage on stderr
    ],
)
def test_a_forked_run_answers_as_a_new_interpreter(args, tmp_path: Path):
    env = {**os.environ, "KOTONIA_HOME": str(tmp_path / "home")}
    forked = run_forked(args, env=env, stdin=b"", timeout=120, cwd=tmp_path)
    assert forked == _exec(args, env, tmp_path)


def test_a_forked_run_sees_its_own_environment_and_folder(tmp_path: Path):
    (tmp_path / "here").mkdir()
    env = {**os.environ, "KOTONIA_HOME": "relative-home"}  # resolved from the working folder
    code, out, err = run_forked(
        ["conversations"], env=env, stdin=b"", timeout=120, cwd=tmp_path / "here"
    )
    assert (code, out, err) == _exec(["conversations"], env, tmp_path / "here")
    assert (tmp_path / "here" / "relative-home").is_dir()


def test_a_forked_run_past_its_timeout_is_killed_and_the_next_one_runs(tmp_path: Path):
    env = {**os.environ, "KOTONIA_HOME": str(tmp_path / "home")}
    with pytest.raises(Timeout):
        run_forked(["characters"], env=env, stdin=b"", timeout=0.001)
    code, out, _err = run_forked(["characters"], env=env, stdin=b"", timeout=120)
    assert code == 0 and b"rowan-ashby" in out
