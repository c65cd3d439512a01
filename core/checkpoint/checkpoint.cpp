// Checkpoint files: writing, checking, listing and loading.
#include "core/checkpoint/checkpoint.h"

#include <fmt/format.h>

#include <cstdint>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "core/io/file.h"
#include "core/io/printable.h"
#include "core/io/safetensors.h"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace trainer {
namespace {

// A sidecar holds the train state and callbacks' state: a few KiB; anything near this is not one.
constexpr uint64_t kMaxSidecarBytes = uint64_t(16) << 20;

const char* mean_name(Augment::Mean m) {
  switch (m) {
    case Augment::Mean::PerPixel: return "per_pixel";
    case Augment::Mean::PerChannel: return "per_channel";
    case Augment::Mean::Constant: return "constant";
    default: return "none";
  }
}

json metrics_json(const Metrics& m) {
  json j = json::object();
  for (const auto& [k, v] : m) j[k] = std::isfinite(v) ? json(v) : json(nullptr);
  return j;
}

Metrics metrics_from(const json& j) {
  Metrics m;
  for (auto it = j.begin(); it != j.end(); ++it) m.push_back({it.key(), it->is_number() ? it->get<double>() : NAN});
  return m;
}

json state_json(const TrainState& s) {
  return json{{"format", "trainer-checkpoint"},
              {"format_version", kCheckpointFormat},
              {"epoch", s.epoch},
              {"step_in_epoch", s.step_in_epoch},
              {"global_step", s.global_step},
              {"optimizer_steps", s.optimizer_steps},
              {"epoch_sums", {{"loss_sum", s.loss_sum}, {"correct", s.correct}, {"count", s.count},
                              {"grad_norm_sum", s.grad_norm_sum}, {"grad_norm_count", s.grad_norm_count}}},
              {"rng", {{"seed", s.seed}, {"kind", "philox(seed, global_step, rank); loader(seed, epoch, batch)"}}},
              {"replicas", s.replicas},
              {"global_batch", s.global_batch},
              {"lr_factor", s.lr_factor},
              {"config_hash", s.config_hash},
              {"reason", s.reason},
              {"last_metrics", metrics_json(s.last)},
              {"callbacks", s.callbacks},
              {"loss_scale", s.loss_scale}};
}

// A whole number of the sidecar within [lo, hi] (a float, or one out of range, is refused: converting
// it would be undefined behaviour).
int64_t whole(const json& v, const char* key, int64_t lo, int64_t hi) {
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(INT64_MAX)) throw std::out_of_range(fmt::format("'{}' is out of range", key));
    x = int64_t(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else {
    throw std::out_of_range(fmt::format("'{}' is not a whole number", key));
  }
  if (x < lo || x > hi) throw std::out_of_range(fmt::format("'{}' is out of range: {}", key, x));
  return x;
}

TrainState state_from(const json& j) {
  TrainState s;
  constexpr int64_t kMax = INT64_MAX;
  s.epoch = int(whole(j.at("epoch"), "epoch", 0, INT32_MAX));
  s.step_in_epoch = whole(j.at("step_in_epoch"), "step_in_epoch", 0, kMax);
  s.global_step = whole(j.at("global_step"), "global_step", 0, kMax);
  s.optimizer_steps = whole(j.at("optimizer_steps"), "optimizer_steps", 0, kMax);
  const json& sums = j.at("epoch_sums");
  s.loss_sum = sums.at("loss_sum").is_number() ? sums.at("loss_sum").get<double>() : NAN;
  s.correct = whole(sums.at("correct"), "correct", 0, kMax);
  s.count = whole(sums.at("count"), "count", 0, kMax);
  // Absent in checkpoints written before clipping existed: no norms so far.
  s.grad_norm_sum = sums.contains("grad_norm_sum") && sums.at("grad_norm_sum").is_number() ? sums.at("grad_norm_sum").get<double>() : 0.0;
  s.grad_norm_count = sums.contains("grad_norm_count") ? whole(sums.at("grad_norm_count"), "grad_norm_count", 0, kMax) : 0;
  const json& seed = j.at("rng").at("seed");
  if (!seed.is_number_unsigned() && !(seed.is_number_integer() && seed.get<int64_t>() >= 0))
    throw std::out_of_range("'seed' is not a whole number of 0 or more");
  s.seed = seed.get<uint64_t>();
  s.replicas = int(whole(j.at("replicas"), "replicas", 1, INT32_MAX));
  s.global_batch = whole(j.at("global_batch"), "global_batch", 1, kMax);
  s.lr_factor = j.at("lr_factor").get<double>();
  s.config_hash = j.at("config_hash").get<std::string>();
  s.reason = j.at("reason").get<std::string>();
  s.last = metrics_from(j.at("last_metrics"));
  s.callbacks = j.at("callbacks");
  s.loss_scale = j.value("loss_scale", nlohmann::json::object());  // absent before loss scaling existed
  return s;
}

std::vector<int64_t> dims(const Shape& s) { return s.dims(); }

// The weights as read when the checkpoint was chosen, or (a CheckpointInfo made by hand) from disk.
SafeTensorsReader weights_reader(const CheckpointInfo& c) {
  return c.weights_bytes ? SafeTensorsReader(c.weights, c.weights_bytes) : SafeTensorsReader(c.weights);
}

}  // namespace

