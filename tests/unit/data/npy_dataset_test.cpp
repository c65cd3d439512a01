// Tests of `type: npy`: round trips over dtypes, header versions and inputs, and every error naming path and detail.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>

#include "core/data/loader.h"
#include "core/data/npy_format.h"
#include "data_test_util.h"

using namespace trainer;
using trainer::test::dataset_from;
using trainer::test::error_of;
using trainer::test::numpy_python;
using trainer::test::TempDir;
using trainer::test::write_bytes;

namespace {

// A .npy file by hand: format `major`.0, a header dict with `descr` and `shape` (text such as
// "(5, 20, 8)"), padded to 64 bytes, then `data`. `extra` goes into the dict (e.g. fortran_order).
std::vector<uint8_t> npy_bytes(const std::string& descr, const std::string& shape, const std::vector<uint8_t>& data,
                               int major = 1, const std::string& fortran = "False") {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
  const size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::string head = "\x93NUMPY";
  head += char(major), head += char(0);
  for (size_t k = 0; k < prefix - 8; ++k) head += char((dict.size() >> (8 * k)) & 0xff);
  head += dict;
  std::vector<uint8_t> out(head.begin(), head.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

template <class T>
std::vector<uint8_t> raw(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), v.data(), out.size());  // little-endian host
  return out;
}

template <class T>
std::vector<T> ramp(size_t n, double scale, double offset = 0) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = T(double(i) * scale + offset);
  return v;
}

std::vector<float> sample(const Dataset& ds, int64_t i, int32_t* label = nullptr) {
  std::vector<float> v(size_t(ds.sample_shape().numel()));
  const int32_t l = ds.get_f32(i, v.data());
  if (label) *label = l;
  return v;
}

// The DataError message of loading `yaml` (a dataset section) with base_dir `dir`.
std::string data_error(const std::string& yaml, const TempDir& dir) {
  return error_of<DataError>([&] { dataset_from(yaml, dir.path()); });
}

}  // namespace

TEST_CASE("npy: one '<f4' input with '<i8' labels round-trips") {
  TempDir d;
  const auto x = ramp<float>(5 * 4 * 3, 0.25, -3);
  write_bytes(d / "x.npy", npy_bytes("<f4", "(5, 4, 3)", raw(x)));
  write_bytes(d / "y.npy", npy_bytes("<i8", "(5,)", raw(std::vector<int64_t>{0, 1, 1, 0, 1})));
  auto ds = dataset_from("{type: npy, x: x.npy, labels: y.npy}", d.path());
  CHECK(ds->float_samples());
  CHECK(ds->size() == 5);
  CHECK(ds->num_classes() == 2);
  CHECK(ds->sample_shape() == Shape{4, 3});
  CHECK(ds->input_shapes() == std::vector<Shape>{Shape{4, 3}});
  CHECK(ds->describe() == "npy x.npy (labels y.npy): 5 samples of (4, 3), 2 classes");
  for (int64_t i = 0; i < 5; ++i) {
    int32_t label = -1;
    const auto v = sample(*ds, i, &label);
    CHECK(std::vector<float>(x.begin() + i * 12, x.begin() + (i + 1) * 12) == v);
    CHECK(label == std::vector<int>{0, 1, 1, 0, 1}[size_t(i)]);
  }
  std::vector<uint8_t> px(12);
  CHECK(error_of<DataError>([&] { ds->get(0, px.data()); }).find("float samples") != std::string::npos);
}

