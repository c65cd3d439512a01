// Device: where a tensor lives and an op runs (a CPU replica or one CUDA GPU).
#pragma once
#include <stdexcept>
#include <string>

namespace trainer {

enum class DeviceKind { CPU = 0, CUDA = 1 };
constexpr int kNumDeviceKinds = 2;

struct Device {
  DeviceKind kind = DeviceKind::CPU;
  int index = 0;  // GPU ordinal, or the replica's number for CPU replicas

  static Device cpu(int i = 0) { return {DeviceKind::CPU, i}; }
  static Device cuda(int i) { return {DeviceKind::CUDA, i}; }
  bool is_cpu() const { return kind == DeviceKind::CPU; }
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  std::string str() const { return (kind == DeviceKind::CPU ? "cpu:" : "cuda:") + std::to_string(index); }
};

// A device or communication failure (the CLI exits 4): a CUDA/cuDNN/cuBLAS/NCCL error with the
// library's message and file:line, an impossible device request, a lost peer.
class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline const char* device_kind_name(DeviceKind k) { return k == DeviceKind::CPU ? "cpu" : "cuda"; }

}  // namespace trainer
