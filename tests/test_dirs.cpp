// The tests' scratch directories (test_dirs.h): one folder per process, made on first use, removed after a passing run.
#include "test_dirs.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <mutex>

namespace trainer::test {
namespace {

namespace fs = std::filesystem;

std::mutex g_mu;
std::string g_root;  // this process's folder, once made
std::atomic<int> g_next{0};

const std::string& root() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_root.empty()) {
    const fs::path p = fs::temp_directory_path() / ("trainer-tests-" + std::to_string(::getpid()));
    fs::remove_all(p);  // a folder left by an earlier process of the same id
    fs::create_directories(p);
    g_root = p.string();
  }
  return g_root;
}

}  // namespace

std::string test_dir(const std::string& tag) {
  const fs::path p = fs::path(root()) / (tag + "-" + std::to_string(g_next++));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

namespace detail {

void finish_test_dirs(bool passed) {
  std::string dir;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    dir = g_root;
  }
  if (dir.empty()) return;
  const char* keep = std::getenv("TRAINER_KEEP_TEST_DIRS");
  if (passed && !(keep && *keep && std::string(keep) != "0")) {
    std::error_code ec;
    fs::remove_all(dir, ec);  // a file a child process still holds open is no reason to fail a passing run
    return;
  }
  std::cerr << "test files kept in " << dir << "\n";
}

}  // namespace detail
}  // namespace trainer::test
