"""Messages a Python user reads: in Python's words, each fact once, and
one number format."""

import pytest

import hal
from conftest import run_child


def test_a_location_the_backend_lacks_is_named_as_python_names_it():
    with pytest.raises(hal.UnsupportedError) as raised:
        hal.open("cpu-shm").allocate(4096, "device")
    message = str(raised.value)
    assert '"host" in Python' in message, message
    assert '"device" in Python' in message, message
    assert "(use Location::Host)" not in message, message


def test_ranges_are_told_in_decimal_for_reads_and_writes():
    m = hal.open("cpu-shm").allocate(8000)
    with pytest.raises(hal.InvalidArgumentError) as read:
        m.read(7999, 2)
    with pytest.raises(hal.InvalidArgumentError) as write:
        m.write(7999, b"xy")
    for raised in (read, write):
        message = str(raised.value)
        assert "2 bytes at offset 7999 is outside the 8000-byte range" in message, message
        assert "0x" not in message, message


@pytest.mark.parametrize("kind", ["memory", "tensor"])
def test_a_handle_text_cut_short_says_it_is_truncated(kind):
    m = hal.open("cpu-shm").allocate(4096)
    if kind == "memory":
        text, open_ = m.export(), hal.import_handle
    else:
        shared = hal.share(m)
        text, open_ = shared.text, hal.open_tensor
    prefix = text.index(".") + 1
    for cut in range(prefix + 1, len(text)):
        with pytest.raises(hal.InvalidHandleError) as raised:
            open_(text[:cut])
        message = str(raised.value)
        assert "truncated" in message, f"cut at {cut}: {message}"
        assert "invalid character" not in message, f"cut at {cut}: {message}"


def test_open_tensor_of_a_memory_handle_says_what_to_call():
    m = hal.open("cpu-shm").allocate(4096)
    with pytest.raises(hal.InvalidHandleError) as raised:
        hal.open_tensor(m.export())
    message = str(raised.value)
    assert message == (
        "invalid handle: expected a tensor handle, got a memory, event or notify handle: "
        "hal.open_tensor opens the tensor handles of hal.share (`hal1t.` ...); import this "
        "one with hal.import_handle"
    )
    assert raised.value.kind == "invalid-handle"


def test_an_unloadable_cuda_driver_names_each_path_once():
    out = run_child(
        """
        import os
        os.environ["HAL_CUDA_LIBRARY"] = "/nonexistent/hal-test/libcuda.so.1"
        import hal
        try:
            hal.open("cuda")
        except hal.UnavailableError as e:
            print(e)
        """
    )
    assert "/nonexistent/hal-test/libcuda.so.1" in out, out
    assert out.count("/nonexistent/hal-test/libcuda.so.1") == 1, out
