// Where the tests and benches find the source tree, ../shared and the build tree, as
// TP_SOURCE_DIR, TP_SHARED_DIR and TP_BINARY_DIR (const char*). CMake force-includes this header
// into every test and bench (tp_test_paths in tests/testutil/CMakeLists.txt) and writes the paths
// into one generated source file, so no compile command line carries an absolute path and a
// clone in another folder gets ccache hits for every test object (CI builds a fresh clone).
#pragma once

namespace tightpipe::testutil {
const char* source_dir();  // the repository's root
const char* shared_dir();  // ../shared beside it
const char* binary_dir();  // the CMake build tree
}  // namespace tightpipe::testutil

#define TP_SOURCE_DIR (::tightpipe::testutil::source_dir())
#define TP_SHARED_DIR (::tightpipe::testutil::shared_dir())
#define TP_BINARY_DIR (::tightpipe::testutil::binary_dir())
