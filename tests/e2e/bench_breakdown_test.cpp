// End-to-end `trainer bench`: where a step's time goes (forward, backward, optimizer, all-reduce,
// input wait) adds up to ms/step, for synthetic input and --data, data and device parallel; a
// missing data set under --data is a data error.
#include <catch2/catch.hpp>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cli.h"
#include "skip.h"

using Catch::Contains;
using Catch::StartsWith;

namespace {

const std::string kSmoke = "'" TRAINER_SOURCE_DIR "/configs/smoke.yaml'";
const std::string kModelParallel = "'" TRAINER_SOURCE_DIR "/configs/model_parallel.yaml'";

// The JSON line bench prints last.
// Every part is there and not negative; the critical-path parts make up most of ms/step (the
// rest: the step-end collectives and the loop) and never more than it (10% for clock noise).
void check_parts(const nlohmann::json& j, bool split) {
  INFO(j.dump());
  for (const char* k : {"forward_backward_ms", "optimizer_ms", "allreduce_ms", "exposed_allreduce_ms", "input_wait_ms",
                        "allreduce_ms_per_step", "ms_per_step"}) {
    REQUIRE(j.contains(k));
    CHECK(j[k].get<double>() >= 0);
  }
  REQUIRE(j.contains("forward_ms"));
  REQUIRE(j.contains("backward_ms"));
  REQUIRE(j.contains("other_ms"));
  double fb = j["forward_backward_ms"].get<double>();
  if (split) {
    CHECK(j["forward_ms"].get<double>() > 0);
    CHECK(j["backward_ms"].get<double>() > 0);
    CHECK(j["forward_ms"].get<double>() + j["backward_ms"].get<double>() == Approx(fb).margin(0.01));
  } else {
    CHECK(j["forward_ms"].is_null());
    CHECK(j["backward_ms"].is_null());
  }
  const double parts = fb + j["optimizer_ms"].get<double>() + j["exposed_allreduce_ms"].get<double>() +
                       j["input_wait_ms"].get<double>();
  const double step = j["ms_per_step"].get<double>();
  CHECK(parts <= step * 1.1);
  CHECK(parts >= step * 0.5);
}

}  // namespace

TEST_CASE("e2e bench: a data-parallel step's parts add up to ms/step (synthetic input)") {
  auto r = e2e::trainer("bench " + kSmoke + " --threads 2 --steps 20 --warmup 2 --set train.batch_size=64");
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains("Step (rank 0 of 1, ms): forward ") && Contains("input wait 0.0 (synthetic input)") &&
                        Contains(" other "));
  auto j = e2e::last_json(r.out);
  check_parts(j, true);
  CHECK(j["input"] == "synthetic");
  CHECK(j["breakdown"] == "rank 0 of 1");
  CHECK(j["input_wait_ms"].get<double>() == 0);

  // --json: the JSON line alone.
  auto only = e2e::trainer("bench " + kSmoke + " --threads 2 --steps 2 --warmup 1 --json");
  INFO(only.out << only.err);
  REQUIRE(only.code == 0);
  CHECK(only.out.find("Step (") == std::string::npos);
  CHECK(e2e::last_json(only.out).contains("optimizer_ms"));
}