// Token models: ids [N, T] and the next token at each position [N, T] (labels [N, 1] stay one per sample).
TEST_CASE("npy: labels [N, T] give a label per position") {
  TempDir d;
  write_bytes(d / "x.npy", npy_bytes("<i4", "(3, 4)", raw(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})));
  write_bytes(d / "y.npy", npy_bytes("<i8", "(3, 4)", raw(std::vector<int64_t>{2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0})));
  auto ds = dataset_from("{type: npy, x: x.npy, labels: y.npy}", d.path());
  CHECK(ds->size() == 3);
  CHECK(ds->label_shape() == Shape{4});
  CHECK(ds->num_classes() == 13);
  std::vector<float> v(4);
  std::vector<int32_t> l(4);
  ds->get_f32_labels(1, v.data(), l.data());
  CHECK(v == std::vector<float>{5, 6, 7, 8});
  CHECK(l == std::vector<int32_t>{6, 7, 8, 9});
  write_bytes(d / "bad.npy", npy_bytes("<i8", "(3, 4)", raw(std::vector<int64_t>{0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0})));
  CHECK(data_error("{type: npy, x: x.npy, labels: bad.npy, classes: 5}", d) ==
        (d / "bad.npy") + ": sample 1 position 2 has label 9, outside 0..4 (classes: 5)");
  write_bytes(d / "y1.npy", npy_bytes("<i8", "(3, 1)", raw(std::vector<int64_t>{0, 1, 0})));
  CHECK(dataset_from("{type: npy, x: x.npy, labels: y1.npy}", d.path())->label_shape() == Shape{});
}

// Padded token sequences: labels -100 (PyTorch's ignore_index) are read when train.ignore_class
// names them (DatasetContext::ignore_class) and count toward no class; without it they are errors.
TEST_CASE("npy: pad labels equal to train.ignore_class are read, and leave the class count alone") {
  TempDir d;
  write_bytes(d / "x.npy", npy_bytes("<i4", "(2, 3)", raw(std::vector<int32_t>{1, 2, 3, 4, 5, 6})));
  write_bytes(d / "y.npy", npy_bytes("<i8", "(2, 3)", raw(std::vector<int64_t>{2, 3, -100, 5, -100, -100})));
  CHECK(data_error("{type: npy, x: x.npy, labels: y.npy}", d) ==
        (d / "y.npy") + ": sample 0 position 2 has label -100, outside 0..16777215");
  auto doc = cfg::parse_document("train: {type: npy, x: x.npy, labels: y.npy}", "test.yaml");
  DatasetContext ctx;
  ctx.base_dir = d.path();
  ctx.ignore_class = -100;
  auto ds = make_dataset(cfg::root(doc).child("train"), ctx);
  CHECK(ds->num_classes() == 6);
  std::vector<int32_t> l(3);
  ds->get_labels(1, l.data());
  CHECK(l == std::vector<int32_t>{5, -100, -100});
  ctx.ignore_class = -1;  // another pad value: -100 is an error again
  CHECK(error_of<DataError>([&] { make_dataset(cfg::root(doc).child("train"), ctx); }) ==
        (d / "y.npy") + ": sample 0 position 2 has label -100, outside 0..16777215");
}

TEST_CASE("npy: '<f8' input, '|u1' labels [N, 1], classes given, format 2.0 and 3.0") {
  TempDir d;
  const auto x = ramp<double>(4 * 6, 0.1, 0.05);
  for (int major : {1, 2, 3}) {
    // Appended, not "x" + std::to_string(...): GCC 12 at -O3 warns (stringop-overflow, a false
    // positive) on inserting before a temporary string when catch.hpp comes precompiled.
    std::string xf = "x";
    xf += std::to_string(major) + ".npy";
    write_bytes(d / xf, npy_bytes("<f8", "(4, 6)", raw(x), major));
    write_bytes(d / "y.npy", npy_bytes("|u1", "(4, 1)", {2, 0, 1, 2}, major));
    auto ds = dataset_from("{type: npy, x: " + xf + ", labels: y.npy, classes: 5}", d.path());
    CHECK(ds->num_classes() == 5);
    CHECK(ds->sample_shape() == Shape{6});
    int32_t label = -1;
    const auto v = sample(*ds, 2, &label);
    CHECK(label == 1);
    for (size_t k = 0; k < 6; ++k) CHECK(v[k] == float(x[12 + k]));
  }
}

