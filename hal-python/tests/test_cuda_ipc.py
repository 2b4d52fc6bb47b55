"""Raw CUDA IPC handles in PyTorch's form, over the stand-in driver: a hal
CUDA allocation's handle (``hal.cuda_ipc_handle``, what
``torch.UntypedStorage._new_shared_cuda`` takes) opens in another process
with ``hal.import_cuda_ipc``, in PyTorch's 66-byte form and bare."""

import pytest

import hal
from conftest import run_child, standin_library

IMPORTER = """
import sys, hal
handle = bytes.fromhex(sys.argv[1])
offset, size = int(sys.argv[2]), int(sys.argv[3])
m = hal.import_cuda_ipc(handle, offset, size)
assert len(m) == size and m.location == "device" and m.backend == "cuda"
assert m.read(0, 5) == b"torch", m.read(0, 5)
m.write(8, b"answer")
"""


@pytest.fixture
def cuda():
    standin_library()
    return hal.open("cuda")


@pytest.mark.parametrize("form", ["torch", "bare"])
def test_a_raw_handle_opens_in_another_process(cuda, form):
    m = cuda.allocate(cuda.page_size, "device")
    m.write(0, b"torch")
    handle, offset, size = hal.cuda_ipc_handle(m)
    assert len(handle) == 66 and handle[:2] == b"\x02c"
    assert (offset, size) == (0, len(m))
    sent = handle if form == "torch" else handle[2:]
    run_child(IMPORTER, sent.hex(), offset, size)
    assert m.read(8, 6) == b"answer"


def test_a_range_past_the_allocation_is_refused(cuda):
    m = cuda.allocate(cuda.page_size, "device")
    handle, offset, size = hal.cuda_ipc_handle(m)
    out = run_child(
        """
        import sys, hal
        try:
            hal.import_cuda_ipc(bytes.fromhex(sys.argv[1]), 0, int(sys.argv[2]) * 2)
        except hal.InvalidHandleError as e:
            print("refused")
        """,
        handle.hex(), size,
    )
    assert out.strip() == "refused"


@pytest.mark.parametrize(
    "handle",
    [b"", b"\x02c" + bytes(63), bytes(65), b"\x01c" + bytes(64), b"\x02e" + bytes(64)],
)
def test_handles_of_other_forms_are_invalid(handle):
    with pytest.raises(hal.InvalidHandleError):
        hal.import_cuda_ipc(handle, 0, 4096)


def test_only_cuda_memory_has_a_raw_handle():
    m = hal.open("cpu-shm").allocate(4096)
    with pytest.raises(hal.InvalidArgumentError, match="only CUDA memory"):
        hal.cuda_ipc_handle(m)


def test_a_driver_refusal_is_a_vendor_error_with_the_drivers_code_and_name(cuda):
    with pytest.raises(hal.VendorError) as raised:
        hal.import_cuda_ipc(bytes(64), 0, 4096)
    error = raised.value
    assert (error.kind, error.code, error.name) == ("vendor", 1, "CUDA_ERROR_INVALID_VALUE")
    assert isinstance(error, hal.Error)
