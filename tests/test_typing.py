"""The typing surface: py.typed, the stubs, ProducerSettings, read as a user's mypy would.

`make test` runs `mypy` on examples/ and tests/typing/ (pyproject's [tool.mypy]); these
tests keep the stubs honest: equal to what the code accepts, and actually read.
"""
import ast
import os
import subprocess
import sys
import typing

import netkafka
from netkafka import config
from netkafka.producer._settings_types import ProducerSettings

PACKAGE = os.path.dirname(netkafka.__file__)
PRODUCER_STUB = os.path.join(PACKAGE, "producer", "producer.pyi")


def test_producer_settings_are_the_settings_config_accepts():
    assert set(typing.get_type_hints(ProducerSettings)) == set(config._SETTING_DEFAULTS)


def stub_names(path, class_name):
    tree = ast.parse(open(path).read())
    (cls,) = [node for node in tree.body
              if isinstance(node, ast.ClassDef) and node.name == class_name]
    return {node.name for node in cls.body if isinstance(node, ast.FunctionDef)} | {
        node.target.id for node in cls.body if isinstance(node, ast.AnnAssign)}


def test_producer_stub_names_every_public_method():
    public = {name for name in vars(netkafka.Producer) if not name.startswith("_")}
    stubbed = stub_names(PRODUCER_STUB, "Producer")
    assert public - {"config"} <= stubbed, public - stubbed
    core = {name for name in vars(netkafka.Producer.__mro__[1]) if not name.startswith("_")}
    assert core <= stub_names(os.path.join(PACKAGE, "producer", "_accumulator.pyi"),
                              "ProducerCore"), core


def test_mypy_reads_the_stubs_and_refuses_a_wrong_setting(tmp_path):
    script = tmp_path / "wrong.py"
    script.write_text("from netkafka import Producer\n"
                      "Producer(bootstrap_servers='h:1', linger_msec=5)\n"
                      "Producer(batch_size='big')\n"
                      "offset: str = Producer().send('t', b'v').get().offset\n")
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                           "--config-file", os.devnull, str(script)],
                          capture_output=True, text=True, cwd=os.path.dirname(PACKAGE),
                          timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert 'Unexpected keyword argument "linger_msec"' in done.stdout, done.stdout
    assert '"batch_size"' in done.stdout and 'expected "int"' in done.stdout, done.stdout
    assert 'expression has type "int", variable has type "str"' in done.stdout, done.stdout
    assert "wrong.py:2" in done.stdout and "wrong.py:4" in done.stdout


def test_the_package_is_marked_typed():
    assert os.path.isfile(os.path.join(PACKAGE, "py.typed"))
