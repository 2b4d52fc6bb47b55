"""Traps a newcomer met: the size of an allocation, handle texts that
outlive their export, the install steps and defaults the documents give."""

import ast
import gc
import inspect
import re
import tomllib
import warnings

import numpy as np
import pytest

import hal
from conftest import REPO


def python_section():
    """The Python walk-through, hal-python/README.md."""
    return (REPO / "hal-python" / "README.md").read_text()


# --- the size asked for --------------------------------------------------


def test_an_allocation_is_the_size_asked_for_though_rounded_underneath():
    device = hal.open("cpu-shm")
    assert 8000 % device.page_size != 0
    m = device.allocate(8000)
    assert len(m) == 8000
    assert memoryview(m).nbytes == 8000
    assert np.asarray(m).shape == (8000,)
    assert np.frombuffer(m, dtype=np.uint8).shape == (8000,)
    assert np.from_dlpack(m).shape == (8000,)
    # What the newcomer's script did: 1,000 float64 broadcast into it.
    values = np.arange(1000, dtype=np.float64)
    np.frombuffer(m, dtype=np.float64)[:] = values
    np.asarray(m).view(np.float64)[:] = values * 2
    assert (np.frombuffer(m.read(0, 8000), dtype=np.float64) == values * 2).all()
    assert "8000 bytes" in repr(m)


def test_read_and_write_stop_at_the_size_asked_for():
    m = hal.open("cpu-shm").allocate(8000)
    m.write(7999, b"x")
    assert m.read(7999, 1) == b"x"
    with pytest.raises(hal.InvalidArgumentError) as read:
        m.read(7999, 2)
    with pytest.raises(hal.InvalidArgumentError) as write:
        m.write(7999, b"xy")
    for raised in (read, write):
        assert "outside the 8000-byte range" in str(raised.value)


def test_a_share_of_a_memory_carries_the_size_asked_for():
    m = hal.open("cpu-shm").allocate(8000)
    shared = hal.share(m)
    assert hal.open_tensor(shared.text).shape == [8000]


def test_an_import_is_the_exported_whole_pages():
    device = hal.open("cpu-shm")
    m = device.allocate(8000)
    text = m.export()
    imported = hal.import_handle(text)
    page = device.page_size
    assert len(imported) == -(-8000 // page) * page


# --- handle texts that outlive their export ------------------------------


def test_the_export_of_a_temporary_memory_warns():
    device = hal.open("cpu-shm")
    with pytest.warns(ResourceWarning, match="keep the Memory alive"):
        text = device.allocate(4096).export()
        gc.collect()
    assert text.startswith("hal1.")


def test_the_text_of_a_temporary_share_warns():
    with pytest.warns(ResourceWarning, match="hal.Shared was collected"):
        text = str(hal.share(np.arange(10.0)))
        gc.collect()
    assert text.startswith("hal1t.")
    with pytest.warns(ResourceWarning, match="hal.Shared was collected"):
        text = hal.share(np.arange(10.0)).text
        gc.collect()


def test_a_memory_whose_texts_are_gone_or_kept_does_not_warn():
    device = hal.open("cpu-shm")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        m = device.allocate(4096)
        text = m.export()
        imported = hal.import_handle(text)
        del imported, text, m  # the text goes first
        gc.collect()
        m = device.allocate(4096)
        m.export()  # not kept
        del m
        gc.collect()
        hal.share(np.arange(4.0))  # nor this one
        shared = hal.share(np.arange(4.0))
        del shared
        gc.collect()
        # The memory is kept: the share's text stays good.
        m = device.allocate(4096)
        text = str(hal.share(m))
        gc.collect()
        assert hal.open_tensor(text).shape == [4096]
        del text, m
        gc.collect()
        # An array over the memory keeps it (and its export) too.
        m = device.allocate(4096)
        text = m.export()
        array = np.from_dlpack(m)
        del m
        gc.collect()
        assert len(hal.import_handle(text)) == 4096
        del array, text
        gc.collect()


def test_the_last_of_several_holders_warns():
    device = hal.open("cpu-shm")
    shared = hal.share(np.arange(4.0))
    memory = shared.memory
    text = shared.text
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        del shared  # the memory is still held
        gc.collect()
    with pytest.warns(ResourceWarning, match="hal.Memory was collected"):
        del memory
        gc.collect()
    assert text
    del device


# --- the documents agree with the module ---------------------------------


def test_the_readme_installs_what_the_python_steps_use():
    section = python_section()
    assert "```sh\npip install './hal-python[numpy]'\n```" in section
    assert "pip install maturin\nmaturin build" in section
    project = tomllib.loads((REPO / "hal-python" / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["numpy"] == ["numpy"]
    assert "import numpy" in (REPO / "hal-python" / "examples" / "share_numpy.py").read_text()


def test_the_readme_says_to_keep_the_exporter_alive():
    section = python_section()
    assert "Keep the exporter's objects alive" in section
    assert "ResourceWarning" in section


def resolve(dotted):
    obj = hal
    for part in dotted.split(".")[1:] if dotted.startswith("hal.") else dotted.split("."):
        obj = getattr(obj, part)
    return obj


def defaults_of(obj):
    """The defaults of a function of the module, by parameter name (those
    its signature shows as `...`, which PyO3 writes for defaults it does not
    spell, are left out)."""
    return {
        name: p.default
        for name, p in inspect.signature(obj).parameters.items()
        if p.default is not inspect.Parameter.empty and p.default is not ...
    }


def test_the_readme_gives_the_defaults_the_module_has():
    checked = set()
    for dotted, args in re.findall(r"`((?:hal|Device|Memory)\.\w+)\(([^)`]*)\)", python_section()):
        try:
            actual = defaults_of(resolve(dotted))
        except (AttributeError, ValueError, TypeError):
            continue
        for name, text in re.findall(r"(\w+)=([^,]+)", args):
            text = text.strip()
            if text == "...":
                continue
            assert name in actual, f"{dotted}: README names {name}=, the module has no default"
            assert actual[name] == ast.literal_eval(text), (
                f"{dotted}: README says {name}={text}, the module {name}={actual[name]!r}"
            )
        checked.add(dotted)
    assert {"Memory.export", "hal.share", "hal.open_tensor", "Device.allocate"} <= checked


def stub_defaults(f):
    """The defaults a stub's function gives, by parameter name."""
    positional = [a.arg for a in f.args.args]
    found = {}
    if f.args.defaults:
        found.update(zip(positional[-len(f.args.defaults):], f.args.defaults))
    found.update(
        (a.arg, d) for a, d in zip(f.args.kwonlyargs, f.args.kw_defaults) if d is not None
    )
    return {name: ast.literal_eval(d) for name, d in found.items()}


def test_the_stubs_give_the_defaults_the_module_has():
    tree = ast.parse((REPO / "hal-python" / "hal.pyi").read_text())
    checked = 0
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            functions = [(node, getattr(hal, node.name))]
        elif isinstance(node, ast.ClassDef):
            cls = getattr(hal, node.name)
            functions = [
                (f, cls if f.name == "__init__" else getattr(cls, f.name))
                for f in node.body
                if isinstance(f, ast.FunctionDef)
                and not f.decorator_list
                and (f.name == "__init__" or hasattr(cls, f.name))
            ]
        else:
            continue
        for f, obj in functions:
            stub = stub_defaults(f)
            if not stub:
                continue
            actual = defaults_of(obj)
            stub = {k: v for k, v in stub.items() if k in actual}
            assert stub == actual, f"hal.pyi {node.name}.{f.name}: {stub}, the module {actual}"
            checked += 1
    assert checked > 10
