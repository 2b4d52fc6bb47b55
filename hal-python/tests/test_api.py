"""The module's own surface, in one process: backends, devices, memory,
the buffer protocol, DLPack capsules and the exceptions."""

import gc

import numpy as np
import pytest

import hal


def test_backends_lists_every_backend_with_why_not():
    names = {name: (ok, why) for name, ok, why in hal.backends()}
    for name in ["cpu-shm", "mock-cuda", "mock-ascend", "cuda", "cuda-uvm", "ascend"]:
        assert name in names
    assert names["cpu-shm"] == (True, "")
    for ok, why in names.values():
        assert ok or why


def test_open_without_a_name_picks_a_usable_backend():
    usable = {name for name, ok, _ in hal.backends() if ok}
    assert hal.open().backend in usable


def test_an_unknown_backend_is_not_found():
    with pytest.raises(hal.NotFoundError) as raised:
        hal.open("no-such-backend")
    assert raised.value.kind == "not-found"
    assert raised.value.code is None


def test_every_error_kind_is_a_subclass_of_hal_error():
    kinds = [
        hal.UnavailableError, hal.UnsupportedError, hal.InvalidHandleError,
        hal.MisalignedError, hal.PermissionDeniedError, hal.NotFoundError,
        hal.AlreadyExistsError, hal.OutOfMemoryError, hal.TimeoutError,
        hal.ClosedError, hal.BusyError, hal.InvalidArgumentError,
        hal.VendorError, hal.IoError, hal.ForkedError,
    ]
    for kind in kinds:
        assert issubclass(kind, hal.Error)
    assert issubclass(hal.Error, Exception)
    assert len(set(kinds)) == 15


def test_a_bad_location_is_an_invalid_argument():
    with pytest.raises(hal.InvalidArgumentError, match="location"):
        hal.open("cpu-shm").allocate(4096, "somewhere")


def test_a_memoryview_writes_the_memory_without_a_copy():
    m = hal.open("cpu-shm").allocate(4096)
    view = memoryview(m)
    assert view.nbytes == 4096 and view.format == "B" and not view.readonly
    view[10:15] = b"hello"
    assert m.read(10, 5) == b"hello"
    m.write(100, bytearray(b"back"))
    assert bytes(view[100:104]) == b"back"
    array = np.frombuffer(m, dtype=np.uint32)
    assert array.shape == (1024,)
    view.release()


def test_device_memory_has_no_buffer_but_reads_and_writes():
    m = hal.open("mock-cuda").allocate(4096, "device")
    with pytest.raises(BufferError, match="not host-visible"):
        memoryview(m)
    m.write(0, b"device")
    assert m.read(0, 6) == b"device"
    assert m.__dlpack_device__()[0] == 12  # kDLExtDev: the simulator's device


def test_out_of_range_is_an_invalid_argument():
    m = hal.open("cpu-shm").allocate(4096)
    with pytest.raises(hal.InvalidArgumentError):
        m.read(4090, 10)


def test_capsules_are_versioned_when_asked_and_legacy_otherwise():
    m = hal.open("cpu-shm").allocate(4096)
    assert '"dltensor_versioned"' in repr(m.__dlpack__(max_version=(1, 0)))
    assert '"dltensor"' in repr(m.__dlpack__())
    assert '"dltensor"' in repr(m.__dlpack__(max_version=(0, 8)))
    assert m.__dlpack_device__() == (1, 0)
    with pytest.raises(BufferError):
        m.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError):
        m.__dlpack__(copy=True)


class Lend:
    """An object whose __dlpack__ hands over a capsule made earlier."""

    def __init__(self, capsule, device):
        self.capsule, self.device = capsule, device

    def __dlpack__(self, **_):
        return self.capsule

    def __dlpack_device__(self):
        return self.device


@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_a_capsule_keeps_the_memory_after_the_object_is_gone(max_version):
    m = hal.open("cpu-shm").allocate(4096)
    m.write(0, b"kept")
    capsule, device = m.__dlpack__(max_version=max_version), m.__dlpack_device__()
    del m
    gc.collect()
    array = np.from_dlpack(Lend(capsule, device))
    assert array[:4].tobytes() == b"kept"


