"""Packaging of the tubelet Python package for pip: the extension module is built by the
project's own CMake (libtubelet.a and python/tubelet/_tubelet.c, with the same flags as
`make build`), then packaged with tubelet/*.py. CMAKE_BUILD_PARALLEL_LEVEL sets the jobs."""
import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        subprocess.check_call(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                               "-DTB_BUILD_TESTS=OFF", f"-DTB_PYTHON_EXECUTABLE={sys.executable}",
                               f"-DPython3_EXECUTABLE={sys.executable}"])
        subprocess.check_call(["cmake", "--build", build, "--target", "tb_python"])
        built = glob.glob(os.path.join(build, "python", "tubelet", "_tubelet*.so"))
        if len(built) != 1:
            raise RuntimeError(f"the CMake build made {built} instead of one _tubelet module")
        dst = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(built[0], dst)


setup(
    name="tubelet",
    version="0.1.0",
    description="Frame-exact fused decode-crop video reader and deterministic threaded loader",
    packages=["tubelet"],
    package_data={"tubelet": ["*.pyi", "py.typed"]},
    ext_modules=[Extension("tubelet._tubelet", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    install_requires=["numpy"],
    python_requires=">=3.9",
)
