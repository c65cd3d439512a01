// libFuzzer target for the safetensors reader (checkpoints, init.from): header, offsets, values.
//
// Each input is one file's bytes, written to the fuzzer's scratch directory and read by
// SafeTensorsReader: the header length, the JSON header, every tensor's dtype, shape and byte
// range (inside the data section, tiling it). Every F32 and I64 tensor is then read. FileError
// (exit 3) is the documented refusal; anything else, a sanitizer report or a timeout is a crash.
#include <cstddef>
#include <cstdint>

#include "core/io/safetensors.h"
#include "fuzz_util.h"

using namespace trainer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_file("weights.safetensors", data, size);
  fuzz::refusals_expected([&] {
    SafeTensorsReader r(path);
    uint64_t covered = 0;
    for (const SafeTensor& t : r.tensors()) {
      if (t.end < t.begin || t.end > size) __builtin_trap();  // the checks must hold what they promise
      covered += t.end - t.begin;
      if (t.dtype == "F32") r.f32(t.name);
      if (t.dtype == "I64") r.i64(t.name);
    }
    if (covered > size) __builtin_trap();
    r.crc32();
  });
  return 0;
}
