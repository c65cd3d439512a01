// Keras initialisers: reading one from a layer's config (name, map or Keras's serialised form) and drawing it.
#include "core/graph/initializer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/io/config.h"

namespace trainer {
namespace {

struct Named {
  const char* name;        // snake_case, as keras.initializers.get takes it
  const char* class_name;  // Keras's class
  InitKind kind;
};

const std::vector<Named>& named() {
  static const std::vector<Named> all = {
      {"zeros", "Zeros", InitKind::Zeros},
      {"ones", "Ones", InitKind::Ones},
      {"constant", "Constant", InitKind::Constant},
      {"random_normal", "RandomNormal", InitKind::RandomNormal},
      {"random_uniform", "RandomUniform", InitKind::RandomUniform},
      {"truncated_normal", "TruncatedNormal", InitKind::TruncatedNormal},
      {"glorot_uniform", "GlorotUniform", InitKind::GlorotUniform},
      {"glorot_normal", "GlorotNormal", InitKind::GlorotNormal},
      {"he_uniform", "HeUniform", InitKind::HeUniform},
      {"he_normal", "HeNormal", InitKind::HeNormal},
      {"lecun_uniform", "LecunUniform", InitKind::LecunUniform},
      {"lecun_normal", "LecunNormal", InitKind::LecunNormal},
      {"variance_scaling", "VarianceScaling", InitKind::VarianceScaling},
      {"orthogonal", "Orthogonal", InitKind::Orthogonal},
      // Keras's aliases (keras.initializers.get("uniform") is RandomUniform()).
      {"uniform", "RandomUniform", InitKind::RandomUniform},
      {"normal", "RandomNormal", InitKind::RandomNormal},
  };
  return all;
}

// The kind `n` names (a name, class name or alias); fails at n with a did-you-mean otherwise.
InitKind kind_of(const cfg::Node& n, const std::string& what) {
  const std::string v = n.as<std::string>();
  std::vector<std::string> all, listed;
  for (const Named& k : named()) {
    if (v == k.name || v == k.class_name) return k.kind;
    all.push_back(k.name), all.push_back(k.class_name);
    if (k.kind != InitKind::RandomUniform && k.kind != InitKind::RandomNormal) listed.push_back(k.name);
  }
  std::string list;
  for (const auto& c : listed) list += (list.empty() ? "" : ", ") + c;
  n.fail(fmt::format("'{}' is not a valid {}{}; valid: {}, random_normal (normal), random_uniform (uniform), or "
                     "Keras's class names (GlorotUniform, ...)",
                     v, what, cfg::suggestion(v, all), list));
}

InitKind kind_of(const std::string& fallback) {
  for (const Named& k : named())
    if (fallback == k.name) return k.kind;
  return InitKind::Zeros;  // not reached: every fallback is a name
}

// The parameters of `init.kind` from `p` (Keras's constructor arguments, with its defaults).
void read_parameters(cfg::MapReader& p, Initializer& init) {
  constexpr double big = 1e30;
  cfg::Node seed = p.optional("seed");
  if (seed.defined())
    seed.fail("an initializer's seed: trainer draws every initial weight from the run's top-level `seed` and the "
              "weight's name; remove this one");
  switch (init.kind) {
    case InitKind::Constant: init.value = p.get_float("value", 0.0, -big, big); break;
    case InitKind::RandomNormal:
    case InitKind::TruncatedNormal: {
      init.mean = p.get_float("mean", 0.0, -big, big);
      init.stddev = p.get_float("stddev", 0.05, -big, big);
      if (init.stddev <= 0) p.optional("stddev").fail(fmt::format("stddev must be above 0, not {}", init.stddev));
      break;
    }
    case InitKind::RandomUniform: {
      init.minval = p.get_float("minval", -0.05, -big, big);
      init.maxval = p.get_float("maxval", 0.05, -big, big);
      if (!(init.minval < init.maxval))
        (p.has("maxval") ? p.optional("maxval") : p.optional("minval"))
            .fail(fmt::format("random_uniform needs minval < maxval, got [{}, {})", init.minval, init.maxval));
      break;
    }
    case InitKind::VarianceScaling: {
      init.scale = p.get_float("scale", 1.0, -big, big);
      if (init.scale <= 0) p.optional("scale").fail(fmt::format("scale must be above 0, not {}", init.scale));
      std::string m = p.get_choice("mode", {"fan_in", "fan_out", "fan_avg"}, "fan_in");
      init.mode = m == "fan_in" ? Initializer::Mode::FanIn
                  : m == "fan_out" ? Initializer::Mode::FanOut
                                   : Initializer::Mode::FanAvg;
      std::string d = p.get_choice("distribution", {"truncated_normal", "untruncated_normal", "uniform"},
                                   "truncated_normal");
      init.distribution = d == "truncated_normal" ? Initializer::Distribution::TruncatedNormal
                          : d == "untruncated_normal" ? Initializer::Distribution::UntruncatedNormal
                                                      : Initializer::Distribution::Uniform;
      break;
    }
    case InitKind::Orthogonal: init.gain = p.get_float("gain", 1.0, -big, big); break;
    default: break;  // the rest take no parameters (Keras's take only a seed)
  }
  p.finish();
}

}  // namespace

Initializer read_initializer(cfg::MapReader& r, const std::string& key, const char* fallback) {
  cfg::Node n = r.optional(key);
  if (!n.defined()) return Initializer(kind_of(fallback));
  if (!n.is_map()) return Initializer(kind_of(n, key + " for " + r.what()));
  cfg::MapReader m(n, key + " of " + r.what());
  Initializer init;
  if (m.has("class_name")) {  // Keras's serialised form: {class_name: RandomNormal, config: {stddev: 0.02}}
    init.kind = kind_of(m.required("class_name"), key + "'s class_name");
    cfg::MapReader p(m.optional("config"), key + "'s config of " + r.what());
    m.allow({"module", "registered_name"});  // keras.saving's other keys
    m.finish();
    read_parameters(p, init);
  } else {  // {type: random_normal, stddev: 0.02}
    init.kind = kind_of(m.required("type"), key + "'s type");
    read_parameters(m, init);
  }
  return init;
}

std::pair<int64_t, int64_t> keras_fans(const Shape& shape) {
  if (shape.rank() == 0) return {1, 1};
  if (shape.rank() == 1) return {shape[0], shape[0]};
  if (shape.rank() == 2) return {shape[0], shape[1]};
  const size_t r = shape.rank();
  int64_t rf = 1;
  for (size_t i = 0; i + 2 < r; ++i) rf *= shape[i];
  return {shape[r - 2] * rf, shape[r - 1] * rf};
}

// Keras Orthogonal for a tensor seen as [rows = numel / last, cols = last]: the Q of the QR
// decomposition of a standard normal [max, min] matrix, with R's diagonal made positive
// (Gram-Schmidt, each column orthogonalised twice for accuracy), transposed when rows < cols:
// orthonormal rows or columns, whichever are fewer; times the gain.
static void orthogonal(const Shape& shape, double gain, std::mt19937_64& rng, float* out) {
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
      out[r * cols + c] = float(gain * (rows >= cols ? q[size_t(c * m + r)] : q[size_t(r * m + c)]));
}

void draw_initializer(const Initializer& init, const Shape& shape, int64_t fan_in_, int64_t fan_out_,
                      std::mt19937_64& rng, float* out) {
  const int64_t n = shape.numel();
  const double fan_in = double(fan_in_), fan_out = double(fan_out_);
  auto uniform = [&](double lo, double hi) {
    std::uniform_real_distribution<double> d(lo, hi);
    for (int64_t i = 0; i < n; ++i) out[i] = float(d(rng));
  };
  auto normal = [&](double mean, double stddev, bool truncate) {
    std::normal_distribution<double> d(mean, stddev);
    for (int64_t i = 0; i < n; ++i) {
      double v;
      do v = d(rng);
      while (truncate && std::abs(v - mean) > 2 * stddev);
      out[i] = float(v);
    }
  };
  // The variance-scaling family's "normal": truncated at two deviations, the deviation corrected
  // for the truncation so that the drawn values' own deviation is `stddev`.
  auto truncated = [&](double stddev) { normal(0.0, stddev / 0.87962566103423978, true); };
  switch (init.kind) {
    case InitKind::Zeros: std::fill(out, out + n, 0.f); break;
    case InitKind::Ones: std::fill(out, out + n, 1.f); break;
    case InitKind::Constant: std::fill(out, out + n, float(init.value)); break;
    case InitKind::RandomNormal: normal(init.mean, init.stddev, false); break;
    case InitKind::TruncatedNormal: normal(init.mean, init.stddev, true); break;
    case InitKind::RandomUniform: uniform(init.minval, init.maxval); break;
    case InitKind::GlorotUniform: {
      const double limit = std::sqrt(6.0 / (fan_in + fan_out));
      uniform(-limit, limit);
      break;
    }
    case InitKind::GlorotNormal: truncated(std::sqrt(2.0 / (fan_in + fan_out))); break;
    case InitKind::HeUniform: uniform(-std::sqrt(6.0 / fan_in), std::sqrt(6.0 / fan_in)); break;
    case InitKind::HeNormal: truncated(std::sqrt(2.0 / fan_in)); break;
    case InitKind::LecunUniform: uniform(-std::sqrt(3.0 / fan_in), std::sqrt(3.0 / fan_in)); break;
    case InitKind::LecunNormal: truncated(std::sqrt(1.0 / fan_in)); break;
    case InitKind::VarianceScaling: {
      const double fans = init.mode == Initializer::Mode::FanIn    ? fan_in
                          : init.mode == Initializer::Mode::FanOut ? fan_out
                                                                   : (fan_in + fan_out) / 2;
      const double var = init.scale / std::max(1.0, fans);
      switch (init.distribution) {
        case Initializer::Distribution::TruncatedNormal: truncated(std::sqrt(var)); break;
        case Initializer::Distribution::UntruncatedNormal: normal(0.0, std::sqrt(var), false); break;
        case Initializer::Distribution::Uniform:
          uniform(-std::sqrt(3.0 * var), std::sqrt(3.0 * var));
          break;
      }
      break;
    }
    case InitKind::Orthogonal: orthogonal(shape, init.gain, rng, out); break;
  }
  if (init.forget_gate_ones) std::fill(out + n / 4, out + n / 2, 1.f);
}

}  // namespace trainer
