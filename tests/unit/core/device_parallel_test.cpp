// Device-parallel invariants on virtual CPU devices: a model cut over devices trains exactly as
// on one device; GPipe micro-batches (M = 1, 2, 4) match one pass over the batch for BN-free
// nets; a shared layer's gradient is the sum of its uses' (on one device and across devices).
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "../cpu_bf16.h"
#include "core/run/plan.h"
#include "core/runtime/device_parallel/pipeline_copy.h"
#include "core/runtime/data_parallel/replica.h"
#include "core/runtime/data_parallel/replica_group.h"
#include "core/runtime/strategy.h"
#include "pipeline_models.h"
#include "skip.h"

using namespace trainer;

using namespace trainer::pipeline_test;

TEST_CASE("device parallel: a CNN over two devices trains as on one (10 steps, 1e-5)", "[device_parallel]") {
  RunSpec e = experiment(kCnn);
  REQUIRE(e.placement.devices == std::vector<std::string>{"cpu:0", "cpu:1"});
  auto one = train_single(e, 10, 5), two = train_placed(e, 10, 5);
  double d = max_diff(one, two);
  WARN("CNN on 2 virtual CPU devices vs 1 device after 10 SGD steps: max |dw| = " << d);
  CHECK(d <= 1e-5);
}

TEST_CASE("device parallel: a transformer block over two devices trains as on one, and with M = 3 micro-batches "
          "(10 steps, 1e-5)",
          "[device_parallel]") {
  RunSpec e = experiment(kTransformer);
  REQUIRE(e.placement.devices == std::vector<std::string>{"cpu:0", "cpu:1"});
  auto one = train_single(e, 10, 5);
  const double d1 = max_diff(one, train_placed(e, 10, 5));
  RunSpec m3 = experiment(kTransformer, {"pipeline.microbatches=3"});
  const double d3 = max_diff(one, train_placed(m3, 10, 5));
  WARN("transformer block on 2 virtual CPU devices vs 1 device after 10 SGD steps: max |dw| = " << d1 << " (M = 1), "
       << d3 << " (M = 3)");
  CHECK(d1 <= 1e-5);
  CHECK(d3 <= 1e-5);
}

TEST_CASE("device parallel: a byte-level GPT (a label per position) over two devices trains as on one, and with "
          "M = 3 micro-batches (10 steps, 1e-5)",
          "[device_parallel]") {
  RunSpec e = experiment(kGpt);
  auto one = train_single(e, 10, 256);
  const double d1 = max_diff(one, train_placed(e, 10, 256));
  const double d3 = max_diff(one, train_placed(experiment(kGpt, {"pipeline.microbatches=3"}), 10, 256));
  WARN("GPT on 2 virtual CPU devices vs 1 device after 10 SGD steps: max |dw| = " << d1 << " (M = 1), " << d3
                                                                                 << " (M = 3)");
  CHECK(d1 <= 1e-5);
  CHECK(d3 <= 1e-5);
  CHECK(max_diff(one, train_single(experiment(kGpt, {"seed=8"}), 10, 256)) > 1e-3);  // the weights do train apart
}

// The output softmax is the loss's own (it reads the logits): neither a replica nor a pipeline's
// last stage runs its node or plans buffers for it (for GPT-2's 50257-way head, three 786 MiB
// buffers), and both still train as above.
TEST_CASE("device parallel: the loss's softmax node has no buffers, on one device and on the last stage", "[device_parallel]") {
  RunSpec e = experiment(kGpt);
  Batch b = random_batch(e, 12, 256, 100);
  auto softmax_unplanned = [](Executor& x) {
    const int out = int(x.nodes().size()) - 1;
    INFO("the graph's last node: " << x.layer(out).name());
    REQUIRE(x.layer(out).type() == "softmax");
    CHECK(x.last_node() == out - 1);
    CHECK_FALSE(x.plan().act[size_t(out)].defined());
    CHECK_FALSE(x.plan().grad[size_t(out)].defined());
    CHECK(x.plan().act[size_t(out - 1)].defined());  // the logits
    CHECK(x.plan().grad[size_t(out - 1)].defined());
  };
  Replica r(trainee_spec(e), Device::cpu(0), 1);
  r.train_step(b.images, b.labels, 0.05f, 0);
  softmax_unplanned(r.executor());
  PipelineCopy w(trainee_spec(e), cpus(e), 1);
  bool stop = false;
  w.train_step(rows(b, 0, 12, 12), 0.05f, 0, stop, MicroStep{0, 1, 0});
  int with_loss = 0;  // the stage whose graph ends with the softmax (the others end at a boundary)
  for (int k = 0; k < w.stages(); ++k) {
    Executor& x = w.stage(k).graph();
    if (x.layer(int(x.nodes().size()) - 1).type() != "softmax") continue;
    ++with_loss;
    softmax_unplanned(x);
  }
  CHECK(with_loss == 1);
}

