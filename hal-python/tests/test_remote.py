"""hal.remote between two real Python processes over UCX on the loopback
address: an exporter of CPU shared memory and a notify, and an importer
that connects from a node of its own. Where UCX cannot be loaded the tests
fail under ``HAL_TESTS_STRICT=1`` and are skipped, saying why, otherwise."""

import base64
import os
import zlib

import numpy as np
import pytest

import hal
import hal.remote
from conftest import finish_child, start_child

SIZE = 1 << 20
PATIENCE = 60.0


def node():
    """A node on the loopback address; the test does not run without UCX."""
    try:
        return hal.remote.Node("127.0.0.1:0")
    except hal.UnavailableError as e:
        if os.environ.get("HAL_TESTS_STRICT") == "1":
            pytest.fail(f"UCX cannot be loaded here, and HAL_TESTS_STRICT=1: {e}")
        pytest.skip(f"UCX cannot be loaded here: {e}")


def pattern(start, n):
    return bytes((i % 251) for i in range(start, start + n))


def exported_memory(read_only=False):
    """A node, CPU shared memory of SIZE bytes holding the pattern, and its
    export (the node is kept by the export)."""
    n = node()
    m = hal.open("cpu-shm").allocate(SIZE)
    m.write(0, pattern(0, SIZE))
    return m, n.export(m, read_only=read_only)


# The importer: connects to the text on its first line, then answers the
# commands of the following lines, one line each.
IMPORTER = """
import sys, hal, hal.remote, numpy as np

def pattern(start, n):
    return bytes((i % 251) for i in range(start, start + n))

node = hal.remote.Node("127.0.0.1:0")
try:
    r = node.connect(sys.stdin.readline().strip())
except hal.Error as e:
    print("refused", type(e).__name__, e.kind, flush=True)
    sys.exit(0)
print("connected", len(r), r.read_only, flush=True)
for line in sys.stdin:
    cmd, *args = line.split()
    try:
        if cmd == "read":
            off, n = map(int, args)
            print("read", r.read(off, n) == pattern(off, n), flush=True)
        elif cmd == "numpy":
            # Into a float64 array and a bytearray: their whole length.
            a = np.zeros(1000, dtype=np.float64)
            got = r.read_into(a, offset=8000)
            b = bytearray(100)
            r.read_into(b, 8000 + 8000)
            ok = a.tobytes() == pattern(8000, 8000) and bytes(b) == pattern(16000, 100)
            print("numpy", got, ok, flush=True)
        elif cmd == "hal-memory":
            # Into local hal memory, and back from it to another place.
            m = hal.open("cpu-shm").allocate(4096)
            r.read_into(m, offset=4096 * 3)
            same = m.read(0, 4096) == pattern(4096 * 3, 4096)
            r.write(200000, m)
            r.flush()
            print("hal-memory", same, flush=True)
        elif cmd == "write":
            off = int(args[0])
            r.write(off, np.arange(256, dtype=np.uint16))
            r.flush()
            print("write ok", flush=True)
        elif cmd == "write-signal":
            off = int(args[0])
            r.write_signal(off, memoryview(b"signalled from afar"))
            print("write-signal ok", flush=True)
        elif cmd == "bounds":
            try:
                r.read(len(r) - 1, 2)
                print("bounds accepted", flush=True)
            except hal.InvalidArgumentError:
                print("bounds refused", flush=True)
        elif cmd == "notify":
            hal.remote.Node("127.0.0.1:0").connect_notify(args[0]).signal()
            print("notify ok", flush=True)
        elif cmd == "quit":
            r.close()
            print("quit ok", flush=True)
            break
        else:
            raise ValueError(cmd)
    except hal.Error as e:
        print(cmd, "error", type(e).__name__, flush=True)
"""


def ask(child, line):
    child.stdin.write(line + "\n")
    child.stdin.flush()
    return child.stdout.readline().split()


