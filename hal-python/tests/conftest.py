"""Shared fixtures of the hal Python tests.

Every cross-process test starts real Python processes (``run_child``).
The CUDA backend runs over the stand-in driver that cargo builds
(``cargo build -p hal-mock-libcuda``): its path is ``HAL_CUDA_LIBRARY``
when set, else the workspace's ``target/debug/libhal_mock_libcuda.so``.
A missing stand-in fails the tests that need it, with what to run.
"""

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
STANDIN = "libhal_mock_libcuda.so"

# Backends every machine has: CPU shared memory and the simulator.
ALWAYS = ["cpu-shm", "mock-cuda", "mock-ascend"]


def standin_library():
    """The stand-in libcuda.so.1 the CUDA backend runs on in these tests."""
    named = os.environ.get("HAL_CUDA_LIBRARY")
    if named:
        return named
    for path in _standin_candidates():
        if path.is_file():
            return str(path)
    pytest.fail(
        f"the stand-in CUDA driver ({STANDIN}) is not built: run "
        "`cargo build -p hal-mock-libcuda`, or set HAL_CUDA_LIBRARY"
    )


def _standin_candidates():
    for profile in ("debug", "release"):
        yield REPO / "target" / profile / STANDIN
        yield REPO / "target" / profile / "deps" / STANDIN


# The CUDA backend of this process and of every child runs on the stand-in.
if not os.environ.get("HAL_CUDA_LIBRARY"):
    for _path in _standin_candidates():
        if _path.is_file():
            os.environ["HAL_CUDA_LIBRARY"] = str(_path)
            break


def run_child(code, *args, stdin=None, timeout=60):
    """Run ``code`` in a new Python process with ``args`` as ``sys.argv[1:]``;
    return its stdout, failing the test with its stderr when it fails."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        pytest.fail(
            f"the child process failed ({done.returncode}):\n{done.stderr}\n{done.stdout}"
        )
    return done.stdout


def start_child(code, *args):
    """Start ``code`` in a new Python process with pipes on stdin and
    stdout (text, line-buffered), for a conversation."""
    return subprocess.Popen(
        [sys.executable, "-u", "-c", textwrap.dedent(code), *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )


def finish_child(child, timeout=60):
    """Wait for a child of ``start_child``; fail the test if it failed."""
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
        pytest.fail(f"the child process hung:\n{err}")
    if child.returncode != 0:
        pytest.fail(f"the child process failed ({child.returncode}):\n{err}\n{out}")
    return out


@pytest.fixture(params=ALWAYS + ["cuda"])
def backend(request):
    """Each backend the tests run on: cpu-shm, the simulator, and the real
    CUDA backend over the stand-in driver."""
    if request.param == "cuda":
        standin_library()
    return request.param


def _shm_entries():
    """The names in /dev/shm, and those in its users' directories of group
    and channel names as ".hal-UID/NAME" (a user's directory is kept while
    the machine runs, and is not listed itself)."""
    try:
        top = os.listdir("/dev/shm")
    except FileNotFoundError:
        return set()
    entries = set()
    for name in top:
        uid = name[len(".hal-"):] if name.startswith(".hal-") else ""
        if uid.isdigit() and os.path.isdir(os.path.join("/dev/shm", name)):
            try:
                inner = os.listdir(os.path.join("/dev/shm", name))
            except OSError:
                inner = None
            if inner is not None:
                entries.update(f"{name}/{n}" for n in inner)
                continue
        entries.add(name)
    return entries


@pytest.fixture(autouse=True, scope="session")
def nothing_left_in_dev_shm():
    """No shared-memory object that the session made is left behind: the
    entries of /dev/shm after the session that name hal or this session's
    processes are compared with those before."""
    before = _shm_entries()
    yield
    import gc

    gc.collect()
    left = sorted(e for e in _shm_entries() - before if "hal" in e.lower())
    assert not left, f"left in /dev/shm: {left}"


def allocate_exportable(device, location=None):
    """Memory of one page of ``device``, which every backend exports."""
    return device.allocate(device.page_size, location)