// Pads (train.ignore_class -100, a different share of each batch's positions every step): the
// pipeline's stages score the same positions and divide by the step's scored count as one device.
TEST_CASE("device parallel: a GPT on padded sequences (ignore_class) trains as on one device, M = 1 and 3, and as "
          "2 hybrid copies", "[device_parallel]") {
  RunSpec e = experiment(kGpt, {"train.ignore_class=-100"});
  REQUIRE(e.train.ignore_class == -100);
  auto one = train_single(e, 10, 256);
  const double d1 = max_diff(one, train_placed(e, 10, 256));
  const double d3 = max_diff(one, train_placed(experiment(kGpt, {"train.ignore_class=-100", "pipeline.microbatches=3"}), 10, 256));
  bool identical = true;
  const double dh = max_diff(one, train_hybrid(e, 2, 10, 256, &identical));
  WARN("GPT with pads on 2 virtual CPU devices vs 1 device after 10 SGD steps: max |dw| = " << d1 << " (M = 1), " << d3
                                                                                        << " (M = 3), " << dh
                                                                                        << " (2 hybrid copies)");
  CHECK(d1 <= 1e-5);
  CHECK(d3 <= 1e-5);
  CHECK(dh <= 1e-5);
  CHECK(identical);
  CHECK(max_diff(one, train_single(experiment(kGpt), 10, 256)) > 1e-3);  // the pads change the training
}

TEST_CASE("device parallel: a boundary whose reader gets no gradient sends zeros back, M = 1 and 3", "[device_parallel]") {
  for (int M : {1, 3}) {
    RunSpec e = experiment(kDeadEnd, {"pipeline.microbatches=" + std::to_string(M)});
    REQUIRE(e.placement.devices == std::vector<std::string>{"cpu:0", "cpu:1"});
    auto one = train_single(e, 4, 5), two = train_placed(e, 4, 5);
    INFO("M = " << M);
    CHECK(max_diff(one, two) <= 1e-6);
    CHECK(two.at("a/kernel") == one.at("a/kernel"));  // a's gradient is zero: its weights never move
  }
}

TEST_CASE("device parallel: clip_norm (one norm over every stage's gradients) and clip_value train as on one device",
          "[device_parallel]") {
  for (const char* clip : {"train.clip_norm=0.05", "train.clip_value=0.002"}) {
    INFO(clip);
    RunSpec e = experiment(kCnn, {clip});
    std::vector<double> n1, n2;
    auto one = train_worker(e, 10, 5, &n1), two = train_placed(e, 10, 5, &n2);
    double d = max_diff(one, two);
    WARN("CNN on 2 virtual CPU devices vs 1 device after 10 SGD steps with " << clip << ": max |dw| = " << d);
    CHECK(d <= 1e-5);
    REQUIRE(n1.size() == n2.size());
    for (size_t s = 0; s < n1.size(); ++s) {
      CHECK(n1[s] > 0.05);  // in force at every step
      CHECK(std::abs(n1[s] - n2[s]) <= 1e-5 * n1[s]);
    }
    CHECK(max_diff(two, train_placed(experiment(kCnn), 10, 5)) > 1e-3);  // and it changes the result
  }
  RunSpec lstm = experiment(kSharedLstm, {"train.clip_norm=0.01"});
  double d = max_diff(train_worker(lstm, 10, 2), train_placed(lstm, 10, 2));
  WARN("shared LSTM on 3 virtual CPU devices vs 1 device after 10 RMSprop steps with clip_norm 0.01: max |dw| = " << d);
  CHECK(d <= 1e-5);
}

TEST_CASE("hybrid: R copies of a pipeline train as one copy with the whole batch and as one device (10 steps, 1e-5)",
          "[device_parallel]") {
  for (const char* yaml : {kCnn, kSharedLstm}) {
    const bool lstm = yaml == kSharedLstm;
    for (int copies : {2, 3}) {
      for (int M : {1, 2}) {
        RunSpec e = experiment(yaml, {"pipeline.microbatches=" + std::to_string(M)});
        bool same = false;
        auto hybrid = train_hybrid(e, copies, 10, lstm ? 2 : 5, &same);
        auto one_copy = train_placed(e, 10, lstm ? 2 : 5);
        auto single = train_single(e, 10, lstm ? 2 : 5);
        const double d_copy = max_diff(hybrid, one_copy), d_single = max_diff(hybrid, single);
        WARN((lstm ? "shared LSTM" : "CNN") << ": hybrid " << copies << " copies x " << e.placement.devices.size()
             << " stages, M = " << M << ", vs one pipeline with the whole batch: max |dw| = " << d_copy
             << "; vs one device: " << d_single);
        CHECK(same);
        CHECK(d_copy <= 1e-5);
        CHECK(d_single <= 1e-5);
      }
    }
  }
}

