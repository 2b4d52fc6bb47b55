"""Channels with subscribers on other hosts (hal.remote: Node.offer_channel,
Node.subscribe) between real Python processes over UCX's TCP transport on
the loopback address: a publisher process offers its channel, two
subscriber processes receive every sample in place (every byte checked,
through numpy without a copy); a killed subscriber's slots come back to
the publisher, which goes on publishing; a text with another secret, or a
changed one, is refused. Where UCX cannot be loaded the tests fail under
``HAL_TESTS_STRICT=1`` and are skipped, saying why, otherwise."""

import base64
import os
import zlib

import pytest

import hal
import hal.remote
from conftest import finish_child, start_child

SECRET = "00112233445566778899aabbccddeeff"
SLOT = 8192

# What every process knows of sample i: its length and bytes.
SAMPLES = """
import numpy as np

SLOT = 8192

def expected(i):
    n = 1 + (i * 997) % SLOT
    j = np.arange(n, dtype=np.uint64)
    return ((i * 131 + j * 7 + (j >> 8)) & 255).astype(np.uint8)
"""


@pytest.fixture(autouse=True)
def over_tcp(monkeypatch):
    """UCX over TCP in the children; skip (or fail, strict) where UCX
    cannot be loaded."""
    monkeypatch.setenv("UCX_TLS", "tcp")
    try:
        hal.remote.Node("127.0.0.1:0")
    except hal.UnavailableError as e:
        if os.environ.get("HAL_TESTS_STRICT") == "1":
            pytest.fail(f"UCX cannot be loaded here, and HAL_TESTS_STRICT=1: {e}")
        pytest.skip(f"UCX cannot be loaded here: {e}")


# The publisher: creates the channel its arguments name (name, slots,
# secret) on CPU shared memory, offers it from its node, prints the offer's
# text, then answers the commands of its stdin, one line each.
PUBLISHER = SAMPLES + """
import sys, time, hal, hal.remote

name, slots, secret = sys.argv[1], int(sys.argv[2]), sys.argv[3]
dev = hal.open("cpu-shm")
pub = dev.publisher(name, slots=slots, slot_size=SLOT, timeout=30.0)
node = hal.remote.Node("127.0.0.1:0")
offer = node.offer_channel(dev, name, secret=secret, timeout=30.0)
print("offer", offer.text, flush=True)
for line in sys.stdin:
    cmd, *args = line.split()
    try:
        if cmd == "wait":
            # Until the offer has this many remote subscribers.
            n = int(args[0])
            deadline = time.monotonic() + 30.0
            while offer.subscribers != n and time.monotonic() < deadline:
                time.sleep(0.01)
            print("wait", offer.subscribers, flush=True)
        elif cmd == "publish":
            start, count = int(args[0]), int(args[1])
            seqs = [pub.publish(expected(i).tobytes()) for i in range(start, start + count)]
            print("publish", seqs == list(range(start, start + count)), flush=True)
        elif cmd == "try":
            pub.try_publish(expected(int(args[0])).tobytes())
            print("try ok", flush=True)
        elif cmd == "quit":
            offer.close()
            pub.close()
            print("quit ok", flush=True)
            break
    except hal.Error as e:
        print(cmd, "error", type(e).__name__, flush=True)
"""

# A subscriber: subscribes from a node of its own with the text and slots
# its arguments name, prints its slots (or the error), then answers the
# commands of its stdin.
SUBSCRIBER = SAMPLES + """
import sys, hal, hal.remote

text, slots = sys.argv[1], int(sys.argv[2])
dev = hal.open("cpu-shm")
node = hal.remote.Node("127.0.0.1:0")
try:
    sub = node.subscribe(dev, text, slots=slots)
except hal.Error as e:
    print("subscribed error", type(e).__name__, str(e).replace("\\n", " "), flush=True)
    sys.exit(0)
print("subscribed", sub.slots, sub.slot_size, flush=True)
held = []

def check(s, i):
    # In place: numpy reads the slot itself (a read-only view), which the
    # sample may not be released under; its copy says the same.
    a = np.frombuffer(s, dtype=np.uint8)
    ok = s.sequence == i and len(s) == len(expected(i)) and not a.flags.writeable
    ok = ok and np.array_equal(a, expected(i)) and s.read() == expected(i).tobytes()
    try:
        s.release()
        ok = False
    except BufferError:
        pass
    del a
    return ok

for line in sys.stdin:
    cmd, *args = line.split()
    try:
        if cmd in ("receive", "hold"):
            start, count = int(args[0]), int(args[1])
            ok = True
            for i in range(start, start + count):
                s = sub.receive(timeout=30.0)
                if s is None:
                    ok = False
                    break
                ok = check(s, i) and ok
                if cmd == "hold":
                    held.append(s)
                else:
                    with s:
                        pass
            print(cmd, ok, flush=True)
        elif cmd == "none":
            print("none", sub.receive(timeout=0) is None, flush=True)
        elif cmd == "closed":
            sub.receive(timeout=30.0)
            print("closed no", flush=True)
        elif cmd == "quit":
            sub.close()
            print("quit ok", flush=True)
            break
    except hal.Error as e:
        print(cmd, "error", type(e).__name__, flush=True)
"""