std::string config_hash(const cfg::Document& doc) {
  std::string text = cfg::emit(doc, {"devices", "checkpoint"});
  if (!text.empty() && text.back() == '\n') text.pop_back();  // the hash predates emit's final newline
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return fmt::format("{:016x}", h);
}

CheckpointInfo save_checkpoint(const std::string& dir, const std::string& stem, ModelState& ps, const NormStats* stats,
                               const TrainState& s, const std::vector<std::string>& classes, const std::vector<float>* best) {
  std::vector<float> w = ps.download_weights();
  SafeTensorsWriter st;
  st.set_metadata("format", "trainer-checkpoint");
  st.set_metadata("format_version", std::to_string(kCheckpointFormat));
  for (const ParamEntry& p : ps.entries()) st.add_f32(p.name, dims(p.spec.shape), w.data() + p.offset);
  for (const std::string& name : ps.optimizer_state_names()) {
    std::vector<float> host = ps.download_state(name);
    for (const ParamEntry& p : ps.entries())
      if (p.spec.trainable) st.add_f32("optimizer/" + name + "/" + p.name, dims(p.spec.shape), host.data() + p.offset);
  }
  std::vector<float> average;
  if (ps.has_average()) {
    average = ps.download_average();
    for (const ParamEntry& p : ps.entries()) st.add_f32(ema_tensor_name(p.name), dims(p.spec.shape), average.data() + p.offset);
  }
  if (best) {
    if (int64_t(best->size()) != ps.total_floats()) throw std::logic_error("save_checkpoint: the best weights' size is not the model's");
    for (const ParamEntry& p : ps.entries()) st.add_f32(best_weights_tensor_name(p.name), dims(p.spec.shape), best->data() + p.offset);
  }
  if (stats && !stats->mean.empty()) {
    st.add_f32("data/mean", stats->kind == Augment::Mean::PerPixel ? dims(stats->shape) : std::vector<int64_t>{int64_t(stats->mean.size())},
               stats->mean.data());
    if (!stats->stddev.empty()) st.add_f32("data/std", {int64_t(stats->stddev.size())}, stats->stddev.data());
  }
  const size_t expected = st.size();
  CheckpointInfo c;
  c.weights = (fs::path(dir) / (stem + ".safetensors")).string();
  c.sidecar = (fs::path(dir) / (stem + ".json")).string();
  c.state = s;
  auto [bytes, crc] = st.write(c.weights);
  json j = state_json(s);
  j["weights"] = {{"file", stem + ".safetensors"}, {"bytes", bytes}, {"crc32", fmt::format("{:08x}", crc)}};
  j["normalization"] = {{"kind", stats ? mean_name(stats->kind) : "none"}, {"shape", stats ? dims(stats->shape) : std::vector<int64_t>{}}};
  c.normalization = j["normalization"];
  if (!classes.empty()) j["classes"] = classes;
  c.classes = classes;
  write_file_atomic(c.sidecar, j.dump(2) + "\n");
  // Read it back as --resume and eval will, before anything relies on it (pruning older ones).
  try {
    CheckpointInfo back = read_checkpoint(c.sidecar);
    SafeTensorsReader check(back.weights, back.weights_bytes);
    if (check.tensors().size() != expected)
      throw FileError(fmt::format("it holds {} tensors, {} were written", check.tensors().size(), expected));
  } catch (const FileError& e) {
    std::error_code ec;
    fs::remove(c.sidecar, ec);  // not a valid checkpoint: the previous one stays the newest
    fs::remove(c.weights, ec);
    throw FileError(fmt::format("{}: the checkpoint just written does not read back ({}); the previous checkpoint "
                                "stays the newest", c.weights, e.what()));
  }
  return c;
}

