# Module visibility, the part the compiler cannot see (CMakeLists.txt, tp_module_internals):
# no source may reach another module's internals by a path that climbs out ("../x.h") or names
# the source tree ("src/data/order.h"). Run: cmake -DROOT=<repo> -P module_includes_check.cmake
file(GLOB_RECURSE files LIST_DIRECTORIES false
  ${ROOT}/src/*.h ${ROOT}/src/*.cc ${ROOT}/tools/*.h ${ROOT}/tools/*.cc
  ${ROOT}/bench/*.h ${ROOT}/bench/*.cc ${ROOT}/tests/*.h ${ROOT}/tests/*.cc)
set(bad "")
foreach(f ${files})
  file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]")
  foreach(line ${lines})
    if(line MATCHES "include[ \t]*[\"<](\\.\\./|[^\">]*/\\.\\./|src/)")
      file(RELATIVE_PATH rel ${ROOT} ${f})
      string(APPEND bad "\n  ${rel}: ${line}")
    endif()
  endforeach()
endforeach()
if(bad)
  message(FATAL_ERROR "includes that bypass module visibility (spell a module's own internals "
    "\"MODULE/x.h\"; move what other modules need into include/tightpipe/):${bad}")
endif()
list(LENGTH files n)
message(STATUS "module includes: ${n} files checked, none climbs out of its module")
