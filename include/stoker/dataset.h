// Inspecting and verifying a packed dataset (`stoker inspect`, `stoker verify`).
#ifndef STOKER_DATASET_H_
#define STOKER_DATASET_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "format/manifest.h"
#include "format/shard_reader.h"
#include "io/storage.h"

namespace stoker {

// Reads and validates the manifest of the dataset at `uri` (a local folder
// or s3://bucket/prefix).
// Returns NotFound when there is no manifest, DataLoss when it is damaged.
absl::StatusOr<Manifest> Inspect(const std::string& uri);

struct VerifyOptions {
  // Shards verified in parallel. Default: all cores.
  std::optional<int> workers;
};

struct VerifyReport {
  uint64_t shards = 0;
  uint64_t records_ok = 0;
  uint64_t records_bad = 0;
  uint64_t bytes = 0;  // shard bytes read
  double seconds = 0;
  // Every problem found: damaged records (shard, offset, key), damaged
  // headers, index or footer, missing shards, and shards whose size, record
  // count or CRC disagree with the manifest. Sorted by shard, then offset.
  std::vector<shard::Corruption> corruptions;
  bool ok() const { return corruptions.empty(); }
};

// Reads every byte of every shard of the dataset at `uri` and checks it.
// Damage is reported in the result, not as an error; a non-OK status means
// the dataset could not be read at all (no or damaged manifest).
absl::StatusOr<VerifyReport> Verify(const std::string& uri, const VerifyOptions& options = {});

// One record read back from a dataset, owning its bytes.
struct Record {
  std::string key;
  int32_t label = shard::kNoLabel;
  std::string meta;
  std::string payload;
  uint64_t shard = 0;   // index into the manifest's shard list
  uint64_t offset = 0;  // of the record within its shard
};

// How shards of an s3:// dataset are read (local datasets are always read in
// place). See docs/input_modes.md.
enum class InputMode {
  kAuto,      // s3://: kFastFile; local: in place
  kFile,      // download this node's shards to local_dir first, then read locally
  kPipe,      // stream each shard through a bounded read-ahead ring; no disk
  kFastFile,  // fetch a shard on first use into the node cache (cache_dir)
};
absl::StatusOr<InputMode> ParseInputMode(std::string_view name);  // "file", "pipe", ...

struct DatasetOptions {
  InputMode mode = InputMode::kAuto;
  io::StorageOptions storage;
  // kFile: where shards are downloaded. Default: ~/.cache/stoker/file/<bucket>/<prefix>.
  std::string local_dir;
  // kFastFile: the node cache folder and its cap (bytes). Default dir
  // ~/.cache/stoker/cache; default limit 10 GiB. A limit smaller than the
  // largest shard is an error at Open.
  std::string cache_dir;
  uint64_t cache_limit = 0;
  // kFastFile: shards fetched at once, ahead along the plan; each fetch
  // sends up to 8 ranges of its shard at once (object stores cap bandwidth
  // per connection) and holds at most 8 MiB in memory.
  int fastfile_parallel_fetches = 8;
  // kPipe: a read-ahead ring of pipe_parts x pipe_part_bytes per shard being
  // read (its missing parts fetched in parallel), for the shards a shuffle
  // block spans (+1) plus pipe_warm_ahead started ahead (at least
  // pipe_active_shards; the least recently read one gives its ring back):
  // memory stays under their product.
  size_t pipe_part_bytes = size_t{2} << 20;
  int pipe_parts = 8;
  int pipe_active_shards = 2;
  // The loader's shuffle block (LoaderOptions::shuffle_window), in samples.
  uint64_t pipe_window_samples = 0;
  // Shards of the plan started streaming ahead of the one being read (each
  // a connection's worth of bandwidth and a ring of memory).
  int pipe_warm_ahead = 4;
  // Shards this process will read (sharded distribution); others are only
  // indexed. Default: all.
  std::function<bool(uint64_t shard, uint64_t num_shards)> needed;
  // kFile: called as download bytes arrive (all shards together).
  std::function<void(uint64_t done, uint64_t total)> progress;
};

// Whether an error means the store (or the link to it) was unreachable for
// a while, so that the same read may succeed later: Unavailable,
// DeadlineExceeded, Aborted, Cancelled. Such errors are never a damaged
// sample: the loader raises them whatever its on_error policy.
bool IsTransient(const absl::Status& s);

// Counters of the node cache and downloads, for stats().
struct DatasetIoStats {
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  uint64_t bytes_downloaded = 0;  // fetched from the store (file, pipe, fastfile)
};

// Random access to every record of a dataset by global index (records
// numbered shard by shard, in file order).
//
// Thread-safety: Read is const and safe for concurrent use.
class Dataset {
 public:
  // Loads the manifest and opens the shards, checking each shard's
  // structure (header, index, footer) and that its size and record count
  // match the manifest. Returns NotFound / DataLoss naming the file.
  // Local datasets and kFile open (and download) every shard here; kPipe
  // and kFastFile send no request beyond the manifest: each shard is opened
  // on first use, by a read or by the read-ahead along the plan, and an
  // error doing so is returned by every read of that shard.
  static absl::StatusOr<std::unique_ptr<Dataset>> Open(const std::string& uri,
                                                       const DatasetOptions& options = {});
  ~Dataset();

  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  const Manifest& manifest() const { return manifest_; }
  uint64_t size() const { return manifest_.records; }

  // Reads record i, checking its CRC. Returns OutOfRange for i >= size(),
  // DataLoss naming shard, offset and key for a damaged record.
  absl::StatusOr<Record> Read(uint64_t i) const;

  // Like Read, without copies: reads record i into *scratch and points *out
  // into it. Sets *shard_index when not null.
  absl::Status ReadView(uint64_t i, std::string* scratch, shard::RecordView* out,
                        uint64_t* shard_index = nullptr) const;

  // The path of shard s, as used in error messages.
  std::string shard_path(uint64_t s) const { return ShardPath(uri_, manifest_.shards[s]); }

  // Starts fetching shards into the node cache in this order, in the
  // background (fastfile read-ahead along the plan); replaces an earlier
  // order. No effect in other modes.
  void Prefetch(std::vector<uint64_t> shard_order) const;
  DatasetIoStats io_stats() const;

 private:
  Dataset() = default;
  std::string uri_;
  Manifest manifest_;
  std::vector<std::unique_ptr<shard::ShardReader>> readers_;  // null: in remote_
  std::vector<uint64_t> first_record_;  // global index of each shard's first record
  struct Remote;                        // node cache, prefetcher, counters
  std::unique_ptr<Remote> remote_;
};

}  // namespace stoker

#endif  // STOKER_DATASET_H_
