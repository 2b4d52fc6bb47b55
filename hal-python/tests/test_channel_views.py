"""A channel's samples in place: a publisher fills loaned slots through a
writable view (NumPy) and a subscriber process reads each sample through a
read-only view, with no copy on either side; views keep what they point
into (a loan with a view is not published, a sample with a view is not
released, a publisher with a loan's view is not closed); device memory
takes `write` and `read` instead."""

import os

import numpy as np
import pytest

import hal
from conftest import finish_child, start_child


def unique(tag):
    return f"pytest-{tag}-{os.getpid()}-{os.urandom(4).hex()}"


READER = """
import sys
import numpy as np
import hal
sub = hal.open(sys.argv[2]).subscribe(sys.argv[1])
print("subscribed", flush=True)
sums = []
while True:
    try:
        sample = sub.receive_view(timeout=30)
    except hal.ClosedError:
        break
    assert sample is not None, "timed out"
    with sample:
        values = np.frombuffer(sample, dtype=np.uint32)
        assert not values.flags.writeable, "a sample is read-only"
        sums.append(f"{sample.sequence}:{int(values.sum())}")
        del values
print(" ".join(sums), flush=True)
"""


def test_samples_are_filled_and_read_in_place_across_processes():
    name = unique("views")
    pub = hal.open("cpu-shm").publisher(name, slots=2, slot_size=4096, timeout=30)
    kid = start_child(READER, name, "cpu-shm")
    assert kid.stdout.readline().strip() == "subscribed"
    expected = []
    for i in range(10):
        loan = pub.loan()
        assert len(loan) == 4096 and loan.sequence == i
        values = np.frombuffer(loan, dtype=np.uint32)
        values[:] = i
        del values
        assert loan.publish() == i
        expected.append(f"{i}:{i * 1024}")
    pub.close()
    assert finish_child(kid).splitlines()[-1] == " ".join(expected)


def test_views_keep_what_they_point_into(backend):
    device = hal.open(backend)
    name = unique("keep")
    pub = device.publisher(name, slots=1, slot_size=device.page_size, timeout=5)
    sub = device.subscribe(name)
    loan = pub.loan()
    host = "memory-is-host" in device.capabilities
    if not host:
        with pytest.raises(BufferError, match="write"):
            memoryview(loan)
        loan.write(b"device bytes")
        assert loan.publish(12) == 0
        sample = sub.receive_view(timeout=5)
        with pytest.raises(BufferError, match="read"):
            memoryview(sample)
        assert sample.read() == b"device bytes"
        sample.release()
        pub.close()
        return
    view = memoryview(loan)
    view[:5] = b"hello"
    with pytest.raises(BufferError, match="alive"):
        loan.publish(5)
    with pytest.raises(BufferError, match="alive"):
        pub.close()
    view.release()
    assert loan.publish(5) == 0
    with pytest.raises(hal.InvalidArgumentError):
        loan.publish(5)
    with pytest.raises(hal.InvalidArgumentError):
        memoryview(loan)

    sample = sub.receive_view(timeout=5)
    assert (sample.sequence, len(sample)) == (0, 5)
    seen = memoryview(sample)
    assert bytes(seen) == b"hello" and seen.readonly
    with pytest.raises(BufferError, match="alive"):
        sample.release()
    with pytest.raises(hal.BusyError):
        pub.try_loan()
    seen.release()
    sample.release()
    assert sample.read is not None
    with pytest.raises(hal.InvalidArgumentError, match="released"):
        sample.read()
    nxt = pub.try_loan()
    assert nxt.slot == 0 and nxt.sequence == 1
    del nxt
    pub.close()


def test_a_sample_keeps_its_subscriber_until_released():
    device = hal.open("cpu-shm")
    name = unique("held")
    pub = device.publisher(name, slots=2, slot_size=4096, timeout=5)
    sub = device.subscribe(name)
    pub.publish(b"kept")
    sample = sub.receive_view(timeout=5)
    sub.close()
    # The sample's slot stays mapped and held after its subscriber closed.
    assert bytes(memoryview(sample)) == b"kept"
    with pytest.raises(hal.ClosedError):
        sub.receive_view(timeout=0)
    sample.release()
    pub.close()


def test_a_stale_loan_is_refused():
    device = hal.open("cpu-shm")
    name = unique("stale")
    pub = device.publisher(name, slots=2, slot_size=4096, timeout=5)
    stale = pub.loan()
    fresh = pub.loan()
    assert (stale.sequence, fresh.sequence) == (0, 0)
    fresh.write(b"x")
    assert fresh.publish(1) == 0
    with pytest.raises(hal.InvalidArgumentError, match="stale"):
        stale.publish(1)
    pub.close()