TEST_CASE("e2e bench: two CPU replicas report their all-reduce, the part of it exposed, and a timeline per bucket") {
  const std::string trace = e2e::temp_dir("bench_trace") + "/trace.json";
  auto r = e2e::trainer("bench " + kSmoke + " --cpu 2 --threads 1 --steps 6 --warmup 2 --set train.bucket_mb=0.001 --timeline --trace " +
                        trace);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  auto j = e2e::last_json(r.out);
  INFO(j.dump());
  CHECK(j["breakdown"] == "rank 0 of 2");
  // Rank 0's summing: 0 when rank 1's thread happened to take every piece (the timeline shows it).
  CHECK(j["allreduce_ms"].get<double>() >= 0);
  CHECK(j["allreduce_ms"].get<double>() == Approx(j["allreduce_ms_per_step"].get<double>()).margin(0.01));
  // Exposed: how long the updates waited for reductions after backward (the summing left for
  // then included); skew: waiting for the other replica's backward to reach a bucket.
  CHECK(j["exposed_allreduce_ms"].get<double>() >= 0);
  CHECK(j["skew_ms"].get<double>() >= 0);
  const double parts = j["forward_backward_ms"].get<double>() + j["optimizer_ms"].get<double>() +
                       j["exposed_allreduce_ms"].get<double>() + j["skew_ms"].get<double>() + j["input_wait_ms"].get<double>();
  CHECK(parts <= j["ms_per_step"].get<double>() * 1.1);
  // The timeline: both replicas, every bucket ready before its reduction starts, reduced before
  // the updates end, every piece taken by one of the two worker threads.
  REQUIRE(j["timeline"].size() == 2);
  int pieces = 0, here = 0;
  for (const auto& rank : j["timeline"]) {
    CHECK(rank["reduced_by"] == "worker threads");
    REQUIRE(rank["buckets"].size() > 1);  // bucket_mb 0.001: one per parameter tensor
    for (const auto& b : rank["buckets"]) {
      INFO(b.dump());
      CHECK(b["ready_ms"].get<double>() >= 0);
      CHECK(b["end_ms"].get<double>() >= b["start_ms"].get<double>());
      CHECK(b["end_ms"].get<double>() <= rank["update_end_ms"].get<double>() + 1.0);  // clocks of two threads
      pieces += b["pieces"].get<int>();
      here += b["pieces_here"].get<int>();
    }
  }
  CHECK(here * 2 == pieces);  // each rank counts every piece; each piece was taken once
  CHECK_THAT(r.out, Contains("Timeline of rank 1's last step"));
  auto t = nlohmann::json::parse(e2e::read_file(trace));
  CHECK(t["traceEvents"].size() > 10);
}

TEST_CASE("e2e bench --data: steps read the training data through the loader, epoch after epoch") {
  // 96 samples in batches of 32: three steps an epoch, so the 12 timed steps start new epochs.
  auto r = e2e::trainer("bench " + kSmoke + " --threads 2 --steps 12 --warmup 2 --data --set data.train.size=96");
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains("(training data)"));
  auto j = e2e::last_json(r.out);
  check_parts(j, true);
  CHECK(j["input"] == "data");
}

TEST_CASE("e2e bench --data: a missing data set is a data error (exit 3), synthetic input does not read it") {
  std::string dir = e2e::temp_dir("bench_nodata");
  std::string missing = " --set 'data.train={type: image_folder, path: no/such/dir}'";
  auto d = e2e::trainer("bench " + kSmoke + missing + " --steps 1 --warmup 0 --data", dir);
  CHECK(d.code == 3);
  CHECK_THAT(d.err, Contains("data error: no/such/dir: no such directory"));
  auto s = e2e::trainer("bench " + kSmoke + missing + " --steps 1 --warmup 0", dir);
  INFO(s.out << s.err);
  CHECK(s.code == 0);
}

TEST_CASE("e2e bench: device parallel reports the schedule, the updates and each stage (synthetic and --data)") {
  const std::string small = " --steps 4 --warmup 1 --set pipeline.microbatches=2 --set train.batch_size=32";
  auto r = e2e::trainer("bench " + kModelParallel + small);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains("Step (all stages, ms): forward+backward ") && Contains("stage 0 on cpu:0: busy ") &&
                        Contains("stage 1 on cpu:1: busy "));
  auto j = e2e::last_json(r.out);
  check_parts(j, false);
  CHECK(j["breakdown"] == "all stages");
  CHECK(j["input"] == "synthetic");
  REQUIRE(j["stages"].size() == 2);
  for (const auto& st : j["stages"]) {  // busy = forward + backward, both done by every stage
    CHECK(st["busy_ms"].get<double>() > 0);
    CHECK(st["forward_ms"].get<double>() > 0);
    CHECK(st["backward_ms"].get<double>() > 0);
    CHECK(st["forward_ms"].get<double>() + st["backward_ms"].get<double>() ==
          Approx(st["busy_ms"].get<double>()).margin(0.01));
  }

  auto d = e2e::trainer("bench " + kModelParallel + small + " --data --set data.train.size=96");
  INFO(d.out << d.err);
  REQUIRE(d.code == 0);
  auto jd = e2e::last_json(d.out);
  check_parts(jd, false);
  CHECK(jd["input"] == "data");
}

