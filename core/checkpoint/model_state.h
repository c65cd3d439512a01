// ModelState: the named parameters and optimizer state of one model copy through host memory —
// what checkpoints, init.from and restore-best read and write, whatever devices hold the model.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/graph/param_store.h"
#include "core/optim/optimizer.h"
#include "core/optim/weight_average.h"

namespace trainer {

class ModelState {
 public:
  virtual ~ModelState() = default;
  // Every parameter once (a layer shared over devices once), with its offset into the host
  // vectors below, which are total_floats() long.
  virtual const std::vector<ParamEntry>& entries() const = 0;
  virtual int64_t total_floats() const = 0;
  virtual std::vector<float> download_weights() = 0;
  virtual void upload_weights(const std::vector<float>& w) = 0;
  // The optimizer's state buffers by name ("momentum", "m", "v"), in the weights' layout (only
  // trainable parameters' ranges are meaningful).
  virtual std::vector<std::string> optimizer_state_names() = 0;
  virtual std::vector<float> download_state(const std::string& name) = 0;
  virtual void upload_state(const std::string& name, const std::vector<float>& v) = 0;
  virtual int64_t optimizer_steps() const = 0;
  virtual void set_optimizer_steps(int64_t steps) = 0;
  // The weights' moving average (train.ema), in the weights' layout, when the model keeps one.
  virtual bool has_average() const = 0;
  virtual std::vector<float> download_average() = 0;
  virtual void upload_average(const std::vector<float>& v) = 0;
  int64_t count(bool trainable) const;  // parameter values, without padding
};

// One parameter store and its optimizer on one device.
class StoreState final : public ModelState {
 public:
  // `average`: the store's moving average (train.ema), or null.
  StoreState(OpContext& ctx, ParamStore& store, Optimizer& opt, WeightAverage* average = nullptr)
      : ctx_(ctx), store_(store), opt_(opt), average_(average) {}
  const std::vector<ParamEntry>& entries() const override { return store_.entries(); }
  int64_t total_floats() const override { return store_.total_floats(); }
  std::vector<float> download_weights() override;
  void upload_weights(const std::vector<float>& w) override;
  std::vector<std::string> optimizer_state_names() override;
  std::vector<float> download_state(const std::string& name) override;
  void upload_state(const std::string& name, const std::vector<float>& v) override;
  int64_t optimizer_steps() const override { return opt_.steps(); }
  void set_optimizer_steps(int64_t steps) override { opt_.set_steps(steps); }
  bool has_average() const override { return average_ != nullptr; }
  std::vector<float> download_average() override;
  void upload_average(const std::vector<float>& v) override;

 private:
  Tensor* state_tensor(const std::string& name);
  OpContext& ctx_;
  ParamStore& store_;
  Optimizer& opt_;
  WeightAverage* average_;
};

// Several stores (the stages of a device-parallel model) as one: a parameter held by several
// (a layer shared over devices) appears once, read from the first and written to every copy.
class TiedState final : public ModelState {
 public:
  explicit TiedState(std::vector<ModelState*> parts);
  const std::vector<ParamEntry>& entries() const override { return entries_; }
  int64_t total_floats() const override { return total_; }
  std::vector<float> download_weights() override;
  void upload_weights(const std::vector<float>& w) override;
  std::vector<std::string> optimizer_state_names() override { return parts_[0]->optimizer_state_names(); }
  std::vector<float> download_state(const std::string& name) override;
  void upload_state(const std::string& name, const std::vector<float>& v) override;
  int64_t optimizer_steps() const override { return parts_[0]->optimizer_steps(); }
  void set_optimizer_steps(int64_t steps) override;
  bool has_average() const override { return parts_[0]->has_average(); }
  std::vector<float> download_average() override;
  void upload_average(const std::vector<float>& v) override;

 private:
  using Fetch = std::function<std::vector<float>(ModelState&)>;
  std::vector<float> gather(const Fetch& fetch);
  std::vector<std::vector<float>> scatter(const std::vector<float>& v);  // per part, in its layout
  std::vector<ModelState*> parts_;
  std::vector<ParamEntry> entries_;
  int64_t total_ = 0;
  struct Copy {
    size_t part;
    int64_t offset;  // in the part's layout
  };
  std::vector<std::vector<Copy>> copies_;  // per entry: where it lives ([0] is read)
};

// A host copy of another state taken at one moment (the watchdog's snapshot of the last completed
// step), read like the original; it cannot be written (upload_* throw).
class HostCopy final : public ModelState {
 public:
  void take(ModelState& from);
  bool empty() const { return weights_.empty(); }
  const std::vector<ParamEntry>& entries() const override { return entries_; }
  int64_t total_floats() const override { return int64_t(weights_.size()); }
  std::vector<float> download_weights() override { return weights_; }
  void upload_weights(const std::vector<float>&) override;
  std::vector<std::string> optimizer_state_names() override { return names_; }
  std::vector<float> download_state(const std::string& name) override;
  void upload_state(const std::string&, const std::vector<float>&) override;
  int64_t optimizer_steps() const override { return steps_; }
  void set_optimizer_steps(int64_t) override;
  bool has_average() const override { return !average_.empty(); }
  std::vector<float> download_average() override { return average_; }
  void upload_average(const std::vector<float>&) override;

 private:
  std::vector<ParamEntry> entries_;
  std::vector<float> weights_, average_;
  std::vector<std::string> names_;
  std::vector<std::vector<float>> states_;
  int64_t steps_ = 0;
};

}  // namespace trainer
