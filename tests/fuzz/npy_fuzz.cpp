// libFuzzer target for NumPy .npy files: the header parser, the mapped reader and `type: npy`.
//
// fuzz::split cuts the input into x.npy (the samples) and y.npy (the labels). x.npy's bytes go
// through npy::parse_header and npy::File (every value converted, up to a bound); then both files are opened as a `type: npy` dataset whose first samples are read.
// DataError (exit 3) and ConfigError are the documented refusals; anything else is a crash.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/data/npy_format.h"
#include "fuzz_util.h"

using namespace trainer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::Split s = fuzz::split(data, size);
  const std::string x = fuzz::write_file("npy/x.npy", s.first, s.first_size);
  fuzz::write_file("npy/y.npy", s.second, s.second_size);
  fuzz::refusals_expected([&] {
    npy::Header h = npy::parse_header(s.first, s.first_size, "x.npy");
    if (h.data_offset > s.first_size) __builtin_trap();  // the parser must not point past what it was given
    npy::File f(x);
    const int64_t n = std::min<int64_t>(f.count(), 4096);
    std::vector<float> values(size_t(std::max<int64_t>(n, 1)));
    f.read_f32(0, n, values.data());
    if (f.type() == npy::Type::U1 || f.type() == npy::Type::I4 || f.type() == npy::Type::I8)
      for (int64_t i = 0; i < n; ++i) f.read_int(i);
  });
  fuzz::refusals_expected([] { fuzz::drain(*fuzz::open_dataset("{type: npy, x: npy/x.npy, labels: npy/y.npy}")); });
  return 0;
}
