"""``hal.share`` of CUDA memory another library allocated (a PyTorch or CuPy
tensor from its caching allocator), over the stand-in driver: the memory is
adopted by address and shared in place, not copied; another process opens
it and writes into the producer's own allocation; the producer's object is
kept until the importer let go.

The "other library" is plain driver calls through ctypes on the same
stand-in library the CUDA backend loaded, and its tensor a DLPack capsule
made by hand, as a framework's ``__dlpack__`` gives one."""

import ctypes
import gc
import time
import weakref

import pytest

import hal
from conftest import finish_child, run_child, standin_library, start_child

PAGE = 4096
# DLPack's device type of CUDA memory (kDLCUDA) and its uint8 code (kDLUInt).
KDL_CUDA, KDL_UINT = 2, 1


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


class Driver:
    """Plain driver calls on device 0's primary context, as a framework
    makes them."""

    def __init__(self):
        self.lib = ctypes.CDLL(standin_library())
        assert self.lib.cuInit(0) == 0
        self.ctx = ctypes.c_void_p()
        assert self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), 0) == 0

    def __enter__(self):
        assert self.lib.cuCtxPushCurrent_v2(self.ctx) == 0
        return self.lib

    def __exit__(self, *_):
        popped = ctypes.c_void_p()
        assert self.lib.cuCtxPopCurrent_v2(ctypes.byref(popped)) == 0


class ForeignCudaTensor:
    """A 1-D uint8 tensor of ``length`` bytes at ``offset`` in a device
    allocation of ``size`` bytes made by plain ``cuMemAlloc_v2``, filled with
    ``fill``; freed when the object goes, as a framework's tensor is."""

    def __init__(self, driver, size, offset, length, fill):
        self.driver, self.offset, self.length = driver, offset, length
        self.base = ctypes.c_uint64()
        with driver as lib:
            assert lib.cuMemAlloc_v2(ctypes.byref(self.base), ctypes.c_size_t(size)) == 0
            data = bytes(fill(i) for i in range(size))
            assert lib.cuMemcpyHtoD_v2(self.base, data, ctypes.c_size_t(size)) == 0

    @property
    def address(self):
        return self.base.value + self.offset

    def read(self, at, n):
        out = ctypes.create_string_buffer(n)
        with self.driver as lib:
            assert lib.cuMemcpyDtoH_v2(out, ctypes.c_uint64(self.address + at), ctypes.c_size_t(n)) == 0
        return out.raw

    def __dlpack_device__(self):
        return (KDL_CUDA, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if max_version is not None:
            # This producer makes legacy capsules only, as older ones do.
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        self._shape = (ctypes.c_int64 * 1)(self.length)
        self._managed = DLManagedTensor(
            DLTensor(
                ctypes.c_void_p(self.address),
                DLDevice(KDL_CUDA, 0),
                1,
                DLDataType(KDL_UINT, 8, 1),
                self._shape,
                None,
                0,
            ),
            None,
            None,
        )
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self._managed), b"dltensor", None)

    def __del__(self):
        with self.driver as lib:
            lib.cuMemFree_v2(self.base)


@pytest.fixture
def driver():
    return Driver()


IMPORTER = """
import sys, hal
t = hal.open_tensor(sys.argv[1])
m = t.memory
assert m.backend == "cuda" and m.location == "device", (m.backend, m.location)
assert (t.dtype, t.shape) == ("uint8", [int(sys.argv[2])]), (t.dtype, t.shape)
start = t.byte_offset
assert m.read(start, 4) == bytes.fromhex(sys.argv[3]), m.read(start, 4)
m.write(start, b"from the importer")
"""


def test_a_foreign_cuda_tensor_is_shared_in_place(driver):
    tensor = ForeignCudaTensor(driver, 4 * PAGE, PAGE + 256, 1000, lambda i: i % 251)
    shared = hal.share(tensor)
    assert not shared.copied, "adopted in place, not copied"
    memory = shared.memory
    assert memory.backend == "cuda" and memory.allocated
    # The whole page around the tensor (it lies at PAGE + 256 .. PAGE + 1256
    # of its allocation), the tensor at its offset in it.
    assert len(memory) == PAGE
    assert shared.tensor.byte_offset == 256
    assert memory.read(256, 4) == tensor.read(0, 4)
    first = tensor.read(0, 4)
    run_child(IMPORTER, shared.text, 1000, first.hex())
    # The importer wrote into the producer's own allocation.
    assert tensor.read(0, 17) == b"from the importer"
    assert memory.wait_unleased(20)
    assert memory.importers() == 0


def test_the_producer_is_kept_until_the_last_importer_let_go(driver):
    tensor = ForeignCudaTensor(driver, 2 * PAGE, 0, PAGE, lambda i: 7)
    gone = weakref.ref(tensor)
    shared = hal.share(tensor)
    del tensor
    gc.collect()
    assert gone() is not None, "the shared memory keeps the producer's tensor"
    del shared
    gc.collect()
    assert gone() is None, "nothing imported it: let go with the last reference"


HOLDER = """
import sys, hal
t = hal.open_tensor(sys.argv[1])
print("imported", flush=True)
sys.stdin.readline()
del t
print("released", flush=True)
"""


def test_an_importer_keeps_the_producer_after_the_share_is_gone(driver):
    tensor = ForeignCudaTensor(driver, 2 * PAGE, 0, PAGE, lambda i: 9)
    gone = weakref.ref(tensor)
    shared = hal.share(tensor)
    child = start_child(HOLDER, shared.text)
    assert child.stdout.readline().strip() == "imported"
    del tensor, shared
    gc.collect()
    assert gone() is not None, "an importer maps the producer's memory: it is kept"
    child.stdin.write("go\n")
    assert child.stdout.readline().strip() == "released"
    finish_child(child)
    deadline = time.monotonic() + 20
    while gone() is not None and time.monotonic() < deadline:
        # A call into hal takes the GIL there, which releases the reference
        # the waiting thread let go of.
        hal.backends()
        gc.collect()
        time.sleep(0.01)
    assert gone() is None, "let go once the importer was gone"
