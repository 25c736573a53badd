// The loader: shards to batches in native threads.
//
// A Loader reads the records of one dataset in the order of the epoch plan
// (see src/plan/epoch_plan.h), decodes and transforms each sample on a pool
// of threads, writes it straight into its slot of a pooled batch buffer, and
// hands out whole batches in plan order. Nothing runs in Python; the consumer
// only waits for the next batch.
#ifndef STOKER_LOADER_H_
#define STOKER_LOADER_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "plan/epoch_plan.h"
#include "stoker/dataset.h"

namespace stoker {

enum class Layout { kNHWC, kNCHW };
enum class DType { kUint8, kFloat32, kFloat16 };
enum class Decode {
  kImage,  // JPEG decode + transform into a fixed-size tensor
  kRaw,    // payload bytes passed through unchanged
};
enum class OnError {
  kRaise,  // the batch holding a damaged sample carries the error (shard, key)
  kSkip,   // the damaged sample is left out of its batch, counted and named in stats
};

// The names users write ("uint8", "float32", "float16"; "NCHW", "NHWC";
// "raise", "skip"; "image", "raw"), shared by the CLI and Python. Return
// InvalidArgument listing the accepted names.
absl::StatusOr<DType> ParseDType(std::string_view name);
absl::StatusOr<Layout> ParseLayout(std::string_view name);
absl::StatusOr<OnError> ParseOnError(std::string_view name);
absl::StatusOr<Decode> ParseDecode(std::string_view name);
absl::StatusOr<plan::Distribution> ParseDistribution(std::string_view name);

// Every option of stoker.Loader (Python) and `stoker bench` (CLI).
struct LoaderOptions {
  std::string uri;              // dataset folder
  uint32_t batch_size = 256;    // samples per batch; > 0
  uint32_t image_size = 224;    // output height = width, pixels
  // true: RandomResizedCrop (scale 0.08-1, ratio 3/4-4/3, centre-crop
  // fallback after 10 tries) and a horizontal flip with p = 0.5.
  // false: resize the shorter side to image_size / 0.875 (256 for 224), then
  // a centre crop of image_size.
  bool train = true;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
  uint32_t rank = 0;
  uint32_t world_size = 1;
  // kReplicated: ranks split the samples of all shards; kSharded: rank r
  // reads only shards s % world_size == r (see plan::Distribution).
  plan::Distribution distribution = plan::Distribution::kReplicated;
  // 0: a global permutation per epoch. > 0: shards in seeded order read front
  // to back through a shuffle buffer of this many samples (pipe mode's
  // order, which reads every shard sequentially once).
  uint64_t shuffle_window = 0;
  Decode decode = Decode::kImage;
  Layout layout = Layout::kNCHW;
  DType dtype = DType::kUint8;
  // Scale to [0, 1] and apply (x - mean) / std. Requires a float dtype.
  bool normalize = false;
  std::array<float, 3> mean = {0.485f, 0.456f, 0.406f};  // of [0, 1] values
  std::array<float, 3> std = {0.229f, 0.224f, 0.225f};
  // Decode and transform threads. Default: all cores.
  std::optional<int> threads;
  // Finished batches kept ready ahead of the consumer. Default 2.
  std::optional<int> prefetch;
  OnError on_error = OnError::kRaise;
  // How an s3:// dataset is read (ignored for local folders): the input
  // mode, and its folders and cap (see stoker/dataset.h, DatasetOptions).
  InputMode mode = InputMode::kAuto;
  std::string local_dir;
  std::string cache_dir;
  uint64_t cache_limit = 0;
  std::optional<std::string> endpoint_url;  // else AWS_ENDPOINT_URL
  // Caps against decompression bombs.
  int64_t max_pixels = int64_t{1} << 28;
  int max_scans = 256;

  // Returns InvalidArgument naming the bad option.
  absl::Status Validate() const;
  // Bytes of one decoded sample (image mode).
  size_t sample_bytes() const;
};

// One delivered batch. Its memory comes from the loader's pool and goes back
// to it when the last shared_ptr to the batch is released (for Python: when
// the framework frees the tensors that view it).
//
// Thread-safety: immutable once delivered.
struct Batch {
  uint64_t epoch = 0;
  uint64_t index = 0;        // batch number within the epoch
  uint32_t size = 0;         // samples (short last batch, or skipped samples)
  // Image mode: size * sample_bytes() bytes, laid out as options.layout.
  void* images = nullptr;
  std::vector<int64_t> shape;  // e.g. {size, 3, 224, 224}
  // Raw mode: the payloads.
  std::vector<std::string> payloads;
  std::vector<int64_t> labels;   // size() entries; -1 for unlabeled
  std::vector<uint64_t> sample_ids;
  std::vector<std::string> keys;
};

// Counters since the loader was created.
struct LoaderStats {
  uint64_t samples = 0;
  uint64_t batches = 0;
  uint64_t bytes_read = 0;      // record bytes read from shards
  double read_seconds = 0;      // thread time per stage, summed over threads
  double decode_seconds = 0;    // decode + transform
  double collate_seconds = 0;   // ordering and hand-off
  double wait_seconds = 0;      // time the consumer waited in Next()
  double first_batch_seconds = -1;  // from the first Next() of the first epoch
  uint64_t skipped = 0;
  std::vector<std::string> skipped_keys;  // "shard:key: reason"
  uint64_t pool_buffers = 0;    // batch buffers allocated in all
  uint64_t padding = 0;         // samples repeated this epoch to even out ranks
  uint64_t cache_hits = 0;      // node cache (fastfile): shards found there
  uint64_t cache_misses = 0;    // and fetched
  uint64_t bytes_downloaded = 0;  // from the object store (file, fastfile)
};

// Thread-safety: Next, Stop, stats and state may be called from different
// threads, but Next from one consumer at a time. Destroying the Loader stops
// and joins every thread it started.
class Loader {
 public:
  static absl::StatusOr<std::unique_ptr<Loader>> Create(const LoaderOptions& options);
  virtual ~Loader() = default;

  // Batches per epoch for this rank.
  virtual uint64_t num_batches() const = 0;
  virtual uint64_t epoch() const = 0;
  // Selects the epoch the next iteration runs. Stops a running epoch.
  virtual void SetEpoch(uint64_t epoch) = 0;

  // Returns the next batch of the current epoch, starting the epoch's
  // pipeline if needed; returns nullptr at the end of the epoch (after which
  // the epoch counter has advanced and the next call starts the next epoch).
  // A damaged sample under kRaise returns DataLoss naming shard, offset and key,
  // in order; Cancelled after Stop().
  virtual absl::StatusOr<std::shared_ptr<const Batch>> Next() = 0;

  // Stops the pipeline and joins its threads; returns within about a second.
  // The current epoch can be resumed from state().
  virtual void Stop() = 0;

  virtual LoaderStats stats() const = 0;
  // Position after the batches the consumer received so far.
  virtual plan::PlanState state() const = 0;
  // Continues from `state`: same dataset (fingerprint), seed, batch size,
  // shuffle, drop_last and world size, else FailedPrecondition saying which.
  virtual absl::Status Restore(const plan::PlanState& state) = 0;
};

}  // namespace stoker

#endif  // STOKER_LOADER_H_
