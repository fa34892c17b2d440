"""How many threads llama.cpp runs, and how they wait for each other (spin briefly, then sleep).

llama.cpp (built with OpenMP, as llama-cpp-python's Linux wheels are) splits every step of
the model's graph across its threads and makes them wait for each other at the end of it:
hundreds of barriers per generated token. By default libgomp spins a long while at a barrier
before it sleeps. With as many threads as cores, the moment anything else wants a core (a
state file being written, the event loop, another program) one thread is descheduled and its
partner spins out its whole count at every barrier, holding the other core: the reply slows
far more than the share of CPU lost (docs/decisions.md D-16, `benchmarks/first_turns.py`). A
short spin keeps the barriers that end at once fast and lets a thread that waits for a
descheduled partner give its core up.

This only works if it is set before the OpenMP runtime loads, which is when llama_cpp is
first imported; the engine package sets it on import, before any of its modules loads
llama_cpp. A value the user set (in the environment) is kept.
"""

from __future__ import annotations

import os

# libgomp's rounds before a waiting thread sleeps: about 50 microseconds here, more than a
# barrier takes when both threads run, far less than a scheduler slice.
GOMP_SPIN_ROUNDS = "1000"
_OURS = {
    "OMP_WAIT_POLICY": "PASSIVE",  # the OpenMP standard's knob (LLVM's and MSVC's runtimes)
    "GOMP_SPINCOUNT": GOMP_SPIN_ROUNDS,  # libgomp's, which takes it over the policy
}
_USERS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")


def wait_briefly() -> bool:
    """Set the OpenMP wait settings unless the user chose any; True when they were set."""
    if any(name in os.environ for name in _USERS):
        return False
    os.environ.update(_OURS)
    return True


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which a container or `taskset`
    narrows; `os.cpu_count()` counts the machine's): one thread each by default."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)
