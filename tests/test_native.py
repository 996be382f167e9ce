"""netkafka runs on its compiled modules only: prove they are the ones loaded."""
import glob
import importlib.machinery
import os
import sys

import pytest

import netkafka
from netkafka import _native

PACKAGE_DIR = os.path.dirname(netkafka.__file__)
ROOT_DIR = os.path.dirname(PACKAGE_DIR)


def test_every_pyx_is_a_required_native_module():
    sources = {
        os.path.splitext(os.path.relpath(p, ROOT_DIR))[0].replace(os.sep, ".")
        for p in glob.glob(os.path.join(PACKAGE_DIR, "**", "*.pyx"), recursive=True)
    }
    assert sources, "no .pyx sources found in the package"
    assert sources == set(_native.NATIVE_MODULES)


@pytest.mark.parametrize("name", _native.NATIVE_MODULES)
def test_native_module_is_a_compiled_extension(name):
    module = netkafka._NATIVE[name]
    assert isinstance(module.__loader__, importlib.machinery.ExtensionFileLoader)
    assert module.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def test_missing_native_module_fails_import_naming_it(monkeypatch):
    name = _native.NATIVE_MODULES[0]
    # None in sys.modules makes the import system raise ImportError for that name.
    monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError, match=rf"{name} is not available.*pip install"):
        _native.load_native_modules()
