"""The C kernels alone, outside Python: tests/csrc/*_driver.c built with sanitizers.

The CRC driver checks every CRC kernel (portable, three-stream, fused, CRC32) against
bit-at-a-time references on every alignment and many lengths, each input in an
allocation of exactly its size, so AddressSanitizer sees any read past either end
and UBSan any undefined shift or overflow. The aarch64 kernel is checked the same way
(without sanitizers) when a cross compiler and qemu are installed.
"""
import os
import platform
import shutil
import subprocess

import pytest

from netkafka.record import _crc

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRC_DRIVER = os.path.join(REPO, "tests", "csrc", "crc_driver.c")
WARNINGS = ["-std=c11", "-Wall", "-Wextra", "-Werror"]
SANITIZERS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all",
              "-fno-omit-frame-pointer"]
AARCH64_SYSROOT = "/usr/aarch64-linux-gnu"


def build(compiler, flags, output):
    subprocess.run(
        [compiler, *WARNINGS, *flags, "-I", os.path.join(REPO, "csrc"), CRC_DRIVER, "-o", output],
        check=True, capture_output=True, text=True,
    )


def run(command):
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.split("\n")


def cpu_has_pclmul():
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " pclmulqdq" in line for line in f)
    except OSError:
        return False


def test_crc_kernels_are_exact_and_clean_under_sanitizers(tmp_path):
    driver = str(tmp_path / "crc_driver")
    build("gcc", ["-O1", "-g", *SANITIZERS], driver)
    checked = run([driver])
    expected = ["checked crc32", "checked portable", "checked dispatch"]
    if _crc.hw_available():
        expected.append("checked hw")
        if platform.machine() == "x86_64" and cpu_has_pclmul():
            expected.append("checked fused")
    assert set(expected) <= set(checked)


@pytest.mark.skipif(
    not (shutil.which("aarch64-linux-gnu-gcc") and shutil.which("qemu-aarch64")
         and os.path.isdir(AARCH64_SYSROOT)),
    reason="needs aarch64-linux-gnu-gcc, qemu-aarch64 and an arm64 libc (apt-get install "
           "gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)",
)
def test_crc_kernels_on_aarch64_under_qemu(tmp_path):
    driver = str(tmp_path / "crc_driver_aarch64")
    build("aarch64-linux-gnu-gcc", ["-O2"], driver)
    checked = run(["qemu-aarch64", "-L", AARCH64_SYSROOT, driver])
    # qemu's default CPU has the CRC extension: the ARMv8 kernel must have run.
    assert {"checked crc32", "checked portable", "checked dispatch", "checked hw"} <= set(checked)
