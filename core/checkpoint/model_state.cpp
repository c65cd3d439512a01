// Host access to parameters and optimizer state: one store, or several tied by parameter name.
#include "core/checkpoint/model_state.h"

#include <map>
#include <stdexcept>

namespace trainer {

int64_t ModelState::count(bool trainable) const {
  int64_t n = 0;
  for (const ParamEntry& p : entries())
    if (p.spec.trainable == trainable) n += p.spec.shape.numel();
  return n;
}

std::vector<float> StoreState::download_weights() {
  ctx_.synchronize();
  return store_.download(ctx_);
}

void StoreState::upload_weights(const std::vector<float>& w) {
  store_.upload(ctx_, w);
  ctx_.synchronize();
}

std::vector<float> StoreState::download_average() {
  if (!average_) throw std::logic_error("download_average: the model keeps no moving average");
  ctx_.synchronize();
  return average_->download();
}

void StoreState::upload_average(const std::vector<float>& v) {
  if (!average_) throw std::logic_error("upload_average: the model keeps no moving average");
  average_->upload(v);
  ctx_.synchronize();
}

std::vector<std::string> StoreState::optimizer_state_names() {
  std::vector<std::string> names;
  for (auto& [name, t] : opt_.state()) names.push_back(name);
  return names;
}

Tensor* StoreState::state_tensor(const std::string& name) {
  for (auto& [n, t] : opt_.state())
    if (n == name) return t;
  throw std::logic_error("no optimizer state " + name);
}

std::vector<float> StoreState::download_state(const std::string& name) {
  Tensor* t = state_tensor(name);
  std::vector<float> host(size_t(store_.total_floats()), 0.0f);
  ctx_.synchronize();
  ctx_.copy_to_host(host.data(), t->data(), size_t(t->numel()) * sizeof(float));
  return host;
}

void StoreState::upload_state(const std::string& name, const std::vector<float>& v) {
  Tensor* t = state_tensor(name);
  ctx_.copy_from_host(t->data(), v.data(), size_t(t->numel()) * sizeof(float));
  ctx_.synchronize();
}

TiedState::TiedState(std::vector<ModelState*> parts) : parts_(std::move(parts)) {
  std::map<std::string, size_t> index;
  for (size_t q = 0; q < parts_.size(); ++q)
    for (const ParamEntry& p : parts_[q]->entries()) {
      auto it = index.find(p.name);
      if (it != index.end()) {
        copies_[it->second].push_back({q, p.offset});
        continue;
      }
      index[p.name] = entries_.size();
      ParamEntry e = p;
      e.offset = total_;
      total_ += p.spec.shape.numel();
      entries_.push_back(e);
      copies_.push_back({{q, p.offset}});
    }
}

std::vector<float> TiedState::gather(const Fetch& fetch) {
  std::vector<std::vector<float>> per(parts_.size());
  for (size_t q = 0; q < parts_.size(); ++q) per[q] = fetch(*parts_[q]);
  std::vector<float> out(size_t(total_), 0.0f);
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Copy& c = copies_[i][0];
    const float* src = per[c.part].data() + c.offset;
    std::copy(src, src + entries_[i].spec.shape.numel(), out.begin() + entries_[i].offset);
  }
  return out;
}

std::vector<std::vector<float>> TiedState::scatter(const std::vector<float>& v) {
  std::vector<std::vector<float>> per(parts_.size());
  for (size_t q = 0; q < parts_.size(); ++q) per[q].assign(size_t(parts_[q]->total_floats()), 0.0f);
  for (size_t i = 0; i < entries_.size(); ++i)
    for (const Copy& c : copies_[i]) {
      const float* src = v.data() + entries_[i].offset;
      std::copy(src, src + entries_[i].spec.shape.numel(), per[c.part].begin() + c.offset);
    }
  return per;
}

std::vector<float> TiedState::download_weights() {
  return gather([](ModelState& s) { return s.download_weights(); });
}

void TiedState::upload_weights(const std::vector<float>& w) {
  auto per = scatter(w);
  for (size_t q = 0; q < parts_.size(); ++q) parts_[q]->upload_weights(per[q]);
}

std::vector<float> TiedState::download_average() {
  return gather([](ModelState& s) { return s.download_average(); });
}

void TiedState::upload_average(const std::vector<float>& v) {
  auto per = scatter(v);
  for (size_t q = 0; q < parts_.size(); ++q) parts_[q]->upload_average(per[q]);
}

std::vector<float> TiedState::download_state(const std::string& name) {
  return gather([&](ModelState& s) { return s.download_state(name); });
}

void TiedState::upload_state(const std::string& name, const std::vector<float>& v) {
  auto per = scatter(v);
  for (size_t q = 0; q < parts_.size(); ++q) parts_[q]->upload_state(name, per[q]);
}

void TiedState::set_optimizer_steps(int64_t steps) {
  for (ModelState* p : parts_) p->set_optimizer_steps(steps);
}

void HostCopy::take(ModelState& from) {
  if (entries_.empty()) entries_ = from.entries();
  weights_ = from.download_weights();
  names_ = from.optimizer_state_names();
  states_.resize(names_.size());
  for (size_t i = 0; i < names_.size(); ++i) states_[i] = from.download_state(names_[i]);
  steps_ = from.optimizer_steps();
  if (from.has_average()) average_ = from.download_average();
}

std::vector<float> HostCopy::download_state(const std::string& name) {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return states_[i];
  throw std::logic_error("host copy: no optimizer state '" + name + "'");
}

void HostCopy::upload_weights(const std::vector<float>&) { throw std::logic_error("host copy: read only"); }
void HostCopy::upload_state(const std::string&, const std::vector<float>&) { throw std::logic_error("host copy: read only"); }
void HostCopy::set_optimizer_steps(int64_t) { throw std::logic_error("host copy: read only"); }
void HostCopy::upload_average(const std::vector<float>&) { throw std::logic_error("host copy: read only"); }

}  // namespace trainer
