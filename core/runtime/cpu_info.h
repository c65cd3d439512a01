// What `trainer devices` reports about the CPU: cores this process may use, the model, the
// vector extensions /proc/cpuinfo lists, and the instruction set oneDNN will dispatch to.
#pragma once
#include <string>
#include <vector>

namespace trainer {

struct CpuInfo {
  int usable = 0;  // logical cores in this process's affinity mask
  int online = 0;  // logical cores online in the machine
  std::string model;         // "model name" from /proc/cpuinfo ("" when absent)
  std::string onednn_isa;    // oneDNN's effective ISA: "avx512_core_bf16", "avx2", ...
  std::vector<std::string> flags;  // of interest, present: avx2, avx512f, avx512_bf16, amx_tile...
  bool avx512 = false, avx512_bf16 = false, amx = false;
};

CpuInfo cpu_info();

}  // namespace trainer
