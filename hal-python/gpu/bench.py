"""GPU smoke benchmark: hal.share + hal.open_tensor of a 1 MiB CUDA tensor
(first open and a cached one) against torch.multiprocessing's own CUDA
sharing (reduce_tensor / rebuild_cuda_tensor), in the same run; the ratios
of medians. Prints "NOT RUN: why" without PyTorch or a GPU.
"""

import pickle
import statistics
import subprocess
import sys
import textwrap

import hal


def not_run(why):
    print(f"NOT RUN: {why}", flush=True)
    sys.exit(0)


try:
    import torch
    from torch.multiprocessing.reductions import reduce_tensor
except ImportError:
    not_run("PyTorch is not installed")
if not torch.cuda.is_available():
    not_run("torch.cuda.is_available() is False (no GPU)")

N = 30
tensors = [torch.full((1 << 18,), float(i), device="cuda") for i in range(N)]  # 1 MiB each
torch.cuda.synchronize()
shared = [hal.share(t) for t in tensors]
reduced = [reduce_tensor(t)[1] for t in tensors]

CONSUMER = textwrap.dedent(
    """
    import pickle, sys, time, hal, torch
    from torch.multiprocessing.reductions import rebuild_cuda_tensor
    texts, reduced = pickle.load(sys.stdin.buffer)
    torch.cuda.init(); torch.zeros(1, device="cuda")
    def timed(f):
        t0 = time.perf_counter_ns(); r = f(); return r, (time.perf_counter_ns() - t0) / 1000
    kept, hal_first, hal_cached, torch_first, torch_cached = [], [], [], [], []
    for text, args in zip(texts, reduced):
        t, us = timed(lambda: torch.from_dlpack(hal.open_tensor(text))); kept.append(t); hal_first.append(us)
        t, us = timed(lambda: torch.from_dlpack(hal.open_tensor(text))); kept.append(t); hal_cached.append(us)
        t, us = timed(lambda: rebuild_cuda_tensor(*args)); kept.append(t); torch_first.append(us)
        t, us = timed(lambda: rebuild_cuda_tensor(*args)); kept.append(t); torch_cached.append(us)
    torch.cuda.synchronize()
    print(repr((hal_first, hal_cached, torch_first, torch_cached)))
    """
)
done = subprocess.run(
    [sys.executable, "-c", CONSUMER],
    input=pickle.dumps(([s.text for s in shared], reduced)),
    capture_output=True, timeout=300,
)
if done.returncode != 0:
    print(done.stderr.decode(), file=sys.stderr)
    sys.exit(1)
hal_first, hal_cached, torch_first, torch_cached = eval(done.stdout.decode())
med = statistics.median
for name, ours, theirs, goal in [
    ("python-open-first", hal_first, torch_first, 0.5),
    ("python-open-cached", hal_cached, torch_cached, 0.1),
]:
    ratio = med(ours) / med(theirs)
    verdict = "met" if ratio <= goal else "missed"
    print(
        f"{name} p50 {med(ours):.1f} us torch p50 {med(theirs):.1f} us ratio {ratio:.3f} "
        f"(goal <= {goal}: {verdict})",
        flush=True,
    )