TEST_CASE("npy: two inputs of different dtypes and shapes are concatenated per sample") {
  TempDir d;
  const auto a = ramp<float>(3 * 2 * 2, 1.0), b = ramp<float>(3 * 5, -0.5, 100);
  write_bytes(d / "seq/a.npy", npy_bytes("<f4", "(3, 2, 2)", raw(a)));
  write_bytes(d / "seq/b.npy", npy_bytes("<f8", "(3, 5)", raw(std::vector<double>(b.begin(), b.end()))));
  write_bytes(d / "seq/y.npy", npy_bytes("<i4", "(3,)", raw(std::vector<int32_t>{1, 0, 1})));
  auto ds = dataset_from("{type: npy, inputs: [seq/a.npy, seq/b.npy], labels: seq/y.npy}", d.path());
  CHECK(ds->input_shapes() == std::vector<Shape>{Shape{2, 2}, Shape{5}});
  CHECK(ds->sample_shape() == Shape{9});
  CHECK(ds->describe() == "npy [seq/a.npy, seq/b.npy] (labels seq/y.npy): 3 samples of (2, 2) + (5,), 2 classes");
  int32_t label = -1;
  const auto v = sample(*ds, 1, &label);
  CHECK(label == 0);
  std::vector<float> want(a.begin() + 4, a.begin() + 8);
  want.insert(want.end(), b.begin() + 5, b.begin() + 10);
  CHECK(v == want);
  // Integer inputs are converted; a 1-D input gives samples of shape [1].
  write_bytes(d / "i.npy", npy_bytes("|u1", "(3,)", {7, 8, 9}));
  auto one = dataset_from("{type: npy, inputs: [i.npy], labels: seq/y.npy}", d.path());
  CHECK(one->sample_shape() == Shape{1});
  CHECK(sample(*one, 2) == std::vector<float>{9});
  // The Loader gives the concatenation, sharded.
  LoaderOptions o;
  o.batch_size = 1, o.workers = 0, o.shuffle = false, o.rank = 1, o.replicas = 2;
  Loader l(ds, o);
  l.start_epoch(0);
  Batch batch;
  REQUIRE(l.next(batch));
  CHECK(batch.indices == std::vector<int64_t>{1});
  CHECK(std::vector<float>(batch.images.f32(), batch.images.f32() + 9) == want);
}

TEST_CASE("npy: the shared header writer is what numpy writes") {
  const std::string h = npy::make_header({5, 20, 8}, "<f4");
  CHECK(h.size() % 64 == 0);
  CHECK(h.substr(10, 63) == "{'descr': '<f4', 'fortran_order': False, 'shape': (5, 20, 8), }");
  const std::string one = npy::make_header({3}, "<i8");
  CHECK(one.find("'shape': (3,), }") != std::string::npos);
  std::vector<uint8_t> bytes(h.begin(), h.end());
  const npy::Header p = npy::parse_header(bytes.data(), bytes.size(), "h.npy");
  CHECK(p.shape == std::vector<int64_t>{5, 20, 8});
  CHECK(p.descr == "<f4");
  CHECK(p.data_offset == h.size());
}

