// Several replicas agree, as a step starts, on a stop one of them asked for and on reading every
// step — for steps run as fixed programs read late and for ordinary steps, with accumulation too.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/run/plan.h"
#include "core/runtime/data_parallel/replica_group.h"
#include "core/runtime/step_stats.h"
#include "fixed_step_util.h"

using namespace trainer;
using namespace trainer::test_fixed;

TEST_CASE("fixed step: several replicas agree on a stop and on reading every step when the step starts, as programs "
          "read late and the ordinary way", "[backends]") {
  // Rank 1 asks to stop at step 3 (with accumulation 2: at its earlier micro-batch, held for the
  // last), rank 0 to read every step after step 5 (its watchdog's snapshot): every rank is told both
  // at that step and at no other, its statistics pending on the program path.
  for (const int k : {1, 2})
    for (const bool fixed : {false, true}) {
      INFO("accumulate " << k << (fixed ? ", programs" : ", ordinary"));
      const RunSpec e = spec({"train.accumulate=" + std::to_string(k), "optimizer={type: sgd, lr: 0.05}"});
      ReplicaGroup group(trainee_spec(e), {Device::cpu(0), Device::cpu(1)}, 1);
      std::vector<std::vector<int>> stops(2), reads(2);
      std::vector<int> pending_steps(2, 0);
      // Each rank's counts as read, checked on this thread (Catch's assertions are not thread-safe:
      // a CHECK on two replica threads at once was an ASan/UBSan report in CI).
      std::vector<std::vector<int64_t>> counts(2);
      group.run([&](ReplicaCopy& w) {
        const int r = w.rank();
        w.set_fixed_anywhere(fixed);
        w.broadcast_parameters();
        const HostBatch hb = batch(6, 5, 5 + 31 * uint64_t(r));
        StepReads pending(2, true);
        for (int s = 0; s < 8; ++s)
          for (int i = 0; i < k; ++i) {
            Batch b;
            b.images = hb.images;
            b.labels = hb.labels;
            b.size = 6;
            b.global_size = 12;
            const MicroStep m{i, k, int64_t(k) * 12};
            bool stop = r == 1 && s == 3 && i == 0, read = r == 0 && s == 5 && m.last();
            StepStats st = w.step(b, 0.05f, 1000 + uint64_t(s * k + i), stop, m, &read);
            if (stop) stops[size_t(r)].push_back(s);
            if (read) reads[size_t(r)].push_back(s);
            if (!m.last()) continue;
            pending_steps[size_t(r)] += st.pending();
            pending.push({std::move(st)});
            for (StepRead rd; pending.next(rd, read);) counts[size_t(r)].push_back(rd.stats.get().count);
          }
        for (StepRead rd; pending.next(rd, true);) counts[size_t(r)].push_back(rd.stats.get().count);
      });
      for (int r = 0; r < 2; ++r) {
        INFO("rank " << r);
        CHECK(counts[size_t(r)] == std::vector<int64_t>(8, int64_t(12 * k)));  // every step read once, whole
        CHECK(stops[size_t(r)] == std::vector<int>{3});
        CHECK(reads[size_t(r)] == std::vector<int>{5});
        CHECK(pending_steps[size_t(r)] == (fixed ? 8 : 0));
      }
    }
}
