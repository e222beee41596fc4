"""Builds libblockpool_torch.so with cargo and installs it inside the blockpool_torch package.

The library is not a Python extension module: ctypes and PyTorch's CUDAPluggableAllocator
load it by path, and it uses no Python C API. So setuptools-rust builds it with
Binding.NoBinding, and two settings undo what it would do for an extension module:

- the file keeps the plain name libblockpool_torch.so (not libblockpool_torch.cpython-311-
  x86_64-linux-gnu.so), the name _lib.py looks for and users can point PyTorch at;
- the wheel is tagged py3-none-<platform>: one wheel serves every Python 3.

The crate is a member of the repository's cargo workspace, so pip must build from the
checkout (pip 21.3 and later build a local directory in place): cargo then uses the
workspace's Cargo.lock (--locked) and target directory, and CARGO_TARGET_DIR can point it at
a build that already exists.
"""

import os

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools_rust import Binding, RustExtension, build_rust

LIBRARY_MODULE = "blockpool_torch.libblockpool_torch"


class build_rust_plain_name(build_rust):
    """Names the built library libblockpool_torch.so, without the Python ABI suffix."""

    def get_dylib_ext_path(self, ext, target_fname):
        path = super().get_dylib_ext_path(ext, target_fname)
        return os.path.join(os.path.dirname(path), target_fname.rsplit(".", 1)[-1] + ".so")


class bdist_wheel_any_python(bdist_wheel):
    """Tags the wheel py3-none-<platform>: the library does not depend on the interpreter."""

    def get_tag(self):
        _, _, platform = super().get_tag()
        return "py3", "none", platform


setup(
    rust_extensions=[
        RustExtension(
            LIBRARY_MODULE,
            path="Cargo.toml",
            binding=Binding.NoBinding,
            args=["--locked"],
            py_limited_api=False,
        )
    ],
    cmdclass={"build_rust": build_rust_plain_name, "bdist_wheel": bdist_wheel_any_python},
)
