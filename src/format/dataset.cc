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
#include "io/s3.h"
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

bool IsTransient(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsAborted(s) ||
         absl::IsCancelled(s);
}

namespace {

std::string HomeCache(std::string_view sub) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  std::string base = xdg && *xdg ? xdg : StrCat(home && *home ? home : "/tmp", "/.cache");
  return StrCat(base, "/stoker/", sub);
}

// A shard of an s3:// dataset read through the node cache: the first read
// (or Ensure, from the read-ahead) sends a HEAD for the object's ETag and
// finds the shard in the cache or fetches it whole into it, in ranges sent
// in parallel; later reads are local. If the cache cannot take it (disk
// full, an I/O error), reads go to the object store instead. Bytes that
// disagree with the manifest's CRC are never cached or delivered: fetched
// once more, then an error (RELIABILITY.md N13).
class CachedShard final : public io::ByteSource {
 public:
  CachedShard(std::string uri, io::StorageOptions storage, const ShardInfo& info,
              std::shared_ptr<io::NodeCache> cache, std::atomic<uint64_t>* downloaded)
      : uri_(std::move(uri)),
        storage_(std::move(storage)),
        size_(info.bytes),
        crc32c_(info.crc32c),
        cache_(std::move(cache)),
        downloaded_(downloaded) {}

  absl::Status ReadAt(uint64_t offset, size_t n, char* dst) const override {
    absl::StatusOr<const io::ByteSource*> src = Ensure();
    if (!src.ok()) return src.status();
    if (absl::Status s = (*src)->ReadAt(offset, n, dst); !s.ok()) {
      if (*src == remote_.get()) return s;
      // The cached copy failed to read (EIO, RELIABILITY.md C9): serve this
      // and later reads from the store.
      std::lock_guard<std::mutex> lock(mu_);
      fallback_ = true;
      return remote_->ReadAt(offset, n, dst);
    }
    return absl::OkStatus();
  }
  uint64_t size() const override { return size_; }
  const std::string& name() const override { return uri_; }

  // Fetches the shard into the cache once; returns where to read from.
  absl::StatusOr<const io::ByteSource*> Ensure() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (fallback_) return remote_.get();
    if (local_) return local_.get();
    if (!remote_) {
      absl::StatusOr<std::unique_ptr<io::ByteSource>> opened = io::OpenUri(uri_, storage_);
      if (!opened.ok()) return opened.status();
      if ((*opened)->size() != size_) {
        return absl::DataLossError(StrCat("shard ", uri_, " has ", (*opened)->size(),
                                          " bytes, the manifest says ", size_));
      }
      remote_ = std::move(*opened);
    }
    absl::StatusOr<io::S3Location> loc = io::ParseS3Uri(uri_);
    if (!loc.ok()) return loc.status();
    const io::CacheKey key{loc->bucket, loc->key, remote_->version(), size_};
    absl::StatusOr<std::unique_ptr<io::ByteSource>> got = cache_->GetOrFill(key, Filler());
    if (absl::IsDataLoss(got.status())) {
      got = cache_->GetOrFill(key, Filler());  // damaged on the way: once more
    }
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
  // Writes the object into a cache entry in windows of at most 8 MiB, each
  // window's ranges (an eighth of the object, 512 KiB to 1 MiB) sent at once:
  // a small shard still uses several connections, and a fetch holds at most
  // 8 MiB of memory. The CRC of the whole must match the manifest's.
  std::function<absl::Status(io::WritableFile*)> Filler() const {
    return [this](io::WritableFile* out) -> absl::Status {
      constexpr size_t kRanges = 8;
      const size_t part =
          std::clamp<size_t>((size_ + kRanges - 1) / kRanges, size_t{512} << 10, size_t{1} << 20);
      std::string buf;
      uint32_t crc = 0;
      for (uint64_t off = 0; off < size_;) {
        const size_t window = static_cast<size_t>(std::min<uint64_t>(part * kRanges, size_ - off));
        buf.resize(window);
        std::vector<io::ByteSource::Range> ranges;
        for (size_t at = 0; at < window; at += part) {
          ranges.push_back({off + at, std::min(part, window - at), buf.data() + at});
        }
        if (absl::Status s = remote_->ReadRanges(ranges); !s.ok()) return s;
        crc = crc32c::Extend(crc, buf.data(), window);
        if (absl::Status s = out->Append(buf); !s.ok()) return s;
        off += window;
        *downloaded_ += window;
      }
      if (crc != crc32c_) {
        return absl::DataLossError(absl::StrFormat(
            "%s: CRC-32C %08x of the fetched object differs from the manifest's %08x", uri_, crc,
            crc32c_));
      }
      return absl::OkStatus();
    };
  }

