// train.class_weight (Keras's fit(class_weight=)): the training loss's rows weighted by their class, Σ w·loss / N; validation unweighted; one and two replicas, a pipeline, binary; the config's errors.
#include <catch2/catch.hpp>

#include <string>

#include "cli.h"
#include "small_cnn.h"

namespace {

// Plain SGD (w -= lr·g): doubling every class's weight doubles every gradient exactly, as doubling
// the rate does, so the two runs' weights agree bit for bit.
std::string config(const std::string& train_extra, const std::string& lr) {
  e2e::SmallCnn c;
  c.name = "cw";
  c.val = true;
  c.train = "{epochs: 2, batch_size: 32" + train_extra + "}";
  c.optimizer = "{type: sgd, lr: " + lr + "}";
  return c.yaml();
}

}  // namespace

TEST_CASE("e2e class_weight: uniform weights of 2 train as a doubled rate (1 and 2 replicas, a pipeline), the training loss doubled, validation unweighted") {
  std::string dir = e2e::temp_dir("class_weight");
  e2e::write_file(dir + "/w.yaml", config(", class_weight: {0: 2, 1: 2, 2: 2, 3: 2}", "0.05"));
  e2e::write_file(dir + "/r.yaml", config("", "0.1"));
  // One replica, two, and a pipeline over two CPU devices (its last stage's loss) in 4 micro-batches.
  const std::string pipeline = " --set strategy=device_parallel --set 'placement={conv1: cpu:0, gap: cpu:1}' "
                               "--set 'pipeline={microbatches: 4}'";
  for (std::string replicas : {"1", "2", "pipeline"}) {
    INFO(replicas);
    const std::string w = "w" + replicas, r = "r" + replicas;
    const std::string how = replicas == "pipeline" ? pipeline : " --cpu " + replicas;
    auto weighted = e2e::trainer("run w.yaml --run-dir " + w + how, dir);
    INFO(weighted.out << weighted.err);
    REQUIRE(weighted.code == 0);
    CHECK_THAT(weighted.out, Catch::Contains("Class weights {0: 2, 1: 2, 2: 2, 3: 2} (other classes 1) on the training loss"));
    auto rate = e2e::trainer("run r.yaml --run-dir " + r + how, dir);
    INFO(rate.out << rate.err);
    REQUIRE(rate.code == 0);
    CHECK(e2e::model_weights(dir + "/" + w + "/checkpoints/epoch-0002.safetensors") ==
          e2e::model_weights(dir + "/" + r + "/checkpoints/epoch-0002.safetensors"));
    auto mw = e2e::last_metrics(dir + "/" + w), mr = e2e::last_metrics(dir + "/" + r);
    CHECK(mw["loss"] == Approx(2 * mr["loss"]).epsilon(1e-6));  // Keras logs the weighted training loss
    CHECK(mw["accuracy"] == mr["accuracy"]);                      // and unweighted metrics
    CHECK(mw["val_loss"] == mr["val_loss"]);                      // validation: no class weights
    CHECK(mw["val_accuracy"] == mr["val_accuracy"]);
  }
}

