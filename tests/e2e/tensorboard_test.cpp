// TensorBoard event files (RUN_DIR/tb) decoded by an independent reader (tensorboard/read_events.py):
// every value against metrics.csv, the schedule and config.yaml; off by config; a resumed run's
// files; under mpirun; a failed write.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "cli.h"
#include "core/io/run_dir.h"

namespace fs = std::filesystem;
using Catch::Contains;
using Catch::StartsWith;
using nlohmann::json;

namespace {

// 6 steps of 32 per epoch, 2 epochs, validation; cosine per step, so the rate changes every step.
const char* kConfig = R"(name: tb
seed: 5
model:
  input: [8, 8, 3]
  layers:
    - {name: conv1, type: conv2d, filters: 4, kernel: 3, padding: same}
    - {name: relu1, type: relu}
    - {name: gap, type: global_avg_pool2d}
    - {name: dense, type: dense, units: 3}
    - {name: softmax, type: softmax}
data:
  train: {type: synthetic, size: 192, image_size: 8, classes: 3, seed: 1}
  val: {type: synthetic, size: 48, image_size: 8, classes: 3, seed: 2}
  augment: {mean: per_channel}
train: {epochs: 2, batch_size: 32}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
schedule: {type: cosine, per_step: true}
)";
constexpr double kBaseLr = 0.05;
constexpr int kEpochs = 2, kSteps = 6, kBatch = 32;

// Records a skip (Missing::Package) and returns true when the reader cannot run: no google.protobuf
// for e2e::python(), or no protoc.
bool skip_without_reader() {
  return e2e::skip_without_python({{"google.protobuf", "python3-protobuf"}}) ||
         e2e::skip_without_command("protoc", "protobuf-compiler");
}

// The events of RUN_DIR/tb as read_events.py decodes them (its exit status checked: every CRC).
json read_tb(const std::string& run_dir) {
  const std::string out = run_dir + "/../tb.json", err = run_dir + "/../tb.err";
  const std::string cmd = e2e::python() + " '" TRAINER_SOURCE_DIR "/tests/e2e/tensorboard/read_events.py' '" + run_dir + "/tb' >'" +
                          out + "' 2>'" + err + "'";
  const int rc = std::system(cmd.c_str());
  INFO("read_events.py: " << e2e::read_file(err));
  REQUIRE(rc == 0);
  return json::parse(e2e::read_file(out));
}

double value_of(const json& v) {
  if (v.is_string()) return v.get<std::string>() == "nan" ? NAN : v.get<std::string>() == "inf" ? INFINITY : -INFINITY;
  return v.get<double>();
}

// One step or epoch event's scalars by tag.
using Scalars = std::map<std::string, double>;

// The scalar events whose tags start with `prefix`, by step; each step once.
std::map<int64_t, Scalars> by_step(const json& tb, const std::string& prefix) {
  std::map<int64_t, Scalars> out;
  for (const json& e : tb["events"]) {
    Scalars s;
    for (const json& v : e["values"])
      if (v["tag"].get<std::string>().rfind(prefix, 0) == 0) {
        REQUIRE(v.contains("simple_value"));
        s[v["tag"].get<std::string>().substr(prefix.size())] = value_of(v["simple_value"]);
      }
    if (s.empty()) continue;
    REQUIRE(s.size() == e["values"].size());  // an event holds one kind of scalar only
    const int64_t step = e["step"].get<int64_t>();
    INFO(prefix << " step " << step);
    CHECK(out.count(step) == 0);
    out[step] = s;
  }
  return out;
}

// float32 (TensorBoard's simple_value) of a double.
bool same_f32(double tb, double exact) {
  if (std::isnan(exact)) return std::isnan(tb);
  return tb == double(float(exact));
}

