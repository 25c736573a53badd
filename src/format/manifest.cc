#include "format/manifest.h"

#include <xxhash.h>

#include "util/strings.h"
#include "absl/strings/str_format.h"
#include "format/shard_format.h"
#include "io/byte_source.h"
#include "io/storage.h"

namespace stoker {
namespace {

using nlohmann::json;

absl::Status Bad(std::string_view where, std::string_view what) {
  return absl::DataLossError(stoker::StrCat("manifest ", where, ": ", what));
}

}  // namespace

std::string ComputeFingerprint(const Manifest& m) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_128bits_reset(st);
  auto add = [&](std::string_view s) {
    uint64_t n = s.size();
    XXH3_128bits_update(st, &n, sizeof(n));
    XXH3_128bits_update(st, s.data(), s.size());
  };
  auto add_u64 = [&](uint64_t v) { XXH3_128bits_update(st, &v, sizeof(v)); };
  add("stoker-dataset");
  add_u64(m.shard_format_version);
  add_u64(m.shards.size());
  for (const ShardInfo& s : m.shards) {
    add(s.path);
    add_u64(s.bytes);
    add_u64(s.records);
    add_u64(s.crc32c);
  }
  add_u64(m.label_names.size());
  for (const std::string& n : m.label_names) add(n);
  XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  return absl::StrFormat("%016x%016x", h.high64, h.low64);
}

std::string ManifestToJson(const Manifest& m) {
  json j = json::object();
  j["format"] = "stoker-dataset";
  j["format_version"] = m.format_version;
  j["shard_format_version"] = m.shard_format_version;
  j["created_by"] = m.created_by;
  j["fingerprint"] = m.fingerprint;
  j["records"] = m.records;
  j["bytes"] = m.bytes;
  j["payload_bytes"] = m.payload_bytes;
  j["num_classes"] = m.num_classes;
  j["unlabeled"] = m.unlabeled;
  j["label_names"] = m.label_names;
  j["pack_options"] = m.pack_options;
  json shards = json::array();
  for (const ShardInfo& s : m.shards) {
    shards.push_back({{"path", s.path},
                      {"bytes", s.bytes},
                      {"records", s.records},
                      {"crc32c", absl::StrFormat("%08x", s.crc32c)}});
  }
  j["shards"] = std::move(shards);
  return j.dump(2) + "\n";
}

absl::StatusOr<Manifest> ParseManifest(std::string_view text, std::string_view where) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Bad(where, "not valid JSON (cut short or damaged?)");
  }
  Manifest m;
  try {
    if (j.value("format", "") != "stoker-dataset") {
      return Bad(where, "not a stoker dataset manifest (missing \"format\": \"stoker-dataset\")");
    }
    m.format_version = j.at("format_version").get<int>();
    if (m.format_version != kManifestVersion) {
      return absl::FailedPreconditionError(
          stoker::StrCat("manifest ", where, " has format_version ", m.format_version,
                       "; this stoker reads version ", kManifestVersion));
    }
    m.shard_format_version = j.at("shard_format_version").get<uint32_t>();
    if (m.shard_format_version != shard::kFormatVersion) {
      return absl::FailedPreconditionError(
          stoker::StrCat("manifest ", where, " names shard format ", m.shard_format_version,
                       "; this stoker reads version ", shard::kFormatVersion));
    }
    m.created_by = j.value("created_by", "");
    m.fingerprint = j.at("fingerprint").get<std::string>();
    m.records = j.at("records").get<uint64_t>();
    m.bytes = j.at("bytes").get<uint64_t>();
    m.payload_bytes = j.at("payload_bytes").get<uint64_t>();
    m.num_classes = j.at("num_classes").get<uint64_t>();
    m.unlabeled = j.value("unlabeled", uint64_t{0});
    m.label_names = j.at("label_names").get<std::vector<std::string>>();
    m.pack_options = j.value("pack_options", json::object());
    uint64_t records = 0, bytes = 0;
    for (const json& s : j.at("shards")) {
      ShardInfo info;
      info.path = s.at("path").get<std::string>();
      info.bytes = s.at("bytes").get<uint64_t>();
      info.records = s.at("records").get<uint64_t>();
      std::string crc = s.at("crc32c").get<std::string>();
      size_t used = 0;
      unsigned long v = std::stoul(crc, &used, 16);
      if (used != crc.size() || crc.size() != 8) return Bad(where, "bad crc32c of " + info.path);
      info.crc32c = static_cast<uint32_t>(v);
      if (info.path.empty() || info.path.find('/') != std::string::npos ||
          info.path.find("..") != std::string::npos || info.path[0] == '.') {
        return Bad(where, stoker::StrCat("unsafe shard name '", info.path, "'"));
      }
      records += info.records;
      bytes += info.bytes;
      m.shards.push_back(std::move(info));
    }
    if (records != m.records || bytes != m.bytes) {
      return Bad(where, stoker::StrCat("totals (", m.records, " records, ", m.bytes,
                                     " bytes) disagree with the shard list (", records,
                                     " records, ", bytes, " bytes)"));
    }
  } catch (const std::exception& e) {
    return Bad(where, stoker::StrCat("missing or mistyped field: ", e.what()));
  }
  if (ComputeFingerprint(m) != m.fingerprint) {
    return Bad(where, "fingerprint does not match the shard list (edited or damaged)");
  }
  return m;
}

std::string ShardPath(const std::string& dir, const ShardInfo& shard) {
  if (dir.empty()) return shard.path;
  return dir.back() == '/' ? dir + shard.path : stoker::StrCat(dir, "/", shard.path);
}

absl::StatusOr<Manifest> LoadManifest(const std::string& dir) {
  std::string path = ShardPath(dir, ShardInfo{std::string(shard::kManifestName)});
  absl::StatusOr<std::string> text = io::ReadUri(path);
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) {
      return absl::NotFoundError(stoker::StrCat(
          "no dataset at ", dir, ": ", path,
          " does not exist (not packed yet, or the pack was interrupted)"));
    }
    return text.status();
  }
  return ParseManifest(*text, path);
}

}  // namespace stoker
