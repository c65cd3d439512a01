// End-to-end helpers: subprocess runs of the trainer binary.
#include "cli.h"

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace fs = std::filesystem;

namespace e2e {

std::string temp_dir(const std::string& tag) {
  static std::mt19937_64 rng(std::random_device{}());
  fs::path p = fs::temp_directory_path() / ("trainer-e2e-" + tag + "-" + std::to_string(rng() % 1000000000));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result trainer(const std::string& args, const std::string& cwd, const std::string& prefix) {
  static std::string dir = temp_dir("cwd");
  std::string where = cwd.empty() ? dir : cwd;
  std::string out = where + "/.stdout", err = where + "/.stderr";
  std::string cmd = "cd '" + where + "' && " + prefix + " '" TRAINER_BINARY "' " + args + " >'" + out + "' 2>'" + err + "' </dev/null";
  int st = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

std::string shared_data_dir() {
  const char* env = std::getenv("TRAINER_DATA");
  std::string d = env && *env ? env : TRAINER_SOURCE_DIR "/../shared/data";
  return fs::exists(fs::path(d) / "cifar10-jpg-test.tar.gz") ? d : "";
}

std::map<std::string, double> last_metrics(const std::string& run_dir) {
  std::stringstream ss(read_file(run_dir + "/metrics.csv"));
  std::string header, line, last;
  std::getline(ss, header);
  while (std::getline(ss, line))
    if (!line.empty()) last = line;
  std::map<std::string, double> m;
  std::stringstream h(header), v(last);
  for (std::string k, x; std::getline(h, k, ',') && std::getline(v, x, ',');) m[k] = x.empty() ? -1 : std::stod(x);
  return m;
}

}  // namespace e2e