  const std::string uri_;
  const io::StorageOptions storage_;
  const uint64_t size_;
  const uint32_t crc32c_;
  const std::shared_ptr<io::NodeCache> cache_;
  std::atomic<uint64_t>* const downloaded_;
  mutable std::mutex mu_;
  mutable std::unique_ptr<io::ByteSource> remote_;  // after the HEAD; guarded by mu_
  mutable std::unique_ptr<io::ByteSource> local_;   // guarded by mu_
  mutable bool fallback_ = false;                   // guarded by mu_
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

// The shards of an s3:// dataset in pipe or fastfile mode, each opened on
// first use (a read, or the read-ahead along the plan): opening costs
// requests (fastfile: a HEAD, then the cache or a fetch; pipe: one read of
// the index), so Open() sends none and nothing is opened twice.
struct Dataset::Remote {
  InputMode mode = InputMode::kAuto;
  std::string uri;
  const Manifest* manifest = nullptr;
  io::StorageOptions storage;
  std::shared_ptr<io::NodeCache> cache;           // fastfile
  std::shared_ptr<io::StreamBudget> stream_budget;  // pipe
  io::StreamingOptions streaming;                   // pipe
  std::atomic<uint64_t> downloaded{0};

  struct Slot {
    std::mutex mu;
    bool tried = false;  // guarded by mu
    absl::Status error;  // of the one attempt to open; guarded by mu
    std::unique_ptr<shard::ShardReader> reader;  // written once under mu
    std::atomic<const shard::ShardReader*> ready{nullptr};
    std::atomic<uint64_t> noted_epoch{0};  // the plan generation this shard was read in
    std::shared_ptr<io::StreamingByteSource> stream;  // pipe; written once under mu
    std::shared_ptr<const io::ByteSource> direct;     // pipe: the store, past the ring
  };
  std::vector<std::unique_ptr<Slot>> slots;

  // The reader of shard s, opening it on first use. An error opening it is
  // kept (every later read of the shard returns it, naming the shard),
  // unless the store was unreachable: then the next read tries again.
  // `from_read`: called by a read of the shard (not by the read-ahead),
  // which moves the read-ahead window.
  absl::StatusOr<const shard::ShardReader*> Reader(uint64_t s, bool from_read = true) {
    Slot& slot = *slots[s];
    if (const shard::ShardReader* r = slot.ready.load(std::memory_order_acquire)) {
      if (from_read) NoteRead(s, slot);
      return r;
    }
    std::lock_guard<std::mutex> lock(slot.mu);
    if (!slot.tried) {
      slot.tried = true;
      absl::StatusOr<std::unique_ptr<shard::ShardReader>> r =
          OpenShard(s, &slot.stream, &slot.direct);
      if (mode == InputMode::kPipe && absl::IsDataLoss(r.status())) {
        // Damaged on the way (RELIABILITY.md N13): once more from the store.
        r = OpenShard(s, &slot.stream, &slot.direct);
      }
      if (r.ok()) {
        slot.reader = std::move(*r);
        slot.ready.store(slot.reader.get(), std::memory_order_release);
      } else if (IsTransient(r.status())) {
        slot.tried = false;  // the store was unreachable: the next read tries again
        return r.status();
      } else {
        slot.error = r.status();
      }
    }
    if (from_read) NoteRead(s, slot);
    if (!slot.error.ok()) return slot.error;
    return slot.reader.get();
  }

  absl::StatusOr<std::unique_ptr<shard::ShardReader>> OpenShard(
      uint64_t s, std::shared_ptr<io::StreamingByteSource>* stream_out,
      std::shared_ptr<const io::ByteSource>* direct_out) {
    const ShardInfo& info = manifest->shards[s];
    const std::string path = ShardPath(uri, info);
    std::shared_ptr<const io::ByteSource> src;
    if (mode == InputMode::kFastFile) {
      auto cached = std::make_shared<CachedShard>(path, storage, info, cache, &downloaded);
      if (absl::StatusOr<const io::ByteSource*> got = cached->Ensure(); !got.ok()) {
        return got.status();
      }
      src = std::move(cached);
    } else {
      // No HEAD: the manifest has the size; the first answer gives the ETag
      // every later read is pinned to.
      absl::StatusOr<io::S3Location> loc = io::ParseS3Uri(path);
      if (!loc.ok()) return loc.status();
      absl::StatusOr<std::shared_ptr<io::S3Client>> client = io::SharedS3Client(storage);
      if (!client.ok()) return client.status();
      absl::StatusOr<std::unique_ptr<io::ByteSource>> opened =
          io::OpenS3Object(*client, loc->bucket, loc->key, info.bytes);
      if (!opened.ok()) return opened.status();
      auto counted = std::make_shared<CountingSource>(std::move(*opened), &downloaded);
      *direct_out = counted;
      std::shared_ptr<io::StreamingByteSource> stream =
          io::MakeStreamingSource(std::move(counted), streaming);
      stream->Warm();  // the first parts come while the index is read
      *stream_out = stream;
      src = std::move(stream);
    }
    absl::StatusOr<std::unique_ptr<shard::ShardReader>> reader =
        shard::ShardReader::Open(std::move(src), info.records);
    if (!reader.ok()) return reader.status();
    if ((*reader)->records() != info.records) {
      return absl::DataLossError(StrCat("shard ", path, " holds ", (*reader)->records(),
                                        " records, the manifest says ", info.records));
    }
    return reader;
  }

