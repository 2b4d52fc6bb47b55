"""The C library and the Python package exchange handles: the C producer
of hal-ffi (hal-ffi/examples/producer.c) and its C++ twin
(hal-ffi/examples/producer.cpp) hand a buffer, a tensor and a notify
ping-pong to a Python consumer (NumPy), and a Python producer hands them to
the C consumer (hal-ffi/examples/consumer.c).

libhal_ipc is installed with ``cargo xtask install-c --prefix DIR --debug``:
DIR is ``HAL_C_PREFIX`` when set (CI installs it first), else the test
installs it under ``target/py-c``.
"""

import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

import hal
from conftest import REPO, finish_child

ROUNDS = 20
ANSWER = b"verified by the consumer\0"


@pytest.fixture(scope="session")
def c_prefix():
    prefix = pathlib.Path(os.environ.get("HAL_C_PREFIX", REPO / "target" / "py-c"))
    if not (prefix / "lib" / "libhal_ipc.so").exists():
        subprocess.run(
            ["cargo", "run", "-q", "-p", "xtask", "--", "install-c", "--prefix", str(prefix),
             "--debug"],
            cwd=REPO, check=True,
        )
    return prefix


def compile_example(prefix, name, out_dir):
    source = REPO / "hal-ffi" / "examples" / f"{name}.c"
    program = out_dir / name
    subprocess.run(
        ["cc", "-std=c11", "-Wall", "-Wextra", f"-I{prefix / 'include' / 'hal-ipc'}", str(source),
         "-o", str(program), f"-L{prefix / 'lib'}", "-lhal_ipc",
         f"-Wl,-rpath,{prefix / 'lib'}"],
        check=True,
    )
    return program


def compile_cpp_example(prefix, name, out_dir):
    """hal-ffi/examples/NAME.cpp, compiled with c++ (C++17) against the
    installed library. Without a C++ compiler the test fails, naming it: it
    never passes, or is skipped, without its check."""
    compiler = shutil.which("c++")
    if compiler is None:
        pytest.fail("no C++ compiler (`c++`) to build the C++ producer: install one "
                    "(Debian: build-essential)")
    source = REPO / "hal-ffi" / "examples" / f"{name}.cpp"
    program = out_dir / f"{name}_cpp"
    subprocess.run(
        [compiler, "-std=c++17", "-Wall", "-Wextra", "-Werror", f"-I{prefix / 'include' / 'hal-ipc'}",
         str(source), "-o", str(program), f"-L{prefix / 'lib'}", "-lhal_ipc",
         f"-Wl,-rpath,{prefix / 'lib'}"],
        check=True,
    )
    return program


PYTHON_CONSUMER = r'''
import os, sys
import numpy as np
import hal

backend, rounds = sys.argv[1], int(sys.argv[2])
device = hal.open(backend)
print(device.process_id(), flush=True)  # for the producer's pid lists
producer_id = int(sys.stdin.readline())
buffer_text, tensor_text, ping_text = (sys.stdin.readline().strip() for _ in range(3))

buffer = hal.import_handle(buffer_text)
data = np.frombuffer(buffer.read(0, len(buffer)), dtype=np.uint8)
i = np.arange(len(buffer), dtype=np.uint64)
assert (data == ((i * 31 + 7) % 251).astype(np.uint8)).all(), "the buffer differs"
buffer.write(0, b"verified by the consumer\0")
del buffer

tensor = hal.open_tensor(tensor_text)
assert tensor.dtype == "float32" and tensor.shape == [16, 64], tensor
if tensor.__dlpack_device__()[0] == 1:  # kDLCPU: NumPy reads it in place
    values = np.from_dlpack(tensor)
else:  # device memory: copied out
    values = np.frombuffer(tensor.memory.read(0, 16 * 64 * 4), np.float32).reshape(16, 64)
assert (values.ravel() == np.arange(16 * 64, dtype=np.float32) / 2).all(), "the tensor differs"
del values, tensor

ping = hal.import_handle(ping_text)
pong = device.notify()
only_producer = [producer_id] if "pid-allow-list" in device.capabilities else None
print(pong.export(importers=only_producer), flush=True)
for _ in range(rounds):
    assert pong.wait(10), "no ping"
    ping.signal()
print(f"python consumer {os.getpid()}: verified the buffer and the tensor", flush=True)
'''


def run_with_python_consumer(producer, backend, tmp_path):
    """Run ``producer`` on ``backend`` with the Python consumer as its
    consumer (HAL_EXAMPLE_CONSUMER); its standard output."""
    consumer = tmp_path / "consumer"
    script = tmp_path / "consumer.py"
    script.write_text(PYTHON_CONSUMER)
    consumer.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
    consumer.chmod(0o755)
    done = subprocess.run(
        [str(producer), backend, str(ROUNDS)],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "HAL_EXAMPLE_CONSUMER": str(consumer)},
    )
    assert done.returncode == 0, done.stderr + done.stdout
    assert "python consumer" in done.stdout
    assert "verified the buffer and the tensor" in done.stdout
    return done.stdout


def test_the_c_producer_hands_a_tensor_to_a_python_consumer(backend, c_prefix, tmp_path):
    producer = compile_example(c_prefix, "producer", tmp_path)
    out = run_with_python_consumer(producer, backend, tmp_path)
    assert f"producer: {ROUNDS} round trips" in out


def test_the_cpp_producer_hands_a_tensor_to_a_python_consumer(backend, c_prefix, tmp_path):
    producer = compile_cpp_example(c_prefix, "producer", tmp_path)
    out = run_with_python_consumer(producer, backend, tmp_path)
    assert "producer (C++) " in out
    assert f"producer (C++): {ROUNDS} round trips" in out


def test_a_python_producer_hands_a_tensor_to_the_c_consumer(backend, c_prefix, tmp_path):
    consumer = compile_example(c_prefix, "consumer", tmp_path)
    device = hal.open(backend)
    host = "memory-is-host" in device.capabilities
    size = 1 << 20
    buffer = device.allocate(size, "host" if host else "device")
    i = np.arange(size, dtype=np.uint64)
    buffer.write(0, ((i * 31 + 7) % 251).astype(np.uint8))
    ping = device.notify()

    child = subprocess.Popen(
        [str(consumer), backend, str(ROUNDS)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, bufsize=1,
    )
    # The consumer's id as its runtime knows it (on Ascend not its pid).
    consumer_id = int(child.stdout.readline())
    only_child = [consumer_id] if "pid-allow-list" in device.capabilities else None
    values = (np.arange(16 * 64, dtype=np.float32) / 2).reshape(16, 64)
    tensor = hal.share(values, importers=only_child, device=device)
    child.stdin.write(f"{device.process_id()}\n")
    child.stdin.write(buffer.export(importers=only_child) + "\n")
    child.stdin.write(tensor.text + "\n")
    child.stdin.write(ping.export(importers=only_child) + "\n")
    child.stdin.flush()
    pong = hal.import_handle(child.stdout.readline())
    for _ in range(ROUNDS):
        pong.signal()
        assert ping.wait(10), "no answer"
    out = finish_child(child)
    assert f"{ROUNDS} pings answered" in out
    assert buffer.read(0, len(ANSWER)) == ANSWER
    del pong
    assert buffer.wait_unleased(10)