TEST_CASE("hybrid with loss scaling: an inf on copy 0 reaches every copy through the sum, and all skip the step", "[device_parallel]") {
  RunSpec e = experiment(kCnn, {"train.loss_scale=dynamic", "pipeline.microbatches=2"});
  bool same = false;
  auto hybrid = train_hybrid(e, 2, 10, 5, &same, 3);
  auto one_copy = train_placed(e, 10, 5, nullptr, 3);
  const double d = max_diff(hybrid, one_copy);
  WARN("CNN, hybrid 2 x 2 with dynamic loss scaling and an inf at step 3 vs one pipeline: max |dw| = " << d);
  CHECK(same);
  CHECK(d <= 1e-5);
  CHECK(max_diff(one_copy, train_placed(e, 10, 5)) > 1e-4);  // the skipped step shows
}

TEST_CASE("hybrid with sync_bn: batch norm over the copies trains as one copy with the whole batch (M = 1)", "[device_parallel]") {
  // conv1 -> batch norm on stage 1; without sync each copy would normalise by its own half batch.
  const std::string bn = std::string(kCnn).replace(std::string(kCnn).find("    - {name: relu1"), 0,
                                                   "    - {name: bn, type: batchnorm}\n");
  RunSpec synced = experiment(bn, {"train.sync_bn=true"});
  bool same = false;
  auto hybrid = train_hybrid(synced, 2, 10, 5, &same);
  auto one_copy = train_placed(experiment(bn), 10, 5);
  const double d = max_diff(hybrid, one_copy);
  bool same_local = false;
  const double local = max_diff(train_hybrid(experiment(bn), 2, 10, 5, &same_local), one_copy);
  WARN("CNN with batch norm, hybrid 2 copies x 2 stages with sync_bn vs one pipeline with the whole batch: max |dw| = "
       << d << " (without sync_bn: " << local << ")");
  CHECK(same);
  CHECK(d <= 1e-5);
  CHECK(local > 1e-4);  // the control: per-copy statistics differ
}

TEST_CASE("device parallel in bf16: the boundary stays f32 and the CNN trains as on one device", "[device_parallel]") {
  // On one device the pool's output is bf16; placed, it is the boundary and stays f32 (keep_f32),
  // and conv2 on the other device converts it to bf16 as it reads it: the same values, since the
  // maximum of bf16 values is one of them. Gradients cross back as f32 and are converted where the
  // single graph would have stored bf16. So the two agree as closely as in fp32, while bf16 itself
  // moves the weights far more than that from fp32's.
  if (!test::cpu_bf16_refusal().empty()) TRAINER_SKIP(CpuFeature, test::cpu_bf16_skip_message());
  RunSpec e = experiment(kCnn, {"precision=bf16"});
  REQUIRE(e.precision == Precision::BF16);
  auto one = train_single(e, 10, 5), two = train_placed(e, 10, 5);
  double d = max_diff(one, two), from_fp32 = max_diff(one, train_single(experiment(kCnn), 10, 5));
  WARN("bf16 CNN on 2 virtual CPU devices vs 1 device after 10 SGD steps: max |dw| = " << d << " (bf16 vs fp32 on one device: "
       << from_fp32 << ")");
  CHECK(d <= 1e-5);
  CHECK(from_fp32 > 1e-4);
}

TEST_CASE("device parallel: GPipe micro-batches M = 2, 4 match M = 1 (10 steps, 1e-5)", "[device_parallel]") {
  auto base = train_placed(experiment(kCnn), 10, 5);
  for (int m : {2, 4}) {
    RunSpec e = experiment(kCnn, {"pipeline.microbatches=" + std::to_string(m)});
    REQUIRE(e.microbatches == m);
    double d = max_diff(base, train_placed(e, 10, 5));
    WARN("CNN, " << m << " micro-batches vs 1 after 10 SGD steps: max |dw| = " << d);
    CHECK(d <= 1e-5);
  }
}