TEST_CASE("e2e bench: the precision is reported, and --layers names each layer's activation type") {
  auto r = e2e::trainer("bench " + kSmoke + " --threads 2 --steps 2 --warmup 1 --layers --set precision=bf16");
  INFO(r.out << r.err);
  // The CPU lacks it: refused in one line, exit 4.
  if (r.code == 4 && r.err.find("precision bf16 needs a CPU with AVX-512") != std::string::npos)
    TRAINER_SKIP(CpuFeature, "cpu bf16: " << r.err);
  REQUIRE(r.code == 0);
  CHECK(e2e::last_json(r.out)["precision"] == "bf16");
  CHECK_THAT(r.out, Contains("(2 threads, bf16)"));
  // configs/smoke.yaml: conv -> batch norm -> relu -> ... -> dense -> softmax; convolutions and the
  // layers after them keep bf16 activations, dense and the output stay f32.
  std::istringstream in(r.out);
  std::string line;
  int bf16_convs = 0, f32_dense = 0;
  while (std::getline(in, line)) {
    std::istringstream w(line);
    std::string name, type, dtype;
    if (!(w >> name >> type >> dtype)) continue;
    bf16_convs += type == "conv2d" && dtype == "bf16";
    f32_dense += type == "dense" && dtype == "f32";
  }
  CHECK(bf16_convs >= 2);
  CHECK(f32_dense >= 1);
  auto f = e2e::trainer("bench " + kSmoke + " --threads 2 --steps 2 --warmup 1 --json");
  INFO(f.out << f.err);
  REQUIRE(f.code == 0);
  CHECK(e2e::last_json(f.out)["precision"] == "fp32");
}

// A tensor that feeds several layers (each inception's input feeds two convolutions) gets its
// input gradients added by the executor after the second consumer's backward: that time is shown
// on a line of its own, not in that convolution's bwd (which it made look slower than it is).
TEST_CASE("e2e bench: --layers shows the input gradients added for a tensor that feeds several layers apart") {
  const std::string mgn = "'" TRAINER_SOURCE_DIR "/configs/minigooglenet.yaml' --set train.batch_size=2";
  auto r = e2e::trainer("bench " + mgn + " --threads 1 --steps 2 --warmup 1 --layers");
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  const std::string key = "Input gradients added where a tensor feeds several layers";
  CHECK_THAT(r.out, Contains(key));
  // configs/smoke.yaml in fp32 is a chain of one type: nothing to add or convert.
  auto chain = e2e::trainer("bench " + kSmoke + " --threads 1 --steps 2 --warmup 1 --layers");
  INFO(chain.out << chain.err);
  REQUIRE(chain.code == 0);
  CHECK_THAT(chain.out, !Contains(key));
  // Last, the step's buffers: the plan's arena holds the outputs and the output gradients (and
  // converted copies and scratch besides), none of them empty for a network that trains.
  for (const std::string& out : {r.out, chain.out}) {
    const std::string arena_key = "Step buffers (the plan's arena, one allocation per copy): ";
    const size_t at = out.find(arena_key);
    REQUIRE(at != std::string::npos);
    double arena = 0, outputs = 0, grads = 0;
    REQUIRE(std::sscanf(out.c_str() + at + arena_key.size(),
                        "%lf MiB: outputs and their converted copies %lf, output gradients %lf", &arena, &outputs,
                        &grads) == 3);
    CHECK(outputs > 0);
    CHECK(grads > 0);
    CHECK(arena >= outputs + grads - 0.1);  // each printed to 0.1 MiB
  }
}