// Every epoch/* event equals metrics.csv's row: the same epochs (from 0), the same columns.
void check_epochs_equal_metrics(const json& tb, const std::string& run_dir, int epochs) {
  std::map<int64_t, Scalars> ep = by_step(tb, "epoch/");
  trainer::MetricRows rows = trainer::read_metrics_csv(run_dir + "/metrics.csv");
  REQUIRE(int(rows.size()) == epochs);
  REQUIRE(ep.size() == rows.size());
  for (const auto& [epoch, row] : rows) {
    INFO("epoch " << epoch);
    REQUIRE(ep.count(epoch) == 1);
    const Scalars& s = ep[epoch];
    CHECK(s.size() == row.size());
    for (const auto& [name, v] : row) {
      INFO(name << ": tb " << (s.count(name) ? s.at(name) : -1) << " csv " << v);
      REQUIRE(s.count(name) == 1);
      // metrics.csv holds fmt's shortest round-trip text of the double: float32 of it exactly.
      CHECK(same_f32(s.at(name), v));
    }
  }
}

// The config event: a text summary as tensorboard's text plugin reads it, config.yaml in a fence.
void check_config(const json& tb, const std::string& run_dir) {
  int seen = 0;
  for (const json& e : tb["events"])
    for (const json& v : e["values"])
      if (v["tag"] == "config") {
        ++seen;
        CHECK(e["step"] == 0);
        CHECK(v["plugin"] == "text");
        CHECK(v["plugin_content"] == "");  // TextPluginData{version: 0}
        CHECK(v["dtype"] == 7);            // DT_STRING
        CHECK(v["dims"].empty());          // a scalar
        REQUIRE(v["strings"].size() == 1);
        CHECK(v["strings"][0] == "```yaml\n" + e2e::read_file(run_dir + "/config.yaml") + "```\n");
      }
  CHECK(seen == 1);
}

// The expected rate of the j-th optimizer step (from 0) of `groups` in `epoch`: cosine per step.
double cosine_lr(int epoch, int j, int groups) {
  const double t = (epoch + double(j) / groups) / kEpochs;
  return kBaseLr * 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, t)));
}

std::string setup(const std::string& tag, const std::string& config = kConfig) {
  std::string dir = e2e::temp_dir("tb-" + tag);
  e2e::write_file(dir + "/c.yaml", config);
  return dir;
}

}  // namespace

