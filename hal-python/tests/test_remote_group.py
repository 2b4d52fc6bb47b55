"""hal.remote.Group between real Python processes over UCX's TCP transport
on the loopback address: three members swap payloads and their exports'
handles, a broadcast and a barrier; a wrong secret is refused; a killed
member is named to the others. Where UCX cannot be loaded the tests fail
under ``HAL_TESTS_STRICT=1`` and are skipped, saying why, otherwise."""

import os
import signal
import socket
import time

import pytest

import hal
import hal.remote
from conftest import finish_child, start_child

SECRET = "00112233445566778899aabbccddeeff"
PATIENCE = 30.0


@pytest.fixture(autouse=True)
def over_tcp(monkeypatch):
    """UCX over TCP in the children; the secret only where a test passes it;
    skip (or fail, strict) where UCX cannot be loaded."""
    monkeypatch.setenv("UCX_TLS", "tcp")
    monkeypatch.delenv("HAL_GROUP_SECRET", raising=False)
    try:
        hal.remote.Node("127.0.0.1:0")
    except hal.UnavailableError as e:
        if os.environ.get("HAL_TESTS_STRICT") == "1":
            pytest.fail(f"UCX cannot be loaded here, and HAL_TESTS_STRICT=1: {e}")
        pytest.skip(f"UCX cannot be loaded here: {e}")


