// `trainer bench-data CONFIG [--workers N] [--epochs E] [--split train|val] [--set k=v]...`: loader throughput.
#include <fmt/format.h>

#include <chrono>

#include "cmd/trainer/command.h"
#include "core/io/json_text.h"
#include "core/run/data_setup.h"

namespace trainer::cli {
namespace {

// Builds the data section exactly as `trainer run` does for one replica (datasets opened, and
// decoded when cached; normalisation statistics computed; loaders with the config's workers),
// then reads whole epochs without training. Prints one JSON line:
//   open_seconds       setup_data: opening train and val (decoding them when cached) and the statistics
//   epoch_img_per_sec  per epoch: samples / seconds to read every batch (decode when not cached,
//                      augment, normalise, batch); the first after open is the "cold" one
//   cold_img_per_sec   samples / (open_seconds + first epoch's seconds)
struct BenchDataArgs {
  std::string config, split = "train";
  std::vector<std::string> sets;
  int workers = -1, epochs = 3;
};


int run_bench_data(const BenchDataArgs& a) {
  using clock = std::chrono::steady_clock;
  std::vector<std::string> sets = a.sets;
  if (a.workers >= 0) sets.push_back(fmt::format("data.workers={}", a.workers));
  RunSpec e = load_run_spec(a.config, sets);
  const auto t0 = clock::now();
  DataSetup d = setup_data(e, single_replica(e), ".");
  const double open_s = std::chrono::duration<double>(clock::now() - t0).count();
  std::vector<std::unique_ptr<Loader>>& loaders = a.split == "train" ? d.train_loaders : d.val_loaders;
  if (loaders.empty())
    throw cfg::ConfigError(a.config, "--split val: the config has no validation set (data.val or data.validation_split)");
  Loader& loader = *loaders[0];

  std::vector<double> seconds, rates;
  int64_t images = 0;
  for (int epoch = 0; epoch < a.epochs; ++epoch) {
    const auto start = clock::now();
    loader.start_epoch(epoch);
    Batch b;
    images = 0;
    while (loader.next(b)) images += b.size;
    const double s = std::chrono::duration<double>(clock::now() - start).count();
    seconds.push_back(s);
    rates.push_back(s > 0 ? double(images) / s : 0.0);
  }
  auto rounded = [](const std::vector<double>& v, int digits) {
    JsonLine out = JsonLine::array();
    for (double x : v) out.push_back(json_rounded(x, digits));
    return out;
  };
  fmt::print("{}\n", json_line({{"config", a.config},
                                 {"split", a.split},
                                 {"dataset", loader.dataset().describe()},
                                 {"workers", loader.options().workers},
                                 {"batch", loader.options().batch_size},
                                 {"images", images},
                                 {"sample_shape", loader.sample_shape().str()},
                                 {"open_seconds", json_rounded(open_s, 3)},
                                 {"epoch_seconds", rounded(seconds, 3)},
                                 {"epoch_img_per_sec", rounded(rates, 1)},
                                 {"cold_img_per_sec", json_rounded(seconds.empty() ? 0.0 : double(images) / (open_s + seconds[0]), 1)}}));
  return kOk;
}

const RegisterCommand reg_bench_data({"bench-data", "Time the data pipeline of a config: open/decode, then img/s per epoch",
                           [](CLI::App& app) {
  auto a = std::make_shared<BenchDataArgs>();
  app.add_option("config", a->config, "Experiment YAML file")->required();
  app.add_option("--set", a->sets, "Override a config key (value parsed as YAML)");
  app.add_option("--workers", a->workers, "Loader worker threads (data.workers; 0: on the reading thread)")
      ->check(CLI::Range(0, 64));
  app.add_option("--epochs", a->epochs, "Epochs to read (default 3; the first is the cold one)")->check(CLI::Range(1, 1000));
  app.add_option("--split", a->split, "Which loader to read: train (augmented) or val")
      ->check(CLI::IsMember({"train", "val"}));
  return [a] { return run_bench_data(*a); };
}});

}  // namespace
}  // namespace trainer::cli