TEST_CASE("npy: format errors name the path and the byte offset") {
  TempDir d;
  write_bytes(d / "y.npy", npy_bytes("|u1", "(5,)", {0, 1, 0, 1, 1}));
  auto with_x = [&](const std::vector<uint8_t>& bytes) {
    write_bytes(d / "x.npy", bytes);
    return data_error("{type: npy, x: x.npy, labels: y.npy}", d);
  };
  const std::string x = d / "x.npy";
  // A 2.0 header claiming 70000 bytes in a 128-byte file.
  std::vector<uint8_t> longhead = npy_bytes("<f4", "(5,)", {}, 2);
  longhead.resize(128, ' ');
  longhead[8] = 0x70, longhead[9] = 0x11, longhead[10] = 0x01, longhead[11] = 0;  // 70000
  CHECK(with_x(longhead) == x + ": byte 8: header length 70000 runs past the end of the 128-byte file");
  CHECK(with_x({'h', 'e', 'l', 'l', 'o'}) == x + ": byte 0: no \\x93NUMPY magic (not a .npy file)");
  CHECK(with_x({}) == x + ": byte 0: the file is empty (not a .npy file)");
  CHECK(with_x({0x93, 'N', 'U', 'M', 'P', 'Y', 1}) == x + ": byte 7: the file ends inside the format version");
  std::vector<uint8_t> v4 = npy_bytes("<f4", "(5,)", raw(std::vector<float>(5)));
  v4[6] = 4;
  CHECK(with_x(v4) == x + ": byte 6: format version 4.0 is not 1.0, 2.0 or 3.0");
  CHECK(with_x(npy_bytes(">f4", "(5,)", raw(std::vector<float>(5)))) ==
        x + ": dtype '>f4' is not supported (use '<f4', '<f8', '|u1', '<i4' or '<i8')");
  CHECK(with_x(npy_bytes("<f4", "(5, 20, 8)", std::vector<uint8_t>(1000))) ==
        x + ": the header says 5x20x8 float32 values (3200 bytes from byte 128), the file has 1000");
  CHECK(with_x(npy_bytes("<f4", "(5, 2)", raw(std::vector<float>(10)), 1, "True"))
            .find(x + ": fortran_order is True") == 0);
  // Fortran order of an array with one non-trivial dimension is the same bytes: accepted.
  write_bytes(x, npy_bytes("<f4", "(5, 1)", raw(std::vector<float>(5)), 1, "True"));
  CHECK(dataset_from("{type: npy, x: x.npy, labels: y.npy}", d.path())->sample_shape() == Shape{1});
  // Malformed dicts: the offset points into the header.
  std::string e = with_x(npy_bytes("<f4", "(5, x)", raw(std::vector<float>(5))));
  CHECK(e.find(x + ": byte 64: expected a dimension, found 'x'") == 0);
  std::vector<uint8_t> nokey = npy_bytes("<f4", "(5,)", raw(std::vector<float>(5)));
  std::memcpy(&nokey[10 + 2], "dascr", 5);
  CHECK(with_x(nokey) == x + ": byte 11: unexpected key 'dascr' (a .npy header has 'descr', 'fortran_order' and 'shape')");
  CHECK(with_x(npy_bytes("<f4", "()", raw(std::vector<float>(1)))) ==
        x + ": holds a scalar, not an array of samples [N, ...]");
  CHECK(with_x(npy_bytes("<f4", "(0, 3)", {})) == x + ": holds no samples (shape (0, 3))");
  CHECK(data_error("{type: npy, x: absent.npy, labels: y.npy}", d).find((d / "absent.npy") + ": cannot open") == 0);
  // Every truncation of a good file is a DataError naming it, never a read past the end.
  const std::vector<uint8_t> good = npy_bytes("<f4", "(5, 2)", raw(std::vector<float>(10)), 2);
  for (size_t n = 0; n < good.size(); ++n) {
    INFO("truncated to " << n << " bytes");
    CHECK(with_x(std::vector<uint8_t>(good.begin(), good.begin() + long(n))).find(x + ": ") == 0);
  }
}

TEST_CASE("npy: inconsistent arrays and labels are data errors naming the files") {
  TempDir d;
  write_bytes(d / "x.npy", npy_bytes("<f4", "(5, 2)", raw(std::vector<float>(10))));
  write_bytes(d / "b.npy", npy_bytes("<f4", "(4, 2)", raw(std::vector<float>(8))));
  write_bytes(d / "y3.npy", npy_bytes("<i8", "(3,)", raw(std::vector<int64_t>{0, 1, 0})));
  write_bytes(d / "y.npy", npy_bytes("<i8", "(5,)", raw(std::vector<int64_t>{0, 1, 7, 1, 0})));
  write_bytes(d / "neg.npy", npy_bytes("<i4", "(5,)", raw(std::vector<int32_t>{0, 1, 0, -2, 0})));
  write_bytes(d / "yf.npy", npy_bytes("<f4", "(5,)", raw(std::vector<float>(5))));
  write_bytes(d / "y2.npy", npy_bytes("<i8", "(5, 2, 1)", raw(std::vector<int64_t>(10))));
  CHECK(data_error("{type: npy, x: x.npy, labels: y3.npy}", d) == (d / "y3.npy") + ": 3 labels, " + (d / "x.npy") +
                                                                     " has 5 samples");
  CHECK(data_error("{type: npy, x: x.npy, labels: y.npy, classes: 2}", d) ==
        (d / "y.npy") + ": sample 2 has label 7, outside 0..1 (classes: 2)");
  CHECK(dataset_from("{type: npy, x: x.npy, labels: y.npy}", d.path())->num_classes() == 8);
  CHECK(data_error("{type: npy, x: x.npy, labels: neg.npy}", d).find((d / "neg.npy") + ": sample 3 has label -2") == 0);
  CHECK(data_error("{type: npy, x: x.npy, labels: yf.npy}", d) ==
        (d / "yf.npy") + ": dtype '<f4' is not supported (use '|u1', '<i4' or '<i8')");
  CHECK(data_error("{type: npy, x: x.npy, labels: y2.npy}", d) ==
        (d / "y2.npy") + ": labels must be an array [N] or [N, 1] (or [N, T]: a label per position), not of shape "
                         "(5, 2, 1)");
  CHECK(data_error("{type: npy, inputs: [x.npy, b.npy], labels: y.npy}", d) ==
        (d / "b.npy") + ": 4 samples, " + (d / "x.npy") + " has 5");
  // Key errors are config errors.
  CHECK(error_of<cfg::ConfigError>([&] { dataset_from("{type: npy, x: x.npy, inputs: [x.npy], labels: y.npy}", d.path()); })
            .find("not both") != std::string::npos);
  CHECK(error_of<cfg::ConfigError>([&] { dataset_from("{type: npy, labels: y.npy}", d.path()); }).find("'x'") !=
        std::string::npos);
  CHECK_THROWS_AS(dataset_from("{type: npy, x: x.npy}", d.path()), cfg::ConfigError);
  CHECK_THROWS_AS(dataset_from("{type: npy, inputs: [], labels: y.npy}", d.path()), cfg::ConfigError);
  CHECK_THROWS_AS(dataset_from("{type: npy, x: x.npy, labels: y.npy, clases: 2}", d.path()), cfg::ConfigError);
  CHECK_THROWS_AS(dataset_from("{type: npy, x: x.npy, labels: y.npy, classes: 0}", d.path()), cfg::ConfigError);
}