def memfd_mappings():
    with open("/proc/self/maps") as maps:
        return sum("memfd:" in line for line in maps)


@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_a_capsule_no_consumer_took_frees_its_tensor(max_version):
    device = hal.open("cpu-shm")
    gc.collect()
    baseline = memfd_mappings()
    for _ in range(20):
        m = device.allocate(4096)
        capsule = m.__dlpack__(max_version=max_version)
        del m, capsule
    gc.collect()
    assert memfd_mappings() == baseline


def test_numpy_sees_the_memory_as_bytes():
    m = hal.open("cpu-shm").allocate(4096)
    a = np.from_dlpack(m)
    assert a.dtype == np.uint8 and a.shape == (4096,)
    a[:3] = [1, 2, 3]
    assert m.read(0, 3) == b"\x01\x02\x03"


def test_notify_wait_times_out_with_false_and_sees_a_signal():
    n = hal.open("cpu-shm").notify()
    assert n.wait(0) is False
    n.signal()
    assert n.wait(5) is True
    with pytest.raises(hal.InvalidArgumentError):
        n.wait(-1)


def test_wait_async_does_not_block_the_event_loop():
    import asyncio

    n = hal.open("cpu-shm").notify()

    async def main():
        waiter = asyncio.ensure_future(n.wait_async(30))
        await asyncio.sleep(0)  # the loop runs while the wait is pending
        assert not waiter.done()
        n.signal()
        return await waiter

    assert asyncio.run(main()) is True


def test_an_imported_memory_cannot_be_exported_again():
    m = hal.open("cpu-shm").allocate(4096)
    again = hal.import_handle(m.export())
    assert not again.allocated
    with pytest.raises(hal.UnsupportedError, match="imported"):
        again.export()


def test_a_read_only_import_refuses_writes():
    m = hal.open("cpu-shm").allocate(4096)
    ro = hal.import_handle(m.export(), read_only=True)
    assert ro.read_only
    with pytest.raises(hal.PermissionDeniedError):
        ro.write(0, b"x")
    assert memoryview(ro).readonly
    assert not np.from_dlpack(ro).flags.writeable
    with pytest.raises(BufferError, match="versioned"):
        ro.__dlpack__()  # a legacy capsule cannot say read-only


def test_malformed_text_is_an_invalid_handle():
    for text in ["", "hal1.", "hal1.AAAA", "hal1t.AAAA", "not a handle"]:
        with pytest.raises(hal.InvalidHandleError):
            hal.import_handle(text)
    with pytest.raises(hal.InvalidHandleError):
        hal.open_tensor("hal1.AAAA")


def test_importers_must_be_anyone_default_or_pids():
    m = hal.open("cpu-shm").allocate(4096)
    with pytest.raises(hal.InvalidArgumentError):
        m.export(importers="everyone")
    with pytest.raises(hal.InvalidArgumentError):
        m.export(importers=["one"])
    assert m.export(importers="default").startswith("hal1.")
    assert m.export(importers=[1, 2]).startswith("hal1.")


def test_shared_tensor_is_the_shared_layout_in_this_process():
    values = np.arange(12, dtype=np.int32).reshape(3, 4)
    shared = hal.share(values)
    here = np.from_dlpack(shared.tensor)
    assert (here == values).all()
    here[2, 3] = -5
    assert np.from_dlpack(hal.open_tensor(shared.text))[2, 3] == -5


def test_managed_memory_is_lent_to_the_cpu_when_asked(backend):
    device = hal.open(backend)
    if "managed-memory" not in device.capabilities:
        with pytest.raises(hal.Error):
            device.allocate(device.page_size, "managed")
        return
    m = device.allocate(device.page_size, "managed")
    m.write(0, b"managed")
    a = np.from_dlpack(m, device="cpu")
    assert a[:7].tobytes() == b"managed"


def test_wait_releases_the_gil_for_the_thread_that_signals():
    import threading

    n = hal.open("cpu-shm").notify()
    waiting = threading.Event()

    def signal_once_waiting():
        waiting.wait()
        n.signal()  # needs the GIL while the main thread is in wait()

    helper = threading.Thread(target=signal_once_waiting)
    helper.start()
    waiting.set()
    assert n.wait(30) is True
    helper.join()
