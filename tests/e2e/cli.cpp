// End-to-end helpers: subprocess runs of the trainer binary.
#include "cli.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/io/safetensors.h"
#include "skip.h"
#include "test_dirs.h"

namespace fs = std::filesystem;

namespace e2e {

std::string temp_dir(const std::string& tag) { return trainer::test::test_dir("e2e-" + tag); }

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

Measured trainer_measured(const std::vector<std::string>& args, const std::string& cwd) {
  const std::string out = cwd + "/.stdout", err = cwd + "/.stderr";
  std::vector<std::string> argv_s{TRAINER_BINARY};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {  // the child: only async-signal-safe calls until exec
    const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int in = open("/dev/null", O_RDONLY);
    if (o < 0 || e < 0 || in < 0 || chdir(cwd.c_str()) != 0) _exit(125);
    dup2(in, 0), dup2(o, 1), dup2(e, 2);
    execv(argv[0], argv.data());
    _exit(126);
  }
  Measured m;
  int st = 0;
  rusage ru{};
  if (pid < 0 || wait4(pid, &st, 0, &ru) != pid) return m;
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m.max_rss_mib = double(ru.ru_maxrss) / 1024.0;  // KiB on Linux
  m.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  m.out = read_file(out);
  m.err = read_file(err);
  return m;
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

std::map<std::string, std::vector<float>> model_weights(const std::string& file) {
  trainer::SafeTensorsReader r(file);
  std::map<std::string, std::vector<float>> out;
  for (const trainer::SafeTensor& t : r.tensors()) {
    bool state = false;
    for (const char* p : {"optimizer/", "data/", "ema/", "early_stopping/"}) state = state || t.name.rfind(p, 0) == 0;
    if (!state) out[t.name] = r.f32(t.name);
  }
  return out;
}

bool have_mpirun() { return std::system("command -v mpirun >/dev/null 2>&1") == 0; }

bool skip_without_mpirun() { return skip_without_command("mpirun", "openmpi-bin"); }

bool skip_without_gpu() {
  const Result dev = trainer("devices");
  if (dev.out.find("cuda:0:") != std::string::npos) return false;
  const size_t at = dev.out.find("cuda");  // "cuda: no GPU visible (<reason>)"
  const std::string why = at == std::string::npos ? "trainer devices lists no GPU" : dev.out.substr(at);
  trainer::test::record_skip(trainer::test::Missing::Gpu, why.substr(0, why.find('\n')));
  return true;
}

std::string python() {
  const char* p = std::getenv("TRAINER_PYTHON");
  return p && *p ? p : "/usr/bin/python3";
}

bool skip_without_python(const std::vector<std::pair<std::string, std::string>>& modules) {
  std::string missing, packages;
  for (const auto& [module, package] : modules)
    if (std::system((python() + " -c 'import " + module + "' >/dev/null 2>&1").c_str()) != 0) {
      missing += (missing.empty() ? "" : ", ") + module;
      packages += (packages.empty() ? "" : " ") + package;
    }
  if (missing.empty()) return false;
  trainer::test::record_skip(trainer::test::Missing::Package,
                             python() + " cannot import " + missing + " (scripts/setup.sh installs " + packages + ")");
  return true;
}

bool skip_without_command(const std::string& command, const std::string& package) {
  if (std::system(("command -v " + command + " >/dev/null 2>&1").c_str()) == 0) return false;
  trainer::test::record_skip(trainer::test::Missing::Package, "no " + command + " (scripts/setup.sh installs " + package + ")");
  return true;
}

std::string mpi_env() {
  return "env OMPI_MCA_btl=self,vader OMPI_MCA_plm=isolated OMPI_MCA_btl_vader_single_copy_mechanism=none "
         "ASAN_OPTIONS=\"${ASAN_OPTIONS:-}:fast_unwind_on_malloc=0\" ";
}

std::string mpirun(const std::string& wrapper) { return mpi_env() + wrapper + "mpirun --oversubscribe --allow-run-as-root"; }

nlohmann::json last_json(const std::string& out) {
  std::istringstream in(out);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return nlohmann::json::parse(last);
}

double fraction_rounding(const nlohmann::json& bench_line, double ceiling) {
  const double g = bench_line["gflops_per_sec"].get<double>();
  return 0.0005 + 0.05 / ceiling + 0.05 * g / (ceiling * ceiling) + 1e-9;
}

}  // namespace e2e
