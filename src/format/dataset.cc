#include "stoker/dataset.h"

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <thread>

#include <algorithm>
#include <chrono>
#include <thread>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>

#include "absl/strings/str_format.h"
#include "io/byte_source.h"
#include "io/node_cache.h"
#include "io/remote_sources.h"
#include "io/storage.h"
#include "util/crc32c.h"
#include "util/strings.h"

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
      absl::StatusOr<std::unique_ptr<io::ByteSource>> src = io::OpenUri(path);
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

absl::StatusOr<InputMode> ParseInputMode(std::string_view name) {
  if (name == "auto") return InputMode::kAuto;
  if (name == "file") return InputMode::kFile;
  if (name == "pipe") return InputMode::kPipe;
  if (name == "fastfile") return InputMode::kFastFile;
  return absl::InvalidArgumentError(
      StrCat("input mode '", name, "' is not one of auto, file, pipe, fastfile"));
}

namespace {

std::string HomeCache(std::string_view sub) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  std::string base = xdg && *xdg ? xdg : StrCat(home && *home ? home : "/tmp", "/.cache");
  return StrCat(base, "/stoker/", sub);
}

// A shard of an s3:// dataset read through the node cache: the first read
// fetches the whole object into the cache (or finds it there), later reads
// are local. If the cache cannot take it (disk full, an I/O error), reads go
// to the object store instead; bytes that disagree with the manifest's CRC
// are an error, never cached or delivered.
class CachedShard final : public io::ByteSource {
 public:
  CachedShard(std::shared_ptr<const io::ByteSource> remote, std::shared_ptr<io::NodeCache> cache,
              io::CacheKey key, uint32_t crc32c, std::atomic<uint64_t>* downloaded)
      : remote_(std::move(remote)),
        cache_(std::move(cache)),
        key_(std::move(key)),
        crc32c_(crc32c),
        downloaded_(downloaded) {}

  absl::Status ReadAt(uint64_t offset, size_t n, char* dst) const override {
    absl::StatusOr<const io::ByteSource*> src = Ensure();
    if (!src.ok()) return src.status();
    return (*src)->ReadAt(offset, n, dst);
  }
  uint64_t size() const override { return remote_->size(); }
  const std::string& name() const override { return remote_->name(); }

  // Fetches the shard into the cache once; returns where to read from.
  absl::StatusOr<const io::ByteSource*> Ensure() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (local_) return local_.get();
    if (fallback_) return remote_.get();
    absl::StatusOr<std::unique_ptr<io::ByteSource>> got =
        cache_->GetOrFill(key_, [&](io::WritableFile* out) -> absl::Status {
          const size_t chunk = std::max<size_t>(remote_->preferred_read_size(), 1 << 20);
          std::string buf;
          uint32_t crc = 0;
          for (uint64_t off = 0; off < remote_->size();) {
            const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, remote_->size() - off));
            buf.resize(n);
            if (absl::Status s = remote_->ReadAt(off, n, buf.data()); !s.ok()) return s;
            crc = crc32c::Extend(crc, buf.data(), n);
            if (absl::Status s = out->Append(buf); !s.ok()) return s;
            off += n;
            *downloaded_ += n;
          }
          if (crc != crc32c_) {
            return absl::DataLossError(absl::StrFormat(
                "%s: CRC-32C %08x of the fetched object differs from the manifest's %08x",
                remote_->name(), crc, crc32c_));
          }
          return absl::OkStatus();
        });
    if (got.ok()) {
      local_ = std::move(*got);
      return local_.get();
    }
    if (absl::IsDataLoss(got.status()) || absl::IsNotFound(got.status()) ||
        absl::IsFailedPrecondition(got.status())) {
      return got.status();  // bad or changed object: nothing to fall back to
    }
    fallback_ = true;  // the cache cannot take it: read from the store
    return remote_.get();
  }

 private:
  const std::shared_ptr<const io::ByteSource> remote_;
  const std::shared_ptr<io::NodeCache> cache_;
  const io::CacheKey key_;
  const uint32_t crc32c_;
  std::atomic<uint64_t>* const downloaded_;
  mutable std::mutex mu_;
  mutable std::unique_ptr<io::ByteSource> local_;  // guarded by mu_
  mutable bool fallback_ = false;                  // guarded by mu_
};

