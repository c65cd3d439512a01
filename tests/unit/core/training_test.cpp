// The single-device step: loss decreases on a learnable set, and training is bit-for-bit
// deterministic for a fixed seed.
#include <catch2/catch.hpp>

#include <cstring>

#include "core/data/loader.h"
#include "core/engine/replica.h"
#include "core/optim/schedule.h"

using namespace trainer;

namespace {

Experiment smoke() {
  return load_experiment(TRAINER_SOURCE_DIR "/configs/smoke.yaml", {"model.layers.4.filters=24"});
}

std::vector<float> train(int steps, std::vector<double>* losses = nullptr) {
  Experiment e = smoke();
  Replica rep(e, Device::cpu(), 2);
  auto ds = make_dataset(cfg::root(e.doc).child("data").child("train"), ".");
  LoaderOptions lo;
  lo.batch_size = 32;
  lo.seed = 1;
  lo.workers = 1;
  Loader loader(ds, lo);
  loader.start_epoch(0);
  Batch b;
  for (int s = 0; s < steps; ++s) {
    if (!loader.next(b)) loader.start_epoch(s), loader.next(b);
    LossStats st = rep.train_step(b.images, b.labels, 0.02f, uint64_t(s));
    if (losses) losses->push_back(st.loss_sum / double(st.count));
  }
  return rep.graph().params().download(rep.context());
}

}  // namespace

TEST_CASE("training: loss falls on the synthetic set") {
  std::vector<double> losses;
  train(60, &losses);
  double first = (losses[0] + losses[1] + losses[2]) / 3, last = (losses[57] + losses[58] + losses[59]) / 3;
  INFO("first " << first << ", last " << last);
  CHECK(last < 0.8 * first);
}

TEST_CASE("training: two runs with one seed give bit-identical weights") {
  std::vector<float> a = train(15), b = train(15);
  REQUIRE(a.size() == b.size());
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}
