"""The template backend, a backend of another crate registered at run time
under its own name, opened by that name from Python: listed by
``hal.backends()``, its memory and notifies shared with another Python
process that imports from the handle text alone."""

import hal
from conftest import finish_child, run_child, start_child

CONSUMER = """
import sys, hal
m = hal.import_handle(sys.stdin.readline())
assert isinstance(m, hal.Memory) and not m.allocated
assert m.read(0, 4) == b"tmpl", m.read(0, 4)
m.write(4, b"seen")
print("ok")
"""

PONG = """
import sys, hal
theirs = hal.import_handle(sys.stdin.readline())
mine = hal.open("template").notify()
print(mine.export(), flush=True)
for _ in range(int(sys.argv[1])):
    assert mine.wait(30), "no ping"
    theirs.signal()
print("done", flush=True)
"""


def test_the_template_is_listed_by_its_name():
    names = {name: available for name, available, _ in hal.backends()}
    assert names.get("template") is True, names


def test_a_device_of_the_template_opens_by_name():
    device = hal.open("template")
    assert device.backend == "template"
    assert device.ordinal == 0


def test_template_memory_travels_to_another_process():
    device = hal.open("template")
    m = device.allocate(device.page_size)
    m.write(0, b"tmpl")
    assert run_child(CONSUMER, stdin=m.export() + "\n").strip() == "ok"
    assert m.read(4, 4) == b"seen"


def test_a_notify_ping_pong_on_the_template():
    rounds = 10
    device = hal.open("template")
    mine = device.notify()
    child = start_child(PONG, rounds)
    child.stdin.write(mine.export() + "\n")
    child.stdin.flush()
    theirs = hal.import_handle(child.stdout.readline())
    assert isinstance(theirs, hal.Notify)
    for _ in range(rounds):
        theirs.signal()
        assert mine.wait(30), "no pong"
    assert finish_child(child).strip() == "done"
