"""One home for netkafka's exceptions.

Every exception class of the package is defined in netkafka.errors and derives from
KafkaError or from a built-in argument error (ValueError, TypeError), so one `except`
clause catches what netkafka raises and one file lists it.  Modules import errors from
there (or from the package root, the public face), never from a sibling's implementation.
"""
import glob
import importlib
import os
import pkgutil
import re

import pytest

import netkafka
from netkafka import _native, errors

PACKAGE_DIR = os.path.dirname(netkafka.__file__)
ARGUMENT_ERRORS = (ValueError, TypeError)
# Where a module may take an error from: its home, or the package root re-exporting it.
ERROR_SOURCES = {"netkafka.errors", "netkafka"}

_FROM_IMPORT = re.compile(r"^\s*from\s+(netkafka[\w.]*)\s+import\s+(\([^)]*\)|[^\n]*)", re.M)


def import_every_module():
    """Imports every module of netkafka, the compiled ones included; returns their names.
    A module that cannot be imported fails the test: its classes would go unchecked."""
    names = {netkafka.__name__}
    for info in pkgutil.walk_packages(netkafka.__path__, netkafka.__name__ + "."):
        importlib.import_module(info.name)
        names.add(info.name)
    return names


def exceptions_defined_in_netkafka():
    """Every exception class whose module is netkafka's, found among the subclasses of
    BaseException, so that a class no module exposes as an attribute counts too."""
    found, todo = set(), [BaseException]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.add(sub)
                todo.append(sub)
    return {cls for cls in found
            if cls.__module__ == "netkafka" or cls.__module__.startswith("netkafka.")}


def sibling_error_imports(source, error_names):
    """`name from module` for each of error_names that source imports from a module
    other than ERROR_SOURCES."""
    wrong = []
    for match in _FROM_IMPORT.finditer(source):
        module = match.group(1)
        if module in ERROR_SOURCES:
            continue
        imported = re.sub(r"#[^\n]*", "", match.group(2)).strip().strip("()")
        for part in imported.split(","):
            name = part.split(" as ")[0].strip()
            if name in error_names:
                wrong.append(f"{name} from {module}")
    return wrong


@pytest.fixture(scope="module")
def imported():
    return import_every_module()


@pytest.fixture(scope="module")
def netkafka_exceptions(imported):
    return exceptions_defined_in_netkafka()


def test_every_module_is_imported_the_compiled_ones_included(imported):
    assert set(_native.NATIVE_MODULES) <= imported
    assert {"netkafka.errors", "netkafka.spark", "netkafka.testing.broker"} <= imported


def test_every_exception_class_is_defined_in_errors(netkafka_exceptions):
    assert errors.SerializationError in netkafka_exceptions  # the walk sees the package's
    outside = sorted(f"{cls.__module__}.{cls.__qualname__}" for cls in netkafka_exceptions
                     if cls.__module__ != errors.__name__)
    assert not outside, f"exception classes defined outside netkafka.errors: {outside}"


def test_every_error_derives_from_kafka_error_or_an_argument_error(netkafka_exceptions):
    classes = {value for value in vars(errors).values()
               if isinstance(value, type) and value.__module__ == errors.__name__}
    classes |= {cls for cls in netkafka_exceptions if cls.__module__ == errors.__name__}
    stray = sorted(cls.__qualname__ for cls in classes
                   if not issubclass(cls, (errors.KafkaError, *ARGUMENT_ERRORS)))
    assert not stray, f"netkafka.errors classes outside KafkaError and ValueError/TypeError: {stray}"


def test_errors_are_imported_from_errors_not_from_a_sibling(netkafka_exceptions):
    error_names = {cls.__name__ for cls in netkafka_exceptions}
    wrong = {}
    for path in sorted(glob.glob(os.path.join(PACKAGE_DIR, "**", "*.p[yx]*"), recursive=True)):
        if not path.endswith((".py", ".pyx", ".pxd")):
            continue
        with open(path, encoding="utf-8") as f:
            found = sibling_error_imports(f.read(), error_names)
        if found:
            wrong[os.path.relpath(path, PACKAGE_DIR)] = found
    assert not wrong, f"errors imported from a sibling's implementation: {wrong}"


def test_an_error_imported_from_a_sibling_is_caught():
    source = (
        "from netkafka.errors import (KafkaError,  # the home\n"
        "                             ProtocolError)\n"
        "from netkafka import SerializationError\n"
        "from netkafka.client.connection import Request, KafkaTimeoutError as Late\n"
        "    from netkafka.producer.accumulator import (RecordAccumulator,\n"
        "                                               ProducerClosedError)  # noqa\n"
    )
    names = {"KafkaError", "ProtocolError", "SerializationError", "KafkaTimeoutError",
             "ProducerClosedError"}
    assert sibling_error_imports(source, names) == [
        "KafkaTimeoutError from netkafka.client.connection",
        "ProducerClosedError from netkafka.producer.accumulator"]
