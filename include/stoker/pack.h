// Packing many small files into stoker shards (`stoker pack`).
#ifndef STOKER_PACK_H_
#define STOKER_PACK_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace stoker {

// Progress of a running pack, passed to PackOptions::progress.
struct PackProgress {
  uint64_t files_done = 0;   // accepted or rejected so far
  uint64_t files_total = 0;
  uint64_t bytes_in = 0;     // source bytes read so far
  uint64_t bytes_out = 0;    // shard bytes written so far
  double seconds = 0;        // since the pack started
};

// What to pack and how. The CLI flags of `stoker pack` and the keyword
// arguments of stoker.pack() map one to one onto these fields.
struct PackOptions {
  // Source folder: an ImageFolder tree (one folder per class, optionally
  // below train/validation/test split folders) or a flat folder of files.
  // Empty when `manifest` is set.
  std::string src;
  // Destination dataset folder; created if missing. Whatever a previous pack
  // left there (manifest, shards, rejected.txt) is replaced.
  std::string dst;
  // With a split tree, pack only this split folder (e.g. "train"). Default:
  // all splits, with the split kept in each record's key and metadata.
  std::optional<std::string> split;
  // A CSV (with a header row) or JSONL file naming the files and labels;
  // paths are relative to the manifest's folder. Other columns become the
  // record's metadata (a JSON object).
  std::optional<std::string> manifest;
  std::string path_column = "path";
  std::string label_column = "label";
  // Turns a path column value into a path: "{}" is replaced by the value,
  // e.g. "images/{}.jpg" when the column holds bare ids.
  std::string path_template = "{}";
  // Target shard size in bytes; a shard is closed before the record that
  // would take it past this (a single larger record gets a shard of its
  // own). Default 64 MiB; sizes outside 1-128 MB draw a warning.
  uint64_t shard_size = uint64_t{64} << 20;
  // Threads reading (and resizing) files. Default: all cores.
  std::optional<int> workers;
  // Resize JPEGs so that the shorter side is this many pixels, aspect kept,
  // never upscaled (smaller images are stored unchanged), re-encoded at
  // `quality`. Non-JPEG files are then rejected.
  std::optional<int> resize;
  int quality = 90;  // JPEG quality 1-100 for re-encoded images
  // Mix records across shards in an order drawn from this seed. Default:
  // records sorted by key.
  std::optional<uint64_t> shuffle_seed;
  // Any rejected input fails the pack: no manifest is written.
  bool strict = false;
  // Called from one thread at a time, at most every ~100 ms and once at the
  // end. May be empty.
  std::function<void(const PackProgress&)> progress;

  // Returns InvalidArgument naming the bad field.
  absl::Status Validate() const;
  // Advice that does not stop the pack (e.g. a shard size outside 1-128 MB).
  std::vector<std::string> Warnings() const;
};

// An input that was not packed, and why.
struct Rejection {
  std::string path;
  std::string reason;
};

struct PackSummary {
  uint64_t records = 0;
  uint64_t shards = 0;
  uint64_t bytes = 0;          // shard bytes written
  uint64_t payload_bytes = 0;  // record payload bytes
  uint64_t source_bytes = 0;   // bytes read from the accepted source files
  uint64_t classes = 0;
  uint64_t resized = 0;        // images re-encoded by --resize
  uint64_t skipped_hidden = 0; // dot-files and dot-folders not considered
  std::vector<Rejection> rejected;
  std::vector<std::string> label_names;
  std::string fingerprint;
  double seconds = 0;
};

// Packs options.src (or options.manifest) into options.dst: shards, then
// rejected.txt, then manifest.json last, so a reader never sees half a
// dataset. Bad inputs (unreadable, empty, missing, duplicate key, not an
// image when resizing) are listed in the summary and in DST/rejected.txt.
// Returns InvalidArgument for bad options or an unusable source,
// FailedPrecondition when `strict` is set and something was rejected (no
// manifest is written then), or the I/O error that stopped the pack.
absl::StatusOr<PackSummary> Pack(const PackOptions& options);

// Parses a byte size such as "64MiB", "64M", "1.5GB", "1048576".
// "KB", "MB", "GB", "TB" are powers of 1000; "KiB", "MiB", "GiB", "TiB" and
// the bare "K", "M", "G", "T" are powers of 1024. Returns InvalidArgument.
absl::StatusOr<uint64_t> ParseByteSize(std::string_view text);

}  // namespace stoker

#endif  // STOKER_PACK_H_
