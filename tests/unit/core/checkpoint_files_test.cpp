// safetensors writing and checked reading (corruption is reported with the path and byte
// offset), atomic writes with the disk-full hook, Keras' callback rules, and the config's hash.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/checkpointer.h"
#include "core/io/config.h"
#include "core/run/callbacks.h"
#include "core/io/file.h"
#include "core/io/safetensors.h"
#include "test_dirs.h"

using namespace trainer;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

std::string temp_path(const std::string& name) {
  static const std::string d = trainer::test::test_dir("ckpt-unit");
  return (fs::path(d) / name).string();
}

std::string sample_file() {
  SafeTensorsWriter w;
  std::vector<float> a{1, 2, 3, 4, 5, 6}, b{-0.5f};
  std::vector<int64_t> c{7, 8};
  w.add_f32("layer/kernel", {2, 3}, a.data());
  w.add_f32("layer/bias", {1}, b.data());
  w.add_i64("steps", {2}, c.data());
  w.set_metadata("format", "test");
  std::string path = temp_path("t.safetensors");
  w.write(path);
  return path;
}

void write_bytes(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

std::string error_of(const std::string& path) {
  try {
    SafeTensorsReader r(path);
  } catch (const FileError& e) {
    return e.what();
  }
  return "";
}

cfg::Node section(const std::string& yaml) { return cfg::root(cfg::parse_document(yaml, "cb.yaml")); }

}  // namespace