def importer(text):
    child = start_child(IMPORTER)
    child.stdin.write(text + "\n")
    child.stdin.flush()
    return child, child.stdout.readline().split()


def test_memory_is_read_written_and_signalled_from_another_process():
    m, export = exported_memory()
    assert export.text.startswith("hal1r.")
    assert export.importers == 0
    child, hello = importer(export.text)
    try:
        assert hello == ["connected", str(SIZE), "False"], hello
        assert export.wait_importers(1, timeout=PATIENCE)
        assert export.importers == 1
        assert ask(child, "read 0 1") == ["read", "True"]
        assert ask(child, f"read 4097 {SIZE - 4097}") == ["read", "True"]
        assert ask(child, "numpy") == ["numpy", "8000", "True"]
        assert ask(child, "hal-memory") == ["hal-memory", "True"]
        assert m.read(200000, 4096) == pattern(4096 * 3, 4096)
        assert ask(child, "write 50000") == ["write", "ok"]
        assert m.read(50000, 512) == np.arange(256, dtype=np.uint16).tobytes()
        assert ask(child, "bounds") == ["bounds", "refused"]
        # Written and signalled: the bytes are here once the signal is.
        assert ask(child, "write-signal 70000") == ["write-signal", "ok"]
        assert export.wait_signal(timeout=PATIENCE)
        assert m.read(70000, 19) == b"signalled from afar"
        # Each signal is taken once.
        assert not export.wait_signal(timeout=0)
        assert ask(child, "quit") == ["quit", "ok"]
        assert export.wait_unused(timeout=PATIENCE)
        assert export.importers == 0
    finally:
        finish_child(child)


def test_a_read_only_export_refuses_writes():
    m, export = exported_memory(read_only=True)
    child, hello = importer(export.text)
    try:
        assert hello == ["connected", str(SIZE), "True"], hello
        assert ask(child, "write 0") == ["write", "error", "PermissionDeniedError"]
        assert ask(child, "write-signal 0") == ["write-signal", "error", "PermissionDeniedError"]
        assert ask(child, "read 0 4096") == ["read", "True"]
        assert m.read(0, 512) == pattern(0, 512)
        assert ask(child, "quit") == ["quit", "ok"]
    finally:
        finish_child(child)