TEST_CASE("npy: what numpy writes is read (and the toy pair script's output loads)") {
  const std::string python = numpy_python();
  if (python.empty()) return;
  TempDir d;
  const std::string script = std::string(TRAINER_SOURCE_DIR) + "/datasets/sequences/make_pairs_npy.py";
  REQUIRE(std::system((python + " '" + script + "' --out '" + d.path() + "' --size 64 --length 7 --features 3 >/dev/null").c_str()) == 0);
  auto ds = dataset_from("{type: npy, inputs: [a.npy, b.npy], labels: labels.npy}", d.path());
  CHECK(ds->size() == 64);
  CHECK(ds->num_classes() == 2);
  CHECK(ds->input_shapes() == std::vector<Shape>{Shape{7, 3}, Shape{7, 3}});
  int ones = 0;
  for (int64_t i = 0; i < 64; ++i) {
    int32_t label = 0;
    sample(*ds, i, &label);
    ones += label;
  }
  CHECK(ones == 32);
  // Every dtype and format version numpy writes.
  const std::string cmd = python + " -c \"import numpy as np; from numpy.lib import format as f\n"
                                   "x = np.arange(24, dtype=np.float64).reshape(4, 3, 2) / 8\n"
                                   "np.save('" + (d / "f8.npy") + "', x)\n"
                                   "np.save('" + (d / "u1.npy") + "', np.array([1, 0, 2, 1], dtype=np.uint8))\n"
                                   "np.save('" + (d / "i4.npy") + "', (np.arange(24, dtype=np.int32) - 5).reshape(4, 6))\n"
                                   "for v in [(2, 0), (3, 0)]:\n"
                                   "  with open('" + d.path() + "/v%d.npy' % v[0], 'wb') as o: f.write_array(o, x.astype(np.float32), version=v)\n\"";
  REQUIRE(std::system(cmd.c_str()) == 0);
  for (const char* x : {"f8.npy", "v2.npy", "v3.npy"}) {
    auto s = dataset_from(std::string("{type: npy, x: ") + x + ", labels: u1.npy}", d.path());
    CHECK(s->sample_shape() == Shape{3, 2});
    CHECK(s->num_classes() == 3);
    CHECK(sample(*s, 3) == std::vector<float>{2.25f, 2.375f, 2.5f, 2.625f, 2.75f, 2.875f});
  }
  auto ints = dataset_from("{type: npy, x: i4.npy, labels: u1.npy}", d.path());
  CHECK(sample(*ints, 0) == std::vector<float>{-5, -4, -3, -2, -1, 0});
}