namespace {

// A sidecar read and checked, its weights file not yet: what choosing among checkpoints needs.
struct Sidecar {
  CheckpointInfo info;
  uint64_t bytes = 0;
  std::string crc;
};

Sidecar read_sidecar(const std::string& path) {
  fs::path p(path);
  if (p.extension() == ".safetensors") p.replace_extension(".json");
  if (!fs::exists(p)) {
    if (fs::exists(path) && p.string() != path)
      throw FileError(fmt::format("{}: no sidecar {} next to it: the checkpoint was not completely written", path, p.string()));
    throw FileError(fmt::format("{}: no such checkpoint", path));
  }
  std::string text = read_text_file(p.string(), kMaxSidecarBytes, "the most a checkpoint sidecar may be");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw FileError(fmt::format("{}: corrupt checkpoint sidecar at byte {}: not valid JSON", p.string(), e.byte));
  } catch (const json::exception&) {  // valid syntax nlohmann cannot hold, e.g. 1e999 (out_of_range 406)
    throw FileError(fmt::format("{}: corrupt checkpoint sidecar: it holds a number too large for a double", p.string()));
  }
  Sidecar out;
  CheckpointInfo& c = out.info;
  c.sidecar = p.string();
  std::string weights_file;
  try {
    if (!j.is_object() || j.value("format", "") != "trainer-checkpoint")
      throw std::out_of_range("it is not a trainer checkpoint sidecar");
    const int64_t version = whole(j.at("format_version"), "format_version", 0, INT32_MAX);
    if (version > kCheckpointFormat)
      throw std::out_of_range(fmt::format("format version {} is newer than this trainer's ({})", version, kCheckpointFormat));
    c.state = state_from(j);
    weights_file = j.at("weights").at("file").get<std::string>();
    out.bytes = uint64_t(whole(j.at("weights").at("bytes"), "bytes", 0, INT64_MAX));
    out.crc = j.at("weights").at("crc32").get<std::string>();
    c.normalization = j.value("normalization", json());  // checked where used (checkpoint_stats)
    // The training set's class names (absent before predict existed): text, one per class.
    if (j.contains("classes")) c.classes = j.at("classes").get<std::vector<std::string>>();
  } catch (const std::exception& e) {  // nlohmann's type and key errors, and ours
    throw FileError(fmt::format("{}: bad checkpoint sidecar: {}", p.string(), e.what()));
  }
  // One plain file name next to the sidecar: no folder, no way up, nothing unprintable.
  bool plain = !weights_file.empty() && weights_file != "." && weights_file != ".." && printable(weights_file) == weights_file;
  for (char ch : weights_file) plain = plain && ch != '/' && ch != '\\';
  if (!plain)
    throw FileError(fmt::format("{}: bad checkpoint sidecar: weights file '{}' is not a plain name", p.string(),
                                printable(weights_file)));
  c.weights = (p.parent_path() / weights_file).string();
  return out;
}

// Reads the weights file the sidecar names and checks its size and CRC-32; the bytes stay with
// the returned info, so a checkpoint a live run prunes after this is still loaded whole.
CheckpointInfo verified(const Sidecar& s) {
  CheckpointInfo c = s.info;
  std::error_code ec;
  uint64_t size = fs::file_size(c.weights, ec);
  if (ec) throw FileError(fmt::format("{}: cannot read {}: {}", c.sidecar, c.weights, ec.message()));
  if (size != s.bytes)
    throw FileError(fmt::format("{}: {} bytes, the sidecar says {}: truncated or replaced", c.weights, size, s.bytes));
  SafeTensorsReader check(c.weights);
  if (fmt::format("{:08x}", check.crc32()) != s.crc)
    throw FileError(fmt::format("{}: CRC-32 {:08x} differs from the sidecar's {}: the file is corrupt", c.weights, check.crc32(), s.crc));
  c.weights_bytes = check.bytes();
  return c;
}

