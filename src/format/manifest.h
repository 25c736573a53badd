// manifest.json: the description of a dataset folder (see docs/formats/shard.md).
#ifndef STOKER_FORMAT_MANIFEST_H_
#define STOKER_FORMAT_MANIFEST_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace stoker {

inline constexpr int kManifestVersion = 1;

struct ShardInfo {
  std::string path;      // relative to the dataset folder, e.g. "shard-00000.stk"
  uint64_t bytes = 0;    // file size
  uint64_t records = 0;
  uint32_t crc32c = 0;   // CRC-32C of the whole file
};

struct Manifest {
  int format_version = kManifestVersion;
  uint32_t shard_format_version = 0;
  std::vector<ShardInfo> shards;
  uint64_t records = 0;        // sum over shards
  uint64_t bytes = 0;          // sum of shard sizes
  uint64_t payload_bytes = 0;  // sum of record payloads
  // Class names; a record's label is an index into this list. Empty when the
  // labels are plain integers (num_classes then counts distinct labels).
  std::vector<std::string> label_names;
  uint64_t num_classes = 0;
  uint64_t unlabeled = 0;      // records without a label
  nlohmann::json pack_options = nlohmann::json::object();
  std::string created_by;      // "stoker <version>"
  // Hex XXH3-128 over the shard list (paths, sizes, counts, CRCs) and the
  // label names: identifies the content, whatever the packing options were.
  std::string fingerprint;
};

// Computes Manifest::fingerprint from the other fields.
std::string ComputeFingerprint(const Manifest& m);

// Serialises with stable key order (pretty-printed, 2 spaces).
std::string ManifestToJson(const Manifest& m);

// Parses and validates: known version, consistent totals, shard names without
// "/" or "..", and a fingerprint that matches the content. `where` (the
// manifest's path or URI) appears in every error. Returns DataLoss for a
// damaged or inconsistent manifest, FailedPrecondition for an unknown version.
absl::StatusOr<Manifest> ParseManifest(std::string_view json, std::string_view where);

// Reads DIR/manifest.json. Returns NotFound naming the path when there is no
// manifest (e.g. an interrupted pack, which never writes one).
absl::StatusOr<Manifest> LoadManifest(const std::string& dir);

// Joins a dataset folder and a shard path.
std::string ShardPath(const std::string& dir, const ShardInfo& shard);

}  // namespace stoker

#endif  // STOKER_FORMAT_MANIFEST_H_
