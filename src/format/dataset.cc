#include "stoker/dataset.h"

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "util/strings.h"
#include "absl/strings/str_format.h"
#include "io/byte_source.h"

namespace stoker {

absl::StatusOr<Manifest> Inspect(const std::string& uri) { return LoadManifest(uri); }

absl::StatusOr<VerifyReport> Verify(const std::string& uri, const VerifyOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<Manifest> m = LoadManifest(uri);
  if (!m.ok()) return m.status();
  const size_t n = m->shards.size();
  std::vector<absl::StatusOr<shard::ShardVerifyResult>> results(n, shard::ShardVerifyResult{});
  const int workers = options.workers.value_or(std::max(1u, std::thread::hardware_concurrency()));
  tbb::task_arena arena(workers);
  arena.execute([&] {
    tbb::parallel_for(size_t{0}, n, [&](size_t i) {
      const std::string path = ShardPath(uri, m->shards[i]);
      absl::StatusOr<std::unique_ptr<io::ByteSource>> src = io::OpenLocalFile(path);
      if (!src.ok()) {
        results[i] = src.status();
        return;
      }
      results[i] = shard::VerifyShard(**src);
    });
  });
  VerifyReport report;
  report.shards = n;
  for (size_t i = 0; i < n; ++i) {
    const ShardInfo& info = m->shards[i];
    const std::string path = ShardPath(uri, info);
    auto add = [&](uint64_t off, std::string reason) {
      report.corruptions.push_back({path, off, "", std::move(reason)});
    };
    if (!results[i].ok()) {
      add(0, std::string(results[i].status().message()));
      report.records_bad += info.records;
      continue;
    }
    shard::ShardVerifyResult& r = *results[i];
    report.records_ok += r.records_ok;
    report.records_bad += r.records_bad;
    report.bytes += r.bytes;
    for (shard::Corruption& c : r.corruptions) report.corruptions.push_back(std::move(c));
    if (r.bytes != info.bytes) {
      add(std::min(r.bytes, info.bytes), stoker::StrCat("shard has ", r.bytes,
                                                      " bytes, the manifest says ", info.bytes));
    }
    if (r.records_ok + r.records_bad != info.records) {
      add(0, stoker::StrCat("found ", r.records_ok + r.records_bad,
                          " records, the manifest says ", info.records));
    }
    if (r.file_crc32c != info.crc32c) {
      add(0, absl::StrFormat("shard CRC-32C %08x differs from the manifest's %08x",
                             r.file_crc32c, info.crc32c));
    }
  }
  std::stable_sort(report.corruptions.begin(), report.corruptions.end(),
                   [](const shard::Corruption& a, const shard::Corruption& b) {
                     return std::tie(a.shard, a.offset) < std::tie(b.shard, b.offset);
                   });
  report.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

absl::StatusOr<std::unique_ptr<Dataset>> Dataset::Open(const std::string& uri) {
  absl::StatusOr<Manifest> m = LoadManifest(uri);
  if (!m.ok()) return m.status();
  std::unique_ptr<Dataset> d(new Dataset());
  d->uri_ = uri;
  d->manifest_ = std::move(*m);
  uint64_t first = 0;
  for (const ShardInfo& info : d->manifest_.shards) {
    const std::string path = ShardPath(uri, info);
    absl::StatusOr<std::unique_ptr<io::ByteSource>> src = io::OpenLocalFile(path);
    if (!src.ok()) return src.status();
    if ((*src)->size() != info.bytes) {
      return absl::DataLossError(stoker::StrCat("shard ", path, " has ", (*src)->size(),
                                              " bytes, the manifest says ", info.bytes));
    }
    auto reader = shard::ShardReader::Open(std::shared_ptr<const io::ByteSource>(std::move(*src)));
    if (!reader.ok()) return reader.status();
    if ((*reader)->records() != info.records) {
      return absl::DataLossError(stoker::StrCat("shard ", path, " holds ", (*reader)->records(),
                                              " records, the manifest says ", info.records));
    }
    d->first_record_.push_back(first);
    first += info.records;
    d->readers_.push_back(std::move(*reader));
  }
  return d;
}

absl::Status Dataset::ReadView(uint64_t i, std::string* scratch, shard::RecordView* out,
                               uint64_t* shard_index) const {
  if (i >= size()) {
    return absl::OutOfRangeError(stoker::StrCat("record ", i, " of dataset ", uri_,
                                                " which has ", size()));
  }
  auto it = std::upper_bound(first_record_.begin(), first_record_.end(), i);
  const uint64_t s = static_cast<uint64_t>(it - first_record_.begin()) - 1;
  if (shard_index) *shard_index = s;
  return readers_[s]->ReadRecord(i - first_record_[s], scratch, out);
}

absl::StatusOr<Record> Dataset::Read(uint64_t i) const {
  std::string scratch;
  shard::RecordView v;
  Record r;
  if (absl::Status st = ReadView(i, &scratch, &v, &r.shard); !st.ok()) return st;
  r.key = std::string(v.key);
  r.label = v.label;
  r.meta = std::string(v.meta);
  r.payload = std::string(v.payload);
  r.offset = v.offset;
  return r;
}

}  // namespace stoker
