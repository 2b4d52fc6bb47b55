"""Two real Python processes share memory, tensors and notifies: on CPU
shared memory, on the simulator, and on the CUDA backend over the stand-in
driver."""

import json

import numpy as np
import pytest

import hal
from conftest import allocate_exportable, finish_child, run_child, start_child

CONSUMER = """
import sys, hal
m = hal.import_handle(sys.stdin.readline())
assert isinstance(m, hal.Memory) and not m.allocated
data = m.read(0, 64)
assert data == bytes(range(64)), data
m.write(64, b"answered by " + str(__import__("os").getpid()).encode())
print(len(m))
"""


def test_memory_travels_to_another_process(backend):
    device = hal.open(backend)
    m = allocate_exportable(device)
    m.write(0, bytes(range(64)))
    text = m.export() if backend != "mock-ascend" else m.export(importers="anyone")
    out = run_child(CONSUMER, stdin=text + "\n")
    assert int(out) == len(m)
    assert m.read(64, 12) == b"answered by "


NUMPY_CONSUMER = """
import json, sys, hal, numpy
t = hal.open_tensor(sys.stdin.readline())
a = numpy.from_dlpack(t)
expected = numpy.load(sys.argv[1])
assert a.dtype == expected.dtype, (a.dtype, expected.dtype)
assert a.shape == expected.shape, (a.shape, expected.shape)
if expected.size:
    assert list(a.strides) == json.loads(sys.argv[2]), (a.strides, sys.argv[2])
assert (a == expected).all()
print(json.dumps([t.dtype, t.shape, t.strides, t.byte_offset]))
"""

ARRAYS = {
    "float32 2-d": np.arange(24, dtype=np.float32).reshape(4, 6),
    "int16 3-d": np.arange(60, dtype=np.int16).reshape(3, 4, 5),
    "complex64": np.arange(8, dtype=np.complex64) * (1 + 2j),
    "bool": np.array([True, False, True, True]),
    "float64 every other column": np.arange(48, dtype=np.float64).reshape(6, 8)[:, ::2],
    "uint8 transposed": np.arange(30, dtype=np.uint8).reshape(5, 6).T,
    "int64 0-d": np.array(7, dtype=np.int64),
    "float32 empty": np.zeros((0, 3), dtype=np.float32),
}


@pytest.mark.parametrize("name", sorted(ARRAYS))
def test_numpy_arrays_keep_dtype_shape_and_strides(name, tmp_path):
    array = ARRAYS[name]
    shared = hal.share(array)
    assert shared.copied
    assert str(shared) == shared.text and shared.text.startswith("hal1t.")
    expected = tmp_path / "expected.npy"
    np.save(expected, array)
    out = run_child(NUMPY_CONSUMER, expected, json.dumps(array.strides), stdin=shared.text + "\n")
    dtype, shape, strides, offset = json.loads(out)
    assert dtype == str(array.dtype) and shape == list(array.shape) and offset == 0
    if array.ndim and array.size:
        assert strides == [s // array.itemsize for s in array.strides]


def test_a_view_of_hal_memory_is_shared_without_a_copy(tmp_path):
    m = hal.open("cpu-shm").allocate(1 << 16)
    whole = np.from_dlpack(m).view(np.float32)
    whole[:] = np.arange(whole.size, dtype=np.float32)
    window = whole.reshape(128, 128)[10:20, 4:100:3]
    shared = hal.share(window)
    assert not shared.copied
    opened = hal.open_tensor(shared.text)
    assert opened.byte_offset == (10 * 128 + 4) * 4
    assert opened.strides == [128, 3]
    expected = tmp_path / "expected.npy"
    np.save(expected, window)
    run_child(NUMPY_CONSUMER, expected, json.dumps(window.strides), stdin=shared.text + "\n")
    # Zero-copy: a write after sharing is seen by the next consumer.
    window[0, 0] = -1.0
    np.save(expected, window)
    run_child(NUMPY_CONSUMER, expected, json.dumps(window.strides), stdin=shared.text + "\n")


def test_a_memory_is_shared_whole_as_bytes():
    m = hal.open("cpu-shm").allocate(4096)
    m.write(0, b"whole")
    shared = hal.share(m)
    assert not shared.copied
    t = hal.import_handle(shared.text)
    assert isinstance(t, hal.Tensor)
    assert t.dtype == "uint8" and t.shape == [4096]
    assert bytes(np.from_dlpack(t)[:5]) == b"whole"


def test_backwards_strides_are_refused():
    with pytest.raises(hal.InvalidArgumentError, match="backwards"):
        hal.share(np.arange(10)[::-1])


def test_something_without_dlpack_is_a_type_error():
    with pytest.raises(TypeError, match="__dlpack__"):
        hal.share([1, 2, 3])


PONG = """
import sys, hal
ping = hal.import_handle(sys.stdin.readline())
own = hal.open(sys.argv[1]).notify()
print(own.export(), flush=True)
for _ in range(int(sys.argv[2])):
    assert own.wait(30), "no ping"
    ping.signal()
print("done", flush=True)
"""


def test_a_notify_ping_pong(backend):
    rounds = 25
    device = hal.open(backend)
    mine = device.notify()
    child = start_child(PONG, backend, rounds)
    child.stdin.write(mine.export() + "\n")
    child.stdin.flush()
    theirs = hal.import_handle(child.stdout.readline())
    assert isinstance(theirs, hal.Notify)
    for _ in range(rounds):
        theirs.signal()
        assert mine.wait(30), "no pong"
    assert finish_child(child).strip() == "done"


def test_an_import_by_a_process_not_on_the_pid_list_is_refused():
    device = hal.open("cpu-shm")
    m = device.allocate(4096)
    text = m.export(importers=[device.process_id()])
    out = run_child(
        """
        import sys, hal
        try:
            hal.import_handle(sys.stdin.readline())
        except hal.PermissionDeniedError as e:
            print("refused", e.kind)
        """,
        stdin=text + "\n",
    )
    assert out.split() == ["refused", "permission-denied"]


def test_a_read_only_export_maps_read_only_in_the_importer():
    m = hal.open("cpu-shm").allocate(4096)
    m.write(0, b"ro")
    out = run_child(
        """
        import sys, hal, numpy
        m = hal.import_handle(sys.stdin.readline())
        assert m.read_only and m.read(0, 2) == b"ro"
        try:
            m.write(0, b"no")
        except hal.PermissionDeniedError:
            print("refused")
        """,
        stdin=m.export(read_only=True) + "\n",
    )
    assert out.strip() == "refused"
    assert m.read(0, 2) == b"ro"


def test_an_event_recorded_here_is_waited_on_in_another_process(backend):
    device = hal.open(backend)
    if "ipc-event" not in device.capabilities:
        with pytest.raises(hal.UnsupportedError):
            device.event().export()
        return
    event = device.event()
    text = event.export()
    event.record()
    out = run_child(
        """
        import sys, hal
        e = hal.import_handle(sys.stdin.readline())
        assert isinstance(e, hal.Event)
        print(e.wait(30))
        """,
        stdin=text + "\n",
    )
    assert out.strip() == "True"
    assert event.wait(30)