// Adds the bytes read through it to a counter (pipe mode's downloads).
class CountingSource final : public io::ByteSource {
 public:
  CountingSource(std::shared_ptr<const io::ByteSource> base, std::atomic<uint64_t>* bytes)
      : base_(std::move(base)), bytes_(bytes) {}
  absl::Status ReadAt(uint64_t offset, size_t n, char* dst) const override {
    absl::Status s = base_->ReadAt(offset, n, dst);
    if (s.ok()) *bytes_ += n;
    return s;
  }
  uint64_t size() const override { return base_->size(); }
  const std::string& name() const override { return base_->name(); }
  size_t preferred_read_size() const override { return base_->preferred_read_size(); }
  std::string version() const override { return base_->version(); }

 private:
  const std::shared_ptr<const io::ByteSource> base_;
  std::atomic<uint64_t>* const bytes_;
};

}  // namespace

struct Dataset::Remote {
  std::shared_ptr<io::NodeCache> cache;
  std::vector<std::shared_ptr<CachedShard>> cached;  // fastfile: per shard, else empty
  std::vector<std::shared_ptr<io::StreamingByteSource>> streams;  // pipe: per shard
  std::atomic<uint64_t> downloaded{0};

  // Pipe: when a shard is first read, start streaming the one the plan
  // reads after it, so the next shard's first parts are there in time.
  void WarmNext(uint64_t s) {
    std::vector<std::shared_ptr<io::StreamingByteSource>> ahead;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (s >= position.size() || position[s] >= order.size()) return;
      for (size_t i = position[s] + 1; i < order.size() && ahead.size() < warm_ahead; ++i) {
        ahead.push_back(streams[order[i]]);
      }
    }
    for (auto& stream : ahead) {
      if (stream) stream->Warm();
    }
  }
  size_t warm_ahead = 1;         // pipe: shards started ahead of the one read

  std::vector<size_t> position;  // pipe: index of each shard in `order`; guarded by mu

  // Read-ahead along the plan: threads fetch cached[order[next++]].
  std::mutex mu;
  std::condition_variable cv;
  std::vector<uint64_t> order;
  size_t next = 0;
  bool stop = false;
  std::vector<std::thread> threads;

  void Prefetcher() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stop || next < order.size(); });
      if (stop) return;
      const uint64_t s = order[next++];
      lock.unlock();
      (void)cached[s]->Ensure();  // errors resurface when the shard is read
      lock.lock();
    }
  }

  ~Remote() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_all();
    for (std::thread& t : threads) t.join();
  }
};

Dataset::~Dataset() = default;

