"""GPU smoke: a PyTorch CUDA tensor shared with hal.share opens in another
process as a PyTorch tensor and as a CuPy array, and writes are seen both
ways; PyTorch's raw CUDA handle opens with hal.import_cuda_ipc, and hal's
raw handle with torch.UntypedStorage._new_shared_cuda.

Prints "NOT RUN: why" and exits 0 where PyTorch or a GPU is missing (the
rehearsal on the stand-in driver); a part that needs CuPy says so alone.
"""

import subprocess
import sys
import textwrap

import hal


def not_run(why):
    print(f"NOT RUN: {why}", flush=True)
    sys.exit(0)


try:
    import torch
except ImportError:
    not_run("PyTorch is not installed")
if not torch.cuda.is_available():
    not_run("torch.cuda.is_available() is False (no GPU)")

CONSUMER = textwrap.dedent(
    """
    import sys, hal
    kind, text = sys.argv[1], sys.argv[2]
    tensor = hal.open_tensor(text)
    if kind == "torch":
        import torch
        t = torch.from_dlpack(tensor)
        assert t.is_cuda and t.dtype == torch.float32 and tuple(t.shape) == (512, 512)
        assert (t.flatten()[:1000] == torch.arange(1000, device=t.device, dtype=t.dtype)).all()
        t[0, 0] = -1.0
        torch.cuda.synchronize()
    else:
        try:
            import cupy
        except ImportError:
            print("NOT RUN: CuPy is not installed", flush=True)
            sys.stdin.readline()
            sys.exit(0)
        t = cupy.from_dlpack(tensor)
        assert t.dtype == cupy.float32 and t.shape == (512, 512)
        assert bool((t.ravel()[:1000] == cupy.arange(1000, dtype=cupy.float32)).all())
        t[0, 1] = -3.0
        cupy.cuda.runtime.deviceSynchronize()
    print("written", flush=True)
    sys.stdin.readline()  # the producer wrote its answer
    value = float(t[1, 1])
    assert value == -2.0, value
    print(f"{kind} consumer: ok", flush=True)
    """
)


def consume(kind, text, mine):
    child = subprocess.Popen(
        [sys.executable, "-u", "-c", CONSUMER, kind, text],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
    )
    line = child.stdout.readline().strip()
    if line.startswith("NOT RUN"):
        print(f"{kind}: {line}", flush=True)
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.wait(60) == 0
        return
    assert line == "written", line
    torch.cuda.synchronize()
    mine[1, 1] = -2.0
    torch.cuda.synchronize()
    child.stdin.write("check\n")
    child.stdin.flush()
    print(child.stdout.read().strip(), flush=True)
    assert child.wait(60) == 0, f"the {kind} consumer failed"


x = torch.arange(512 * 512, dtype=torch.float32, device="cuda").reshape(512, 512)
shared = hal.share(x)
print(f"hal.share of a CUDA tensor: copied={shared.copied}", flush=True)
mine = torch.from_dlpack(shared.tensor)
assert (mine == x).all()
consume("torch", shared.text, mine)
assert float(mine[0, 0]) == -1.0, "the torch consumer's write is not seen"
if not shared.copied:
    torch.cuda.synchronize()
    assert float(x[0, 0]) == -1.0, "shared in place: the consumer wrote into x itself"
    print("shared in place: the consumer's write is in x", flush=True)
consume("cupy", shared.text, mine)
print("both ways: ok", flush=True)

# PyTorch's raw handle, opened by hal in another process.
storage = x.untyped_storage()
device, handle, size, offset, *_ = storage._share_cuda_()
print(f"_share_cuda_: {len(handle)}-byte handle, offset {offset}, size {size}", flush=True)
expected = x.flatten()[:4].cpu().numpy().tobytes()
subprocess.run(
    [sys.executable, "-c", textwrap.dedent(
        """
        import sys, hal
        m = hal.import_cuda_ipc(bytes.fromhex(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                                int(sys.argv[4]))
        assert m.read(0, 16).hex() == sys.argv[5], m.read(0, 16).hex()
        print("hal.import_cuda_ipc of PyTorch's handle: ok")
        """
    ), handle.hex(), str(offset), str(size), str(device), expected.hex()],
    check=True,
)

# hal's raw handle, opened by PyTorch in another process.
memory = hal.open("cuda").allocate(2 << 20, "device")
torch.from_dlpack(memory)[:8].copy_(torch.arange(8, dtype=torch.uint8, device="cuda"))
torch.cuda.synchronize()
raw, raw_offset, raw_size = hal.cuda_ipc_handle(memory)
subprocess.run(
    [sys.executable, "-c", textwrap.dedent(
        """
        import sys, torch
        counter = torch.UntypedStorage._new_shared_filename_cpu(8 * 128)
        _, counter_name, _ = counter._share_filename_cpu_()
        s = torch.UntypedStorage._new_shared_cuda(
            0, bytes.fromhex(sys.argv[1]), int(sys.argv[3]), int(sys.argv[2]),
            counter_name, 0, bytes(64), False)
        t = torch.empty(0, dtype=torch.uint8, device="cuda").set_(s)
        assert t[:8].tolist() == list(range(8)), t[:8]
        print("torch.UntypedStorage._new_shared_cuda of hal's handle: ok")
        """
    ), raw.hex(), str(raw_offset), str(raw_size)],
    check=True,
)
