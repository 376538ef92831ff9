"""The optional native Kineto reader (native/, C++17).

Everything else is configured in pyproject.toml. The extension is optional:
where it does not build (no compiler, no Python headers, an unsupported
platform), the install goes on without it and the Python reader runs
(hta_report/load/fastparse.py). ``HTA_REPORT_NO_NATIVE=1`` skips it.
"""
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """``build_ext`` that warns and goes on where a compiler is missing or fails
    (``Extension(optional=True)`` covers a failed compile, not a missing compiler
    on every setuptools version)."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any failure leaves the Python reader
            print(f"warning: the native reader was not built ({exc}); the Python reader will run", file=sys.stderr)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            print(f"warning: {ext.name} was not built ({exc}); the Python reader will run", file=sys.stderr)


if os.name == "nt":
    flags = ["/std:c++17", "/O2", "/EHsc"]
else:
    flags = ["-std=c++17", "-O3", "-fvisibility=hidden", "-Wall", "-Wextra"]

ext_modules = [] if os.environ.get("HTA_REPORT_NO_NATIVE") else [
    Extension(
        "hta_report.load._native",
        sources=["native/module.cpp", "native/reader.cpp"],
        depends=["native/reader.hpp"],
        extra_compile_args=flags,
        language="c++",
        optional=True,
    )
]

setup(ext_modules=ext_modules, cmdclass={"build_ext": OptionalBuildExt})
