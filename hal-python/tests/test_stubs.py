"""The type stubs (hal.pyi) name what the module has, and nothing else."""

import ast

import hal
from conftest import REPO

STUBS = REPO / "hal-python" / "hal.pyi"


def stub_tree():
    return ast.parse(STUBS.read_text())


def test_the_stubs_name_every_public_name_of_the_module():
    tree = stub_tree()
    names = {
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.ClassDef))
    }
    public = {
        n for n in dir(hal)
        if not n.startswith("_") and not isinstance(getattr(hal, n), type(hal))
    }
    assert public - names == set(), "in the module, not in hal.pyi"
    assert names - public == set(), "in hal.pyi, not in the module"


def test_the_stubs_name_every_method_of_each_class():
    for node in stub_tree().body:
        if not isinstance(node, ast.ClassDef) or issubclass(getattr(hal, node.name), Exception):
            continue
        declared = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        actual = {
            n for n in dir(getattr(hal, node.name))
            if not n.startswith("_") or n in ("__dlpack__", "__dlpack_device__", "__len__")
        }
        assert actual - declared == set(), f"{node.name}: methods missing from hal.pyi"


def test_every_class_and_function_has_a_docstring():
    for name in dir(hal):
        if name.startswith("_") or isinstance(getattr(hal, name), type(hal)):
            continue
        assert getattr(hal, name).__doc__, f"hal.{name} has no docstring"
