"""A forked child (multiprocessing's fork start method) and the parent's
objects: refused with ForkedError, while the backend opened again in the
child works; and an export to this user's processes, imported by another."""

import os

import pytest

import hal
from conftest import run_child

CONSUMER = """
import sys, hal
m = hal.import_handle(sys.stdin.readline())
print(m.read(0, 5).decode())
"""


def test_same_user_export_reaches_another_process_of_this_user():
    m = hal.open("cpu-shm").allocate(4096)
    m.write(0, b"yours")
    out = run_child(CONSUMER, stdin=m.export(importers="same-user") + "\n")
    assert out.strip() == "yours"


def test_same_user_is_refused_where_the_backend_cannot_check_it():
    m = hal.open("mock-cuda").allocate(4096, "device")
    with pytest.raises(hal.UnsupportedError):
        m.export(importers="same-user")


def test_a_forked_child_is_refused_its_parents_memory_and_opens_its_own():
    m = hal.open("cpu-shm").allocate(4096)
    m.write(0, b"parent")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        # The child: report through the pipe, exit without Python's cleanup.
        code = 1
        try:
            os.close(read)
            try:
                m.read(0, 6)
                verdict = "read"
            except hal.ForkedError as e:
                verdict = "forked" if e.kind == "forked" else "wrong kind"
            mine = hal.open("cpu-shm").allocate(4096)
            mine.write(0, b"child")
            verdict += " " + mine.read(0, 5).decode()
            os.write(write, verdict.encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as r:
        said = r.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, said
    assert said == "forked child"
    # The parent's memory is the parent's still.
    assert m.read(0, 6) == b"parent"