// Training position, for choosing the newest: epoch, then samples into it (steps times the global
// batch, so runs on other device counts compare), then the step count. Never file times.
bool ahead(const CheckpointInfo& a, const CheckpointInfo& b) {
  const TrainState &x = a.state, &y = b.state;
  if (x.epoch != y.epoch) return x.epoch > y.epoch;
  int64_t xs = x.step_in_epoch * x.global_batch, ys = y.step_in_epoch * y.global_batch;
  if (xs != ys) return xs > ys;
  if (x.global_step != y.global_step) return x.global_step > y.global_step;
  bool xb = fs::path(a.sidecar).stem() == "best", yb = fs::path(b.sidecar).stem() == "best";
  if (xb != yb) return yb;  // at one position, the regular checkpoint (what a resume continues)
  return a.sidecar > b.sidecar;  // then the later run directory (their names are start times)
}

// A checkpoint read failed because a live run pruned it meanwhile (it removes the sidecar first).
bool vanished(const std::string& sidecar) {
  std::error_code ec;
  return !fs::exists(sidecar, ec);
}

}  // namespace

CheckpointInfo read_checkpoint(const std::string& path) { return verified(read_sidecar(path)); }

std::vector<CheckpointInfo> list_checkpoints(const std::string& dir, std::vector<std::string>* skipped, bool verify) {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& f : fs::directory_iterator(dir, ec)) {
    if (f.path().extension() != ".json") continue;
    try {
      Sidecar s = read_sidecar(f.path().string());
      out.push_back(verify ? verified(s) : s.info);
      out.back().weights_bytes.reset();
    } catch (const FileError& e) {
      if (skipped && !vanished(f.path().string())) skipped->push_back(e.what());
    }
  }
  std::sort(out.begin(), out.end(), ahead);
  return out;
}

std::optional<CheckpointInfo> newest_checkpoint(const std::vector<std::string>& dirs, const std::string& hash,
                                                std::vector<std::string>* skipped) {
  // A live run may prune every checkpoint of a listing before it is read (keep: 1, a checkpoint
  // every step): then list again; its newer checkpoints are there by then.
  for (int attempt = 0; attempt < 50; ++attempt) {
    bool moved_on = false;
    std::vector<std::string> passed;
    auto skip = [&](const std::string& sidecar, const std::string& why) {
      if (vanished(sidecar)) moved_on = true;
      else passed.push_back(why);
    };
    std::vector<Sidecar> all;
    for (const std::string& dir : dirs) {
      std::error_code ec;
      if (!fs::is_directory(dir, ec)) continue;
      for (const auto& f : fs::directory_iterator(dir, ec)) {
        if (f.path().extension() != ".json") continue;
        try {
          Sidecar s = read_sidecar(f.path().string());
          if (hash.empty() || s.info.state.config_hash == hash) all.push_back(std::move(s));
        } catch (const FileError& e) {
          skip(f.path().string(), e.what());
        }
      }
    }
    std::sort(all.begin(), all.end(), [](const Sidecar& a, const Sidecar& b) { return ahead(a.info, b.info); });
    std::optional<CheckpointInfo> found;
    for (const Sidecar& s : all) {
      try {
        found = verified(s);
        break;
      } catch (const FileError& e) {
        skip(s.info.sidecar, e.what());
      }
    }
    if (found || !moved_on) {
      if (skipped) skipped->insert(skipped->end(), passed.begin(), passed.end());
      return found;
    }
  }
  return std::nullopt;
}

bool has_ema(const CheckpointInfo& c) {
  SafeTensorsReader st = weights_reader(c);
  for (const SafeTensor& t : st.tensors())
    if (t.name.rfind("ema/", 0) == 0) return true;
  return false;
}

