"""share_numpy.py: a NumPy array and a notify shared with another process.

    python share_numpy.py    # starts itself again as the consumer
"""

import subprocess
import sys

import numpy as np

import hal

if len(sys.argv) == 3:
    # The consumer: open the tensor, check it, write into it, signal.
    tensor = hal.open_tensor(sys.argv[1])
    columns = np.from_dlpack(tensor)  # the producer's memory, not a copy
    assert columns.shape == (4, 3) and columns.dtype == np.float32
    assert (columns == np.arange(24).reshape(4, 6)[:, ::2]).all()
    columns[0, 0] = -1.0
    hal.import_handle(sys.argv[2]).signal()
    sys.exit(0)

# The producer: a 4x6 float32 grid in shared memory, every other column shared.
device = hal.open("cpu-shm")
memory = device.allocate(4096)
grid = np.from_dlpack(memory)[:96].view(np.float32).reshape(4, 6)
grid[:] = np.arange(24).reshape(4, 6)
shared = hal.share(grid[:, ::2])  # zero-copy: the view lies in hal memory
assert not shared.copied
done = device.notify()
consumer = subprocess.Popen([sys.executable, __file__, shared.text, done.export()])
assert done.wait(timeout=30), "the consumer did not answer"
assert consumer.wait() == 0
assert grid[0, 0] == -1.0  # the consumer's write, seen here
print(grid)
