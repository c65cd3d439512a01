// ParamStore layout, allocation, initialisation (each parameter drawn from its own seeded stream) and host transfer.
#include "core/graph/param_store.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace trainer {

static int64_t align16(int64_t n) { return (n + 15) & ~int64_t(15); }

ParamLayout::ParamLayout(std::vector<ParamEntry> entries) {
  std::stable_partition(entries.begin(), entries.end(), [](const ParamEntry& e) { return e.spec.trainable; });
  int64_t off = 0;
  for (ParamEntry& e : entries) {
    e.offset = off;
    off += align16(e.spec.shape.numel());
    if (e.spec.trainable) trainable_floats_ = off;
  }
  total_floats_ = off;
  entries_ = std::move(entries);
}

int64_t ParamLayout::count(bool trainable) const {
  int64_t n = 0;
  for (const ParamEntry& e : entries_)
    if (e.spec.trainable == trainable) n += e.spec.shape.numel();
  return n;
}

static uint64_t fnv1a(const std::string& s, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ (seed * 0x9E3779B97F4A7C15ull);
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

void init_param(const ParamSpec& spec, const std::string& name, uint64_t seed, float* out) {
  std::mt19937_64 rng(fnv1a(name, seed));
  auto [fan_in, fan_out] = keras_fans(spec.shape);
  if (spec.fan_in > 0) fan_in = spec.fan_in;
  if (spec.fan_out > 0) fan_out = spec.fan_out;
  draw_initializer(spec.init, spec.shape, fan_in, fan_out, rng, out);
}

ParamStore::ParamStore(const ParamLayout& layout, OpContext& ctx, uint64_t seed) : layout_(layout) {
  weights_ = ctx.zeros(Shape{total_floats()});
  grads_ = ctx.zeros(Shape{std::max<int64_t>(trainable_floats(), 1)});
  std::vector<float> host(size_t(total_floats()), 0.f);
  for (const ParamEntry& e : entries()) init_param(e.spec, e.name, seed, host.data() + e.offset);
  upload(ctx, host);
}

Tensor ParamStore::trainable_weights() const {
  return Tensor::view(weights_.data(), Shape{trainable_floats()}, DType::F32, weights_.device());
}

Tensor ParamStore::trainable_grads() const {
  return Tensor::view(grads_.data(), Shape{trainable_floats()}, DType::F32, grads_.device());
}

Tensor ParamStore::frozen_weights() const {
  return Tensor::view(weights_.f32() + trainable_floats(), Shape{total_floats() - trainable_floats()}, DType::F32,
                      weights_.device());
}

Tensor ParamStore::weight_view(size_t i) const {
  const ParamEntry& e = entries()[i];
  return Tensor::view(weights_.f32() + e.offset, e.spec.shape, DType::F32, weights_.device());
}

Tensor ParamStore::grad_view(size_t i) const {
  const ParamEntry& e = entries()[i];
  if (!e.spec.trainable) return Tensor();
  return Tensor::view(grads_.f32() + e.offset, e.spec.shape, DType::F32, grads_.device());
}

std::vector<float> ParamStore::download(OpContext& ctx) const {
  std::vector<float> host(static_cast<size_t>(total_floats()));
  ctx.copy_to_host(host.data(), weights_.data(), host.size() * sizeof(float));
  return host;
}

void ParamStore::upload(OpContext& ctx, const std::vector<float>& values) {
  ctx.copy_from_host(weights_.data(), values.data(), values.size() * sizeof(float));
}

}  // namespace trainer