TEST_CASE("device parallel: the shared-LSTM model over three devices trains as on one", "[device_parallel]") {
  RunSpec e = experiment(kSharedLstm);
  REQUIRE(e.placement.devices.size() == 3);
  auto one = train_single(e, 10, 2);
  REQUIRE(one.count("lstm_a/kernel"));
  REQUIRE_FALSE(one.count("lstm_b/kernel"));  // one parameter set for both uses
  for (int m : {1, 3}) {
    RunSpec p = experiment(kSharedLstm, {"pipeline.microbatches=" + std::to_string(m)});
    double d = max_diff(one, train_placed(p, 10, 2));
    WARN("shared LSTM on 3 virtual CPU devices (" << m << " micro-batches) vs 1 device after 10 RMSprop steps: max |dw| = " << d);
    CHECK(d <= 1e-5);
  }
}

TEST_CASE("shared layers: the gradient is the sum of both uses' gradients", "[device_parallel]") {
  // The same model without sharing: lstm_b has its own parameters, set equal to lstm_a's.
  std::string unshared = kSharedLstm;
  unshared.replace(unshared.find("{name: lstm_b, share: lstm_a, inputs: [b]}"), 42,
                   "{name: lstm_b, type: lstm, units: 6, inputs: [b]}");
  RunSpec shared = experiment(kSharedLstm), separate = experiment(unshared);
  Batch b = random_batch(input_shapes(shared), 7, 2, 42);

  Replica rs(trainee_spec(shared), Device::cpu(0), 1), ru(trainee_spec(separate), Device::cpu(0), 1);
  {  // separate's lstm_b := lstm_a, everything else equal by name (same seed)
    std::vector<float> w = ru.state().download_weights();
    auto src = by_name(rs.state());
    for (const ParamEntry& p : ru.state().entries()) {
      std::string from = p.name.rfind("lstm_b/", 0) == 0 ? "lstm_a/" + p.name.substr(7) : p.name;
      std::copy(src.at(from).begin(), src.at(from).end(), w.begin() + p.offset);
    }
    ru.state().upload_weights(w);
  }
  auto grads = [](Replica& r) {
    std::vector<float> g(size_t(r.executor().params().trainable_floats()));
    r.context().copy_to_host(g.data(), r.executor().params().grads().data(), g.size() * sizeof(float));
    std::map<std::string, std::vector<float>> out;
    for (const ParamEntry& p : r.executor().params().entries())
      if (p.spec.trainable) out[p.name].assign(g.begin() + p.offset, g.begin() + p.offset + p.spec.shape.numel());
    return out;
  };
  rs.compute_gradients(b.images, b.labels, 1.0f / 7, 0);
  ru.compute_gradients(b.images, b.labels, 1.0f / 7, 0);
  auto gs = grads(rs), gu = grads(ru);
  double worst = 0, scale = 0;
  for (const char* p : {"kernel", "recurrent_kernel", "bias"}) {
    const auto &sum = gs.at(std::string("lstm_a/") + p), &a = gu.at(std::string("lstm_a/") + p), &bb = gu.at(std::string("lstm_b/") + p);
    for (size_t i = 0; i < sum.size(); ++i) {
      worst = std::max(worst, double(std::fabs(sum[i] - (a[i] + bb[i]))));
      scale = std::max(scale, double(std::fabs(a[i])) + std::fabs(bb[i]));
    }
  }
  WARN("shared LSTM gradient vs the sum of two separate LSTMs' (one device): max diff " << worst << " (gradients up to " << scale << ")");
  CHECK(scale > 1e-4);
  CHECK(worst <= 1e-6);

  // Across devices: each copy holds the sum after a step's gradients.
  PipelineCopy w(trainee_spec(shared), cpus(shared), 1);
  w.compute_gradients(b, 0);
  for (int s = 0; s < w.stages(); ++s) {
    ParamStore& ps = w.stage(s).params();
    for (const ParamEntry& p : ps.entries()) {
      if (p.name.rfind("lstm_a/", 0) != 0 || !p.spec.trainable) continue;
      std::vector<float> g(size_t(p.spec.shape.numel()));
      Tensor gv = ps.grad_view(size_t(&p - &ps.entries()[0]));
      w.stage(s).context().copy_to_host(g.data(), gv.data(), gv.bytes());
      const auto& sum = gs.at(p.name);
      double d = 0;
      for (size_t i = 0; i < g.size(); ++i) d = std::max(d, double(std::fabs(g[i] - sum[i])));
      INFO("stage " << s << " " << p.name);
      CHECK(d <= 1e-6);
    }
  }
}

