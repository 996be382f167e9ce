"""Build of netkafka's native modules: every build switch lives here.

Each ``.pyx`` under ``netkafka/`` becomes an extension module (named by its path,
e.g. ``netkafka/record/_crc.pyx`` is ``netkafka.record._crc``) linked with the C kernels
in ``csrc/``.  Switches are environment variables, read once:

    NETKAFKA_DEBUG=1        -O0 -g, invariant checks (NETKAFKA_DEBUG macro),
                            Cython bounds and wraparound checks on
    NETKAFKA_SANITIZE=LIST  e.g. "address,undefined": compile and link with
                            -fsanitize=LIST (load libasan first: see README)
    NETKAFKA_ANNOTATE=1     write Cython's HTML annotation next to each .pyx
    NETKAFKA_MODULES=a,b    build only these modules (e.g. "_crc"): a quick
                            rebuild of the one module being worked on

The default build is optimised (-O3) and keeps the checks out of hot loops.
"""
import glob
import os

from Cython.Build import cythonize
from setuptools import Extension, setup

DEBUG = os.environ.get("NETKAFKA_DEBUG", "") not in ("", "0")
SANITIZE = os.environ.get("NETKAFKA_SANITIZE", "").strip()
ANNOTATE = os.environ.get("NETKAFKA_ANNOTATE", "") not in ("", "0")

ONLY = {m for m in os.environ.get("NETKAFKA_MODULES", "").split(",") if m}

CSRC = sorted(glob.glob("csrc/*.c"))

compile_args = ["-std=c11", "-Wall", "-Wno-unused-function"]
link_args = []
macros = []
if DEBUG:
    compile_args += ["-O0", "-g3"]
    macros.append(("NETKAFKA_DEBUG", "1"))
else:
    compile_args += ["-O3"]
    macros.append(("NDEBUG", "1"))
if SANITIZE:
    flags = ["-fsanitize=" + SANITIZE, "-fno-omit-frame-pointer"]
    compile_args += flags
    link_args += flags

directives = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "initializedcheck": DEBUG,
    "cdivision": True,
    "embedsignature": True,
}


def module_name(pyx):
    return os.path.splitext(os.path.basename(pyx))[0]


def qualified_name(pyx):
    return os.path.splitext(pyx)[0].replace(os.sep, ".")


def extension(pyx):
    return Extension(
        qualified_name(pyx),
        sources=[pyx] + CSRC,
        include_dirs=["csrc"],
        define_macros=macros,
        extra_compile_args=compile_args,
        extra_link_args=link_args,
    )


setup(
    ext_modules=cythonize(
        [
            extension(pyx)
            for pyx in sorted(glob.glob("netkafka/**/*.pyx", recursive=True))
            if not ONLY or module_name(pyx) in ONLY
        ],
        compiler_directives=directives,
        annotate=ANNOTATE,
        # A debug build must never reuse optimised C from an earlier run.
        force=DEBUG or bool(SANITIZE),
    ),
)