  // Read-ahead along the plan: threads open order[next++] while it is at
  // most `ahead` shards past the furthest one read.
  std::mutex mu;
  std::condition_variable cv;
  std::vector<uint64_t> order;
  std::vector<size_t> position;  // of each shard in `order`, SIZE_MAX if absent
  size_t next = 0;
  size_t reading = 0;       // position of the furthest shard read so far
  size_t released = 0;      // pipe: rings of positions below it were given back
  size_t keep_behind = SIZE_MAX;  // pipe: positions behind `reading` a block may still read
  uint64_t generation = 1;  // of `order`; Slot::noted_epoch compares with it
  std::atomic<uint64_t> current_generation{1};
  size_t ahead = 1;
  bool stop = false;
  std::vector<std::thread> threads;

  // The first read of a shard in this plan moves the read-ahead window.
  // Pipe: it also marks the rings of the shards opened ahead of it as used,
  // nearest last, so that the stream budget gives back the rings of shards
  // already read before those of shards still to come.
  void NoteRead(uint64_t s, Slot& slot) {
    const uint64_t g = current_generation.load(std::memory_order_relaxed);
    if (slot.noted_epoch.load(std::memory_order_relaxed) == g) return;
    slot.noted_epoch.store(g, std::memory_order_relaxed);
    std::vector<Slot*> ahead_slots, done_slots;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (s < position.size() && position[s] != SIZE_MAX) {
        reading = std::max(reading, position[s]);
        for (size_t i = std::min(order.size(), position[s] + 1 + ahead); i > position[s] + 1;) {
          ahead_slots.push_back(slots[order[--i]].get());
        }
        // Shards further behind than a shuffle block reaches are done.
        for (; released < reading && reading - released > keep_behind; ++released) {
          done_slots.push_back(slots[order[released]].get());
        }
      }
    }
    cv.notify_all();
    for (Slot* a : done_slots) {
      if (a->ready.load(std::memory_order_acquire) != nullptr && a->stream) a->stream->Release();
    }
    for (Slot* a : ahead_slots) {
      if (a->ready.load(std::memory_order_acquire) != nullptr && a->stream) a->stream->Warm();
    }
  }

