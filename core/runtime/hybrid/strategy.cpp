// The hybrid strategy: data parallelism over R copies of an S-stage pipeline on R x S devices (in
// each process, under mpirun) — a PipelineCopy per copy, stage s of every copy joined by a
// communicator of its own — and its part of a bench result.
#include <fmt/format.h>

#include <algorithm>

#include "core/dist/device_comms.h"
#include "core/dist/launch.h"
#include "core/dist/process_comm.h"
#include "core/runtime/device_parallel/pipeline_copy.h"
#include "core/runtime/rank_threads.h"
#include "core/runtime/strategy.h"

namespace trainer {
namespace {

// The placement's labels, one stage slot each, in the order placement.devices lists them.
int stage_slots(const TraineeSpec& t) { return std::max<int>(1, int(t.placement.devices.size())); }

class Hybrid final : public Strategy {
 public:
  // Under mpirun each process holds R whole copies: copy r here is data-parallel rank
  // process_rank * R + r, and stage s's communicator joins stage s of every process's copies.
  Hybrid(const TraineeSpec& t, const std::vector<Device>& devices, int threads) : threads_(threads) {
    const int S = stage_slots(t), R = int(devices.size()) / S;
    const Launch& proc = this_process();
    auto communicators = [&](const std::vector<Device>& devs, const std::vector<OpContext*>& ctxs) {
      // The same order of calls in every process (each makes its collectives' MPI communicator).
      return proc.multi() ? make_process_communicators(devs, ctxs, proc.rank, proc.size) : make_communicators(devs, ctxs);
    };
    for (int r = 0; r < R; ++r)
      copies_.push_back(std::make_unique<PipelineCopy>(
          t, std::vector<Device>(devices.begin() + r * S, devices.begin() + (r + 1) * S), threads));
    // Stage s of every copy: one communicator group; the copies' driving threads: another.
    const int stages = copies_[0]->stages();
    std::vector<std::vector<Communicator*>> per_copy(static_cast<size_t>(R));
    for (int s = 0; s < stages; ++s) {
      std::vector<Device> devs;
      std::vector<OpContext*> ctxs;
      for (auto& c : copies_) {
        devs.push_back(c->stage(s).context().device());
        ctxs.push_back(&c->stage(s).context());
      }
      stage_comms_.push_back(communicators(devs, ctxs));
      for (int r = 0; r < R; ++r) per_copy[size_t(r)].push_back(stage_comms_.back()[size_t(r)].get());
      if (s == 0) ctl_comms_ = communicators(devs, ctxs);
    }
    for (int r = 0; r < R; ++r)
      copies_[size_t(r)]->attach(proc.rank * R + r, per_copy[size_t(r)], ctl_comms_[size_t(r)].get());
  }

  int size() const override { return int(copies_.size()); }
  Trainee& trainee(int i) override { return *copies_[size_t(i)]; }
  void run(const std::function<void(Trainee&)>& fn) override {
    run_rank_threads(
        size(), [&](int r) { fn(*copies_[size_t(r)]); }, [](int r) { return fmt::format("pipeline copy {}", r); },
        [&](const std::string& why) {
          for (auto& group : stage_comms_) group[0]->abort(why);
          ctl_comms_[0]->abort(why);
        });
  }
  size_t device_memory_peak() override {
    size_t sum = 0;
    for (auto& c : copies_)
      for (int s = 0; s < c->stages(); ++s) sum += c->stage(s).context().device_memory_peak();
    return sum;
  }

 protected:
  void describe(BenchResult& r, const BenchOptions& o) override;

 private:
  std::vector<std::unique_ptr<PipelineCopy>> copies_;
  std::vector<std::vector<std::unique_ptr<Communicator>>> stage_comms_;  // [stage][copy]
  std::vector<std::unique_ptr<Communicator>> ctl_comms_;                 // [copy]
  int threads_;
};

// Copy 0's pipeline bubble and parts.
void Hybrid::describe(BenchResult& r, const BenchOptions&) {
  PipelineCopy& w = *copies_[0];
  const Launch& proc = this_process();
  r.device = fmt::format("hybrid {} copies x {} stages{}", copies_.size() * size_t(proc.size), w.stages(),
                         proc.multi() ? fmt::format(" ({} processes)", proc.size) : "");
  r.threads = threads_;
  int64_t flops = 0;
  for (int s = 0; s < w.stages(); ++s) flops += w.stage(s).graph().flops_per_sample();
  r.gflops_per_second = 3.0 * double(flops) * r.images_per_second / 1e9;
  // Each stage's sum over the copies starts at the end of its own backward, while the stages
  // before it are still in theirs; how much of it that hides is not measured (reported as 0).
  r.hidden_fraction = 0;
  r.microbatches = w.microbatches();
  r.bubble = w.bubble().fraction();
  r.parts.scope = "copy 0, all stages";
}

[[maybe_unused]] const bool registered = [] {
  StrategyType t;
  // R x S devices: --cpu N (virtual CPU devices) or --gpus, copy r's stage s on device r*S + s.
  // (Under mpirun one copy per process is enough: the copies are the processes'.)
  t.devices = [](const TraineeSpec& spec, const DevicesSpec& d, std::vector<std::string>*) {
    std::vector<Device> devices = select_devices(d);
    const int S = stage_slots(spec), least = this_process().multi() ? S : 2 * S;
    if (devices.size() < size_t(least) || devices.size() % size_t(S) != 0)
      throw DeviceError(fmt::format("strategy hybrid places {} stages per copy: it needs a multiple of {} devices, at least "
                                    "{} (--cpu {} or --gpus with {} GPUs for {}), not {}",
                                    S, S, least, least, least, least == S ? "a copy in each process" : "2 copies",
                                    devices.size()));
    return devices;
  };
  t.local_replicas = [](const TraineeSpec& spec, const std::vector<Device>& devices) {
    return int(devices.size()) / stage_slots(spec);
  };
  t.threads = [](const DevicesSpec& d, const std::vector<Device>& devices) {
    return threads_per_replica(d, int(devices.size()));
  };
  t.make = [](const TraineeSpec& spec, const std::vector<Device>& devices, int threads) -> std::unique_ptr<Strategy> {
    return std::make_unique<Hybrid>(spec, devices, threads);
  };
  register_strategy(StrategyKind::Hybrid, std::move(t));
  return true;
}();

}  // namespace
}  // namespace trainer