absl::StatusOr<std::unique_ptr<Dataset>> Dataset::Open(const std::string& uri,
                                                       const DatasetOptions& options) {
  absl::StatusOr<Manifest> m = LoadManifest(uri);
  if (!m.ok()) return m.status();
  std::unique_ptr<Dataset> d(new Dataset());
  d->uri_ = uri;
  d->manifest_ = std::move(*m);
  const size_t n = d->manifest_.shards.size();
  InputMode mode = options.mode;
  if (!io::IsS3Uri(uri)) {
    mode = InputMode::kAuto;  // local datasets are read in place
  } else if (mode == InputMode::kAuto) {
    mode = InputMode::kFastFile;
  }
  auto needed = [&](uint64_t s) { return !options.needed || options.needed(s, n); };

  if (mode != InputMode::kAuto) d->remote_ = std::make_unique<Remote>();
  std::string local_dir;
  if (mode == InputMode::kFile) {
    local_dir = options.local_dir;
    if (local_dir.empty()) {
      absl::StatusOr<io::S3Location> loc = io::ParseS3Uri(uri);
      if (!loc.ok()) return loc.status();
      local_dir = HomeCache(StrCat("file/", loc->bucket, "/", loc->key));
    }
    if (absl::Status s = io::MakeFolder(local_dir); !s.ok()) return s;
  }
  if (mode == InputMode::kFastFile) {
    io::NodeCacheOptions co;
    co.dir = options.cache_dir.empty() ? HomeCache("cache") : options.cache_dir;
    co.limit_bytes = options.cache_limit ? options.cache_limit : uint64_t{10} << 30;
    absl::StatusOr<std::shared_ptr<io::NodeCache>> cache = io::NodeCache::Open(co);
    if (!cache.ok()) return cache.status();
    uint64_t largest = 0;
    for (const ShardInfo& info : d->manifest_.shards) largest = std::max(largest, info.bytes);
    if (absl::Status s = (*cache)->CheckFits(largest); !s.ok()) return s;
    d->remote_->cache = *cache;
    d->remote_->cached.resize(n);
  }

  // Pipe: rings for the shards a shuffle window spans at once, plus the one
  // being started ahead; fewer would evict a ring still in use and fetch
  // its shard again and again.
  std::shared_ptr<io::StreamBudget> stream_budget;
  if (mode == InputMode::kPipe) {
    uint64_t fewest = UINT64_MAX;
    for (const ShardInfo& info : d->manifest_.shards) {
      if (info.records > 0) fewest = std::min(fewest, info.records);
    }
    // A block of the shuffle spans at most ceil(window / fewest) + 1 shards,
    // one more is touched at a block boundary; plus those started ahead.
    const uint64_t spanned =
        fewest == UINT64_MAX ? 1 : (options.pipe_window_samples + fewest - 1) / fewest + 2;
    const int active = static_cast<int>(std::max<uint64_t>(
        options.pipe_active_shards,
        std::min<uint64_t>(spanned + static_cast<uint64_t>(options.pipe_warm_ahead), n)));
    stream_budget = io::MakeStreamBudget(active);
    d->remote_->streams.resize(n);
    d->remote_->warm_ahead = static_cast<size_t>(std::max(0, options.pipe_warm_ahead));
  }
  // Open every shard (in parallel: each is a HEAD and two small reads on S3).
  std::vector<absl::Status> status(n);
  std::vector<std::unique_ptr<shard::ShardReader>> readers(n);
  std::atomic<uint64_t> download_done{0};
  uint64_t download_total = 0;
  for (uint64_t s = 0; s < n; ++s) {
    if (mode == InputMode::kFile && needed(s)) download_total += d->manifest_.shards[s].bytes;
  }
  auto open_one = [&](uint64_t s) -> absl::Status {
    const ShardInfo& info = d->manifest_.shards[s];
    const std::string path = ShardPath(uri, info);
    absl::StatusOr<std::unique_ptr<io::ByteSource>> opened = io::OpenUri(path, options.storage);
    if (!opened.ok()) return opened.status();
    std::shared_ptr<const io::ByteSource> src = std::move(*opened);
    if (src->size() != info.bytes) {
      return absl::DataLossError(StrCat("shard ", path, " has ", src->size(),
                                        " bytes, the manifest says ", info.bytes));
    }
    if (mode == InputMode::kFile && needed(s)) {
      io::DownloadOptions dl;
      dl.crc32c = info.crc32c;
      uint64_t last = 0;
      dl.progress = [&](uint64_t done, uint64_t) {
        const uint64_t all = download_done += done - last;
        last = done;
        if (options.progress) options.progress(all, download_total);
      };
      const std::string local = io::JoinUri(local_dir, info.path);
      absl::StatusOr<uint64_t> got = io::DownloadToLocal(*src, local, dl);
      if (!got.ok()) return got.status();
      d->remote_->downloaded += *got;
      absl::StatusOr<std::unique_ptr<io::ByteSource>> file = io::OpenLocalFile(local);
      if (!file.ok()) return file.status();
      src = std::move(*file);
    }
    auto reader = shard::ShardReader::Open(src);
    if (!reader.ok()) return reader.status();
    if ((*reader)->records() != info.records) {
      return absl::DataLossError(StrCat("shard ", path, " holds ", (*reader)->records(),
                                        " records, the manifest says ", info.records));
    }
    if (mode == InputMode::kPipe && needed(s)) {
      io::StreamingOptions so;
      so.part_bytes = options.pipe_part_bytes;
      so.parts = options.pipe_parts;
      so.budget = stream_budget;
      so.on_first_read = [remote = d->remote_.get(), s] { remote->WarmNext(s); };
      auto counted = std::make_shared<CountingSource>(src, &d->remote_->downloaded);
      std::shared_ptr<io::StreamingByteSource> stream = io::MakeStreamingSource(counted, so);
      d->remote_->streams[s] = stream;
      *reader = (*reader)->WithSource(std::move(stream));
    } else if (mode == InputMode::kFastFile && needed(s)) {
      absl::StatusOr<io::S3Location> loc = io::ParseS3Uri(path);
      if (!loc.ok()) return loc.status();
      io::CacheKey key{loc->bucket, loc->key, src->version(), info.bytes};
      auto cached = std::make_shared<CachedShard>(src, d->remote_->cache, std::move(key),
                                                  info.crc32c, &d->remote_->downloaded);
      d->remote_->cached[s] = cached;
      *reader = (*reader)->WithSource(cached);
    }
    readers[s] = std::move(*reader);
    return absl::OkStatus();
  };
  if (mode == InputMode::kAuto) {
    for (uint64_t s = 0; s < n; ++s) status[s] = open_one(s);
  } else {
    // Waiting on the network, not the CPU: plain threads (TBB would cap
    // them at the core count), 16 requests in flight.
    std::atomic<uint64_t> next{0};
    std::vector<std::thread> openers;
    for (uint64_t t = 0; t < std::min<uint64_t>(n, 16); ++t) {
      openers.emplace_back([&] {
        for (uint64_t s = next++; s < n; s = next++) status[s] = open_one(s);
      });
    }
    for (std::thread& t : openers) t.join();
  }
  for (const absl::Status& s : status) {
    if (!s.ok()) return s;
  }
  uint64_t first = 0;
  for (uint64_t s = 0; s < n; ++s) {
    d->first_record_.push_back(first);
    first += d->manifest_.shards[s].records;
    d->readers_.push_back(std::move(readers[s]));
  }
  if (mode == InputMode::kFastFile) {
    // Shards fetched ahead at once: each is one connection's worth of
    // bandwidth on a store that caps connections, as S3 does.
    for (int t = 0; t < options.fastfile_parallel_fetches; ++t) {
      d->remote_->threads.emplace_back([r = d->remote_.get()] { r->Prefetcher(); });
    }
  }
  return d;
}

