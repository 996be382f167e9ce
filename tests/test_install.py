"""netkafka as a user gets it: an sdist built from this checkout, installed outside it.

The sdist must carry every native source (a tree without them used to build a wheel with
no native module in it), the wheel built from it must carry compiled modules and no
generated C, and the installed package must import and send a record to the test broker,
read back by the independent reader.  Building must leave the checkout as it found it.

Speed (the test compiles all native modules once, on every core): the fresh venv gets no
packages from the network.  netkafka's dependencies and the build tools (setuptools,
Cython, pip) are made visible to it by a .pth line naming the test interpreter's
site-packages, and pip runs with --no-deps --no-build-isolation.  What is tested is the
sdist's contents and its build, not pip's resolver.
"""
import glob
import os
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import zipfile

import pytest

from netkafka._native import NATIVE_MODULES
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD_TIMEOUT_S = 900


def git_state() -> list[str]:
    """Every untracked or ignored path, and every change: what a build could leave behind
    (bytecode caches aside, which this test's own imports may write)."""
    status = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"],
                            cwd=REPO, check=True, capture_output=True, text=True).stdout
    return [line for line in status.splitlines()
            if "__pycache__" not in line and ".pytest_cache" not in line]


def run(*command: str, cwd: str) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT_S)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> str:
    """Builds the sdist from the checkout; asserts the checkout is unchanged by it."""
    before = git_state()
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(out), REPO,
        cwd=str(out))
    assert git_state() == before, "building the sdist changed the checkout"
    (path,) = glob.glob(str(out / "netkafka-*.tar.gz"))
    return path


def test_sdist_carries_every_native_source(sdist):
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    tracked = subprocess.run(["git", "ls-files", "netkafka", "csrc", "LICENSE"], cwd=REPO,
                             check=True, capture_output=True, text=True).stdout.split()
    native = [path for path in tracked
              if path.endswith((".pyx", ".pxd", ".pyi", ".c", ".h", "py.typed", "LICENSE"))]
    assert native and not set(native) - names, set(native) - names
    generated = [name for name in names
                 if name.startswith("netkafka/") and name.endswith((".c", ".so"))]
    assert not generated, generated


def test_sdist_installs_outside_the_checkout_and_sends(sdist, tmp_path, kafka_broker, topic_name):
    venv = tmp_path / "venv"
    # Without its own pip and setuptools (ensurepip's may be older than pyproject needs):
    # the test interpreter's, through the .pth below, build and install into this venv.
    run(sys.executable, "-m", "venv", "--without-pip", str(venv), cwd=str(tmp_path))
    python = str(venv / "bin" / "python")
    site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
               cwd=str(tmp_path)).strip()
    # Appended after the venv's own site-packages: the installed netkafka wins.
    with open(os.path.join(site, "deps-from-test-interpreter.pth"), "w") as pth:
        pth.write(sysconfig.get_paths()["purelib"] + "\n")
    before = git_state()
    wheels = tmp_path / "wheels"
    run(python, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
        "--wheel-dir", str(wheels), sdist, cwd=str(tmp_path))
    (wheel,) = glob.glob(str(wheels / "netkafka-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    compiled = {name.split(".", 1)[0].replace("/", ".") for name in names if name.endswith(".so")}
    assert compiled == set(NATIVE_MODULES)
    assert not [name for name in names if name.endswith(".c")]
    assert "pyspark_netkafka/__init__.py" in names
    run(python, "-m", "pip", "install", "--quiet", "--no-deps", wheel, cwd=str(tmp_path))

    script = textwrap.dedent(f"""
        import netkafka
        assert netkafka.__file__.startswith({str(venv)!r}), netkafka.__file__
        producer = netkafka.Producer(bootstrap_servers={kafka_broker.bootstrap!r})
        metadata = producer.send({topic_name!r}, b"from the sdist", key=b"k").get(timeout=30)
        producer.close()
        print(netkafka.__file__, metadata.partition, metadata.offset)
    """)
    create_topic(kafka_broker.bootstrap, topic_name)
    out = run(python, "-c", script, cwd=str(tmp_path))
    assert out.split()[2] == "0", out
    (record,) = read_topic(kafka_broker.bootstrap, topic_name, 1)
    assert (record.key, record.value) == (b"k", b"from the sdist")
    assert git_state() == before, "installing the sdist changed the checkout"

    # PySpark's own lookup of Python data sources, as a session runs it at startup, finds
    # the installed format("netkafka") with no registration code.
    lookup = textwrap.dedent(f"""
        import io, pickle, struct
        from pyspark.sql.worker.lookup_data_sources import _main
        out = io.BytesIO()
        _main(io.BytesIO(), out)
        data = io.BytesIO(out.getvalue())
        def length():
            return struct.unpack(">i", data.read(4))[0]
        for _ in range(length()):
            name = data.read(length()).decode()
            source = pickle.loads(data.read(length()))
            print(name, source.__module__, __import__(source.__module__).__file__)
    """)
    found = run(python, "-c", lookup, cwd=str(tmp_path)).split()
    assert found[:2] == ["netkafka", "netkafka.spark.datasource"], found
    assert found[2].startswith(str(venv)), found
