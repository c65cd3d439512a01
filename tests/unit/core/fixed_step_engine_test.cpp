// The fixed step of a replica copy (Trainee::step): loss scaling, clipping, accumulation and the
// moving average decided by the program's own kernels, read at once or late, and several replicas
// with the collectives inside the program — the ordinary step's bits, on the CPU and as CUDA graphs;
// TRAINER_CUDA_GRAPHS.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <string>

#include "core/run/plan.h"
#include "core/runtime/data_parallel/replica.h"
#include "core/runtime/data_parallel/replica_group.h"
#include "fixed_step_util.h"
#include "test_devices.h"

using namespace trainer;
using namespace trainer::test_fixed;

namespace {

// What the engine's step (Trainee::train_step) leaves after each of 10 steps of one replica.
struct EngineRun {
  std::vector<float> weights;  // after the last step
  std::vector<double> losses, norms;
  std::vector<float> scales;
  std::vector<int64_t> optimizer_steps, skipped;
  int fixed = 0, recorded = 0;  // steps that ran as the fixed program; of those, replayed recordings
  uint64_t last_waits = 0;      // the host's waits for the device over the last three steps
  std::vector<std::vector<float>> replicas;  // every rank's weights after the last step
  std::vector<float> average;                // train.ema's, rank 0's, after the last step
  int64_t final_steps = 0;                   // the optimizer's count after the last step
  int deferred = 0;  // read late (lag >= 0): the steps whose statistics Trainee::step returned pending
  size_t buckets = 0;  // the gradient's buckets (GradBuckets)
  int joins = 0;       // LateSums: the programs' joins of started sums
};


// 10 steps of the replicas on `devices` through Trainee::train_step (batch 6 four times, 4 three
// times, 6 again, each rank its own samples), the fixed program allowed anywhere (`fixed`, the CPU
// running it as called) or not; rank 0's batches of the steps in `poisoned` carry an inf pixel
// (non-finite gradients, on every rank once summed). With train.accumulate k > 1 each step is k
// micro-batches of other samples, the first of a poisoned step carrying the inf (the held sum then
// holds it). Rank 0's view, every rank's last weights in `replicas`. With `lag` >= 0 each step's
// statistics and report are read only `lag` steps later (Trainee::step and PendingSteps, as the
// epoch loop does: the program's state carries the scale and counts from step to step meanwhile);
// the per-step optimizer counts are then not recorded (the host's is ahead until it reads).
// Before micro-batch s·k + i in `injected`, every rank is asked for an inf gradient (rank 0 puts it
// in: Trainee::inject_nonfinite): that micro-batch runs the ordinary way, the step's others as programs.
// `buckets`: the program sums the gradient bucket by bucket during backward (as over NCCL): Buckets::
// AsCalled, each bucket summed when started; Buckets::AtJoin, every started sum run only when the
// program joins them (LateSums), the latest a communicator that overlaps backward may run them.
enum class Buckets { None, AsCalled, AtJoin };

// A communicator whose started sums run when joined, in the order started (every other call goes to
// `inner`): as NCCL's on its side stream may, at the latest — so a program that read or wrote a
// bucket between its start and the join would see other values than with the sums run as called.
class LateSums final : public Communicator {
 public:
  explicit LateSums(Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void all_reduce_sum(Tensor& b) override { inner_.all_reduce_sum(b); }
  void broadcast(Tensor& b, int root) override { inner_.broadcast(b, root); }
  void all_reduce_host(std::vector<double>& v) override { inner_.all_reduce_host(v); }
  void barrier() override { inner_.barrier(); }
  void abort(const std::string& why) override { inner_.abort(why); }
  void issue_all_reduce_sum(Tensor& b) override { inner_.issue_all_reduce_sum(b); }
  void issue_broadcast(Tensor& b, int root) override { inner_.issue_broadcast(b, root); }
  void issue_all_gather(Tensor& b) override { inner_.issue_all_gather(b); }
  void wait_issued() override { inner_.wait_issued(); }
  bool overlaps() const override { return true; }
  void start_all_reduce_sum(Tensor& b) override { started_.push_back(b); }
  void join_started() override {
    for (Tensor& b : started_) inner_.all_reduce_sum(b);
    joins_ += !started_.empty();
    started_.clear();
  }
  int joins() const { return joins_; }

 private:
  Communicator& inner_;
  std::vector<Tensor> started_;
  int joins_ = 0;
};

EngineRun train_engine(const RunSpec& e, const std::vector<Device>& devices, bool fixed, const std::set<int>& poisoned,
                       int lag = -1, const std::set<int>& injected = {}, Buckets buckets = Buckets::None) {
  const int k = e.train.accumulate;
  const int ranks = int(devices.size());
  ReplicaGroup group(trainee_spec(e), devices, devices[0].is_cpu() ? (ranks == 1 ? 2 : 1) : 0);
  EngineRun out;
  std::vector<std::vector<float>> replicas(devices.size());
  group.run([&](ReplicaCopy& w) {
    const int r = w.rank();
    w.set_fixed_anywhere(fixed);
    w.set_program_buckets(buckets != Buckets::None);
    LateSums late(w.control());  // the control communicator: the same ranks, this thread's alone
    if (buckets == Buckets::AtJoin) w.set_program_comm(&late);
    w.broadcast_parameters();
    HostBatch six = batch(6, 5, 5 + 31 * uint64_t(r)), four = batch(4, 5, 5 + 31 * uint64_t(r)),
              bad6 = batch(6, 5, 5 + 31 * uint64_t(r)), bad4 = batch(4, 5, 5 + 31 * uint64_t(r));
    // A poisoned step's batch has the step's rows (a program per batch size: the same kind as the
    // other ranks' unpoisoned batch, so that they run it alike).
    bad6.images.f32()[17] = std::numeric_limits<float>::infinity();
    bad4.images.f32()[17] = std::numeric_limits<float>::infinity();
    bool stop = false;
    uint64_t waits = 0;
    EngineRun mine;
    StepReads pending(std::max(lag, 0), true);
    auto read = [&](bool all) {
      for (StepRead rd; pending.next(rd, all);) {
        mine.losses.push_back(rd.stats.get().loss_sum);
        mine.norms.push_back(rd.stats.grad_norm());
        mine.scales.push_back(w.scaler().enabled() ? float(rd.stats.loss_scale()) : 1.0f);
        mine.skipped.push_back(w.scaler().skipped_total());  // followed up to this step, no further
      }
    };
    for (int s = 0; s < 10; ++s) {
      if (s == 7) waits = host_waits();
      const int64_t n = s >= 4 && s < 7 ? 4 : 6;
      const bool poison = r == 0 && poisoned.count(s);
      LossStats st;
      for (int i = 0; i < k; ++i) {
        HostBatch mb;
        if (k > 1) {
          mb = batch(n, 5, 100 * uint64_t(s) + uint64_t(i) + 10000 * uint64_t(r));
          if (i == 0 && poison) mb.images.f32()[17] = std::numeric_limits<float>::infinity();
        }
        const HostBatch& hb = k > 1 ? mb : poison ? (n == 4 ? bad4 : bad6) : (n == 4 ? four : six);
        Batch b;
        b.images = hb.images;
        b.labels = hb.labels;
        b.size = n;
        b.global_size = n * ranks;
        const MicroStep m{i, k, int64_t(k) * n * ranks};
        if (injected.count(s * k + i)) w.inject_nonfinite();  // every rank, as TRAINER_INJECT_NONFINITE
        if (lag >= 0 && m.last()) {
          StepStats late = w.step(b, 0.05f / float(1 + s), 1000 + uint64_t(s * k + i), stop, m);
          mine.deferred += late.pending();
          pending.push({std::move(late)});
        } else st = w.train_step(b, 0.05f / float(1 + s), 1000 + uint64_t(s * k + i), stop, m);
        mine.fixed += w.last_step_fixed();
        mine.recorded += w.step_recorded();
      }
      if (lag >= 0) {
        read(false);
        continue;
      }
      mine.losses.push_back(st.loss_sum);
      mine.norms.push_back(w.clip().grad_norm());
      mine.scales.push_back(w.scaler().scale());
      mine.optimizer_steps.push_back(w.state().optimizer_steps());
      mine.skipped.push_back(w.scaler().skipped_total());
    }
    mine.last_waits = host_waits() - waits;
    read(true);
    mine.final_steps = w.state().optimizer_steps();
    mine.buckets = w.buckets().buckets().size();
    mine.joins = late.joins();
    w.set_program_comm(nullptr);
    replicas[size_t(r)] = w.state().download_weights();
    if (r == 0 && w.state().has_average()) mine.average = w.state().download_average();
    if (r == 0) out = std::move(mine);
  });
  out.weights = replicas[0];
  out.replicas = std::move(replicas);
  return out;
}
EngineRun train_engine(const RunSpec& e, Device device, bool fixed, const std::set<int>& poisoned, int lag = -1,
                       const std::set<int>& injected = {}) {
  return train_engine(e, std::vector<Device>{device}, fixed, poisoned, lag, injected);
}

// Every step's loss, norm, scale, step count and skip count, and the last weights, bit for bit.
void check_same(const EngineRun& a, const EngineRun& b) {
  for (size_t s = 0; s < a.losses.size(); ++s) {
    INFO("step " << s << ": loss " << a.losses[s] << " / " << b.losses[s] << ", norm " << a.norms[s] << " / "
                 << b.norms[s]);
    CHECK(same_double(a.losses[s], b.losses[s]));
    CHECK(same_double(a.norms[s], b.norms[s]));
    CHECK(a.scales[s] == b.scales[s]);
    if (!a.optimizer_steps.empty() && !b.optimizer_steps.empty()) CHECK(a.optimizer_steps[s] == b.optimizer_steps[s]);
    CHECK(a.skipped[s] == b.skipped[s]);
  }
  CHECK(a.losses.size() == b.losses.size());
  CHECK(a.final_steps == b.final_steps);
  REQUIRE(a.weights.size() == b.weights.size());
  size_t differ = 0;
  for (size_t i = 0; i < a.weights.size(); ++i) differ += std::memcmp(&a.weights[i], &b.weights[i], sizeof(float)) != 0;
  INFO(differ << " of " << a.weights.size() << " weights differ");
  CHECK(differ == 0);
  REQUIRE(a.average.size() == b.average.size());
  if (!a.average.empty()) CHECK(std::memcmp(a.average.data(), b.average.data(), a.average.size() * sizeof(float)) == 0);
}

// Loss scaling (dynamic with a growth every 2 steps, a static scale that is not a power of two)
// with skipped steps, clipping by norm (both conventions) and by value, and the two together.
struct UpdateCase {
  const char* name;
  std::vector<std::string> sets;
  std::set<int> poisoned;  // only where loss scaling skips them
};
std::vector<UpdateCase> update_cases() {
  return {
      {"dynamic loss scale, sgd", {"train.loss_scale={init_scale: 1024, growth_interval: 2}", "optimizer={type: sgd, lr: 0.05, momentum: 0.9}"}, {2, 3, 8}},
      {"clip_norm, adam (keras)", {"train.clip_norm=0.05", "optimizer={type: adam, lr: 0.01}"}, {}},
      {"clip_norm, sgd (pytorch)", {"train.clip_norm=0.05", "optimizer={type: sgd, lr: 0.05, momentum: 0.9, convention: pytorch}"}, {}},
      {"clip_value, static scale 1000, rmsprop", {"train.clip_value=0.002", "train.loss_scale=1000", "optimizer={type: rmsprop, lr: 0.01, momentum: 0.5}"}, {5}},
      {"clip_norm, dynamic scale, adamw", {"train.clip_norm=0.05", "train.loss_scale={init_scale: 4096, growth_interval: 3}", "optimizer={type: adamw, lr: 0.01}"}, {1, 6}},
      // Accumulation: the held sum kept by the earlier micro-batches' programs, added back by the last's.
      {"accumulate 2, sgd", {"train.accumulate=2", "optimizer={type: sgd, lr: 0.05, momentum: 0.9}"}, {}},
      {"accumulate 3, dynamic scale, clip_norm, adam", {"train.accumulate=3", "train.clip_norm=0.05", "train.loss_scale={init_scale: 1024, growth_interval: 2}", "optimizer={type: adam, lr: 0.01}"}, {2, 7}},
      // The moving average inside the program: every second optimizer step, not on skipped ones.
      {"ema every 2, dynamic scale, sgd", {"train.ema={decay: 0.8, every: 2}", "train.loss_scale={init_scale: 1024, growth_interval: 2}", "optimizer={type: sgd, lr: 0.05, momentum: 0.9}"}, {3, 4}},
  };
}

}  // namespace

TEST_CASE("fixed step: loss scaling and clipping decided by the step's own kernels give the ordinary step's bits (skips, both clip forms and conventions)",
          "[backends]") {
  for (const UpdateCase& c : update_cases()) {
    SECTION(c.name) {
      const RunSpec e = spec(c.sets);
      const EngineRun ordinary = train_engine(e, Device::cpu(0), false, c.poisoned);
      const EngineRun fixed = train_engine(e, Device::cpu(0), true, c.poisoned);
      const int k = e.train.accumulate;
      CHECK(ordinary.fixed == 0);
      CHECK(fixed.fixed == 10 * k);  // every micro-batch, the poisoned ones included, ran as the fixed program
      check_same(ordinary, fixed);
      // Read two steps late: the program carries the scale, its growth and the counts itself
      // (skips, growth and the moving average's cadence included), the host follows when it reads.
      check_same(ordinary, train_engine(e, Device::cpu(0), true, c.poisoned, 2));
      // Not trivial: the poisoned steps were skipped (and only they), clipping clipped.
      CHECK(fixed.skipped.back() == int64_t(c.poisoned.size()));
      CHECK(fixed.optimizer_steps.back() == 10 - int64_t(c.poisoned.size()));
      if (e.train.clip.mode == GradClipOptions::Mode::Norm)
        CHECK(*std::max_element(fixed.norms.begin(), fixed.norms.end()) > 0.05);
    }
  }
}

TEST_CASE("fixed step: an accumulated step run partly as programs, partly the ordinary way, adds up its statistics "
          "as the ordinary step does, read at once or late", "[backends]") {
  // Accumulation 3 with dynamic loss scaling: an inf asked for in the middle micro-batch of step 4
  // (a program's sums, then the host's, then a program's again), the first of step 5 (the host's,
  // then programs'), the last of step 8 (programs', then the host's); rank 0 of 1 and of 2 replicas.
  const RunSpec e = spec({"train.accumulate=3", "train.loss_scale={init_scale: 1024, growth_interval: 2}",
                          "optimizer={type: sgd, lr: 0.05, momentum: 0.9}"});
  const std::set<int> injected{4 * 3 + 1, 5 * 3, 8 * 3 + 2};
  for (const int ranks : {1, 2}) {
    INFO(ranks << " replicas");
    std::vector<Device> devices;
    for (int r = 0; r < ranks; ++r) devices.push_back(Device::cpu(r));
    const EngineRun ordinary = train_engine(e, devices, false, {}, -1, injected);
    const EngineRun fixed = train_engine(e, devices, true, {}, -1, injected);
    CHECK(ordinary.fixed == 0);
    CHECK(fixed.fixed == 10 * 3 - 3);  // every micro-batch but the three injected ran as a program
    check_same(ordinary, fixed);
    CHECK(fixed.skipped.back() == 3);  // each injected step skipped, and only they
    // Read two steps late (several ranks: the steps whose micro-batches all ran as programs, their
    // sums gathered; the three with an ordinary one are read at once, exchanged on the host). An
    // ordinary micro-batch makes the host follow every step launched before it, so the skip count
    // seen when a step is read may include a later step's: only the last is compared (losses,
    // norms, scales and weights step by step).
    EngineRun now = ordinary, late = train_engine(e, devices, true, {}, 2, injected);
    CHECK(late.deferred == (ranks == 1 ? 10 - 1 : 10 - 3));  // alone, only step 8 (whose last is the host's) read at once
    for (EngineRun* run : {&now, &late}) run->skipped.assign(run->skipped.size(), run->skipped.back());
    check_same(now, late);
  }
}

namespace {

// Several replicas with sync_bn: batch norm's statistics summed over the replicas inside the
// program too (two all-reduces in its forward, one in its backward, on the control communicator).
std::vector<UpdateCase> sync_bn_cases() {
  return {
      {"sync_bn, sgd", {"train.sync_bn=true", "optimizer={type: sgd, lr: 0.05, momentum: 0.9}"}, {}},
      {"sync_bn, accumulate 2, dynamic scale, clip_norm, adam", {"train.sync_bn=true", "train.accumulate=2", "train.clip_norm=0.05", "train.loss_scale={init_scale: 1024, growth_interval: 2}", "optimizer={type: adam, lr: 0.01}"}, {2, 7}},
  };
}

// Every update case (with several replicas also the sync_bn ones) of the replicas on `devices` (one
// GPU: alone, or listed N times) as CUDA graphs against devices.cuda_graphs: false, 10 steps each:
// the same bits; a lone replica's replayed step read at once waits for the device once (for its
// results, at its last micro-batch: the earlier ones of an accumulated step read nothing back and
// meet no other rank), read late never — alone, over a one-rank NCCL communicator or side by side.
void check_graphs_against_launched(const std::vector<Device>& devices) {
  std::vector<UpdateCase> cases = update_cases();
  if (devices.size() > 1)
    for (const UpdateCase& c : sync_bn_cases()) cases.push_back(c);
  for (const UpdateCase& c : cases) {
    INFO(c.name << ", " << devices.size() << " replica(s)");
    std::vector<std::string> sets = c.sets;
    sets.push_back("devices.tf32=false");
    const RunSpec graphs = spec(sets);
    sets.push_back("devices.cuda_graphs=false");
    const RunSpec launched = spec(sets);
    const EngineRun on = train_engine(graphs, devices, false, c.poisoned);
    const EngineRun off = train_engine(launched, devices, false, c.poisoned);
    const int k = graphs.train.accumulate;
    CHECK(on.fixed == 10 * k);
    CHECK(off.fixed == 0);
    // Steps 0 and 4 of each batch size plan, 1 and 5 record (and replay what they recorded), the
    // rest replay: 8 of 10 replayed recordings (each micro-batch kind of an accumulated step its own
    // recording). Fewer: a block handed back after a recording (a layer's buffer made again at
    // the other batch size) made it record again.
    CHECK(on.recorded == 8 * k);
    // (host_waits counts every thread's: one replica's alone are its own.)
    if (devices.size() == 1) {
      CHECK(on.last_waits == 3);
      CHECK(off.last_waits > on.last_waits);
    }
    check_same(off, on);
    for (size_t r = 1; r < devices.size(); ++r)
      CHECK(std::memcmp(on.replicas[r].data(), on.replicas[0].data(), on.replicas[0].size() * sizeof(float)) == 0);
    CHECK(on.skipped.back() == int64_t(c.poisoned.size()));
    // Read two steps late, the scale and the counts kept on the GPU meanwhile: the same bits, and a
    // replayed step never waits, accumulated or not.
    const EngineRun late = train_engine(graphs, devices, false, c.poisoned, 2);
    check_same(off, late);
    CHECK(late.deferred == 10);
    CHECK(late.last_waits == 0);
  }
}

}  // namespace

TEST_CASE("fixed step: loss scaling and clipping as CUDA graphs give the ordinary step's bits") {
  const test::TestDevice* gpu = test::test_gpu();  // a skip, with the reason, where no GPU can run
  if (!gpu) return;
  // Its loss sums and check read back together (its batch, labels and scalars go through staging
  // buffers of their own).
  check_graphs_against_launched({gpu->device});
}

TEST_CASE("fixed step: several replicas with the all-reduce and buffer broadcast inside the program give the ordinary step's bits",
          "[backends]") {
  // 2 and 3 CPU replicas (the in-process communicator summing in rank order both ways): loss
  // scaling with skips, clipping, accumulation, batch-norm statistics broadcast from rank 0, or
  // summed over the replicas (sync_bn).
  std::vector<UpdateCase> cases = update_cases();
  for (const UpdateCase& c : sync_bn_cases()) cases.push_back(c);
  for (const int ranks : {2, 3})
    for (const UpdateCase& c : cases) {
      if (ranks == 3 && c.name != std::string("accumulate 3, dynamic scale, clip_norm, adam") &&
          c.name != std::string("sync_bn, accumulate 2, dynamic scale, clip_norm, adam"))
        continue;
      SECTION(std::to_string(ranks) + " replicas, " + c.name) {
        const RunSpec e = spec(c.sets);
        std::vector<Device> devices;
        for (int r = 0; r < ranks; ++r) devices.push_back(Device::cpu(r));
        const EngineRun ordinary = train_engine(e, devices, false, c.poisoned);
        const EngineRun fixed = train_engine(e, devices, true, c.poisoned);
        const int k = e.train.accumulate;
        CHECK(ordinary.fixed == 0);
        CHECK(fixed.fixed == 10 * k);
        check_same(ordinary, fixed);
        // Every replica holds rank 0's weights, bit for bit, on both paths.
        for (int r = 1; r < ranks; ++r) {
          INFO("rank " << r);
          CHECK(std::memcmp(fixed.replicas[size_t(r)].data(), fixed.replicas[0].data(), fixed.replicas[0].size() * sizeof(float)) == 0);
          CHECK(std::memcmp(ordinary.replicas[size_t(r)].data(), ordinary.replicas[0].data(),
                            ordinary.replicas[0].size() * sizeof(float)) == 0);
        }
        CHECK(fixed.skipped.back() == int64_t(c.poisoned.size()));
        if (std::string(c.name).rfind("sync_bn", 0) == 0) {  // the statistics are the replicas' together
          std::vector<std::string> own = c.sets;
          own.erase(own.begin());
          CHECK(train_engine(spec(own), devices, true, c.poisoned).weights != fixed.weights);
        }
        // The statistics are the job's: every rank's samples counted.
        CHECK(fixed.losses.front() != 0);
        // Read two steps late: every rank's sums gathered inside the program and added up in rank
        // order when read, as the host exchange adds them — the same bits, every step pending.
        const EngineRun late = train_engine(e, devices, true, c.poisoned, 2);
        CHECK(late.deferred == 10);
        check_same(ordinary, late);
        CHECK(train_engine(e, devices, false, c.poisoned, 2).deferred == 0);  // the ordinary step: read at once
      }
    }
}

TEST_CASE("fixed step: several replicas' program summing its gradient bucket by bucket during backward (as over NCCL) "
          "gives the ordinary step's bits",
          "[backends]") {
  // Buckets of at least 262 floats (train.bucket_mb 0.001): two for this small net, each started from the
  // executor's frontier hook as backward finishes it, the held sum of an accumulated step added into
  // each bucket's range first. The sums run as called when started (the CPU's in-process
  // communicator: a bucket started before its gradients are final sums partial values) or only when
  // the program joins them (LateSums: a program that used a bucket before the join, or changed it
  // after its start, gets other values) — the two ends of when an overlapping communicator may run
  // them. Read at once and two steps late.
  for (const int ranks : {2, 3})
    for (const UpdateCase& c : update_cases()) {
      if (ranks == 3 && c.name != std::string("accumulate 3, dynamic scale, clip_norm, adam")) continue;
      SECTION(std::to_string(ranks) + " replicas, " + c.name) {
        std::vector<std::string> sets = c.sets;
        sets.push_back("train.bucket_mb=0.001");
        const RunSpec e = spec(sets);
        std::vector<Device> devices;
        for (int r = 0; r < ranks; ++r) devices.push_back(Device::cpu(r));
        const EngineRun ordinary = train_engine(e, devices, false, c.poisoned);
        for (const Buckets how : {Buckets::AsCalled, Buckets::AtJoin}) {
          INFO((how == Buckets::AsCalled ? "summed as started" : "summed when joined"));
          const EngineRun fixed = train_engine(e, devices, true, c.poisoned, -1, {}, how);
          CHECK(fixed.buckets >= 2);
          CHECK(fixed.fixed == 10 * e.train.accumulate);
          CHECK(fixed.joins == (how == Buckets::AtJoin ? 10 : 0));  // one join per updating step
          check_same(ordinary, fixed);
          for (int r = 1; r < ranks; ++r)
            CHECK(std::memcmp(fixed.replicas[size_t(r)].data(), fixed.replicas[0].data(), fixed.replicas[0].size() * sizeof(float)) == 0);
          CHECK(fixed.skipped.back() == int64_t(c.poisoned.size()));
          const EngineRun late = train_engine(e, devices, true, c.poisoned, 2, {}, how);
          CHECK(late.deferred == 10);
          check_same(ordinary, late);
        }
      }
    }
}

TEST_CASE("fixed step: a one-rank NCCL step records its all-reduce and broadcast in the CUDA graph, one GPU listed twice "
          "records its replicas' collectives in pieces") {
  const test::TestDevice* gpu = test::test_gpu();  // a skip, with the reason, where no GPU can run
  if (!gpu) return;
  ScopedEnv comm("TRAINER_COMM", "nccl");  // NCCL for one GPU: the collectives issued inside the capture
  // The statistics are the job's as the program leaves them (one rank): read late, no wait for the
  // collectives either.
  check_graphs_against_launched({gpu->device});
  // The in-process communicator (`--gpus 0,0`): each replica's program recorded in pieces, the
  // replicas meeting on the host between them (their streams waiting for each other's events), the
  // sums and copies recorded kernels: the launched step's bits, read late without a wait.
  comm.set(nullptr);
  check_graphs_against_launched({gpu->device, gpu->device});
}

TEST_CASE("fixed step: TRAINER_CUDA_GRAPHS=0 launches every step (the reference), 1 records, anything else is refused") {
  ScopedEnv graphs("TRAINER_CUDA_GRAPHS", nullptr);
  CHECK(trainee_spec(spec({})).cuda_graphs);
  CHECK_FALSE(trainee_spec(spec({"devices.cuda_graphs=false"})).cuda_graphs);
  graphs.set("0");
  CHECK_FALSE(trainee_spec(spec({})).cuda_graphs);
  // With it, the fixed program is not used even where it could run (the CPU, allowed anywhere).
  const EngineRun launched = train_engine(spec({}), Device::cpu(0), true, {});
  CHECK(launched.fixed == 0);
  graphs.set("1");
  CHECK(trainee_spec(spec({"devices.cuda_graphs=false"})).cuda_graphs);
  CHECK(train_engine(spec({}), Device::cpu(0), true, {}).fixed == 10);
  graphs.set("off");
  CHECK_THROWS_AS(trainee_spec(spec({})), cfg::ConfigError);
}
