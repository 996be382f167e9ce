"""Build of netkafka's native modules: every build switch lives here.

Each ``.pyx`` under ``netkafka/`` becomes an extension module (named by its path,
e.g. ``netkafka/record/_crc.pyx`` is ``netkafka.record._crc``) linked with the C kernels
in ``csrc/``.  Switches are environment variables, read once:

    NETKAFKA_DEBUG=1        -O0 -g, invariant checks (NETKAFKA_DEBUG macro),
                            Cython bounds and wraparound checks on
    NETKAFKA_SANITIZE=LIST  e.g. "address,undefined": compile and link with
                            -fsanitize=LIST (load libasan first: see README)
    NETKAFKA_ANNOTATE=1     write Cython's HTML annotation next to each generated
                            .c file (in the build directory, below)
    NETKAFKA_MODULES=a,b    build only these modules (e.g. "_crc"): a quick
                            rebuild of the one module being worked on
    NETKAFKA_BUILD_DIR=DIR  where build products go (default: a directory under the
                            system's temp directory named after this checkout)

The default build is optimised (-O3) and keeps the checks out of hot loops.

Nothing but the compiled modules (``--inplace``) is written into the source tree: the
C that Cython generates, setuptools' build/ and its egg-info all go to the build
directory, so `pip install .` and `python -m build` leave a checkout as they found it
(tests/test_install.py checks).  Cython runs as a step of build_ext, not when this file
is read, so the sdist carries the .pyx/.pxd sources and never generated C.
"""
import glob
import hashlib
import os
import sys
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_clib import build_clib
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD_DIR = os.environ.get("NETKAFKA_BUILD_DIR") or os.path.join(
    tempfile.gettempdir(), "netkafka-build",
    hashlib.sha256(HERE.encode()).hexdigest()[:16])
os.makedirs(BUILD_DIR, exist_ok=True)

DEBUG = os.environ.get("NETKAFKA_DEBUG", "") not in ("", "0")
SANITIZE = os.environ.get("NETKAFKA_SANITIZE", "").strip()
ANNOTATE = os.environ.get("NETKAFKA_ANNOTATE", "") not in ("", "0")

ONLY = {m for m in os.environ.get("NETKAFKA_MODULES", "").split(",") if m}

CSRC = sorted(glob.glob("csrc/*.c"))
CSRC_HEADERS = sorted(glob.glob("csrc/*.h"))
PYX = sorted(glob.glob("netkafka/**/*.pyx", recursive=True))
# A tree without its sources (e.g. an sdist that left them out) would otherwise
# "succeed" as a wheel with no native module in it, which then fails at import.
if not PYX or not CSRC:
    raise SystemExit(f"setup.py: no {'netkafka/**/*.pyx' if not PYX else 'csrc/*.c'} "
                     f"under {HERE}: nothing to compile (is this a complete source tree?)")
unknown = ONLY - {os.path.splitext(os.path.basename(pyx))[0] for pyx in PYX}
if unknown:
    raise SystemExit(f"setup.py: NETKAFKA_MODULES names no module: {sorted(unknown)}")

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


# csrc/ is compiled once, into a static library every module links.  When each module
# compiled csrc/ itself, build_ext's parallel jobs wrote the same object files at once, and
# a module could link a half-written one (it then failed at import: undefined symbol).
CSRC_LIBRARY = ("netkafka_csrc", {
    "sources": CSRC,
    "include_dirs": ["csrc"],
    "macros": macros,
    "cflags": compile_args,
    "obj_deps": {"": CSRC_HEADERS},
})
# Objects are reused when newer than their sources, so each set of flags (debug, sanitizer)
# has its own directory: a debug build never links optimised objects, nor the reverse.
CSRC_FLAVOR = hashlib.sha256(repr((compile_args, macros)).encode()).hexdigest()[:12]


def module_name(pyx):
    return os.path.splitext(os.path.basename(pyx))[0]


def qualified_name(pyx):
    return os.path.splitext(pyx)[0].replace(os.sep, ".")


def extension(pyx):
    return Extension(
        qualified_name(pyx),
        sources=[pyx],
        # Relinked when the library's sources change (build_clib has rebuilt it by then).
        depends=CSRC + CSRC_HEADERS,
        include_dirs=["csrc"],
        define_macros=macros,
        extra_compile_args=compile_args,
        extra_link_args=link_args,
    )


class build_csrc_library(build_clib):
    """build_clib into a directory of its own per set of compile flags, under the
    interpreter's build_temp (so `setup.py clean --all` removes it)."""

    def finalize_options(self):
        super().finalize_options()
        self.build_temp = os.path.join(self.build_temp, "csrc-" + CSRC_FLAVOR)
        self.build_clib = self.build_temp


class cythonize_then_build_ext(build_ext):
    """Cythonizes into the build directory when extensions are built, and only then."""

    def finalize_options(self):
        from Cython.Build import cythonize
        # Before setuptools finalizes: it prepares the Extension objects cythonize returns.
        self.distribution.ext_modules = cythonize(
            self.distribution.ext_modules,
            compiler_directives=directives,
            annotate=ANNOTATE,
            # One per interpreter, so that builds for several Pythons may run at once.
            build_dir=os.path.join(BUILD_DIR, "cython-" + sys.implementation.cache_tag),
            # A debug build must never reuse optimised C from an earlier run.
            force=DEBUG or bool(SANITIZE),
        )
        super().finalize_options()

    def run(self):
        # `build` runs build_clib first; `build_ext --inplace` and editable installs do not.
        self.run_command("build_clib")
        super().run()


setup(
    ext_modules=[extension(pyx) for pyx in PYX if not ONLY or module_name(pyx) in ONLY],
    libraries=[CSRC_LIBRARY],
    cmdclass={"build_clib": build_csrc_library, "build_ext": cythonize_then_build_ext},
    options={
        "build": {"build_base": BUILD_DIR},
        "egg_info": {"egg_base": BUILD_DIR},
        # Every core: an sdist's install compiles 14 modules.
        "build_ext": {"parallel": os.cpu_count() or 1},
    },
)
