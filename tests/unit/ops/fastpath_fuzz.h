// Differential tests of fast paths against their reference paths: case budget and seeds, values shaped like training's, bounds from the operands, a tally per path.
//
// Each fastpath_*_test.cpp draws random cases (shapes, windows, thread counts 1-4, values) from one
// seed and runs every case through a fast path and through the reference path it replaced
// (FastPaths off), comparing the two:
// - on *exact* values (small dyadic numbers: every product and partial sum is a float, so any
//   order of summation gives the same bits), bit for bit — a lost, doubled or misplaced term, a
//   race or a stale scratch buffer shows as a difference, however large the reduction;
// - on *wide* values (magnitudes from 2^-60 to 2^20, runs of exact zeros as ReLU gates and
//   pooling leave in gradients, activations at their clamp bounds), each path against the float64
//   reference within the worst-case bound of its arithmetic (recursive summation of T products:
//   T·u·Σ|terms|, plus the type's rounding of the inputs and output), where the paths may round
//   differently.
// Budget (environment): TRAINER_FUZZ_CASES per path (default: each test's CI count, a quarter of it
// under a sanitizer), TRAINER_FUZZ_SECONDS (a time budget per path instead: the long mode,
// scripts/fuzz-numerics.sh), TRAINER_FUZZ_SEED (default fixed, so CI repeats itself; every failure
// prints the seed and the case number), TRAINER_FUZZ_CASE=k (run case k only) and
// TRAINER_FUZZ_THREADS=n (every case on n threads).
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bf16_check.h"
#include "core/ops/context.h"
#include "test_util.h"

namespace trainer::test::fuzz {

constexpr uint64_t kDefaultSeed = 20261128;

// gcc defines __SANITIZE_ADDRESS__/__SANITIZE_THREAD__; clang (the sanitizer builds' compiler)
// answers __has_feature instead — until 2026-11-29 only gcc's were asked, so the clang builds ran
// the full count.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TRAINER_FUZZ_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TRAINER_FUZZ_SANITIZED 1
#endif
#endif
#ifdef TRAINER_FUZZ_SANITIZED
constexpr int64_t kSanitizerDivisor = 4;
#else
constexpr int64_t kSanitizerDivisor = 1;
#endif

inline int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoll(v, nullptr, 10) : fallback;
}

// The cases one path runs: `ci_cases` unless the environment says otherwise (see above).
class Budget {
 public:
  explicit Budget(int64_t ci_cases)
      : cases_(env_int("TRAINER_FUZZ_CASES", std::max<int64_t>(1, ci_cases / kSanitizerDivisor))),
        seconds_(double(env_int("TRAINER_FUZZ_SECONDS", 0))),
        only_(env_int("TRAINER_FUZZ_CASE", -1)),
        seed_(uint64_t(env_int("TRAINER_FUZZ_SEED", int64_t(kDefaultSeed)))),
        start_(std::chrono::steady_clock::now()) {}
  // Whether case k runs (false ends the loop).
  bool more(int64_t k) const {
    if (only_ >= 0) return k <= only_;
    if (seconds_ > 0) return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count() < seconds_;
    return k < cases_;
  }
  bool skip(int64_t k) const { return only_ >= 0 && k != only_; }
  // Case k's own generator: the same case whatever ran before it.
  std::mt19937_64 rng(int64_t k, uint64_t salt) const {
    std::seed_seq s{uint32_t(seed_), uint32_t(seed_ >> 32), uint32_t(k), uint32_t(salt)};
    return std::mt19937_64(s);
  }
  uint64_t seed() const { return seed_; }
  // What reproduces case k, for INFO.
  std::string repro(int64_t k) const {
    std::ostringstream o;
    o << "reproduce: TRAINER_FUZZ_SEED=" << seed_ << " TRAINER_FUZZ_CASE=" << k;
    return o.str();
  }

 private:
  int64_t cases_;
  double seconds_;
  int64_t only_;
  uint64_t seed_;
  std::chrono::steady_clock::time_point start_;
};

// Per fast path: cases, thread counts, the largest difference on exact values (must be 0) and the
// largest error on wide values as a fraction of its bound (must be <= 1); printed as one WARN line.
struct Tally {
  explicit Tally(std::string p) : path(std::move(p)) {}
  std::string path;
  int64_t cases = 0, exact_cases = 0;
  std::set<int> threads;
  double exact_worst = 0, worst = 0;  // |fast - reference| on exact values; error / bound on wide ones
  std::string worst_case;

