// Tests of saving and loading normalisation statistics as NumPy .npy files.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>

#include "core/data/memory_dataset.h"
#include "core/data/transforms.h"
#include "core/data/util.h"
#include "data_test_util.h"

using namespace trainer;
using trainer::test::error_of;
using trainer::test::TempDir;
using trainer::test::write_bytes;

namespace {

std::shared_ptr<MemoryDataset> random_dataset(int n, Shape shape, uint64_t seed) {
  std::vector<uint8_t> px(size_t(n * shape.numel()));
  Rng rng(seed);
  for (auto& v : px) v = uint8_t(rng.uniform_int(0, 255));
  return std::make_shared<MemoryDataset>(shape, 1, std::move(px), std::vector<int32_t>(size_t(n), 0), "random");
}

// A .npy file by hand: header dict text and raw data.
std::vector<uint8_t> npy(const std::string& dict, const std::vector<uint8_t>& data) {
  std::string h = dict;
  while ((10 + h.size() + 1) % 64 != 0) h += ' ';
  h += '\n';
  std::string head = "\x93NUMPY";
  head += char(1), head += char(0), head += char(h.size() & 0xff), head += char(h.size() >> 8);
  head += h;
  std::vector<uint8_t> out(head.size() + data.size());
  std::memcpy(out.data(), head.data(), head.size());
  if (!data.empty()) std::memcpy(out.data() + head.size(), data.data(), data.size());
  return out;
}

template <class T>
std::vector<uint8_t> raw(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());  // little-endian host (x86-64, aarch64)
  return out;
}

}  // namespace

TEST_CASE("stats: per-pixel mean round-trips through a numpy-compatible .npy") {
  TempDir d;
  auto ds = random_dataset(9, Shape{3, 2, 2}, 4);
  NormStats st = compute_stats(*ds, Augment::Mean::PerPixel);
  save_stats(st, d / "mean.npy");
  NormStats back = load_stats(d / "mean.npy");
  CHECK(back.kind == Augment::Mean::PerPixel);
  CHECK(back.shape == Shape{3, 2, 2});
  CHECK(back.mean == st.mean);  // bit for bit
  CHECK(!std::filesystem::exists(d / "mean.npy.tmp"));

  // The layout numpy.load expects: magic, version 1.0, header length, the dict padded with
  // spaces to a 64-byte boundary and ending in a newline, then little-endian float32 in C order.
  const std::vector<uint8_t> f = data_util::read_file(d / "mean.npy");
  REQUIRE(f.size() > 10);
  CHECK(std::string(f.begin() + 1, f.begin() + 6) == "NUMPY");
  CHECK((f[0] == 0x93 && f[6] == 1 && f[7] == 0));
  const size_t len = size_t(f[8]) | size_t(f[9]) << 8;
  CHECK((10 + len) % 64 == 0);
  const std::string header(f.begin() + 10, f.begin() + 10 + long(len));
  CHECK(header.find("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2, 2), }") == 0);
  CHECK(header.back() == '\n');
  REQUIRE(f.size() == 10 + len + 12 * 4);
  float first = 0;
  std::memcpy(&first, &f[10 + len], 4);
  CHECK(first == st.mean[0]);
}

TEST_CASE("stats: numpy reads the per-pixel mean .npy back to the same numbers, and what numpy writes loads") {
  const std::string python = trainer::test::numpy_python();
  if (python.empty()) return;
  TempDir d;
  auto ds = random_dataset(9, Shape{3, 2, 2}, 4);
  NormStats st = compute_stats(*ds, Augment::Mean::PerPixel);
  save_stats(st, d / "mean.npy");
  std::string cmd = python + " -c \"import numpy as np; a = np.load('" + (d / "mean.npy") +
                    "'); assert a.dtype == np.float32 and a.shape == (3, 2, 2); print(repr(float(a[2, 1, 1])))\" > '" +
                    (d / "out.txt") + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream in(d / "out.txt");
  double v = 0;
  in >> v;
  CHECK(float(v) == st.mean[11]);
  // And what numpy writes, load_stats reads.
  cmd = python + " -c \"import numpy as np; np.save('" + (d / "np.npy") +
        "', np.arange(12, dtype=np.float32).reshape(2, 2, 3) / 4)\"";
  REQUIRE(std::system(cmd.c_str()) == 0);
  NormStats np = load_stats(d / "np.npy");
  CHECK(np.shape == Shape{2, 2, 3});
  CHECK(np.mean == std::vector<float>{0, 0.25f, 0.5f, 0.75f, 1, 1.25f, 1.5f, 1.75f, 2, 2.25f, 2.5f, 2.75f});
}

