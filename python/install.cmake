# Installs the built package (TB_PY_OUT: BUILD/python/tubelet) into the site directory under
# CMAKE_INSTALL_PREFIX that TB_PY_EXE reads: ~/.local's user site, /usr/local's dist-packages on
# Debian; under any other prefix PREFIX/lib/pythonX.Y/site-packages, which PYTHONPATH must name.
# Run by `cmake --install` (python/CMakeLists.txt); checked by tests/readme_check.sh.
set(code [=[
import os, site, sys, sysconfig
p = os.path.abspath(sys.argv[1])
for d in [site.getusersitepackages()] + site.getsitepackages():
    if os.path.relpath(os.path.abspath(d), p).startswith("lib" + os.sep):
        print(d)
        sys.exit(0)
print(sysconfig.get_path("platlib", "posix_prefix", {"base": p, "platbase": p}))
]=])
execute_process(COMMAND "${TB_PY_EXE}" -c "${code}" "${CMAKE_INSTALL_PREFIX}"
                OUTPUT_VARIABLE dir RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0 OR dir STREQUAL "")
  message(FATAL_ERROR "tubelet: ${TB_PY_EXE} could not name its site directory under "
                      "${CMAKE_INSTALL_PREFIX} (${rc})")
endif()
file(GLOB files "${TB_PY_OUT}/*.py" "${TB_PY_OUT}/*.pyi" "${TB_PY_OUT}/py.typed"
     "${TB_PY_OUT}/_tubelet*.so")
file(INSTALL ${files} DESTINATION "${dir}/tubelet")
message(STATUS "tubelet: the Python package is in ${dir}/tubelet (for ${TB_PY_EXE})")