  void exact(int t, double diff) {
    ++cases, ++exact_cases;
    threads.insert(t);
    exact_worst = std::max(exact_worst, diff);
  }
  void wide(int t, double fraction, const std::string& what) {
    ++cases;
    threads.insert(t);
    if (fraction > worst) worst = fraction, worst_case = what;
  }
  void report(const Budget& b) const {
    std::ostringstream o;
    o << "fast path " << path << ": " << cases << " cases (" << exact_cases << " exact";
    o << ", " << (cases - exact_cases) << " wide), threads";
    for (int t : threads) o << " " << t;
    o << "; exact values: largest difference " << exact_worst << "; wide values: worst error " << worst
      << " of its bound" << (worst_case.empty() ? "" : " (" + worst_case + ")") << "; seed " << b.seed();
    WARN(o.str());
  }
};

// A CPU context per (threads, precision, fast paths), made once: contexts hold oneDNN engines.
inline OpContext& cpu_context_for(int threads, Precision p, FastPaths f) {
  static std::map<std::tuple<int, int, uint32_t>, std::unique_ptr<OpContext>> made;
  auto& c = made[{threads, int(p), f.bits()}];
  if (!c) {
    ContextOptions o;
    o.threads = threads;
    o.precision = p;
    o.fast = f;
    c = make_context(Device::cpu(), o);
  }
  c->bind_thread();  // oneDNN and sgemm take the calling thread's OpenMP thread count
  return *c;
}

// 1 to 4 compute threads (TRAINER_FUZZ_THREADS=n: n, to see whether a failure follows the count).
inline int threads(std::mt19937_64& rng) {
  const int t = int(uniform_int(rng, 1, 4));
  return int(env_int("TRAINER_FUZZ_THREADS", t));
}

// Small dyadic values k / 2^s (|k| <= 16, s in 2..4) with a fraction of zeros in runs: products
// have at most 9 significant bits, so sums of fewer than 2^15 of them are exact in f32 (and every
// value is a bf16 one).
inline ref::Vec exact_values(size_t n, std::mt19937_64& rng, double zeros = 0.3) {
  ref::Vec v(n);
  const int s = int(uniform_int(rng, 2, 4));
  std::bernoulli_distribution start_run(zeros / 8), stop_run(1.0 / 8);
  bool run = false;
  for (size_t i = 0; i < n; ++i) {
    run = run ? !stop_run(rng) : start_run(rng);
    v[i] = run ? 0.0 : std::ldexp(double(uniform_int(rng, -16, 16)), -s);
  }
  return v;
}

// Values as a training step has them: magnitudes log-uniform over [2^lo, 2^hi] with random signs;
// `gated` adds runs of exact zeros (a ReLU's gradient, or pooling's 3 of 4) and, for activations,
// values at a clamp's bounds (0 and 6). Rounded to dtype.
inline ref::Vec wide_values(size_t n, std::mt19937_64& rng, DType t, int lo = -60, int hi = 20, bool gated = true) {
  ref::Vec v(n);
  std::uniform_real_distribution<double> e(lo, hi);
  std::bernoulli_distribution sign(0.5), start_run(gated ? 0.04 : 0.0), stop_run(0.15), bound(gated ? 0.03 : 0.0);
  bool run = false;
  for (size_t i = 0; i < n; ++i) {
    run = run ? !stop_run(rng) : start_run(rng);
    if (run) {
      v[i] = 0.0;
    } else if (bound(rng)) {
      v[i] = sign(rng) ? 6.0 : 0.0;
    } else {
      v[i] = bf16_check::round_to(t, (sign(rng) ? -1.0 : 1.0) * std::exp2(e(rng)));
    }
  }
  return v;
}

// The unit roundoff of f32 arithmetic, and γ(T) = T·u / (1 - T·u): the worst-case relative error of a
// sum of T rounded terms (Higham, Accuracy and Stability of Numerical Algorithms, §3.1).
constexpr double kU32 = 0x1p-24;
inline double gamma(int64_t terms) {
  const double t = double(terms) * kU32;
  return t / (1.0 - t);
}

// The largest |got - want| / bound over elements (NaN in got: infinity; a zero bound admits only an
// exact result), and how many elements exceed their bound.
struct Fit {
  double worst = 0;
  int64_t outside = 0;
};
inline Fit fit(const ref::Vec& got, const ref::Vec& want, const ref::Vec& bound) {
  Fit f;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    const double r = std::isnan(got[i]) ? INFINITY : bound[i] > 0 ? err / bound[i] : (err == 0 ? 0.0 : INFINITY);
    if (!(r <= 1)) ++f.outside;
    f.worst = std::max(f.worst, r);
  }
  return f;
}

// The largest |a - b| (NaN anywhere: infinity).
inline double max_diff(const ref::Vec& a, const ref::Vec& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::fabs(a[i] - b[i]);
    d = std::isnan(e) ? INFINITY : std::max(d, e);
  }
  return d;
}

}  // namespace trainer::test::fuzz