TEST_CASE("e2e tensorboard: every optimizer step and epoch, the config and the file version, read back by an independent reader") {
  if (skip_without_reader()) return;
  const std::string dir = setup("plain");
  auto r = e2e::trainer("run c.yaml --cpu 1 --run-dir r", dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  const json tb = read_tb(dir + "/r");
  REQUIRE(tb["files"].size() == 1);
  const json& f = tb["files"][0];
  CHECK(f["file_version"] == "brain.Event:2");
  CHECK(f["writer"] == "trainer");
  CHECK_THAT(f["name"].get<std::string>(), StartsWith("events.out.tfevents."));
  // The config, 12 step events, 2 epoch events, after the file_version record.
  CHECK(f["records"] == 1 + 1 + kEpochs * kSteps + kEpochs);
  check_config(tb, dir + "/r");
  check_epochs_equal_metrics(tb, dir + "/r", kEpochs);

  std::map<int64_t, Scalars> steps = by_step(tb, "step/");
  REQUIRE(steps.size() == size_t(kEpochs * kSteps));
  trainer::MetricRows rows = trainer::read_metrics_csv(dir + "/r/metrics.csv");
  for (int epoch = 0; epoch < kEpochs; ++epoch) {
    Scalars row(rows[size_t(epoch)].second.begin(), rows[size_t(epoch)].second.end());
    double loss_sum = 0;
    for (int j = 0; j < kSteps; ++j) {
      const int64_t g = int64_t(epoch) * kSteps + j + 1;  // the global step after this one
      INFO("global step " << g);
      REQUIRE(steps.count(g) == 1);
      const Scalars& s = steps[g];
      CHECK(s.size() == 3);  // neither grad_norm nor loss_scale: clipping and loss scaling are off
      CHECK(same_f32(s.at("lr"), cosine_lr(epoch, j, kSteps)));
      CHECK(s.at("samples_per_s") > 0);
      CHECK(std::isfinite(s.at("loss")));
      loss_sum += s.at("loss") * kBatch;
    }
    // The steps' losses weighted by their samples are the epoch's loss (float32 rounding apart).
    CHECK(loss_sum / (kSteps * kBatch) == Approx(row.at("loss")).epsilon(1e-6));
    // The epoch's rate is its last step's.
    CHECK(same_f32(steps[int64_t(epoch + 1) * kSteps].at("lr"), row.at("lr")));
  }
  WARN("tensorboard: step 1 " << steps[1].at("loss") << " loss, lr " << steps[1].at("lr") << ", " << steps[1].at("samples_per_s")
                              << " samples/s; epoch 0 val_accuracy " << by_step(tb, "epoch/")[0].at("val_accuracy"));
}

TEST_CASE("e2e tensorboard: with accumulation, clipping and loss scaling, one event per optimizer step with grad_norm and loss_scale") {
  if (skip_without_reader()) return;
  std::string config = kConfig;
  const std::string train = "train: {epochs: 2, batch_size: 32}";
  config.replace(config.find(train), train.size(),
                 "train: {epochs: 2, batch_size: 32, accumulate: 2, clip_norm: 0.01, loss_scale: {growth_interval: 2}}");
  const std::string dir = setup("clip", config);
  auto r = e2e::trainer("run c.yaml --cpu 1 --run-dir r", dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  const json tb = read_tb(dir + "/r");
  check_config(tb, dir + "/r");
  check_epochs_equal_metrics(tb, dir + "/r", kEpochs);
  trainer::MetricRows rows = trainer::read_metrics_csv(dir + "/r/metrics.csv");
  std::map<int64_t, Scalars> steps = by_step(tb, "step/");
  const int groups = kSteps / 2;
  REQUIRE(steps.size() == size_t(kEpochs * groups));  // 3 optimizer steps of 2 micro-batches an epoch
  std::set<double> scales;
  for (int epoch = 0; epoch < kEpochs; ++epoch) {
    Scalars row(rows[size_t(epoch)].second.begin(), rows[size_t(epoch)].second.end());
    double norm_sum = 0, loss_sum = 0;
    for (int j = 0; j < groups; ++j) {
      const int64_t g = int64_t(epoch) * kSteps + 2 * (j + 1);  // at the step's last micro-batch
      INFO("global step " << g);
      REQUIRE(steps.count(g) == 1);
      const Scalars& s = steps[g];
      CHECK(s.size() == 5);
      CHECK(same_f32(s.at("lr"), cosine_lr(epoch, j, groups)));
      CHECK(s.at("grad_norm") > 0.01);  // clipped: the norm before clipping is above the bound
      norm_sum += s.at("grad_norm");
      loss_sum += s.at("loss") * 2 * kBatch;
      scales.insert(s.at("loss_scale"));
    }
    CHECK(norm_sum / groups == Approx(row.at("grad_norm")).epsilon(1e-6));  // the epoch's mean norm
    CHECK(loss_sum / (kSteps * kBatch) == Approx(row.at("loss")).epsilon(1e-6));
    // The scale after the epoch's last step is the epoch's.
    CHECK(steps[int64_t(epoch + 1) * kSteps].at("loss_scale") == row.at("loss_scale"));
  }
  CHECK(scales.size() >= 3);  // growth every 2 steps: the scale doubled along the way
}

TEST_CASE("e2e tensorboard: --set logging.tensorboard=false writes no tb folder") {
  const std::string dir = setup("off");
  auto r = e2e::trainer("run c.yaml --cpu 1 --run-dir r --set logging.tensorboard=false --set train.epochs=1", dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK(fs::exists(dir + "/r/metrics.csv"));
  CHECK(!fs::exists(dir + "/r/tb"));
  auto on = e2e::trainer("run c.yaml --cpu 1 --run-dir on --set train.epochs=1", dir);
  REQUIRE(on.code == 0);
  CHECK(fs::is_directory(dir + "/on/tb"));
}

TEST_CASE("e2e tensorboard: a run resumed from its first epoch's checkpoint holds the earlier steps up to it, then its own") {
  if (skip_without_reader()) return;
  const std::string dir = setup("resume");
  auto full = e2e::trainer("run c.yaml --cpu 1 --run-dir full", dir);
  INFO(full.out << full.err);
  REQUIRE(full.code == 0);
  // The first epoch's checkpoint: the earlier run's steps 7-12 and epoch 1 are past it.
  auto res = e2e::trainer("run --resume full/checkpoints/epoch-0001.safetensors --cpu 1 --run-dir resumed", dir);
  INFO(res.out << res.err);
  REQUIRE(res.code == 0);
  const json before = read_tb(dir + "/full"), after = read_tb(dir + "/resumed");
  REQUIRE(after["files"].size() == 1);
  check_config(after, dir + "/resumed");
  check_epochs_equal_metrics(after, dir + "/resumed", kEpochs);
  std::map<int64_t, Scalars> a = by_step(after, "step/"), b = by_step(before, "step/");
  REQUIRE(a.size() == size_t(kEpochs * kSteps));
  for (int64_t g = 1; g <= kEpochs * kSteps; ++g) {
    INFO("global step " << g);
    REQUIRE(a.count(g) == 1);
    if (g <= kSteps) {
      CHECK(a[g] == b[g]);  // carried over as written
    } else {
      CHECK(a[g].at("lr") == b[g].at("lr"));
      CHECK(a[g].at("loss") == Approx(b[g].at("loss")).epsilon(1e-5));  // the same training, resumed exactly
    }
  }
  // The carried steps keep their times; the resumed run's come after.
  double carried = 0, own = 1e300;
  for (const json& e : after["events"]) {
    const int64_t s = e["step"].get<int64_t>();
    if (e["values"][0]["tag"].get<std::string>().rfind("step/", 0) != 0) continue;
    if (s <= kSteps) carried = std::max(carried, e["wall_time"].get<double>());
    else own = std::min(own, e["wall_time"].get<double>());
  }
  CHECK(carried <= own);
}

TEST_CASE("e2e tensorboard: under mpirun only the first process writes events") {
  if (skip_without_reader() || e2e::skip_without_mpirun()) return;
  const std::string dir = setup("mpi");
  auto r = e2e::trainer("run c.yaml --cpu 1 --threads 1 --run-dir r --set train.epochs=1", dir, e2e::mpirun("timeout 300 ") + " -np 2");
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  const json tb = read_tb(dir + "/r");
  CHECK(tb["files"].size() == 1);
  std::map<int64_t, Scalars> steps = by_step(tb, "step/");
  CHECK(steps.size() == size_t(kSteps / 2));  // 2 replicas of 32: 3 steps of 64 samples
  CHECK(steps.rbegin()->first == kSteps / 2);
  check_epochs_equal_metrics(tb, dir + "/r", 1);
}

TEST_CASE("e2e tensorboard: an events file that cannot be written ends the run with one line and exit 3, as metrics.csv") {
  // A file size limit as a full disk (SIGXFSZ ignored: the write fails with EFBIG): the events
  // file, about 100 bytes a step, passes 24 KiB in the first epoch's 600 steps; nothing else the
  // run writes by then does.
  std::string config = kConfig;
  const std::string train = "train: {epochs: 2, batch_size: 32}", size = "size: 192";
  config.replace(config.find(train), train.size(), "train: {epochs: 1, batch_size: 1}");
  config.replace(config.find(size), size.size(), "size: 600");
  const std::string dir = setup("efbig", config);
  auto r = e2e::trainer("run c.yaml --cpu 1 --run-dir r", dir, "trap '' XFSZ; ulimit -f 48;");
  INFO(r.out << r.err);
  CHECK(r.code == 3);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK_THAT(r.err, StartsWith("file error: cannot write r/tb/events.out.tfevents."));
  CHECK_THAT(r.err, Contains(": File too large"));
}
