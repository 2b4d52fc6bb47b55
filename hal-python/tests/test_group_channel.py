"""Groups and channels across real Python processes: a group of three
all-gathers and broadcasts, a channel broadcasts to two subscriber
processes through fewer slots than samples, a queue shares its samples,
and a dead publisher is reported."""

import os
import subprocess
import sys
import textwrap

import pytest

import hal
from conftest import finish_child, start_child


def unique(tag):
    return f"pytest-{tag}-{os.getpid()}-{os.urandom(4).hex()}"


MEMBER = """
import sys, hal
with hal.Group(sys.argv[1], 3, timeout=30) as g:
    got = g.all_gather(f"rank {g.rank}".encode())
    assert got == [f"rank {r}".encode() for r in range(3)], got
    said = g.broadcast(1, b"from one" if g.rank == 1 else b"")
    assert said == b"from one", said
    g.barrier()
    print(g.rank, ",".join(map(str, g.members)))
"""


def test_three_processes_gather_and_broadcast():
    name = unique("group")
    kids = [start_child(MEMBER, name) for _ in range(2)]
    with hal.Group(name, 3, timeout=30) as g:
        got = g.all_gather(f"rank {g.rank}".encode())
        assert got == [f"rank {r}".encode() for r in range(3)]
        assert g.broadcast(1, b"from one" if g.rank == 1 else b"") == b"from one"
        g.barrier()
        members = g.members
    outs = [finish_child(k) for k in kids]
    ranks = sorted(int(o.split()[0]) for o in outs) + [g.rank]
    assert sorted(ranks) == [0, 1, 2]
    assert all(o.split()[1] == ",".join(map(str, members)) for o in outs)
    assert set(members) == {os.getpid()} | {k.pid for k in kids}


SUBSCRIBER = """
import sys, hal
sub = hal.open(sys.argv[2]).subscribe(sys.argv[1])
print("subscribed", flush=True)
got = []
while True:
    try:
        data = sub.receive(timeout=30)
    except hal.ClosedError:
        break
    assert data is not None, "timed out"
    got.append(data)
print("|".join(d.decode() for d in got), flush=True)
"""


@pytest.mark.parametrize("mode", ["broadcast", "queue"])
def test_a_channel_reaches_two_processes(backend, mode):
    name = unique(mode)
    device = hal.open(backend)
    pub = device.publisher(name, slots=2, slot_size=4096, mode=mode, timeout=30)
    kids = [start_child(SUBSCRIBER, name, backend) for _ in range(2)]
    for k in kids:
        assert k.stdout.readline().strip() == "subscribed"
    samples = [f"sample {i}" for i in range(20)]
    for i, s in enumerate(samples):
        assert pub.publish(s.encode()) == i
    pub.close()
    outs = [finish_child(k).splitlines()[-1] for k in kids]
    if mode == "broadcast":
        assert all(o == "|".join(samples) for o in outs), outs
    else:
        got = sorted((x for o in outs for x in o.split("|") if x), key=lambda x: int(x.split()[1]))
        assert got == samples


def test_a_dead_publisher_is_reported_after_its_last_sample():
    name = unique("dead")
    device = hal.open("cpu-shm")
    child = start_child(
        """
import sys, hal
pub = hal.open("cpu-shm").publisher(sys.argv[1], slots=1, slot_size=64)
print("created", flush=True)
sys.stdin.readline()
pub.publish(b"last words")
print("published", flush=True)
sys.stdin.readline()
""",
        name,
    )
    assert child.stdout.readline().strip() == "created"
    sub = device.subscribe(name)
    child.stdin.write("go\n")
    child.stdin.flush()
    assert child.stdout.readline().strip() == "published"
    child.kill()
    child.wait()
    assert sub.receive(timeout=30) == b"last words"
    with pytest.raises(hal.ClosedError, match="died"):
        sub.receive(timeout=30)
    sub.close()


def test_try_publish_is_busy_until_the_subscriber_takes_the_sample():
    name = unique("busy")
    device = hal.open("cpu-shm")
    pub = device.publisher(name, slots=1, slot_size=64)
    sub = device.subscribe(name)
    pub.publish(b"one")
    with pytest.raises(hal.BusyError):
        pub.try_publish(b"two")
    assert sub.try_receive() == b"one"
    assert sub.try_receive() is None
    assert pub.try_publish(b"two") == 1
    assert sub.receive(timeout=5) == b"two"