void load_checkpoint(const CheckpointInfo& c, ModelState& ps, bool optimizer, LoadWeights which) {
  SafeTensorsReader st = weights_reader(c);
  bool average = false;
  if (which == LoadWeights::Average)
    for (const SafeTensor& t : st.tensors()) average = average || t.name.rfind("ema/", 0) == 0;
  auto mismatch = [&](const std::string& why) { return cfg::ConfigError(c.weights, why + " (does the config match the checkpoint?)"); };
  auto read = [&](const std::string& name, const Shape& shape) {
    const SafeTensor* t = st.find(name);
    if (!t) throw mismatch(fmt::format("no tensor '{}' for the model's parameter", name));
    if (t->shape != shape.dims())
      throw mismatch(fmt::format("'{}' has shape {}, the model's is {}", name, Shape(t->shape).str(), shape.str()));
    return st.f32(name);
  };
  // A parameter the model lacks is as much a mismatch as one it needs (PyTorch's strict loading):
  // the first in the file is named. Optimizer state and normalisation data are checked on use.
  std::set<std::string> mine;
  for (const ParamEntry& p : ps.entries()) mine.insert(p.name);
  for (const SafeTensor& t : st.tensors())
    if (!is_state_tensor(t.name) && !mine.count(t.name))
      throw mismatch(fmt::format("'{}' in the checkpoint is not a parameter of the model", t.name));
  std::vector<float> w = ps.download_weights();
  for (const ParamEntry& p : ps.entries()) {
    std::vector<float> v = read(average ? ema_tensor_name(p.name) : p.name, p.spec.shape);
    std::copy(v.begin(), v.end(), w.begin() + p.offset);
  }
  ps.upload_weights(w);
  if (!optimizer) return;
  for (const std::string& name : ps.optimizer_state_names()) {
    std::vector<float> host(size_t(ps.total_floats()), 0.0f);
    for (const ParamEntry& p : ps.entries()) {
      if (!p.spec.trainable) continue;
      std::vector<float> v = read("optimizer/" + name + "/" + p.name, p.spec.shape);
      std::copy(v.begin(), v.end(), host.begin() + p.offset);
    }
    ps.upload_state(name, host);
  }
  // The moving average when the checkpoint holds one; otherwise it starts from the weights at
  // the first step (a run that turns train.ema on when resumed).
  if (ps.has_average() && has_ema(c)) {
    std::vector<float> host(size_t(ps.total_floats()), 0.0f);
    for (const ParamEntry& p : ps.entries()) {
      std::vector<float> v = read(ema_tensor_name(p.name), p.spec.shape);
      std::copy(v.begin(), v.end(), host.begin() + p.offset);
    }
    ps.upload_average(host);
  }
  ps.set_optimizer_steps(c.state.optimizer_steps);
}

std::vector<float> load_best_weights(const CheckpointInfo& c, ModelState& ps) {
  SafeTensorsReader st = weights_reader(c);
  std::vector<float> host;
  for (const ParamEntry& p : ps.entries()) {
    const std::string name = best_weights_tensor_name(p.name);
    const SafeTensor* t = st.find(name);
    if (!t) return {};
    if (t->shape != p.spec.shape.dims())
      throw cfg::ConfigError(c.weights, fmt::format("'{}' has shape {}, the model's is {} (does the config match the "
                                                    "checkpoint?)", name, Shape(t->shape).str(), p.spec.shape.str()));
    if (host.empty()) host.assign(size_t(ps.total_floats()), 0.0f);
    std::vector<float> v = st.f32(name);
    std::copy(v.begin(), v.end(), host.begin() + p.offset);
  }
  return host;
}

NormStats checkpoint_stats(const CheckpointInfo& c) {
  NormStats s;
  std::string kind;
  try {  // read_checkpoint checked the JSON itself, not this part of it
    const json& n = c.normalization;
    if (!n.is_object()) throw std::out_of_range("no 'normalization' object");
    kind = n.at("kind").get<std::string>();
    if (kind == "none" || kind == "constant") return s;
    if (kind != "per_pixel" && kind != "per_channel") throw std::out_of_range("unknown normalization kind '" + kind + "'");
    s.shape = Shape(n.at("shape").get<std::vector<int64_t>>());
  } catch (const std::exception& e) {  // nlohmann's type and key errors, and ours
    throw FileError(fmt::format("{}: bad checkpoint sidecar: {}", c.sidecar, e.what()));
  }
  SafeTensorsReader st = weights_reader(c);
  s.kind = kind == "per_pixel" ? Augment::Mean::PerPixel : Augment::Mean::PerChannel;
  s.mean = st.f32("data/mean");
  if (st.find("data/std")) s.stddev = st.f32("data/std");
  return s;
}

}  // namespace trainer