void Dataset::Prefetch(std::vector<uint64_t> shard_order) const {
  if (remote_ && !remote_->streams.empty()) {  // pipe: remember the order
    std::lock_guard<std::mutex> lock(remote_->mu);
    remote_->position.assign(remote_->streams.size(), SIZE_MAX);
    for (size_t i = 0; i < shard_order.size(); ++i) {
      if (shard_order[i] < remote_->position.size()) remote_->position[shard_order[i]] = i;
    }
    remote_->order = std::move(shard_order);
    remote_->next = remote_->order.size();  // nothing for the fetch threads
    return;
  }
  if (!remote_ || remote_->cached.empty()) return;
  std::vector<uint64_t> order;
  for (uint64_t s : shard_order) {
    if (s < remote_->cached.size() && remote_->cached[s]) order.push_back(s);
  }
  {
    std::lock_guard<std::mutex> lock(remote_->mu);
    remote_->order = std::move(order);
    remote_->next = 0;
  }
  remote_->cv.notify_all();
}

DatasetIoStats Dataset::io_stats() const {
  DatasetIoStats st;
  if (!remote_) return st;
  st.bytes_downloaded = remote_->downloaded.load();
  if (remote_->cache) {
    const io::NodeCacheStats cs = remote_->cache->stats();
    st.cache_hits = cs.hits;
    st.cache_misses = cs.misses;
  }
  return st;
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
