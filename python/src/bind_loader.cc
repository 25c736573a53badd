// Shims for stoker/loader.h: the native Loader behind stoker.Loader.
//
// Batches leave without a copy: the image tensor and the labels are
// ndarrays over the batch's pooled memory, owned by a capsule that holds the
// batch's shared_ptr; the buffer returns to the pool when the last array (or
// the torch tensor made from it through DLPack) is freed.
#include <nanobind/ndarray.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "bind.h"
#include "stoker/loader.h"

namespace stoker::python {
namespace {

using BatchPtr = std::shared_ptr<const Batch>;

// A capsule owning one reference to the batch.
nb::capsule Owner(const BatchPtr& batch) {
  return nb::capsule(new BatchPtr(batch), [](void* p) noexcept { delete static_cast<BatchPtr*>(p); });
}

nb::dlpack::dtype ImageDType(DType d) {
  switch (d) {
    case DType::kUint8:
      return nb::dtype<uint8_t>();
    case DType::kFloat32:
      return nb::dtype<float>();
    case DType::kFloat16:
      return nb::dlpack::dtype{static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
  }
  return nb::dtype<uint8_t>();
}

template <typename T>
T Parsed(absl::StatusOr<T> v) {
  return ValueOrThrow(std::move(v));
}

class PyLoader {
 public:
  explicit PyLoader(const LoaderOptions& o) : options_(o) {
    loader_ = ValueOrThrow(WithoutGil([&] { return Loader::Create(o); }));
  }

  // (images, labels) or, with_keys, (images, labels, keys); None at the end
  // of the epoch. images is a numpy array (image mode) or a list of bytes
  // (raw mode).
  nb::object Next(bool with_keys) {
    Loader* loader = Get();
    absl::StatusOr<BatchPtr> got = WithoutGil([&] { return loader->Next(); });
    ThrowIfError(got.status());
    const BatchPtr& b = *got;
    if (!b) return nb::none();
    nb::object images;
    if (b->images != nullptr) {
      std::vector<size_t> shape(b->shape.begin(), b->shape.end());
      images = nb::cast(nb::ndarray<nb::numpy>(b->images, shape.size(), shape.data(), Owner(b),
                                               nullptr, ImageDType(options_.dtype)));
    } else {
      nb::list payloads;
      for (const std::string& p : b->payloads) payloads.append(nb::bytes(p.data(), p.size()));
      images = payloads;
    }
    const size_t n = b->labels.size();
    // Writable, as DLPack (before 1.0) cannot mark an export read-only; the
    // batch belongs to the consumer from here on.
    nb::object labels = nb::cast(nb::ndarray<nb::numpy, int64_t, nb::ndim<1>>(
        const_cast<int64_t*>(b->labels.data()), {n}, Owner(b)));
    if (!with_keys) return nb::make_tuple(images, labels);
    nb::list keys;
    for (const std::string& k : b->keys) keys.append(Str(k));
    return nb::make_tuple(images, labels, keys);
  }

  nb::dict Stats() const {
    const LoaderStats s = Get()->stats();
    nb::dict d;
    d["samples"] = s.samples;
    d["batches"] = s.batches;
    d["bytes_read"] = s.bytes_read;
    nb::dict seconds;
    seconds["read"] = s.read_seconds;
    seconds["decode"] = s.decode_seconds;
    seconds["collate"] = s.collate_seconds;
    seconds["wait"] = s.wait_seconds;
    d["seconds"] = seconds;
    d["first_batch_seconds"] =
        s.first_batch_seconds < 0 ? nb::object(nb::none()) : nb::object(nb::float_(s.first_batch_seconds));
    d["skipped"] = s.skipped;
    nb::list skipped;
    for (const std::string& k : s.skipped_keys) skipped.append(Str(k));
    d["skipped_samples"] = skipped;
    d["pool_buffers"] = s.pool_buffers;
    d["padding"] = s.padding;
    d["cache_hits"] = s.cache_hits;
    d["cache_misses"] = s.cache_misses;
    d["bytes_downloaded"] = s.bytes_downloaded;
    return d;
  }

  nb::dict State() const {
    const plan::PlanState st = Get()->state();
    nb::dict d;
    d["fingerprint"] = st.fingerprint;
    d["seed"] = st.seed;
    d["epoch"] = st.epoch;
    d["batches_done"] = st.batches_done;
    d["num_samples"] = st.num_samples;
    d["batch_size"] = st.batch_size;
    d["rank"] = st.rank;
    d["world_size"] = st.world_size;
    d["shuffle"] = st.shuffle;
    d["drop_last"] = st.drop_last;
    d["distribution"] = st.distribution == plan::Distribution::kSharded ? "sharded" : "replicated";
    d["shuffle_window"] = st.shuffle_window;
    return d;
  }

  void Restore(nb::dict d) {
    plan::PlanState st;
    try {
      st.fingerprint = nb::cast<std::string>(d["fingerprint"]);
      st.seed = nb::cast<uint64_t>(d["seed"]);
      st.epoch = nb::cast<uint64_t>(d["epoch"]);
      st.batches_done = nb::cast<uint64_t>(d["batches_done"]);
      st.num_samples = nb::cast<uint64_t>(d["num_samples"]);
      st.batch_size = nb::cast<uint32_t>(d["batch_size"]);
      st.rank = nb::cast<uint32_t>(d["rank"]);
      st.world_size = nb::cast<uint32_t>(d["world_size"]);
      st.shuffle = nb::cast<bool>(d["shuffle"]);
      st.drop_last = nb::cast<bool>(d["drop_last"]);
      st.distribution = Parsed(ParseDistribution(nb::cast<std::string>(d["distribution"])));
      st.shuffle_window = nb::cast<uint64_t>(d["shuffle_window"]);
    } catch (const nb::builtin_exception&) {
      throw nb::value_error("not a stoker Loader state: a field is missing or has the wrong type");
    } catch (const nb::python_error&) {
      throw nb::value_error("not a stoker Loader state: a field is missing or has the wrong type");
    }
    Loader* loader = Get();
    ThrowIfError(WithoutGil([&] { return loader->Restore(st); }));
  }

  uint64_t num_batches() const { return Get()->num_batches(); }
  uint64_t epoch() const { return Get()->epoch(); }
  void SetEpoch(uint64_t e) {
    Loader* loader = Get();
    WithoutGil([&] {
      loader->SetEpoch(e);
      return 0;
    });
  }
  void Stop() {
    if (!loader_) return;
    WithoutGil([&] {
      loader_->Stop();
      return 0;
    });
  }
  // Stops and frees the loader now (threads joined); further use raises.
  void Close() {
    WithoutGil([&] {
      loader_.reset();
      return 0;
    });
  }
  bool closed() const { return loader_ == nullptr; }

 private:
  Loader* Get() const {
    if (!loader_) throw nb::value_error("the loader is closed");
    return loader_.get();
  }

  LoaderOptions options_;
  std::unique_ptr<Loader> loader_;
};

}  // namespace

void BindLoader(nb::module_& m) {
  nb::class_<PyLoader>(m, "Loader", "stoker::Loader; see stoker.Loader.")
      .def(
          "__init__",
          [](PyLoader* self, const std::string& uri, uint32_t batch_size, uint32_t image_size,
             bool train, bool shuffle, uint64_t seed, const std::string& layout,
             const std::string& dtype, bool normalize, std::array<float, 3> mean,
             std::array<float, 3> std, bool drop_last, uint32_t rank, uint32_t world_size,
             std::optional<int> threads, std::optional<int> prefetch,
             const std::string& on_error, const std::string& decode, int64_t max_pixels,
             int max_scans, const std::string& distribution, uint64_t shuffle_window,
             const std::string& mode, const std::string& local_dir, const std::string& cache_dir,
             uint64_t cache_limit, std::optional<std::string> endpoint_url) {
            LoaderOptions o;
            o.uri = uri;
            o.batch_size = batch_size;
            o.image_size = image_size;
            o.train = train;
            o.shuffle = shuffle;
            o.seed = seed;
            o.layout = Parsed(ParseLayout(layout));
            o.dtype = Parsed(ParseDType(dtype));
            o.normalize = normalize;
            o.mean = mean;
            o.std = std;
            o.drop_last = drop_last;
            o.rank = rank;
            o.world_size = world_size;
            o.threads = threads;
            o.prefetch = prefetch;
            o.on_error = Parsed(ParseOnError(on_error));
            o.decode = Parsed(ParseDecode(decode));
            o.max_pixels = max_pixels;
            o.max_scans = max_scans;
            o.distribution = Parsed(ParseDistribution(distribution));
            o.shuffle_window = shuffle_window;
            o.mode = Parsed(ParseInputMode(mode));
            o.local_dir = local_dir;
            o.cache_dir = cache_dir;
            o.cache_limit = cache_limit;
            o.endpoint_url = std::move(endpoint_url);
            new (self) PyLoader(o);
          },
          nb::kw_only(), nb::arg("uri"), nb::arg("batch_size"), nb::arg("image_size"),
          nb::arg("train"), nb::arg("shuffle"), nb::arg("seed"), nb::arg("layout"),
          nb::arg("dtype"), nb::arg("normalize"), nb::arg("mean"), nb::arg("std"),
          nb::arg("drop_last"), nb::arg("rank"), nb::arg("world_size"),
          nb::arg("threads").none(), nb::arg("prefetch").none(), nb::arg("on_error"),
          nb::arg("decode"), nb::arg("max_pixels"), nb::arg("max_scans"),
          nb::arg("distribution"), nb::arg("shuffle_window"), nb::arg("mode"),
          nb::arg("local_dir"), nb::arg("cache_dir"), nb::arg("cache_limit"),
          nb::arg("endpoint_url").none())
      .def("next", &PyLoader::Next, nb::arg("with_keys") = false)
      .def("stats", &PyLoader::Stats)
      .def("state", &PyLoader::State)
      .def("restore", &PyLoader::Restore, nb::arg("state"))
      .def("set_epoch", &PyLoader::SetEpoch, nb::arg("epoch"))
      .def("stop", &PyLoader::Stop)
      .def("close", &PyLoader::Close)
      .def_prop_ro("closed", &PyLoader::closed)
      .def_prop_ro("num_batches", &PyLoader::num_batches)
      .def_prop_ro("epoch", &PyLoader::epoch);
}

}  // namespace stoker::python
