#include "stoker/pack.h"

#include <tbb/global_control.h>
#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <set>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "util/strings.h"
#include "absl/strings/str_format.h"
#include "format/manifest.h"
#include "format/shard_format.h"
#include "format/shard_writer.h"
#include "image/jpeg.h"
#include "io/byte_source.h"
#include "io/storage.h"
#include "io/writable_file.h"
#include "pack/sources.h"
#include "stoker/version.h"
#include "util/strings.h"

namespace stoker {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A file loaded (and possibly resized) by a worker, on its way to the writer.
struct Loaded {
  const pack::SourceItem* item = nullptr;
  std::string payload;
  uint64_t source_bytes = 0;
  bool resized = false;
  std::string reject_reason;  // non-empty: not packed
};

Loaded LoadOne(const pack::SourceItem& item, const PackOptions& o) {
  Loaded out;
  out.item = &item;
  absl::StatusOr<std::string> bytes = io::ReadFileToString(item.path);
  if (!bytes.ok()) {
    out.reject_reason = absl::IsNotFound(bytes.status()) ? "file does not exist"
                        : stoker::StrCat("cannot read: ", bytes.status().message());
    return out;
  }
  out.source_bytes = bytes->size();
  if (bytes->empty()) {
    out.reject_reason = "empty file (0 bytes)";
    return out;
  }
  if (o.resize) {
    if (!image::LooksLikeJpeg(*bytes)) {
      out.reject_reason = "not a JPEG image (--resize needs JPEG input)";
      return out;
    }
    image::ResizeJpegOptions ro;
    ro.shorter_side = *o.resize;
    ro.quality = o.quality;
    absl::StatusOr<std::optional<std::string>> r = image::ResizeJpegShorterSide(*bytes, ro);
    if (!r.ok()) {
      out.reject_reason = stoker::StrCat("cannot resize: ", r.status().message());
      return out;
    }
    if (r->has_value()) {
      out.payload = std::move(**r);
      out.resized = true;
      return out;
    }
  }
  out.payload = std::move(*bytes);
  return out;
}

// The deterministic permutation behind --shuffle-seed: Fisher-Yates over
// splitmix64, so the order is the same on every platform and library.
void SeededShuffle(std::vector<pack::SourceItem>* items, uint64_t seed) {
  uint64_t state = seed;
  auto next = [&state] {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  for (size_t i = items->size(); i > 1; --i) {
    size_t j = static_cast<size_t>(next() % i);
    std::swap((*items)[i - 1], (*items)[j]);
  }
}

std::string ShardName(uint64_t i) { return absl::StrFormat("shard-%05d.stk", i); }

// Whether a name in the destination is one an earlier pack wrote.
bool WrittenByPack(std::string_view name) {
  return (absl::StartsWith(ToAbsl(name), "shard-") &&
          (absl::EndsWith(ToAbsl(name), ToAbsl(shard::kShardSuffix)) ||
           absl::StrContains(ToAbsl(name), std::string(shard::kShardSuffix) + ".tmp."))) ||
         absl::StartsWith(ToAbsl(name), std::string(shard::kManifestName) + ".tmp.") ||
         absl::StartsWith(ToAbsl(name), std::string(shard::kRejectedName));
}

// Removes what an earlier pack left in dst: the manifest first, so no reader
// takes the folder (or prefix) for a dataset while shards change underneath.
absl::Status ClearDestination(const std::string& dst) {
  if (absl::Status s = io::MakeFolder(dst); !s.ok()) return s;
  if (absl::Status s = io::RemoveUri(io::JoinUri(dst, shard::kManifestName)); !s.ok()) {
    return s;
  }
  if (io::IsS3Uri(dst)) {
    absl::StatusOr<io::S3Location> loc = io::ParseS3Uri(io::JoinUri(dst, ""));
    if (!loc.ok()) return loc.status();
    absl::StatusOr<std::shared_ptr<io::S3Client>> client = io::SharedS3Client({});
    if (!client.ok()) return client.status();
    absl::StatusOr<std::vector<io::S3Client::Object>> objects =
        (*client)->List(loc->bucket, loc->key);
    if (!objects.ok()) return objects.status();
    for (const io::S3Client::Object& obj : *objects) {
      const std::string_view name = std::string_view(obj.key).substr(loc->key.size());
      if (name.find('/') != std::string_view::npos || !WrittenByPack(name)) continue;
      if (absl::Status s = (*client)->DeleteObject(loc->bucket, obj.key); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  std::error_code ec;
  for (fs::directory_iterator it(dst, ec), end; !ec && it != end; it.increment(ec)) {
    if (WrittenByPack(it->path().filename().string())) {
      std::error_code ec2;
      fs::remove(it->path(), ec2);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<uint64_t> ParseByteSize(std::string_view text) {
  std::string t(absl::StripAsciiWhitespace(ToAbsl(text)));
  size_t i = 0;
  while (i < t.size() && (absl::ascii_isdigit(t[i]) || t[i] == '.')) ++i;
  double v;
  if (i == 0 || !absl::SimpleAtod(t.substr(0, i), &v)) {
    return absl::InvalidArgumentError(stoker::StrCat("bad size '", text, "'"));
  }
  std::string unit = absl::AsciiStrToLower(absl::StripAsciiWhitespace(t.substr(i)));
  double mult;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kib") mult = 1024.0;
  else if (unit == "m" || unit == "mib") mult = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib") mult = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb") mult = 1e3;
  else if (unit == "mb") mult = 1e6;
  else if (unit == "gb") mult = 1e9;
  else if (unit == "tb") mult = 1e12;
  else return absl::InvalidArgumentError(stoker::StrCat("bad size unit in '", text, "'"));
  return static_cast<uint64_t>(std::llround(v * mult));
}

absl::Status PackOptions::Validate() const {
  if (dst.empty()) return absl::InvalidArgumentError("no destination folder given");
  if (src.empty() == !manifest.has_value()) {
    return absl::InvalidArgumentError("give either a source folder or --manifest, not both");
  }
  if (manifest && split) return absl::InvalidArgumentError("--split applies to folders only");
  if (shard_size < 4096) {
    return absl::InvalidArgumentError(stoker::StrCat("--shard-size ", shard_size,
                                                   " is too small (4096 bytes at least)"));
  }
  if (workers && (*workers < 1 || *workers > 1024)) {
    return absl::InvalidArgumentError(stoker::StrCat("--workers ", *workers, " is not in 1-1024"));
  }
  if (resize && (*resize < 1 || *resize > 65535)) {
    return absl::InvalidArgumentError(stoker::StrCat("--resize ", *resize, " is not in 1-65535"));
  }
  if (quality < 1 || quality > 100) {
    return absl::InvalidArgumentError(stoker::StrCat("--quality ", quality, " is not in 1-100"));
  }
  if (path_template.find("{}") == std::string::npos) {
    return absl::InvalidArgumentError("--path-template must contain {}");
  }
  return absl::OkStatus();
}

std::vector<std::string> PackOptions::Warnings() const {
  std::vector<std::string> w;
  if (shard_size < 1000000 || shard_size > 128000000) {
    w.push_back(stoker::StrCat("shard size ", shard_size,
                             " bytes is outside 1-128 MB, the range where reads stay efficient"
                             " and shards stay few"));
  }
  return w;
}

absl::StatusOr<PackSummary> Pack(const PackOptions& o) {
  if (absl::Status s = o.Validate(); !s.ok()) return s;
  const auto t0 = Clock::now();
  absl::StatusOr<pack::SourceList> listed = pack::ListSources(o);
  if (!listed.ok()) return listed.status();
  pack::SourceList& sources = *listed;
  std::sort(sources.items.begin(), sources.items.end(),
            [](const pack::SourceItem& a, const pack::SourceItem& b) { return a.key < b.key; });
  if (o.shuffle_seed) SeededShuffle(&sources.items, *o.shuffle_seed);

  const std::string& dst = o.dst;
  if (absl::Status s = ClearDestination(dst); !s.ok()) return s;

  PackSummary summary;
  summary.rejected = std::move(sources.rejected);
  summary.skipped_hidden = sources.skipped_hidden;
  Manifest manifest;
  manifest.shard_format_version = shard::kFormatVersion;
  manifest.label_names = sources.label_names;

  // Writer state, touched only by the serial output stage.
  std::unique_ptr<shard::ShardWriter> writer;
  absl::Status write_status;
  std::set<int32_t> labels_seen;
  uint64_t files_done = 0, bytes_in = 0;
  auto last_progress = Clock::now();
  auto report = [&](bool final) {
    if (!o.progress) return;
    auto now = Clock::now();
    if (!final && now - last_progress < std::chrono::milliseconds(100)) return;
    last_progress = now;
    PackProgress p;
    p.files_done = files_done;
    p.files_total = sources.items.size();
    p.bytes_in = bytes_in;
    p.bytes_out = summary.bytes + (writer ? writer->bytes() : 0);
    p.seconds = std::chrono::duration<double>(now - t0).count();
    o.progress(p);
  };
  auto finish_shard = [&]() -> absl::Status {
    if (!writer) return absl::OkStatus();
    ShardInfo info;
    info.path = ShardName(manifest.shards.size());
    info.records = writer->records();
    if (absl::Status s = writer->Finish(); !s.ok()) return s;
    info.bytes = writer->bytes();
    info.crc32c = writer->file_crc32c();
    summary.bytes += info.bytes;
    manifest.shards.push_back(std::move(info));
    writer.reset();
    return absl::OkStatus();
  };
  auto write_one = [&](Loaded& l) -> absl::Status {
    ++files_done;
    bytes_in += l.source_bytes;
    if (!l.reject_reason.empty()) {
      summary.rejected.push_back({l.item->path, std::move(l.reject_reason)});
      return absl::OkStatus();
    }
    const uint64_t record_size =
        shard::kRecordHeaderSize + l.item->key.size() + l.item->meta.size() + l.payload.size();
    if (writer && writer->records() > 0 &&
        writer->bytes() + record_size + (writer->records() + 1) * shard::kIndexEntrySize +
                shard::kIndexHeaderSize + shard::kFooterSize >
            o.shard_size) {
      if (absl::Status s = finish_shard(); !s.ok()) return s;
    }
    if (!writer) {
      absl::StatusOr<std::unique_ptr<io::WritableFile>> f =
          io::NewUriWriter(io::JoinUri(dst, ShardName(manifest.shards.size())));
      if (!f.ok()) return f.status();
      writer = std::make_unique<shard::ShardWriter>(std::move(*f));
    }
    absl::Status s = writer->Add(l.item->key, l.item->label, l.item->meta, l.payload);
    if (!s.ok()) {
      if (absl::IsInvalidArgument(s)) {  // an oversized key or payload: reject the file only
        summary.rejected.push_back({l.item->path, std::string(s.message())});
        return absl::OkStatus();
      }
      return s;
    }
    ++summary.records;
    summary.payload_bytes += l.payload.size();
    summary.source_bytes += l.source_bytes;
    if (l.resized) ++summary.resized;
    if (l.item->label >= 0) labels_seen.insert(l.item->label);
    else ++manifest.unlabeled;
    report(false);
    return absl::OkStatus();
  };

  const int workers =
      o.workers.value_or(std::max(1u, std::thread::hardware_concurrency()));
  tbb::task_arena arena(workers);
  size_t next = 0;
  arena.execute([&] {
    tbb::parallel_pipeline(
        static_cast<size_t>(workers) * 4,
        tbb::make_filter<void, pack::SourceItem*>(
            tbb::filter_mode::serial_in_order,
            [&](tbb::flow_control& fc) -> pack::SourceItem* {
              if (next >= sources.items.size() || !write_status.ok()) {
                fc.stop();
                return nullptr;
              }
              return &sources.items[next++];
            }) &
            tbb::make_filter<pack::SourceItem*, Loaded>(
                tbb::filter_mode::parallel,
                [&](pack::SourceItem* item) { return LoadOne(*item, o); }) &
            tbb::make_filter<Loaded, void>(tbb::filter_mode::serial_in_order,
                                           [&](Loaded l) {
                                             if (!write_status.ok()) return;
                                             write_status = write_one(l);
                                           }));
  });
  if (write_status.ok()) write_status = finish_shard();
  if (!write_status.ok()) return write_status;
  report(true);

  // rejected.txt: one "path<TAB>reason" per line, always written so a re-run
  // never leaves an old list behind.
  std::string rejected_text;
  for (const Rejection& r : summary.rejected) stoker::StrAppend(&rejected_text, r.path, "\t",
                                                              r.reason, "\n");
  if (absl::Status s =
          io::WriteUriAtomically(io::JoinUri(dst, shard::kRejectedName), rejected_text);
      !s.ok()) {
    return s;
  }
  if (o.strict && !summary.rejected.empty()) {
    for (const ShardInfo& s : manifest.shards) (void)io::RemoveUri(io::JoinUri(dst, s.path));
    return absl::FailedPreconditionError(stoker::StrCat(
        summary.rejected.size(), " input(s) rejected under --strict (first: ",
        summary.rejected[0].path, ": ", summary.rejected[0].reason, "); list in ",
        io::JoinUri(dst, shard::kRejectedName), "; no dataset written"));
  }

  manifest.records = summary.records;
  manifest.bytes = summary.bytes;
  manifest.payload_bytes = summary.payload_bytes;
  manifest.num_classes = sources.label_names.empty() ? labels_seen.size()
                                                     : sources.label_names.size();
  manifest.created_by = stoker::StrCat("stoker ", kVersion);
  nlohmann::json opts = nlohmann::json::object();
  opts["source"] = o.manifest ? *o.manifest : o.src;
  if (o.split) opts["split"] = *o.split;
  opts["shard_size"] = o.shard_size;
  if (o.resize) {
    opts["resize"] = *o.resize;
    opts["quality"] = o.quality;
  }
  if (o.shuffle_seed) opts["shuffle_seed"] = *o.shuffle_seed;
  if (o.manifest) {
    opts["path_column"] = o.path_column;
    opts["label_column"] = o.label_column;
    opts["path_template"] = o.path_template;
  }
  manifest.pack_options = std::move(opts);
  manifest.fingerprint = ComputeFingerprint(manifest);
  if (absl::Status s = io::WriteUriAtomically(io::JoinUri(dst, shard::kManifestName),
                                               ManifestToJson(manifest));
      !s.ok()) {
    return s;
  }
  summary.shards = manifest.shards.size();
  summary.classes = manifest.num_classes;
  summary.label_names = manifest.label_names;
  summary.fingerprint = manifest.fingerprint;
  summary.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return summary;
}

}  // namespace stoker