TEST_CASE("safetensors: round trip of names, shapes, dtypes, values and metadata") {
  SafeTensorsReader r(sample_file());
  REQUIRE(r.tensors().size() == 3);
  CHECK(r.find("layer/kernel")->shape == std::vector<int64_t>{2, 3});
  CHECK(r.f32("layer/kernel") == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(r.f32("layer/bias") == std::vector<float>{-0.5f});
  CHECK(r.i64("steps") == std::vector<int64_t>{7, 8});
  CHECK(r.metadata().at("format") == "test");
  CHECK_THROWS_WITH(r.f32("steps"), Contains("is I64, expected F32"));
  CHECK_THROWS_WITH(r.f32("nope"), Contains("no tensor 'nope'"));
  // The data section starts 8-byte aligned, as the format recommends.
  std::string bytes = SafeTensorsWriter().serialize();
  CHECK(bytes.size() % 8 == 0);
}

TEST_CASE("safetensors: every kind of corruption is a FileError with the path and the byte offset") {
  std::string good = sample_file();
  std::ifstream in(good, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string p = temp_path("bad.safetensors");

  write_bytes(p, bytes.substr(0, 5));
  CHECK_THAT(error_of(p), Contains(p) && Contains("at byte 0") && Contains("less than the 8-byte header length"));
  write_bytes(p, bytes.substr(0, 40));
  CHECK_THAT(error_of(p), Contains("runs past the end of the file") && Contains("truncated"));
  write_bytes(p, bytes.substr(0, bytes.size() - 4));
  CHECK_THAT(error_of(p), Contains("lie outside the data section") || Contains("leaves a hole"));
  write_bytes(p, bytes + "xxxx");
  CHECK_THAT(error_of(p), Contains("4 bytes follow the last tensor"));
  std::string garbled = bytes;
  garbled[8] = '#';  // the header's opening brace
  write_bytes(p, garbled);
  CHECK_THAT(error_of(p), Contains("not valid JSON") && Contains("at byte"));
  std::string wrong = bytes;
  size_t at = wrong.find("\"F32\"");
  wrong.replace(at, 5, "\"Q32\"");
  write_bytes(p, wrong);
  CHECK_THAT(error_of(p), Contains("unknown dtype"));
  write_bytes(p, std::string(8, '\xff'));
  CHECK_THAT(error_of(p), Contains("runs past the end"));
  CHECK_THAT(error_of(temp_path("missing.safetensors")), Contains("cannot read"));
}

TEST_CASE("atomic files: complete or absent, and a full disk is an error naming the file") {
  std::string p = temp_path("atomic.txt");
  write_file_atomic(p, "first");
  CHECK(read_text_file(p) == "first");
  {
    AtomicFile f(p);
    f.write("second, never committed");
  }  // destroyed without commit: the old file stays, no temporary is left
  CHECK(read_text_file(p) == "first");
  for (const auto& e : fs::directory_iterator(fs::path(p).parent_path()))
    CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
  CHECK(crc32_of("123456789", 9) == 0xCBF43926u);  // the standard check value
}

TEST_CASE("callbacks: EarlyStopping follows Keras (patience, min_delta, mode, baseline, restore)") {
  std::vector<std::string> names{"accuracy", "loss", "lr", "val_accuracy", "val_loss"};
  Callbacks cb(read_callbacks(section("early_stopping: {patience: 2}"), names));
  std::vector<double> losses{1.0, 0.9, 0.95, 0.91, 0.8};
  int stopped = -1;
  for (int e = 0; e < int(losses.size()) && stopped < 0; ++e)
    if (cb.on_epoch_end(e, {{"val_loss", losses[size_t(e)]}}, 0.1).stop) stopped = e;
  CHECK(stopped == 3);  // no improvement at epochs 2 and 3: wait reaches 2

  Callbacks acc(read_callbacks(section("early_stopping: {monitor: val_accuracy, min_delta: 0.05, restore_best_weights: true}"), names));
  auto e0 = acc.on_epoch_end(0, {{"val_accuracy", 0.5}}, 0.1);
  CHECK(e0.snapshot_best);
  auto e1 = acc.on_epoch_end(1, {{"val_accuracy", 0.53}}, 0.1);  // +0.03 < min_delta: no improvement
  CHECK(e1.stop);
  CHECK(e1.restore_best);
  // Keras 3's on_train_end: the stop's line, then the restore's.
  CHECK(e1.messages == std::vector<std::string>{"Epoch 2: early stopping", "Restoring model weights from the end of the best epoch: 1."});
  // Training that ends by its epochs restores too (Keras 3 restores in on_train_end either way);
  // an epoch before the last does not, nor a run without restore_best_weights.
  Callbacks runs(read_callbacks(section("early_stopping: {monitor: val_accuracy, patience: 5, restore_best_weights: true}"), names));
  CHECK(runs.on_epoch_end(0, {{"val_accuracy", 0.5}}, 0.1).snapshot_best);
  auto mid = runs.on_epoch_end(1, {{"val_accuracy", 0.4}}, 0.1);
  CHECK_FALSE(mid.restore_best);
  CHECK(mid.messages.empty());
  auto end = runs.on_epoch_end(2, {{"val_accuracy", 0.45}}, 0.1, true);
  CHECK_FALSE(end.stop);
  CHECK(end.restore_best);
  CHECK(end.messages == std::vector<std::string>{"Restoring model weights from the end of the best epoch: 1."});
  Callbacks plain(read_callbacks(section("early_stopping: {monitor: val_accuracy, patience: 5}"), names));
  plain.on_epoch_end(0, {{"val_accuracy", 0.5}}, 0.1);
  auto plain_end = plain.on_epoch_end(1, {{"val_accuracy", 0.4}}, 0.1, true);
  CHECK_FALSE(plain_end.restore_best);
  CHECK(plain_end.messages.empty());

  // Below a baseline never reached, improving epochs do not reset the wait (Keras returns early
  // on an improvement, so the stop comes at the next epoch that does not improve).
  Callbacks base(read_callbacks(section("early_stopping: {monitor: loss, baseline: 0.1, patience: 1}"), names));
  CHECK_FALSE(base.on_epoch_end(0, {{"loss", 1.0}}, 0.1).stop);
  CHECK_FALSE(base.on_epoch_end(1, {{"loss", 0.9}}, 0.1).stop);
  CHECK(base.on_epoch_end(2, {{"loss", 0.95}}, 0.1).stop);
  Callbacks reached(read_callbacks(section("early_stopping: {monitor: loss, baseline: 0.95, patience: 1}"), names));
  CHECK_FALSE(reached.on_epoch_end(0, {{"loss", 0.9}}, 0.1).stop);  // beats the baseline: wait reset
  CHECK_FALSE(reached.on_epoch_end(1, {{"loss", 0.85}}, 0.1).stop);

  // An equal value is no improvement (Keras's strict ops.greater / ops.less): a repeated accuracy,
  // as small validation sets give, counts toward the patience.
  Callbacks same(read_callbacks(section("early_stopping: {monitor: val_accuracy, patience: 1}"), names));
  CHECK_FALSE(same.on_epoch_end(0, {{"val_accuracy", 0.5}}, 0.1).stop);
  CHECK(same.on_epoch_end(1, {{"val_accuracy", 0.5}}, 0.1).stop);

  CHECK_THROWS_WITH(Callbacks(read_callbacks(section("early_stopping: {monitor: val_los}"), names)),
                    Contains("no metric 'val_los'") && Contains("did you mean 'val_loss'"));
  CHECK_THROWS_WITH(Callbacks(read_callbacks(section("early_stopping: {}"), {"accuracy", "loss", "lr"})),
                    Contains("monitor defaults to val_loss"));
}

TEST_CASE("callbacks: ReduceLROnPlateau follows Keras (patience, cooldown, min_lr) and its state round-trips") {
  std::vector<std::string> names{"loss"};
  Callbacks cb(read_callbacks(section("reduce_lr_on_plateau: {monitor: loss, patience: 1, cooldown: 1, factor: 0.5, min_lr: 0.02}"), names));
  double lr = 0.1;
  std::vector<std::string> said;
  for (int e = 0; e < 6; ++e) {
    auto r = cb.on_epoch_end(e, {{"loss", 1.0}}, lr);  // never improves after epoch 0
    for (auto& m : r.messages) said.push_back(m);
    lr = cb.adjust_lr(0.1);
  }
  // keras/src/callbacks/reduce_lr_on_plateau.py asks in_cooldown() after decrementing the
  // counter, so a cooldown of 1 ends within the epoch after a reduction, which counts: epoch 1:
  // 0.1 -> 0.05; epoch 2: 0.05 -> 0.025; epoch 3: -> 0.02 (min_lr); then none (not above min_lr).
  REQUIRE(said.size() == 3);
  CHECK(said[0] == "Epoch 2: ReduceLROnPlateau reducing learning rate to 0.05.");
  CHECK(said[1] == "Epoch 3: ReduceLROnPlateau reducing learning rate to 0.025.");
  CHECK(said[2] == "Epoch 4: ReduceLROnPlateau reducing learning rate to 0.02.");
  CHECK(std::abs(cb.adjust_lr(0.1) - 0.02) < 1e-12);
  // min_delta 0: an equal loss is no improvement (np.less(a, best - 0)), so the rate falls at epoch 2.
  Callbacks flat(read_callbacks(section("reduce_lr_on_plateau: {monitor: loss, patience: 1, min_delta: 0}"), names));
  CHECK(flat.on_epoch_end(0, {{"loss", 1.0}}, 0.1).messages.empty());
  CHECK(flat.on_epoch_end(1, {{"loss", 1.0}}, 0.1).messages.size() == 1);
  // cooldown 2 keeps one epoch out of the wait: reductions at epochs 2, 4 and 6 (1-based).
  Callbacks two(read_callbacks(section("reduce_lr_on_plateau: {monitor: loss, patience: 1, cooldown: 2, factor: 0.5}"), names));
  std::vector<int> reduced;
  lr = 0.1;
  for (int e = 0; e < 6; ++e) {
    if (!two.on_epoch_end(e, {{"loss", 1.0}}, lr).messages.empty()) reduced.push_back(e + 1);
    lr = two.adjust_lr(0.1);
  }
  CHECK(reduced == std::vector<int>{2, 4, 6});

  Callbacks again(read_callbacks(section("reduce_lr_on_plateau: {monitor: loss, patience: 1, cooldown: 1, factor: 0.5, min_lr: 0.02}"), names));
  again.restore(cb.state());
  CHECK(again.state() == cb.state());
  CHECK(std::abs(again.adjust_lr(0.1) - 0.02) < 1e-12);
  CHECK_THROWS_WITH(Callbacks(read_callbacks(section("reduce_lr_on_plateau: {monitor: loss, factor: 1.5}"), names)),
                    Contains("does not support a factor >= 1.0"));

  Callbacks nan(read_callbacks(section("terminate_on_nan: true"), names));
  std::string msg;
  CHECK(nan.on_batch_end(3, 0.5, &msg));
  CHECK_FALSE(nan.on_batch_end(4, NAN, &msg));
  CHECK(msg == "Batch 4: Invalid loss, terminating training");
}

namespace {

// One trainable parameter of one float, no optimizer state: enough for Checkpointer's files.
class OneFloat final : public ModelState {
 public:
  OneFloat() : entries_{{"w", ParamSpec{"w", Shape{1}}, 0}} {}
  const std::vector<ParamEntry>& entries() const override { return entries_; }
  int64_t total_floats() const override { return 1; }
  std::vector<float> download_weights() override { return {w_}; }
  void upload_weights(const std::vector<float>& w) override { w_ = w.at(0); }
  std::vector<std::string> optimizer_state_names() override { return {}; }
  std::vector<float> download_state(const std::string&) override { return {}; }
  void upload_state(const std::string&, const std::vector<float>&) override {}
  int64_t optimizer_steps() const override { return 0; }
  void set_optimizer_steps(int64_t) override {}
  bool has_average() const override { return false; }
  std::vector<float> download_average() override { return {}; }
  void upload_average(const std::vector<float>&) override {}
  float w_ = 0.5f;

 private:
  std::vector<ParamEntry> entries_;
};

}  // namespace

TEST_CASE("checkpoint best: written only when the metric strictly improves (Keras's save_best_only)") {
  const std::string dir = temp_path("best-run");
  auto doc = cfg::parse_document("checkpoint: {best: val_accuracy}", "c.yaml");
  Checkpointer ck(read_checkpoint_spec(cfg::root(doc).child("checkpoint")), dir, nullptr, {});
  OneFloat m;
  TrainState s;
  s.global_batch = 8, s.reason = "epoch", s.config_hash = "h";
  s.epoch = 1;
  CHECK(ck.update_best(m, s, {{"val_accuracy", 0.5}}) ==
        "Epoch 1: val_accuracy improved from -inf to 0.50000, saving model to " + dir + "/best.safetensors");
  // An equal value does not improve (np.greater): the file keeps the first epoch's weights.
  m.w_ = 2.0f;
  s.epoch = 2;
  CHECK(ck.update_best(m, s, {{"val_accuracy", 0.5}}) == "Epoch 2: val_accuracy did not improve from 0.50000");
  CHECK(read_checkpoint(dir + "/best.safetensors").state.epoch == 1);
  s.epoch = 3;
  CHECK_THAT(ck.update_best(m, s, {{"val_accuracy", 0.75}}), Contains("improved from 0.50000 to 0.75000"));
  CHECK(read_checkpoint(dir + "/best.safetensors").state.epoch == 3);
}

TEST_CASE("config hash: leaves out devices and checkpoint settings, and leaves the document as it was") {
  const std::string text = "name: n\nseed: 3\ndevices: {cpu: 4}\ncheckpoint: {every_steps: 5}\ntrain: {epochs: 2}\n";
  const auto doc = cfg::parse_document(text, "h.yaml", {});
  const std::string before = cfg::emit(*doc);
  const std::string h = config_hash(*doc);
  // The run directory's config.yaml is the document emitted after the hash was taken (a resume
  // reads its devices from there): every key still in it, in order.
  CHECK(cfg::emit(*doc) == before);
  CHECK_THAT(cfg::emit(*doc), Contains("devices") && Contains("checkpoint"));
  CHECK(config_hash(*doc) == h);
  const auto other_devices = cfg::parse_document("name: n\nseed: 3\ndevices: {cpu: 1}\ntrain: {epochs: 2}\n", "h.yaml", {});
  CHECK(config_hash(*other_devices) == h);
  const auto other_seed = cfg::parse_document("name: n\nseed: 4\ndevices: {cpu: 4}\ntrain: {epochs: 2}\n", "h.yaml", {});
  CHECK(config_hash(*other_seed) != h);
}