TEST_CASE("e2e bench: a timed step allocates nothing and never waits for a device (one replica, two replicas, a pipeline, MiniGoogLeNet)") {
  const std::string mgn = "'" TRAINER_SOURCE_DIR "/configs/minigooglenet.yaml' --set train.batch_size=2";
  const std::string lstm = "'" TRAINER_SOURCE_DIR "/configs/shared_lstm.yaml' --set train.batch_size=4";
  for (const std::string& args : {kSmoke + " --cpu 1", kSmoke + " --cpu 2 --threads 1", kModelParallel, lstm, mgn}) {
    e2e::Result r = e2e::trainer("bench " + args + " --steps 3 --warmup 2 --json");
    INFO("trainer bench " << args << "\n" << r.err);
    REQUIRE(r.code == 0);
    const nlohmann::json j = e2e::last_json(r.out);
    REQUIRE(j.contains("allocations_per_step"));
    CHECK(j["allocations_per_step"].get<double>() == 0.0);
    // The CPU's ops run as they are called: the host never waits (a GPU's count: fixed_step_test).
    REQUIRE(j.contains("host_syncs_per_step"));
    CHECK(j["host_syncs_per_step"].get<double>() == 0.0);
  }
}

TEST_CASE("e2e bench: --threads 1 keeps one core busy, and the step is measured against the machine's cached ceiling") {
  const std::string cache = e2e::temp_dir("ceiling_cache");
  const std::string env = "TRAINER_CACHE_DIR='" + cache + "' ";
  auto first = e2e::trainer("bench " + kSmoke + " --threads 1 --steps 30 --warmup 3 --json", "", env);
  INFO(first.out << first.err);
  REQUIRE(first.code == 0);
  auto j = e2e::last_json(first.out);
  // CPU time over wall time of the timed steps, all threads: no second core kept busy.
  CHECK(j["cpu_cores"].get<double>() > 0.5);
  CHECK(j["cpu_cores"].get<double>() <= 1.05);
  // The ceiling: measured by this run, kept in the cache, read from it by the next.
  REQUIRE(j.contains("ceiling_gflops"));
  CHECK(j["ceiling_gflops"].get<double>() > 0);
  CHECK(j["gemm_ceiling_gflops"].get<double>() > 0);
  const double ceiling = j["ceiling_gflops"].get<double>();
  CHECK(j["ceiling_fraction"].get<double>() ==
        Approx(j["gflops_per_sec"].get<double>() / ceiling).margin(e2e::fraction_rounding(j, ceiling)));
  CHECK(j["ceiling_cached"] == false);
  const std::string cached = e2e::read_file(cache + "/ceilings.json");
  CHECK_THAT(cached, Contains("| 1 threads | fp32") && Contains("conv_gflops"));
  auto second = e2e::trainer("bench " + kSmoke + " --threads 1 --steps 5 --warmup 1", "", env);
  INFO(second.out << second.err);
  REQUIRE(second.code == 0);
  CHECK_THAT(second.out, Contains("Ceiling: ") && Contains("measured before on this machine"));
  CHECK(e2e::last_json(second.out)["ceiling_cached"] == true);
  // TRAINER_CEILING=off: no ceiling.
  auto off = e2e::trainer("bench " + kSmoke + " --threads 1 --steps 5 --warmup 1 --json", "", env + "TRAINER_CEILING=off ");
  REQUIRE(off.code == 0);
  CHECK_FALSE(e2e::last_json(off.out).contains("ceiling_gflops"));
}

