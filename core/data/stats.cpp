// Normalisation statistics: computing them over a dataset, saving and loading them as .npy files.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "core/data/npy_format.h"
#include "core/data/transforms.h"
#include "core/data/util.h"

namespace trainer {

NormStats compute_stats(const Dataset& ds, Augment::Mean kind, int threads) {
  NormStats st;
  st.kind = kind;
  st.shape = ds.sample_shape();
  if (kind != Augment::Mean::PerPixel && kind != Augment::Mean::PerChannel) return st;
  if (ds.float_samples())
    throw std::invalid_argument(fmt::format("{}: has float samples (sequences, arrays): mean: per_pixel/per_channel "
                                            "statistics are for uint8 images (drop data.augment's mean)",
                                            ds.describe()));
  const int64_t n = ds.size();
  if (n <= 0) throw DataError(fmt::format("{}: no samples to compute the mean over", ds.describe()));
  const size_t elems = size_t(st.shape.numel()), C = size_t(st.shape[2]);
  if (threads <= 0) threads = data_util::default_threads(8);
  threads = int(std::clamp<int64_t>(threads, 1, n));
  // Integer sums are exact, so the result does not depend on how samples are split over threads.
  const bool per_pixel = kind == Augment::Mean::PerPixel;
  std::vector<std::vector<uint64_t>> sum(size_t(threads), std::vector<uint64_t>(per_pixel ? elems : C, 0));
  std::vector<std::vector<uint64_t>> sq(size_t(threads), std::vector<uint64_t>(per_pixel ? 0 : C, 0));
  data_util::parallel_for(threads, threads, [&](int64_t t) {
    std::vector<uint8_t> px(elems);
    auto& s = sum[size_t(t)];
    auto& q = sq[size_t(t)];
    for (int64_t i = n * t / threads, end = n * (t + 1) / threads; i < end; ++i) {
      ds.get(i, px.data());
      if (per_pixel) {
        for (size_t e = 0; e < elems; ++e) s[e] += px[e];
      } else {
        for (size_t e = 0; e < elems; ++e) s[e % C] += px[e], q[e % C] += uint64_t(px[e]) * px[e];
      }
    }
  }, 1);
  const size_t len = per_pixel ? elems : C;
  const double count = per_pixel ? double(n) : double(n) * double(elems / C);
  st.mean.assign(len, 0.f);
  for (size_t e = 0; e < len; ++e) {
    uint64_t total = 0;
    for (int t = 0; t < threads; ++t) total += sum[size_t(t)][e];
    st.mean[e] = float(double(total) / count);
  }
  if (!per_pixel) {
    st.stddev.assign(C, 1.f);
    for (size_t c = 0; c < C; ++c) {
      uint64_t total = 0, total_sq = 0;
      for (int t = 0; t < threads; ++t) total += sum[size_t(t)][c], total_sq += sq[size_t(t)][c];
      double m = double(total) / count, var = std::max(0.0, double(total_sq) / count - m * m);
      st.stddev[c] = float(std::max(std::sqrt(var), 1e-6));
    }
  }
  return st;
}

namespace {

void write_npy(const std::string& path, const std::vector<int64_t>& shape, const std::vector<float>& data) {
  static_assert(sizeof(float) == 4);
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw DataError(fmt::format("{}: cannot write: {}", tmp, std::strerror(errno)));
  const std::string header = npy::make_header(shape, "<f4");
  bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size();
  for (float v : data) {  // little-endian whatever the host
    uint32_t u = 0;
    std::memcpy(&u, &v, 4);
    const uint8_t b[4] = {uint8_t(u), uint8_t(u >> 8), uint8_t(u >> 16), uint8_t(u >> 24)};
    ok = ok && std::fwrite(b, 1, 4, f) == 4;
  }
  ok = std::fflush(f) == 0 && ok;
  const int err = errno;
  std::fclose(f);
  std::error_code ec;
  if (!ok) {
    std::filesystem::remove(tmp, ec);
    throw DataError(fmt::format("{}: cannot write: {}", tmp, std::strerror(err)));
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw DataError(fmt::format("{}: cannot rename to {}: {}", tmp, path, ec.message()));
}

struct Npy {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

Npy read_npy(const std::string& path) {
  const npy::File f(path, {npy::Type::F4, npy::Type::F8});
  Npy out;
  out.shape = f.header().shape;
  out.data.resize(size_t(f.count()));
  f.read_f32(0, f.count(), out.data.data());
  return out;
}

}  // namespace

void save_stats(const NormStats& stats, const std::string& path) {
  if (stats.kind == Augment::Mean::PerPixel) {
    if (stats.shape.rank() != 3 || size_t(stats.shape.numel()) != stats.mean.size())
      throw std::invalid_argument("save_stats: the mean image does not match its shape");
    write_npy(path, {stats.shape[0], stats.shape[1], stats.shape[2]}, stats.mean);
  } else if (stats.kind == Augment::Mean::PerChannel) {
    if (stats.mean.size() != stats.stddev.size() || stats.mean.empty())
      throw std::invalid_argument("save_stats: per-channel means and deviations differ in length");
    std::vector<float> both = stats.mean;
    both.insert(both.end(), stats.stddev.begin(), stats.stddev.end());
    write_npy(path, {2, int64_t(stats.mean.size())}, both);
  } else {
    throw std::invalid_argument("save_stats: only per_pixel and per_channel statistics are saved");
  }
}

NormStats load_stats(const std::string& path) {
  Npy a = read_npy(path);
  NormStats st;
  for (float v : a.data)
    if (!std::isfinite(v)) throw DataError(fmt::format("{}: holds a value that is not finite", path));
  if (a.shape.size() == 3 && a.shape[2] > 0) {
    st.kind = Augment::Mean::PerPixel;
    st.shape = Shape{a.shape[0], a.shape[1], a.shape[2]};
    st.mean = std::move(a.data);
  } else if ((a.shape.size() == 2 && a.shape[0] == 2 && a.shape[1] > 0) || (a.shape.size() == 1 && a.shape[0] > 0)) {
    const size_t C = size_t(a.shape.back());
    st.kind = Augment::Mean::PerChannel;
    st.shape = Shape{0, 0, int64_t(C)};
    st.mean.assign(a.data.begin(), a.data.begin() + long(C));
    st.stddev.assign(C, 1.f);
    if (a.shape.size() == 2) st.stddev.assign(a.data.begin() + long(C), a.data.end());
    for (float s : st.stddev)
      if (!(s > 0)) throw DataError(fmt::format("{}: standard deviation {} is not positive", path, s));
  } else {
    std::string dims;
    for (int64_t d : a.shape) dims += fmt::format("{}{}", dims.empty() ? "" : ", ", d);
    throw DataError(fmt::format("{}: shape ({}) is neither a mean image (H, W, C) nor channel statistics (2, C) or (C,)",
                                path, dims));
  }
  return st;
}

}  // namespace trainer