TEST_CASE("e2e class_weight: a zero weight silences its class, the list form, an unweighted class keeps weight 1") {
  std::string dir = e2e::temp_dir("class_weight_zero");
  e2e::write_file(dir + "/c.yaml", config("", "0.1"));
  // Every class at 0: no gradient at all, so the weights are those of a run at rate 0.
  auto zero = e2e::trainer("run c.yaml --run-dir zero --set 'train.class_weight=[0, 0, 0, 0]'", dir);
  INFO(zero.out << zero.err);
  REQUIRE(zero.code == 0);
  auto still = e2e::trainer("run c.yaml --run-dir still --set optimizer.lr=0", dir);
  REQUIRE(still.code == 0);
  CHECK(e2e::model_weights(dir + "/zero/checkpoints/epoch-0002.safetensors") ==
        e2e::model_weights(dir + "/still/checkpoints/epoch-0002.safetensors"));
  CHECK(e2e::last_metrics(dir + "/zero")["loss"] == 0.0);
  // {0: 1} names class 0's weight as the others' default: the unweighted run, bit for bit.
  auto one = e2e::trainer("run c.yaml --run-dir one --set 'train.class_weight={0: 1}'", dir);
  auto plain = e2e::trainer("run c.yaml --run-dir plain", dir);
  REQUIRE(one.code == 0);
  REQUIRE(plain.code == 0);
  CHECK(e2e::model_weights(dir + "/one/checkpoints/epoch-0002.safetensors") ==
        e2e::model_weights(dir + "/plain/checkpoints/epoch-0002.safetensors"));
  CHECK(e2e::read_file(dir + "/one/metrics.csv") == e2e::read_file(dir + "/plain/metrics.csv"));
  // One class weighed up: another model.
  auto up = e2e::trainer("run c.yaml --run-dir up --set 'train.class_weight={2: 4}'", dir);
  REQUIRE(up.code == 0);
  CHECK(e2e::model_weights(dir + "/up/checkpoints/epoch-0002.safetensors") !=
        e2e::model_weights(dir + "/plain/checkpoints/epoch-0002.safetensors"));
}

TEST_CASE("e2e class_weight: a class the model does not score, a negative weight and a name are config errors") {
  std::string dir = e2e::temp_dir("class_weight_errors");
  e2e::write_file(dir + "/c.yaml", config(", class_weight: {0: 1, 4: 3}", "0.1"));
  auto beyond = e2e::trainer("run c.yaml --run-dir a", dir);
  CHECK(beyond.code == 2);
  CHECK_THAT(beyond.err, Catch::Contains("c.yaml:16:50: class_weight names") &&
                             Catch::Contains("class_weight names class 4, but the model scores 4 classes (0 to 3)"));
  e2e::write_file(dir + "/n.yaml", config(", class_weight: {0: -1}", "0.1"));
  auto negative = e2e::trainer("run n.yaml --run-dir b", dir);
  CHECK(negative.code == 2);
  CHECK_THAT(negative.err, Catch::Contains("a class weight must be between 0 and 1e6, not -1"));
  e2e::write_file(dir + "/k.yaml", config(", class_weight: {cat: 2}", "0.1"));
  auto name = e2e::trainer("run k.yaml --run-dir c", dir);
  CHECK(name.code == 2);
  CHECK_THAT(name.err, Catch::Contains("class_weight's keys are class indices (0, 1, ...), not 'cat'"));
}

// binary_crossentropy's one unit scores classes 0 and 1: weights {0: 2, 1: 2} with plain SGD are a
// doubled rate; class 2 is not one of its classes.
TEST_CASE("e2e class_weight: binary_crossentropy's two classes") {
  std::string dir = e2e::temp_dir("class_weight_binary");
  e2e::SmallCnn c;
  c.name = "bce";
  c.binary = true;
  c.train_size = 64;
  c.train = "{epochs: 2, batch_size: 16, loss: binary_crossentropy}";
  c.optimizer = "{type: sgd, lr: 0.1}";
  e2e::write_file(dir + "/c.yaml", c.yaml());
  auto w = e2e::trainer("run c.yaml --run-dir w --set 'train.class_weight={0: 2, 1: 2}' --set optimizer.lr=0.05", dir);
  INFO(w.out << w.err);
  REQUIRE(w.code == 0);
  auto r = e2e::trainer("run c.yaml --run-dir r", dir);
  REQUIRE(r.code == 0);
  CHECK(e2e::model_weights(dir + "/w/checkpoints/epoch-0002.safetensors") ==
        e2e::model_weights(dir + "/r/checkpoints/epoch-0002.safetensors"));
  CHECK(e2e::last_metrics(dir + "/w")["loss"] == Approx(2 * e2e::last_metrics(dir + "/r")["loss"]).epsilon(1e-6));
  auto bad = e2e::trainer("run c.yaml --run-dir b --set 'train.class_weight={2: 1}'", dir);
  CHECK(bad.code == 2);
  CHECK_THAT(bad.err, Catch::Contains("class_weight names class 2, but the model scores 2 classes (0 to 1)"));
}
