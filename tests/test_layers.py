"""The layer rule for the native modules, which import-linter cannot read.

`make test` runs `lint-imports` over the Python modules with the layers contract in
pyproject.toml; this applies the same list to every import and cimport of the .pyx and .pxd
files, so that a native module cannot reach upward either.
"""
import glob
import os
import re
import tomllib

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The C kernels' Cython declarations: below every layer, importable by all.
CSRC = "netkafka.csrc"

_IMPORT = re.compile(r"^\s*(?:from\s+(netkafka[\w.]*)\s+c?import|c?import\s+(netkafka[\w.]*))", re.M)


def contract_layers():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        contracts = tomllib.load(f)["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers"]
    return layers


LAYERS = contract_layers()


def layer_of(module):
    """Index in LAYERS (0 is the highest), or None for a module outside every layer."""
    for index, layer in enumerate(LAYERS):
        if module == layer or module.startswith(layer + "."):
            return index
    return None


def module_of(path):
    return os.path.splitext(os.path.relpath(path, REPO))[0].replace(os.sep, ".")


def native_sources():
    pattern = os.path.join(REPO, "netkafka", "**", "*.p[yx][xd]")
    paths = glob.glob(pattern, recursive=True)
    return sorted(p for p in paths if p.endswith((".pyx", ".pxd")) and module_of(p) != CSRC)


def upward_imports(module, source):
    """The netkafka modules that `source` (of `module`) imports or cimports from above."""
    own = layer_of(module)
    upward = []
    for match in _IMPORT.finditer(source):
        target = match.group(1) or match.group(2)
        if target == CSRC:
            continue
        target_layer = layer_of(target)
        if target_layer is None or target_layer < own:
            upward.append(target)
    return upward


def test_contract_lists_every_subpackage():
    packages = {
        "netkafka." + name
        for name in os.listdir(os.path.join(REPO, "netkafka"))
        if os.path.isfile(os.path.join(REPO, "netkafka", name, "__init__.py")) and name != "testing"
    }
    assert packages <= set(LAYERS), f"subpackages outside the layers contract: {packages - set(LAYERS)}"


@pytest.mark.parametrize("path", native_sources(), ids=module_of)
def test_native_module_imports_only_its_own_layer_or_below(path):
    module = module_of(path)
    assert layer_of(module) is not None, f"{module} is in no layer of the contract"
    with open(path, encoding="utf-8") as f:
        upward = upward_imports(module, f.read())
    assert not upward, f"{module} imports from above its layer: {upward}"


def test_upward_imports_and_cimports_are_caught():
    source = (
        "from netkafka.csrc cimport nk_crc32c\n"
        "from netkafka.errors import ProtocolError\n"
        "from netkafka.producer._mutex cimport Mutex\n"
        "import netkafka\n"
        "    from netkafka.client.connection import Request\n"
    )
    assert upward_imports("netkafka.record._crc", source) == [
        "netkafka.producer._mutex", "netkafka", "netkafka.client.connection"]
    assert upward_imports("netkafka.producer._futures", source) == ["netkafka"]
