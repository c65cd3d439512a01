// ParamStore layout, allocation, initialisation (Keras initialisers) and host transfer.
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

// Keras Orthogonal (gain 1) for a tensor seen as [rows = numel / last, cols = last]: the Q of the
// QR decomposition of a standard normal [max, min] matrix, with R's diagonal made positive
// (Gram-Schmidt, each column orthogonalised twice for accuracy), transposed when rows < cols:
// orthonormal rows or columns, whichever are fewer.
static void orthogonal(const Shape& shape, std::mt19937_64& rng, float* out) {
  const int64_t cols = shape.rank() ? shape.back() : 1, rows = cols ? shape.numel() / cols : 0;
  const int64_t m = std::max(rows, cols), k = std::min(rows, cols);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> q(size_t(m * k));  // column j at q[j * m, (j + 1) * m)
  for (double& v : q) v = normal(rng);
  for (int64_t j = 0; j < k; ++j) {
    double* c = q.data() + j * m;
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t p = 0; p < j; ++p) {
        const double* e = q.data() + p * m;
        double dot = 0;
        for (int64_t i = 0; i < m; ++i) dot += e[i] * c[i];
        for (int64_t i = 0; i < m; ++i) c[i] -= dot * e[i];
      }
    double norm = 0;
    for (int64_t i = 0; i < m; ++i) norm += c[i] * c[i];
    norm = std::sqrt(norm);
    for (int64_t i = 0; i < m; ++i) c[i] /= norm;
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)  // Q is [m, k]: element (r, c), or (c, r) of the transpose
      out[r * cols + c] = float(rows >= cols ? q[size_t(c * m + r)] : q[size_t(r * m + c)]);
}

void init_param(const ParamSpec& spec, const std::string& name, uint64_t seed, float* out) {
  int64_t n = spec.shape.numel();
  std::mt19937_64 rng(fnv1a(name, seed));
  double fan_in = double(spec.fan_in), fan_out = double(spec.fan_out);
  auto uniform = [&](double limit) {
    std::uniform_real_distribution<double> d(-limit, limit);
    for (int64_t i = 0; i < n; ++i) out[i] = float(d(rng));
  };
  // Keras draws "normal" initialisers from a normal truncated at two standard deviations,
  // with the standard deviation corrected for the truncation (0.87962566103423978).
  auto truncated = [&](double stddev) {
    std::normal_distribution<double> d(0.0, stddev / 0.87962566103423978);
    for (int64_t i = 0; i < n; ++i) {
      double v;
      do v = d(rng);
      while (std::abs(v) > 2 * stddev / 0.87962566103423978);
      out[i] = float(v);
    }
  };
  switch (spec.init) {
    case InitKind::Zeros: std::fill(out, out + n, 0.f); break;
    case InitKind::Ones: std::fill(out, out + n, 1.f); break;
    case InitKind::GlorotUniform: uniform(std::sqrt(6.0 / (fan_in + fan_out))); break;
    case InitKind::GlorotNormal: truncated(std::sqrt(2.0 / (fan_in + fan_out))); break;
    case InitKind::HeUniform: uniform(std::sqrt(6.0 / fan_in)); break;
    case InitKind::HeNormal: truncated(std::sqrt(2.0 / fan_in)); break;
    case InitKind::LecunNormal: truncated(std::sqrt(1.0 / fan_in)); break;
    case InitKind::Orthogonal: orthogonal(spec.shape, rng, out); break;
    case InitKind::UnitForgetBias:
      std::fill(out, out + n, 0.f);
      std::fill(out + n / 4, out + n / 2, 1.f);
      break;
    case InitKind::RandomUniform: uniform(0.05); break;
  }
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
