"""Packaging of the tubelet Python package for pip: the extension module is built by the
project's own CMake (libtubelet.a and python/tubelet/_tubelet.c, with the same flags as
`make build`), then packaged with tubelet/*.py. The command-line program is built with it and
installed as the environment's `tubelet` command (bin/tubelet: the C program itself, no
Python in between). CMAKE_BUILD_PARALLEL_LEVEL sets the jobs."""
import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.dist import Distribution

install_data = Distribution().get_command_class("install_data")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def cmake_dir(cmd):
    """The CMake build directory, under build_ext's temporary directory."""
    return os.path.abspath(os.path.join(cmd.get_finalized_command("build_ext").build_temp,
                                        "cmake"))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = cmake_dir(self)
        subprocess.check_call(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                               "-DTB_BUILD_TESTS=OFF", f"-DTB_PYTHON_EXECUTABLE={sys.executable}",
                               f"-DPython3_EXECUTABLE={sys.executable}"])
        subprocess.check_call(["cmake", "--build", build, "--target", "tb_python", "tubelet_cli"])
        built = glob.glob(os.path.join(build, "python", "tubelet", "_tubelet*.so"))
        if len(built) != 1:
            raise RuntimeError(f"the CMake build made {built} instead of one _tubelet module")
        dst = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(built[0], dst)


class InstallProgram(install_data):
    """Installs the program CMakeBuild built as bin/tubelet of the environment."""

    def run(self):
        program = os.path.join(cmake_dir(self), "tubelet")
        if not os.access(program, os.X_OK):
            raise RuntimeError(f"the CMake build made no program {program}")
        self.data_files = [("bin", [program])]
        super().run()


setup(
    name="tubelet",
    version="0.1.0",
    description="Frame-exact fused decode-crop video reader and deterministic threaded loader",
    packages=["tubelet"],
    package_data={"tubelet": ["*.pyi", "py.typed"]},
    ext_modules=[Extension("tubelet._tubelet", sources=[])],
    # Filled by InstallProgram once the build has run (an empty list would skip install_data).
    data_files=[("bin", [])],
    cmdclass={"build_ext": CMakeBuild, "install_data": InstallProgram},
    install_requires=["numpy"],
    python_requires=">=3.9",
)