  void ReadAhead() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stop || (next < order.size() && next <= reading + ahead); });
      if (stop) return;
      const uint64_t s = order[next++];
      lock.unlock();
      (void)Reader(s, /*from_read=*/false);  // an error resurfaces when the shard is read
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
  uint64_t first = 0;
  for (uint64_t s = 0; s < n; ++s) {
    d->first_record_.push_back(first);
    first += d->manifest_.shards[s].records;
  }
  InputMode mode = options.mode;
  if (!io::IsS3Uri(uri)) {
    mode = InputMode::kAuto;  // local datasets are read in place
  } else if (mode == InputMode::kAuto) {
    mode = InputMode::kFastFile;
  }
  if (mode == InputMode::kPipe || mode == InputMode::kFastFile) {
    auto remote = std::make_unique<Remote>();
    Remote& r = *remote;
    r.mode = mode;
    r.uri = uri;
    r.manifest = &d->manifest_;
    r.storage = options.storage;
    for (size_t s = 0; s < n; ++s) r.slots.push_back(std::make_unique<Remote::Slot>());
    int threads = 0;
    if (mode == InputMode::kFastFile) {
      io::NodeCacheOptions co;
      co.dir = options.cache_dir.empty() ? HomeCache("cache") : options.cache_dir;
      co.limit_bytes = options.cache_limit ? options.cache_limit : uint64_t{10} << 30;
      absl::StatusOr<std::shared_ptr<io::NodeCache>> cache = io::NodeCache::Open(co);
      if (!cache.ok()) return cache.status();
      uint64_t largest = 0;
      for (const ShardInfo& info : d->manifest_.shards) largest = std::max(largest, info.bytes);
      if (absl::Status s = (*cache)->CheckFits(largest); !s.ok()) return s;
      r.cache = *cache;
      threads = std::max(1, options.fastfile_parallel_fetches);
      r.ahead = static_cast<size_t>(threads);
    } else {
      // Rings for the shards a shuffle block spans at once, plus those
      // streamed ahead; fewer would evict a ring still in use and fetch its
      // shard again and again.
      uint64_t fewest = UINT64_MAX;
      for (const ShardInfo& info : d->manifest_.shards) {
        if (info.records > 0) fewest = std::min(fewest, info.records);
      }
      // A block of the shuffle spans at most ceil(window / fewest) + 1
      // shards, one more is touched at a block boundary, and one more is
      // opened while the read moves on to the next (the read-ahead threads
      // work in parallel).
      const uint64_t spanned =
          fewest == UINT64_MAX ? 1 : (options.pipe_window_samples + fewest - 1) / fewest + 3;
      r.keep_behind = static_cast<size_t>(spanned);
      const int warm = std::max(0, options.pipe_warm_ahead);
      const int active = static_cast<int>(std::max<uint64_t>(
          options.pipe_active_shards, std::min<uint64_t>(spanned + static_cast<uint64_t>(warm), n)));
      r.stream_budget = io::MakeStreamBudget(active);
      r.streaming.part_bytes = options.pipe_part_bytes;
      r.streaming.parts = options.pipe_parts;
      r.streaming.budget = r.stream_budget;
      threads = std::max(1, warm);
      r.ahead = static_cast<size_t>(warm);
    }
    for (int t = 0; t < threads; ++t) r.threads.emplace_back([&r] { r.ReadAhead(); });
    d->remote_ = std::move(remote);
    d->readers_.resize(n);  // unused: remote_->slots hold the readers
    return d;
  }

  // Local datasets and file mode: every shard opened now (file mode
  // downloads it first), its structure checked against the manifest.
  std::string local_dir;
  if (mode == InputMode::kFile) {
    local_dir = options.local_dir;
    if (local_dir.empty()) {
      absl::StatusOr<io::S3Location> loc = io::ParseS3Uri(uri);
      if (!loc.ok()) return loc.status();
      local_dir = HomeCache(StrCat("file/", loc->bucket, "/", loc->key));
    }
    if (absl::Status s = io::MakeFolder(local_dir); !s.ok()) return s;
    d->remote_ = std::make_unique<Remote>();  // for its download counter
  }
  auto needed = [&](uint64_t s) { return !options.needed || options.needed(s, n); };
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
    auto reader = shard::ShardReader::Open(src, info.records);
    if (!reader.ok()) return reader.status();
    if ((*reader)->records() != info.records) {
      return absl::DataLossError(StrCat("shard ", path, " holds ", (*reader)->records(),
                                        " records, the manifest says ", info.records));
    }
    readers[s] = std::move(*reader);
    return absl::OkStatus();
  };
  if (mode == InputMode::kAuto) {
    for (uint64_t s = 0; s < n; ++s) status[s] = open_one(s);
  } else {
    // Waiting on the network, not the CPU: plain threads (TBB would cap
    // them at the core count), 16 downloads in flight.
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
  d->readers_ = std::move(readers);
  return d;
}

void Dataset::Prefetch(std::vector<uint64_t> shard_order) const {
  if (!remote_ || remote_->slots.empty()) return;  // local or file: nothing to fetch
  Remote& r = *remote_;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    r.position.assign(r.slots.size(), SIZE_MAX);
    std::vector<uint64_t> order;
    for (uint64_t s : shard_order) {
      if (s < r.slots.size() && r.position[s] == SIZE_MAX) {
        r.position[s] = order.size();
        order.push_back(s);
      }
    }
    r.order = std::move(order);
    r.next = 0;
    r.reading = 0;
    r.released = 0;
    r.current_generation.store(++r.generation, std::memory_order_relaxed);
  }
  r.cv.notify_all();
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
  const shard::ShardReader* reader = readers_[s].get();
  if (reader == nullptr) {
    if (!remote_ || remote_->slots.empty()) {
      return absl::FailedPreconditionError(
          StrCat("shard ", shard_path(s), " is not read by this process"));
    }
    absl::StatusOr<const shard::ShardReader*> r = remote_->Reader(s);
    if (!r.ok()) return r.status();
    reader = *r;
    absl::Status st = reader->ReadRecord(i - first_record_[s], scratch, out);
    const io::ByteSource* direct = remote_->slots[s]->direct.get();
    if (absl::IsDataLoss(st) && direct != nullptr) {
      // Pipe: bytes damaged on the way are read once more from the store
      // (RELIABILITY.md N13); damaged again, the error stands.
      st = reader->ReadRecordFrom(*direct, i - first_record_[s], scratch, out);
    }
    return st;
  }
  return reader->ReadRecord(i - first_record_[s], scratch, out);
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
