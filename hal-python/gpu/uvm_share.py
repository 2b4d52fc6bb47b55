"""GPU smoke: a hal-cuda-uvm managed buffer shared with two processes, read
as a CuPy array on the GPU in one and as a NumPy array on the CPU in the
other.

The NumPy part runs on the stand-in driver too; the CuPy part prints "NOT
RUN: why" where CuPy or a GPU is missing.
"""

import subprocess
import sys
import textwrap

import numpy as np

import hal

SIZE = 2 << 20

device = hal.open("cuda-uvm")
memory = device.allocate(SIZE, "managed")
values = np.from_dlpack(memory, device="cpu").view(np.float32)
values[:] = np.arange(values.size, dtype=np.float32)
text = memory.export()

NUMPY = textwrap.dedent(
    """
    import sys, hal, numpy as np
    m = hal.import_handle(sys.argv[1])
    a = np.from_dlpack(m, device="cpu").view(np.float32)
    assert (a == np.arange(a.size, dtype=np.float32)).all()
    a[0] = -1.0
    print(f"NumPy on the CPU: {a.size} float32 read, one written")
    """
)
CUPY = textwrap.dedent(
    """
    import sys, hal
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        print(f"NOT RUN: CuPy on the GPU: {e!r}")
        sys.exit(0)
    m = hal.import_handle(sys.argv[1])
    a = cupy.from_dlpack(m).view(cupy.float32)
    assert float(a[0]) == -1.0 and float(a[7]) == 7.0
    assert float(a.sum()) == float(sum(range(1, a.size))) - 1.0
    print(f"CuPy on the GPU: {a.size} float32 summed")
    """
)
for code in (NUMPY, CUPY):
    out = subprocess.run(
        [sys.executable, "-c", code, text], capture_output=True, text=True, timeout=120
    )
    print(out.stdout.strip(), out.stderr.strip(), flush=True)
    assert out.returncode == 0, "a consumer failed"
assert values[0] == -1.0, "the NumPy consumer's write is not seen"
print("uvm: ok")
