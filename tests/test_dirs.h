// Scratch directories of the tests: all under one folder per test process, removed when the process passes (kept, and named, when it fails or TRAINER_KEEP_TEST_DIRS is set).
//
// Each test executable runs once per test case under CTest, and the e2e cases each make a few
// directories (a cwd for the trainer binary, run folders, configs): before 2026-12-01 they were left
// in the temporary folder, ~260 directories and ~180 MB per scripts/test.sh (a development machine
// had gathered 14 GB). Now test_dir() makes them under <tmp>/trainer-tests-<pid>/, and
// tests/catch_main.cpp removes that folder at the end of a run with no failure; a failing run keeps
// it and prints its path (so does any run with TRAINER_KEEP_TEST_DIRS=1).
#pragma once
#include <string>

namespace trainer::test {

// A fresh, empty directory "<tag>-<n>" under this process's folder (made on first use).
std::string test_dir(const std::string& tag);

namespace detail {
// For tests/catch_main.cpp: after the run, remove this process's folder if `passed` (and
// TRAINER_KEEP_TEST_DIRS is unset or 0), else say on stderr where it is. Nothing if none was made.
void finish_test_dirs(bool passed);
}  // namespace detail

}  // namespace trainer::test