TEST_CASE("device parallel: config errors name the place", "[device_parallel]") {
  auto fails = [](const std::vector<std::string>& sets, const std::string& want) {
    try {
      experiment(kCnn, sets);
      FAIL("no error for " << want);
    } catch (const cfg::ConfigError& x) {
      CHECK_THAT(std::string(x.what()), Catch::Contains(want));
    }
  };
  fails({"placement={conv3: cpu:1}"}, "placement names 'conv3', which is not a layer or block of the model (did you mean 'conv1'");
  fails({"placement={conv1: tpu:0}"}, "'tpu:0' is not a device: use cpu, cpu:N (a virtual CPU device) or gpu:N");
  fails({"strategy=data_parallel"}, "'placement' needs strategy: device_parallel or hybrid");
  fails({"pipeline.microbatches=0"}, "microbatches");
}

TEST_CASE("stage threads: a failing stage stops the waiting ones and its error reaches the caller", "[device_parallel]") {
  Mailbox box;
  StageThreads threads(3, [](int) {}, box);
  box.reset(4);
  auto t0 = std::chrono::steady_clock::now();
  try {
    threads.run_all([&](int s) {
      if (s == 1) throw std::runtime_error("stage one broke");
      box.wait(size_t(s));  // never posted: only the abort wakes these
    });
    FAIL("no exception");
  } catch (const PipelineAborted&) {
    FAIL("the abort of the waiting stages hid the first failure");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == "stage one broke");
  }
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  // The threads are usable again afterwards.
  box.reset(3);
  std::atomic<int> ran{0};
  threads.run_all([&](int s) {
    box.post(size_t(s));
    box.wait(size_t((s + 1) % 3));
    ++ran;
  });
  CHECK(ran == 3);
}

TEST_CASE("shared layers under data parallelism: 2 replicas x 6 match 1 replica x 12 (gradient buckets wait for the owner)",
          "[device_parallel]") {
  // Buckets are all-reduced as backward finishes them: a shared layer's gradient is final only
  // after its first use's backward has added the second use's, which the bucket must wait for.
  RunSpec e = experiment(kSharedLstm, {"strategy=data_parallel", "placement=null", "train.bucket_mb=0.001"});
  auto one = train_single(e, 10, 2);
  e.train.batch_size = 6;
  ReplicaGroup group(trainee_spec(e), {Device::cpu(0), Device::cpu(1)}, 1);
  std::vector<std::vector<float>> finals(2);
  group.run([&](ReplicaCopy& w) {
    w.broadcast_parameters();
    bool stop = false;
    for (int s = 0; s < 10; ++s) {
      Batch all = random_batch(input_shapes(e), 12, 2, uint32_t(100 + s)), mine;
      mine.images = all.images.slice(6 * w.rank(), 6 * w.rank() + 6);
      mine.labels = all.labels.slice(6 * w.rank(), 6 * w.rank() + 6);
      mine.size = 6;
      mine.global_size = 12;
      w.train_step(mine, 0.05f, uint64_t(s), stop);
    }
    finals[size_t(w.rank())] = w.state().download_weights();
  });
  CHECK(finals[0] == finals[1]);
  std::map<std::string, std::vector<float>> two;
  for (const ParamEntry& p : group.worker(0).state().entries())
    two[p.name].assign(finals[0].begin() + p.offset, finals[0].begin() + p.offset + p.spec.shape.numel());
  double d = max_diff(one, two);
  WARN("shared LSTM, 2 data-parallel replicas vs 1 after 10 RMSprop steps: max |dw| = " << d);
  CHECK(d <= 1e-5);
}

TEST_CASE("device parallel: CPU stages leave one core per GPU stage's thread, --threads is taken as given", "[device_parallel]") {
  const StrategyType& t = strategy_type(StrategyKind::DeviceParallel);
  const int hw = std::max(1, int(std::thread::hardware_concurrency()));
  DevicesSpec d;
  CHECK(t.threads(d, {Device::cpu(0)}) == hw);
  CHECK(t.threads(d, {Device::cpu(0), Device::cpu(1)}) == std::max(1, hw / 2));
  CHECK(t.threads(d, {Device::cuda(0), Device::cpu(0)}) == std::max(1, hw - 1));
  CHECK(t.threads(d, {Device::cuda(0), Device::cuda(1), Device::cpu(0)}) == std::max(1, hw - 2));
  CHECK(t.threads(d, {Device::cuda(0), Device::cuda(1)}) == hw);  // no CPU stage: nothing to share
  d.threads = 3;
  CHECK(t.threads(d, {Device::cuda(0), Device::cpu(0)}) == 3);
}