def with_secret_changed(text):
    """The handle text with one bit of its secret flipped and its checksum
    made right again (the layout of hal_core::handle::remote: the 16-byte
    secret, then the CRC-32 of everything before it)."""
    body = text[len("hal1r."):]
    raw = bytearray(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    raw[-20] ^= 0x01
    raw[-4:] = zlib.crc32(bytes(raw[:-4])).to_bytes(4, "little")
    return "hal1r." + base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")


def test_a_wrong_secret_is_refused_with_the_permission_exception():
    _, export = exported_memory()
    child, answer = importer(with_secret_changed(export.text))
    finish_child(child)
    assert answer == ["refused", "PermissionDeniedError", "permission-denied"], answer
    assert export.importers == 0
    # In this process too: the exception is the package's.
    with pytest.raises(hal.PermissionDeniedError):
        node().connect(with_secret_changed(export.text))
    for bad in ["hal1r.", "hal1r.AAAA", export.text[:-3], "not a handle"]:
        with pytest.raises(hal.InvalidHandleError):
            node().connect(bad)


def test_a_notify_is_signalled_from_another_process():
    n = node()
    notify = hal.open("cpu-shm").notify()
    export = n.export_notify(notify)
    m, memory_export = exported_memory()
    child, hello = importer(memory_export.text)
    try:
        assert hello[0] == "connected", hello
        for _ in range(3):
            assert ask(child, f"notify {export.text}") == ["notify", "ok"]
            assert notify.wait(timeout=PATIENCE)
        assert ask(child, "quit") == ["quit", "ok"]
    finally:
        finish_child(child)
    # A notify's text is no memory's, and the other way round.
    with pytest.raises(hal.InvalidHandleError):
        n.connect(export.text)
    with pytest.raises(hal.InvalidHandleError):
        n.connect_notify(memory_export.text)


def test_signals_between_spinning_nodes_are_taken_by_waits_that_drive_the_worker():
    a = hal.remote.Node("127.0.0.1:0", spin=0.0002)
    b = hal.remote.Node("127.0.0.1:0", spin=0.0002)
    cpu = hal.open("cpu-shm")
    ea = a.export_notify(cpu.notify())
    eb = b.export_notify(cpu.notify())
    to_b, to_a = a.connect_notify(eb.text), b.connect_notify(ea.text)
    for _ in range(20):
        to_b.signal()
        assert eb.wait_signal(timeout=PATIENCE)
        to_a.signal()
        assert ea.wait_signal(timeout=PATIENCE)
    # Each signal was taken once.
    assert not ea.wait_signal(timeout=0)
    with pytest.raises(hal.InvalidArgumentError):
        hal.remote.Node("127.0.0.1:0", spin=-1)


def test_in_one_process_buffers_of_any_kind_and_the_refusals():
    exporter = node()
    m = hal.open("cpu-shm").allocate(SIZE)
    export = exporter.export(m)
    r = node().connect(export.text)
    assert len(r) == SIZE and not r.read_only
    with pytest.raises(BufferError):
        r.read_into(b"bytes are not writable")
    with pytest.raises(BufferError):
        r.read_into(np.zeros((4, 4))[:, ::2])  # not contiguous
    with pytest.raises(hal.InvalidArgumentError):
        r.read(SIZE, 1)
    with pytest.raises(hal.InvalidArgumentError):
        r.read(0, 1 << 62)  # refused before anything is allocated
    empty = bytearray()
    assert r.read_into(empty, SIZE) == 0
    r.write(0, np.full(8, 1.5, dtype=np.float32))
    r.flush()
    assert np.frombuffer(m.read(0, 32), dtype=np.float32).tolist() == [1.5] * 8
    r.close()
    with pytest.raises(hal.ClosedError):
        r.read(0, 1)
    assert export.wait_unused(timeout=PATIENCE)
    # An export that ends closes its importers, and its node (kept here)
    # refuses later ones.
    other = node().connect(export.text)
    assert export.wait_importers(1, timeout=PATIENCE)
    text = export.text
    export.close()
    with pytest.raises(hal.ClosedError):
        other.read(0, 1)
    with pytest.raises(hal.NotFoundError):
        node().connect(text)
    with pytest.raises(hal.ClosedError):
        export.text
    with pytest.raises(hal.InvalidArgumentError):
        hal.remote.Node("0.0.0.0:0")
    with pytest.raises(hal.InvalidArgumentError):
        hal.remote.Node("nowhere")
    with pytest.raises(hal.InvalidArgumentError):
        hal.remote.Node("127.0.0.1:0", timeout=-1)
    anywhere = hal.remote.Node("0.0.0.0:0", advertise="127.0.0.1")
    assert anywhere.address.startswith("127.0.0.1:") and not anywhere.address.endswith(":0")


def test_the_stubs_name_what_hal_remote_has():
    import ast

    from conftest import REPO

    tree = ast.parse((REPO / "hal-python" / "remote.pyi").read_text())
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    public = {n for n in dir(hal.remote) if not n.startswith("_")}
    assert set(classes) == public
    for name, node_ in classes.items():
        declared = {n.name for n in node_.body if isinstance(n, ast.FunctionDef)}
        actual = {
            n
            for n in dir(getattr(hal.remote, name))
            if not n.startswith("_") or n in ("__len__", "__enter__", "__exit__")
        }
        assert actual - declared == set(), f"{name}: methods missing from remote.pyi"
        # `__buffer__` (the buffer protocol) is listed by dir() from Python 3.12 on.
        unlisted = {"__init__", "__buffer__"}
        assert declared - actual - unlisted == set(), f"{name}: not in the module"
        assert getattr(hal.remote, name).__doc__, f"hal.remote.{name} has no docstring"
