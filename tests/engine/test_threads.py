"""How llama.cpp's threads are set up (engine/threads.py): their OpenMP waits are short, set
before llama_cpp loads, a user's own choice is kept, and there is one thread per core this
process may run on. Each check runs in a fresh interpreter: the OpenMP runtime reads its
settings once, when it loads, and the CPU affinity is the process's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

WAITS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")

BEFORE_LLAMA = """
import json, os, sys
import kotonia_tui.engine
loaded_before = "llama_cpp" in sys.modules
from kotonia_tui.engine import LlamaEngine  # loads llama_cpp
print(json.dumps({
    "loaded_before": loaded_before,
    "loaded_after": "llama_cpp" in sys.modules,
    "env": {n: os.environ.get(n) for n in WAITS},
}))
""".replace("WAITS", repr(WAITS))

ON_ONE_CORE = """
import json, os, sys
from pathlib import Path
os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
from kotonia_tui.config import ModelProfile, PromptFormat
from kotonia_tui.engine import LlamaEngine
profile = ModelProfile(model_path=Path(sys.argv[1]), n_ctx=512,
                       prompt_format=PromptFormat.TEMPLATE)
with LlamaEngine.open(profile, cache_dir=Path(sys.argv[2])) as engine:
    print(json.dumps({"threads": engine.info.threads, "cpus": os.cpu_count()}))
"""


def run(code: str, *args: str, **env: str) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items() if k not in WAITS}
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_the_engine_sets_short_openmp_waits_before_llama_cpp_loads():
    found = run(BEFORE_LLAMA)
    assert found["loaded_before"] is False and found["loaded_after"] is True
    assert found["env"] == {
        "OMP_WAIT_POLICY": "PASSIVE",
        "GOMP_SPINCOUNT": "1000",
        "KMP_BLOCKTIME": None,
    }


@pytest.mark.parametrize("name", WAITS)
def test_a_wait_setting_the_user_chose_is_kept_and_nothing_is_added(name):
    found = run(BEFORE_LLAMA, **{name: "7"})
    assert found["env"] == {n: ("7" if n == name else None) for n in WAITS}


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_one_thread_per_core_the_process_may_run_on(tmp_path: Path, tiny_model_path: Path):
    found = run(ON_ONE_CORE, str(tiny_model_path), str(tmp_path))
    assert found["threads"] == 1
