// Strategy: how a run's model copies are placed and driven — data parallel (a replica per device),
// device parallel (one model cut over devices, pipelined) or hybrid (data parallel over copies of
// that pipeline) — behind one interface, so the epoch
// loop, fit, bench and the banner never branch on the kind. Kinds register themselves.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/runtime/bench_result.h"
#include "core/runtime/devices.h"
#include "core/runtime/strategy_kind.h"
#include "core/runtime/trainee.h"

namespace trainer {

class Strategy {
 public:
  virtual ~Strategy() = default;
  // The trainees of this process, each driven by a thread of its own; trainee(0) is the lead
  // (in process 0: global rank 0, whose weights checkpoints take).
  virtual int size() const = 0;
  virtual Trainee& trainee(int i) = 0;
  // fn(trainee) on one thread per trainee (bound to its device first; trainee 0 on the calling
  // thread). When one fails, every other is woken from its collectives and the first failure is
  // rethrown (data and config errors keep their type; others become a DeviceError naming the rank).
  virtual void run(const std::function<void(Trainee&)>& fn) = 0;
  // Device memory the trainees' allocators held at most, in bytes (0 on the CPU).
  virtual size_t device_memory_peak() = 0;
  // Timed training steps on `inputs` (one per trainee), as `trainer bench` reports them: the one
  // bench loop of every strategy (core/runtime/bench_loop.cpp), then describe().
  BenchResult bench(std::vector<BenchInput>& inputs, const BenchOptions& o);

 protected:
  // The strategy's own part of a bench result, after the loop filled the timings: the device
  // line, threads, FLOP/s, the parts' scope, the hidden share of communication, the bubble, the
  // timelines, the per-layer lines.
  virtual void describe(BenchResult& r, const BenchOptions& o) = 0;
};

// One kind: where it runs, and how its trainees are made.
struct StrategyType {
  // The devices of this process: one per replica (data parallel), one per placement label
  // (device parallel); `notes` says where labels ran.
  std::function<std::vector<Device>(const TraineeSpec& t, const DevicesSpec& d, std::vector<std::string>* notes)> devices;
  // How many data-parallel ranks this process contributes (1 for a pipeline; hybrid: devices / stages).
  std::function<int(const TraineeSpec& t, const std::vector<Device>& devices)> local_replicas;
  // CPU compute threads per replica or stage.
  std::function<int(const DevicesSpec& d, const std::vector<Device>& devices)> threads;
  std::function<std::unique_ptr<Strategy>(const TraineeSpec& t, const std::vector<Device>& devices, int threads)> make;
};
void register_strategy(StrategyKind kind, StrategyType type);
const StrategyType& strategy_type(StrategyKind kind);

}  // namespace trainer
