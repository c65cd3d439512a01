// libFuzzer target for `type: cifar10_bin` / `cifar100_bin`: one batch file of fixed-size records.
//
// The first input byte picks the reader (CIFAR-10, CIFAR-100 fine or coarse labels); the rest
// is written as the test batch in the fuzzer's scratch directory and opened as a dataset, whose
// first samples are read. DataError (exit 3) is the documented refusal; anything else is a crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int kind = data[0] % 3;
  fuzz::write_file(kind == 0 ? "cifar/test_batch.bin" : "cifar/test.bin", data + 1, size - 1);
  const std::string spec = kind == 0   ? "{type: cifar10_bin, path: cifar, split: test}"
                           : kind == 1 ? "{type: cifar100_bin, path: cifar, split: test, label: fine}"
                                       : "{type: cifar100_bin, path: cifar, split: test, label: coarse}";
  fuzz::refusals_expected([&] { fuzz::drain(*fuzz::open_dataset(spec)); });
  return 0;
}