TEST_CASE("e2e bench: a cached ceiling the run beats was measured under load, and is measured again") {
  const std::string cache = e2e::temp_dir("ceiling_stale");
  const std::string env = "TRAINER_CACHE_DIR='" + cache + "' ";
  auto first = e2e::trainer("bench " + kSmoke + " --threads 1 --steps 5 --warmup 1 --json", "", env);
  REQUIRE(first.code == 0);
  const double measured = e2e::last_json(first.out)["ceiling_gflops"].get<double>();
  // The cache as a measurement beside another process would leave it: far below this machine's.
  nlohmann::json c = nlohmann::json::parse(e2e::read_file(cache + "/ceilings.json"));
  REQUIRE(c.size() == 1);
  for (auto& e : c) e["conv_gflops"] = 0.01;
  e2e::write_file(cache + "/ceilings.json", c.dump(1));
  auto r = e2e::trainer("bench " + kSmoke + " --threads 1 --steps 5 --warmup 1 --json", "", env);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.err, Contains("over the cached ceiling of 0.0: measured it again:"));
  const nlohmann::json j = e2e::last_json(r.out);
  CHECK(j["ceiling_cached"] == false);
  CHECK(j["ceiling_gflops"].get<double>() > 0.5 * measured);
  CHECK(j["ceiling_fraction"].get<double>() < 1.5);
  // Stored: the next run reads the new value.
  const nlohmann::json after = nlohmann::json::parse(e2e::read_file(cache + "/ceilings.json"));
  for (const auto& e : after) CHECK(e["conv_gflops"].get<double>() > 0.5 * measured);
  // A cached ceiling the run does not beat is kept (no note, read from the cache).
  auto kept = e2e::trainer("bench " + kSmoke + " --threads 1 --steps 5 --warmup 1 --json", "", env);
  REQUIRE(kept.code == 0);
  CHECK_THAT(kept.err, !Contains("measured it again"));
  CHECK(e2e::last_json(kept.out)["ceiling_cached"] == true);
}

TEST_CASE("e2e devices: idle OpenMP threads spin briefly by default, and a user's wait policy is kept") {
  auto d = e2e::trainer("devices", "", "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u TRAINER_GOMP_SPINCOUNT_DEFAULT ");
  INFO(d.out << d.err);
  REQUIRE(d.code == 0);
  CHECK_THAT(d.out, Contains("cpu: idle OpenMP threads: GOMP_SPINCOUNT=3000 (trainer's default"));
  auto p = e2e::trainer("devices", "", "env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=passive ");
  REQUIRE(p.code == 0);
  CHECK_THAT(p.out, Contains("cpu: idle OpenMP threads: OMP_WAIT_POLICY=passive (from the environment)"));
}

TEST_CASE("e2e bench: OMP_PROC_BIND or OMP_PLACES would bind every compute thread to one core: removed, in one line") {
  // libgomp binds the first thread to its first place as it loads, and every thread trainer starts
  // inherits that core (cpu_cores 1.0 with --threads 2 before trainer removed the binding). What
  // is checked is that cause, the process's affinity mask (`trainer devices`: "cpu: N logical
  // cores", the cores in it), not the cores a bench kept busy, which another process's load on the
  // machine would lower.
  const std::string mgn = "'" TRAINER_SOURCE_DIR "/configs/minigooglenet.yaml' --set train.batch_size=8 --threads 2";
  auto unbound = e2e::trainer("devices", "", "env -u OMP_PROC_BIND -u OMP_PLACES ");
  REQUIRE(unbound.code == 0);
  const std::string cores_line = unbound.out.substr(0, unbound.out.find('\n'));
  REQUIRE_THAT(cores_line, StartsWith("cpu: "));
  if (std::thread::hardware_concurrency() < 2) WARN("one core here: a mask of one core is what any run gets");
  for (const std::string env : {"OMP_PROC_BIND=close OMP_PLACES=cores ", "OMP_PLACES=cores ", "OMP_PROC_BIND=true "}) {
    auto r = e2e::trainer("bench " + mgn + " --steps 2 --warmup 1 --json", "", "env " + env);
    INFO(env << "\n" << r.out << r.err);
    REQUIRE(r.code == 0);
    CHECK_THAT(r.err, Contains("not applied: trainer's compute threads would all inherit the one core"));
    auto d = e2e::trainer("devices", "", "env " + env);
    INFO(d.out << d.err);
    REQUIRE(d.code == 0);
    CHECK(d.out.substr(0, d.out.find('\n')) == cores_line);  // every core of the unbound run, not one
  }
  // Binding switched off, or none asked for: nothing removed, nothing said.
  auto off = e2e::trainer("bench " + kSmoke + " --steps 2 --warmup 1 --json", "", "env OMP_PROC_BIND=false OMP_PLACES=cores ");
  REQUIRE(off.code == 0);
  CHECK_THAT(off.err, !Contains("not applied"));
}