def answer(child):
    """The child's next answer, past UCX's log lines."""
    while True:
        line = child.stdout.readline()
        if not line:
            return ["(ended)", child.stderr.read()]
        if not (line.startswith("[") and " UCX " in line):
            return line.split()


def ask(child, line):
    child.stdin.write(line + "\n")
    child.stdin.flush()
    return answer(child)


def channel_name(tag):
    return f"py-remote-{tag}-{os.getpid()}"


def publisher(tag, slots):
    child = start_child(PUBLISHER, channel_name(tag), slots, SECRET)
    said = answer(child)
    assert said[:1] == ["offer"] and said[1].startswith("hal1r."), said
    return child, said[1]


def subscriber(text, slots=0):
    child = start_child(SUBSCRIBER, text, slots)
    return child, answer(child)


def quit_all(children):
    try:
        for c in children:
            if c.poll() is None:
                c.stdin.write("quit\n")
                c.stdin.flush()
    finally:
        for c in children:
            finish_child(c)


def test_two_remote_subscribers_receive_every_byte_in_place():
    pub, text = publisher("every", 4)
    children = [pub]
    try:
        one, said = subscriber(text, slots=2)
        children.append(one)
        assert said == ["subscribed", "2", str(SLOT)], said
        two, said = subscriber(text)
        children.append(two)
        assert said == ["subscribed", "4", str(SLOT)], said
        assert ask(pub, "wait 2") == ["wait", "2"]
        # More samples than either has slots, received at once by both
        # (the slowest holds the publisher back): each released as read.
        for c, line in [(pub, "publish 0 40"), (one, "receive 0 40"), (two, "receive 0 40")]:
            c.stdin.write(line + "\n")
            c.stdin.flush()
        assert answer(one) == ["receive", "True"]
        assert answer(two) == ["receive", "True"]
        assert answer(pub) == ["publish", "True"]
        assert ask(one, "none") == ["none", "True"]
        # The publisher withdraws its offer and closes: the end is seen.
        assert ask(pub, "quit") == ["quit", "ok"]
        assert ask(one, "closed") == ["closed", "error", "ClosedError"]
        assert ask(two, "closed") == ["closed", "error", "ClosedError"]
    finally:
        quit_all(children)


def test_a_killed_remote_subscribers_slots_come_back_to_the_publisher():
    pub, text = publisher("killed", 2)
    children = [pub]
    try:
        victim, said = subscriber(text)
        assert said[:1] == ["subscribed"], said
        other, said = subscriber(text)
        children.append(other)
        assert said[:1] == ["subscribed"], said
        assert ask(pub, "publish 0 2") == ["publish", "True"]
        assert ask(other, "receive 0 2") == ["receive", "True"]
        # The victim holds both of the channel's slots: no slot is free.
        assert ask(victim, "hold 0 2") == ["hold", "True"]
        assert ask(pub, "try 2") == ["try", "error", "BusyError"]
        victim.kill()
        victim.communicate()
        # Its connection closed: its proxy unsubscribed, the slots it held
        # are free, and the publisher goes on.
        assert ask(pub, "wait 1") == ["wait", "1"]
        pub.stdin.write("publish 2 20\n")
        pub.stdin.flush()
        assert ask(other, "receive 2 20") == ["receive", "True"]
        assert answer(pub) == ["publish", "True"]
    finally:
        quit_all(children)


def other_secret(text):
    """`text` with its secret's first byte flipped and its CRC made right:
    the bytes end with the 16-byte secret and a CRC-32 of what precedes."""
    body = text[len("hal1r."):]
    raw = bytearray(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    raw[-20] ^= 1
    raw[-4:] = zlib.crc32(bytes(raw[:-4])).to_bytes(4, "little")
    return "hal1r." + base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")


def test_a_wrong_text_is_refused_with_the_right_exception():
    pub, text = publisher("refused", 2)
    children = [pub]
    try:
        forged = other_secret(text)
        assert forged != text
        intruder, said = subscriber(forged)
        children.append(intruder)
        assert said[:3] == ["subscribed", "error", "PermissionDeniedError"], said
        assert "secret" in " ".join(said), said
        middle = len(text) // 2
        changed = text[:middle] + ("A" if text[middle] != "A" else "B") + text[middle + 1 :]
        broken, said = subscriber(changed)
        children.append(broken)
        assert said[:3] == ["subscribed", "error", "InvalidHandleError"], said
        # The refused took nothing: the right text subscribes.
        right, said = subscriber(text)
        children.append(right)
        assert said[:1] == ["subscribed"], said
        assert ask(pub, "wait 1") == ["wait", "1"]
    finally:
        quit_all(children)
    # In this process: a secret that is no hex is refused before anything.
    node = hal.remote.Node("127.0.0.1:0")
    with pytest.raises(hal.InvalidArgumentError, match="32 hex digits"):
        node.offer_channel(hal.open("cpu-shm"), channel_name("none"), secret="0011")