def free_address():
    """An address of the loopback whose port was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def listened_on(address):
    """Whether a socket listens on `address` (127.0.0.1:PORT), read from
    /proc/net/tcp: nothing is bound or sent (a bind would take the
    group's address from its server)."""
    port = int(address.rsplit(":", 1)[1])
    want = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as f:
        return any(
            line.split()[1] == want and line.split()[3] == "0A" for line in list(f)[1:]
        )


# A member: joins the group its arguments name (address, size, secret),
# prints its rank (or the join's error), then answers the commands of its
# stdin, one line each.
MEMBER = """
import sys, hal, hal.remote

addr, size, secret = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    g = hal.remote.Group(addr, "py-members", size, secret=secret, timeout=30.0)
except hal.Error as e:
    print("joined error", type(e).__name__, str(e).replace("\\n", " "), flush=True)
    sys.exit(0)
print("joined", g.rank, g.size, flush=True)
mine = f"rank {g.rank} says hello".encode() * (g.rank + 1)
memory = export = None
for line in sys.stdin:
    cmd, *args = line.split()
    try:
        if cmd == "members":
            pid, address = g.members[g.rank]
            assert pid == __import__("os").getpid()
            assert address == g.node().address
            print("members", len(g.members), address.split(":")[0], flush=True)
        elif cmd == "gather":
            got = g.all_gather(mine)
            want = [f"rank {r} says hello".encode() * (r + 1) for r in range(g.size)]
            print("gather", got == want, flush=True)
        elif cmd == "export":
            # Memory holding this rank's byte, exported from the group's
            # node; the handles swapped; the next rank's memory read.
            node = g.node()
            memory = hal.open("cpu-shm").allocate(4096)
            memory.write(0, bytes([65 + g.rank]) * 4096)
            export = node.export(memory, read_only=True)
            texts = g.all_gather(export.text.encode())
            nxt = (g.rank + 1) % g.size
            theirs = node.connect(texts[nxt].decode())
            read = theirs.read(0, 4096)
            theirs.close()
            g.barrier()
            print("export", read == bytes([65 + nxt]) * 4096, flush=True)
        elif cmd == "bcast":
            root = int(args[0])
            got = g.broadcast(root, b"the plan" if g.rank == root else b"")
            print("bcast", got.decode().replace(" ", "_"), flush=True)
        elif cmd == "barrier":
            g.barrier()
            print("barrier ok", flush=True)
        elif cmd == "quit":
            g.close()
            print("quit ok", flush=True)
            break
    except hal.Error as e:
        print(cmd, "error", type(e).__name__, str(e).replace("\\n", " "), flush=True)
"""


def member(address, size, secret=SECRET):
    return start_child(MEMBER, address, size, secret)


def answer(child):
    """The child's next answer, past UCX's log lines (UCX logs to stdout:
    the members racing for the group's address log the bind that lost)."""
    while True:
        line = child.stdout.readline()
        if not (line.startswith("[") and " UCX " in line):
            return line.split()


def ask_all(children, line):
    for c in children:
        c.stdin.write(line + "\n")
        c.stdin.flush()
    return [answer(c) for c in children]


def joined(children):
    """Each child's answer to its join, `joined RANK SIZE`: the children
    by rank."""
    lines = [answer(c) for c in children]
    assert all(l[:1] == ["joined"] and l[1] != "error" for l in lines), lines
    ranks = [int(l[1]) for l in lines]
    assert sorted(ranks) == list(range(len(children))), ranks
    assert all(int(l[2]) == len(children) for l in lines), lines
    return [c for _, c in sorted(zip(ranks, children), key=lambda p: p[0])]


def quit_all(children):
    try:
        for c in children:
            if c.poll() is None:
                c.stdin.write("quit\n")
                c.stdin.flush()
    finally:
        for c in children:
            finish_child(c)


def test_three_processes_gather_swap_their_exports_broadcast_and_meet():
    address = free_address()
    children = [member(address, 3) for _ in range(3)]
    try:
        by_rank = joined(children)
        assert ask_all(by_rank, "members") == [["members", "3", "127.0.0.1"]] * 3
        assert ask_all(by_rank, "gather") == [["gather", "True"]] * 3
        assert ask_all(by_rank, "export") == [["export", "True"]] * 3
        assert ask_all(by_rank, "bcast 1") == [["bcast", "the_plan"]] * 3
        assert ask_all(by_rank, "barrier") == [["barrier", "ok"]] * 3
        assert ask_all(by_rank, "gather") == [["gather", "True"]] * 3
    finally:
        quit_all(children)


def test_a_wrong_secret_is_refused_with_the_permission_exception():
    address = free_address()
    first = member(address, 2)
    others = []
    try:
        # The group is served (its address listened on) and waits for its
        # second member: a joiner with another secret is refused.
        deadline = time.monotonic() + PATIENCE
        while not listened_on(address) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert listened_on(address), "the first member never served the group"
        intruder = member(address, 2, secret="ffeeddccbbaa99887766554433221100")
        others.append(intruder)
        refused = answer(intruder)
        assert refused[:3] == ["joined", "error", "PermissionDeniedError"], refused
        assert "secret" in " ".join(refused), refused
        # The refused joiner took no rank: the right one is rank 1.
        second = member(address, 2)
        others.append(second)
        by_rank = joined([first, second])
        assert by_rank == [first, second]
        assert ask_all(by_rank, "gather") == [["gather", "True"]] * 2
    finally:
        quit_all([first, *others])
    # In this process: no secret, or no hex, is refused before anything is sent.
    with pytest.raises(hal.InvalidArgumentError, match="HAL_GROUP_SECRET"):
        hal.remote.Group(address, "py-members", 2, timeout=1.0)
    with pytest.raises(hal.InvalidArgumentError, match="32 hex digits"):
        hal.remote.Group(address, "py-members", 2, secret="0011", timeout=1.0)
    with pytest.raises(hal.InvalidArgumentError, match="IP:PORT"):
        hal.remote.Group("nowhere", "py-members", 2, secret=SECRET)


def test_a_killed_member_is_named_to_the_others():
    address = free_address()
    children = [member(address, 3) for _ in range(3)]
    try:
        by_rank = joined(children)
        assert ask_all(by_rank, "gather") == [["gather", "True"]] * 3
        victim = by_rank[2]
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=PATIENCE)
        for got in ask_all(by_rank[:2], "gather"):
            assert got[:3] == ["gather", "error", "ClosedError"], got
            assert "member 2 " in " ".join(got) + " ", got
        # The group is broken: every later round says so.
        for got in ask_all(by_rank[:2], "barrier"):
            assert got[:3] == ["barrier", "error", "ClosedError"], got
    finally:
        for c in children:
            if c.poll() is None:
                c.stdin.write("quit\n")
                c.stdin.flush()
        for c in children:
            c.communicate(timeout=PATIENCE)


def test_a_closed_group_says_so_and_the_stub_names_its_calls():
    address = free_address()
    g = hal.remote.Group(address, "alone", 1, secret=SECRET, timeout=PATIENCE)
    assert (g.rank, g.size, g.name, g.address) == (0, 1, "alone", address)
    assert g.all_gather(b"x") == [b"x"]
    assert g.broadcast(0, b"y") == b"y"
    with pytest.raises(hal.InvalidArgumentError):
        g.broadcast(1, b"")
    assert "rank 0 of 1" in repr(g)
    with g:
        g.barrier()
    with pytest.raises(hal.ClosedError, match="closed"):
        g.barrier()
