"""Sharing between users, from Python, with real processes of two users:
this one (root) and uid 65534, played by ``halctl`` (the workspace's
``target/debug/halctl``, which ``cargo test`` builds; the Python of this
machine may live where uid 65534 cannot run it). An export to anyone
reaches the other user, one to the exporter's own user does not, and an
import of another user's export takes its descriptors once
``hal.trust_exporter_uid`` names that user. Needs root; without it the test
fails under ``HAL_TESTS_STRICT=1`` and is skipped, saying why, otherwise."""

import os
import pathlib
import subprocess

import pytest

import hal

NOBODY = 65534
REPO = pathlib.Path(__file__).resolve().parents[2]
AS_NOBODY = dict(user=NOBODY, group=NOBODY, extra_groups=[])


def _halctl():
    """The workspace's halctl, which uid 65534 runs."""
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    path = target / "debug" / "halctl"
    if not path.is_file():
        pytest.fail(f"{path} is not built: run `cargo build -p halctl`")
    return str(path)


def test_an_export_to_anyone_reaches_another_user_both_ways():
    if os.geteuid() != 0:
        if os.environ.get("HAL_TESTS_STRICT") == "1":
            pytest.fail("this test starts a process of another user, which needs root")
        pytest.skip("starting a process of another user needs root")
    device = hal.open("cpu-shm")
    anyone = device.allocate(4096)
    anyone.write(0, b"\x5a" * 4096)
    own = device.allocate(4096)
    own.write(0, b"\x5a" * 4096)
    for text, code in [
        (anyone.export(importers="anyone"), 0),
        (own.export(importers="same-user"), 1),
    ]:
        done = subprocess.run(
            [_halctl(), "import", text, "--expect", "0x5a"],
            capture_output=True,
            text=True,
            timeout=60,
            **AS_NOBODY,
        )
        assert done.returncode == code, (code, done.stderr)

    child = subprocess.Popen(
        [_halctl(), "export", "--backend", "cpu-shm", "--size", "4K", "--fill", "0x33",
         "--importers", "anyone"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        **AS_NOBODY,
    )
    try:
        theirs = child.stdout.readline().strip()
        with pytest.raises(hal.PermissionDeniedError) as refused:
            hal.import_handle(theirs)
        assert "trust_exporter_uid" in str(refused.value)
        hal.trust_exporter_uid(NOBODY)
        m = hal.import_handle(theirs)
        assert m.read(0, 4) == b"\x33" * 4
        del m
    finally:
        child.stdin.close()
        child.wait(timeout=60)
