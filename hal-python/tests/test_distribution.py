"""The distribution is ``hal-ipc`` (``pip install hal-ipc``) and the module
it installs is ``hal`` (``import hal``): the name ``hal`` on PyPI is another
project's."""

import importlib.metadata
import pathlib

import pytest

import hal


def test_the_distribution_hal_ipc_installs_the_module_that_is_imported():
    dist = importlib.metadata.distribution("hal-ipc")
    assert dist.metadata["Name"] == "hal-ipc"
    assert dist.version == hal.__version__
    module_dir = pathlib.Path(hal.__file__).resolve().parent
    installed = [
        pathlib.Path(dist.locate_file(f)).resolve()
        for f in dist.files or []
        if pathlib.PurePosixPath(f).parts[0] == "hal"
    ]
    assert installed, f"hal-ipc {dist.version} lists no file of the module hal: {dist.files}"
    assert any(p.parent == module_dir for p in installed), (
        f"the imported hal ({module_dir}) is not the one hal-ipc installed ({installed})"
    )


def test_no_distribution_named_hal_is_installed_beside_it():
    # An install of this project from before it was named hal-ipc would
    # provide the same module: pip cannot tell the two apart.
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        dist = importlib.metadata.distribution("hal")
        pytest.fail(
            f"a distribution named hal ({dist.version}, {dist.locate_file('')}) is installed "
            "beside hal-ipc and provides the same module: `pip uninstall hal`"
        )