TEST_CASE("stats: per-channel statistics are a (2, C) array, (C,) and float64 files load too") {
  TempDir d;
  auto ds = random_dataset(7, Shape{2, 3, 3}, 5);
  NormStats st = compute_stats(*ds, Augment::Mean::PerChannel);
  save_stats(st, d / "ch.npy");
  const std::vector<uint8_t> f = data_util::read_file(d / "ch.npy");
  CHECK(std::string(f.begin() + 10, f.end()).find("'shape': (2, 3), }") != std::string::npos);
  NormStats back = load_stats(d / "ch.npy");
  CHECK(back.kind == Augment::Mean::PerChannel);
  CHECK(back.mean == st.mean);
  CHECK(back.stddev == st.stddev);
  // Channel statistics fit samples of any height and width with the same channels.
  Augment a;
  a.mean = Augment::Mean::PerChannel;
  auto shared = std::make_shared<NormStats>(back);
  SampleTransform t(a, Shape{5, 7, 3}, shared);
  CHECK_THROWS_AS(SampleTransform(a, Shape{5, 7, 1}, shared), DataError);

  write_bytes(d / "c.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", raw(std::vector<float>{1, 2, 3})));
  NormStats c = load_stats(d / "c.npy");
  CHECK(c.kind == Augment::Mean::PerChannel);
  CHECK(c.mean == std::vector<float>{1, 2, 3});
  CHECK(c.stddev == std::vector<float>{1, 1, 1});
  write_bytes(d / "f8.npy", npy("{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1, 2), }",
                                raw(std::vector<double>{0.5, 120.25})));
  NormStats f8 = load_stats(d / "f8.npy");
  CHECK(f8.kind == Augment::Mean::PerPixel);
  CHECK(f8.mean == std::vector<float>{0.5f, 120.25f});

  CHECK_THROWS_AS(save_stats(NormStats{}, d / "none.npy"), std::invalid_argument);
}

TEST_CASE("stats: files that are not statistics are data errors naming the file") {
  TempDir d;
  write_bytes(d / "junk.npy", {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'});
  CHECK(error_of<DataError>([&] { load_stats(d / "junk.npy"); }) ==
        (d / "junk.npy") + ": byte 0: no \\x93NUMPY magic (not a .npy file)");
  write_bytes(d / "int.npy", npy("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", raw(std::vector<int>{1, 2, 3})));
  CHECK(error_of<DataError>([&] { load_stats(d / "int.npy"); }).find("dtype '<i4' is not supported (use '<f4' or '<f8')") !=
        std::string::npos);
  write_bytes(d / "f.npy", npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", raw(std::vector<float>(6))));
  CHECK(error_of<DataError>([&] { load_stats(d / "f.npy"); }).find("fortran_order is True") != std::string::npos);
  write_bytes(d / "s.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 5), }", raw(std::vector<float>(20, 1))));
  CHECK(error_of<DataError>([&] { load_stats(d / "s.npy"); }) ==
        (d / "s.npy") + ": shape (4, 5) is neither a mean image (H, W, C) nor channel statistics (2, C) or (C,)");
  write_bytes(d / "t.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2, 3), }", raw(std::vector<float>(5))));
  CHECK(error_of<DataError>([&] { load_stats(d / "t.npy"); }).find("the header says 2x2x3 float32 values (48 bytes from byte 128), the file has 20") !=
        std::string::npos);
  write_bytes(d / "z.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1), }", raw(std::vector<float>{3, 0})));
  CHECK(error_of<DataError>([&] { load_stats(d / "z.npy"); }).find("standard deviation 0 is not positive") !=
        std::string::npos);
  CHECK(error_of<DataError>([&] { load_stats(d / "absent.npy"); }).find((d / "absent.npy") + ": cannot open") == 0);
  CHECK(error_of<DataError>([&] { save_stats(compute_stats(*random_dataset(2, Shape{1, 1, 1}, 1), Augment::Mean::PerPixel),
                                              d / "no/such/dir/m.npy"); })
            .find("cannot write") != std::string::npos);
}
