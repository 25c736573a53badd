#include "io/remote_sources.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "io/posix_io.h"
#include "util/crc32c.h"
#include "util/strings.h"

namespace stoker::io {
namespace {


// CRC-32C of a local file, or the error reading it.
absl::StatusOr<uint32_t> FileCrc(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "cannot open", path);
  std::vector<char> buf(size_t{4} << 20);
  uint32_t crc = 0;
  for (;;) {
    ssize_t got = ::read(fd, buf.data(), buf.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      absl::Status s = ErrnoToStatus(errno, "cannot read", path);
      ::close(fd);
      return s;
    }
    if (got == 0) break;
    crc = crc32c::Extend(crc, buf.data(), static_cast<size_t>(got));
  }
  ::close(fd);
  return crc;
}

// One attempt: resume `part` from its length, then rename it to `path`.
absl::StatusOr<uint64_t> DownloadOnce(const ByteSource& src, const std::string& path,
                                      const std::string& part, const DownloadOptions& o) {
  const uint64_t total = src.size();
  int fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, "cannot create", part);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    absl::Status s = ErrnoToStatus(errno, "cannot stat", part);
    ::close(fd);
    return s;
  }
  uint64_t done = static_cast<uint64_t>(st.st_size);
  if (done > total) {  // not a prefix of this object: start over
    if (::ftruncate(fd, 0) != 0) {
      absl::Status s = ErrnoToStatus(errno, "cannot truncate", part);
      ::close(fd);
      return s;
    }
    done = 0;
  }
  uint64_t fetched = 0;
  std::vector<char> buf(std::max<size_t>(1, o.chunk_bytes));
  while (done < total) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), total - done));
    // The chunk as up to 8 ranges read at once (on S3, 8 connections).
    const size_t piece = std::max<size_t>((n + 7) / 8, size_t{512} << 10);
    std::vector<ByteSource::Range> ranges;
    for (size_t at = 0; at < n; at += piece) {
      ranges.push_back({done + at, std::min(piece, n - at), buf.data() + at});
    }
    absl::Status s = src.ReadRanges(ranges);
    if (s.ok()) s = WriteFully(fd, std::string_view(buf.data(), n), part);
    if (!s.ok()) {
      ::close(fd);  // the part file stays: the next attempt resumes it
      return s;
    }
    done += n;
    fetched += n;
    if (o.progress) o.progress(done, total);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) return ErrnoToStatus(errno, "cannot flush", part);
  if (::rename(part.c_str(), path.c_str()) != 0) {
    return ErrnoToStatus(errno, "cannot rename to", path);
  }
  return fetched;
}

}  // namespace

absl::StatusOr<uint64_t> DownloadToLocal(const ByteSource& src, const std::string& path,
                                         const DownloadOptions& o) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) == src.size()) {
    if (!o.crc32c) return 0;
    absl::StatusOr<uint32_t> crc = FileCrc(path);
    if (crc.ok() && *crc == *o.crc32c) return 0;  // complete from an earlier run
  }
  const std::string part = path + ".part";
  uint64_t fetched = 0;
  for (int attempt = 0;; ++attempt) {
    absl::StatusOr<uint64_t> got = DownloadOnce(src, path, part, o);
    if (!got.ok()) return got.status();
    fetched += *got;
    if (!o.crc32c) return fetched;
    absl::StatusOr<uint32_t> crc = FileCrc(path);
    if (!crc.ok()) return crc.status();
    if (*crc == *o.crc32c) return fetched;
    ::unlink(path.c_str());  // a stale or damaged part file, or bad bytes
    if (attempt == 1) {
      return absl::DataLossError(absl::StrFormat(
          "download of %s to %s: CRC-32C %08x, expected %08x (fetched twice)", src.name(),
          path, *crc, *o.crc32c));
    }
  }
}

namespace {

class StreamingSource;

// A part's bytes in their own anonymous mapping, returned to the kernel when
// freed. (glibc raises its mmap threshold after the first large free, and
// then keeps freed multi-MiB parts in its arenas: the ring's memory bound
// would hold for live parts only, not for the process.)
class PartBuffer {
 public:
  explicit PartBuffer(size_t n) : size_(n) {
    if (n == 0) return;
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<char*>(p);
  }
  ~PartBuffer() {
    if (data_ != nullptr) ::munmap(data_, size_);
  }
  PartBuffer(const PartBuffer&) = delete;
  PartBuffer& operator=(const PartBuffer&) = delete;
  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  char* data_ = nullptr;
  size_t size_;
};

}  // namespace

class StreamBudget {
 public:
  explicit StreamBudget(int max_active) : max_active_(static_cast<size_t>(std::max(1, max_active))) {}
  // Marks s as just used; may release the least recently used other source.
  // REQUIRES: the caller holds no source's mutex.
  void Touch(StreamingSource* s);
  void Forget(StreamingSource* s);

 private:
  const size_t max_active_;
  std::mutex mu_;
  std::vector<StreamingSource*> active_;  // most recent last; guarded by mu_
};

std::shared_ptr<StreamBudget> MakeStreamBudget(int max_active_sources) {
  return std::make_shared<StreamBudget>(max_active_sources);
}

namespace {

class StreamingSource final : public StreamingByteSource {
 public:
  StreamingSource(std::shared_ptr<const ByteSource> base, StreamingOptions o)
      : base_(std::move(base)),
        part_bytes_(std::max<size_t>(1, o.part_bytes)),
        parts_(static_cast<uint64_t>(std::max(1, o.parts))),
        num_parts_((base_->size() + part_bytes_ - 1) / part_bytes_),
        budget_(std::move(o.budget)),
        on_first_read_(std::move(o.on_first_read)),
        reader_([this] { ReadAhead(); }) {}

  ~StreamingSource() override {
    if (budget_) budget_->Forget(this);
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    reader_.join();
  }

  absl::Status ReadAt(uint64_t offset, size_t n, char* dst) const override {
    if (offset > size() || n > size() - offset) {
      return absl::OutOfRangeError(StrCat("read of ", n, " bytes at ", offset, " of ",
                                          name(), " (", size(), " bytes)"));
    }
    if (n == 0) return absl::OkStatus();
    const uint64_t p0 = offset / part_bytes_, p1 = (offset + n - 1) / part_bytes_;
    if (budget_) budget_->Touch(const_cast<StreamingSource*>(this));
    if (on_first_read_ && !first_read_seen_.exchange(true)) on_first_read_();
    std::unique_lock<std::mutex> lock(mu_);
    if (p1 - p0 + 1 > parts_ || p0 + parts_ < head_ || p0 > head_ + parts_) {
      // Too big for the ring, far behind it, or far ahead (e.g. the index
      // at the end of a shard): a direct read leaves the ring where it is.
      lock.unlock();
      return base_->ReadAt(offset, n, dst);
    }
    if (p1 >= head_ + parts_) {  // move the ring forward
      head_ = p1 + 1 - parts_;
      for (auto it = parts_map_.begin(); it != parts_map_.end() && it->first < head_;) {
        it = parts_map_.erase(it);
      }
    }
    started_ = true;
    cv_.notify_all();  // the read-ahead thread may have work now
    for (uint64_t p = p0; p <= p1; ++p) {
      const uint64_t part_start = p * part_bytes_;
      const uint64_t from = std::max(offset, part_start);
      const uint64_t to = std::min(offset + n, part_start + PartSize(p));
      if (p < head_) {  // just behind the ring: read directly
        lock.unlock();
        absl::Status s = base_->ReadAt(from, to - from, dst + (from - offset));
        lock.lock();
        if (!s.ok()) return s;
        continue;
      }
      absl::StatusOr<std::shared_ptr<const PartBuffer>> part = GetPart(p, lock);
      if (!part.ok()) return part.status();
      std::memcpy(dst + (from - offset), (*part)->data() + (from - part_start), to - from);
    }
    return absl::OkStatus();
  }

  uint64_t size() const override { return base_->size(); }
  const std::string& name() const override { return base_->name(); }
  size_t preferred_read_size() const override { return part_bytes_; }

  // Starts the read-ahead before the first read (the next shard of a plan).
  void Warm() override {
    if (budget_) budget_->Touch(this);
    {
      std::lock_guard<std::mutex> lock(mu_);
      started_ = true;
    }
    cv_.notify_all();
  }

  // Gives back the ring's memory; the read-ahead idles until the next read.
  void Release() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = parts_map_.begin(); it != parts_map_.end();) {
      it = it->second.loading ? std::next(it) : parts_map_.erase(it);
    }
    started_ = false;
  }

 private:
  struct Part {
    bool loading = false;
    absl::Status status;
    std::shared_ptr<const PartBuffer> data;
  };

  uint64_t PartSize(uint64_t p) const {
    return std::min<uint64_t>(part_bytes_, base_->size() - p * part_bytes_);
  }

  // Returns part p, loading it on this thread unless another one already is.
  // REQUIRES: lock held on mu_.
  absl::StatusOr<std::shared_ptr<const PartBuffer>> GetPart(
      uint64_t p, std::unique_lock<std::mutex>& lock) const {
    bool fresh = false;  // this read loaded the part or waited for its load
    for (;;) {
      if (p < head_) {  // another reader moved the ring past p: read it alone
        lock.unlock();
        auto data = std::make_shared<PartBuffer>(PartSize(p));
        absl::Status s = base_->ReadAt(p * part_bytes_, data->size(), data->data());
        lock.lock();
        if (!s.ok()) return s;
        return std::shared_ptr<const PartBuffer>(std::move(data));
      }
      auto it = parts_map_.find(p);
      if (it == parts_map_.end()) {
        Load(p, lock);
        fresh = true;
        continue;
      }
      if (it->second.loading) {
        cv_.wait(lock);
        fresh = true;
        continue;
      }
      if (!it->second.status.ok()) {
        absl::Status s = it->second.status;
        parts_map_.erase(it);  // the next read tries again
        if (fresh) return s;
        continue;  // an earlier load's error (the link may be back): load again
      }
      return it->second.data;
    }
  }

  // Loads part p without the lock held. REQUIRES: lock held, p absent.
  void Load(uint64_t p, std::unique_lock<std::mutex>& lock) const {
    parts_map_[p].loading = true;
    lock.unlock();
    auto data = std::make_shared<PartBuffer>(PartSize(p));
    absl::Status s = base_->ReadAt(p * part_bytes_, data->size(), data->data());
    lock.lock();
    Loaded(p, s, std::move(data));
    cv_.notify_all();
  }

  // Keeps the ring full: loads every missing part of [head, head+parts) at
  // once (ReadRanges: on S3 a request each, all in flight together).
  void ReadAhead() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      std::vector<uint64_t> missing;
      for (uint64_t p = head_; p < std::min(head_ + parts_, num_parts_); ++p) {
        if (parts_map_.find(p) == parts_map_.end()) missing.push_back(p);
      }
      if (missing.empty() || !started_) {  // idle until the first read
        cv_.wait(lock);
        continue;
      }
      for (uint64_t p : missing) parts_map_[p].loading = true;
      lock.unlock();
      std::vector<std::shared_ptr<PartBuffer>> data;
      std::vector<Range> ranges;
      for (uint64_t p : missing) {
        data.push_back(std::make_shared<PartBuffer>(PartSize(p)));
        ranges.push_back({p * part_bytes_, data.back()->size(), data.back()->data()});
      }
      absl::Status s = base_->ReadRanges(ranges);
      lock.lock();
      for (size_t i = 0; i < missing.size(); ++i) Loaded(missing[i], s, std::move(data[i]));
      cv_.notify_all();
    }
  }

  // Files the result of loading part p. REQUIRES: lock held on mu_.
  void Loaded(uint64_t p, const absl::Status& s, std::shared_ptr<PartBuffer> data) const {
    auto it = parts_map_.find(p);
    if (p < head_) {  // the ring moved past it meanwhile
      if (it != parts_map_.end()) parts_map_.erase(it);
    } else {
      it->second.loading = false;
      it->second.status = s;
      if (s.ok()) it->second.data = std::move(data);
    }
  }

  const std::shared_ptr<const ByteSource> base_;
  const size_t part_bytes_;
  const uint64_t parts_;
  const uint64_t num_parts_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable std::map<uint64_t, Part> parts_map_;  // guarded by mu_
  mutable uint64_t head_ = 0;                   // first part of the ring; guarded by mu_
  bool stop_ = false;                           // guarded by mu_
  mutable bool started_ = false;                // a read used the ring; guarded by mu_
  const std::shared_ptr<StreamBudget> budget_;
  const std::function<void()> on_first_read_;
  mutable std::atomic<bool> first_read_seen_{false};
  std::thread reader_;                          // last: starts after the rest is set
};

}  // namespace

void StreamBudget::Touch(StreamingSource* s) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find(active_.begin(), active_.end(), s);
  if (it != active_.end()) {
    if (it + 1 == active_.end()) return;  // already the most recent
    active_.erase(it);
  }
  active_.push_back(s);
  if (active_.size() > max_active_) {
    StreamingSource* victim = active_.front();
    active_.erase(active_.begin());
    victim->Release();  // locks only the victim's mutex
  }
}

void StreamBudget::Forget(StreamingSource* s) {
  std::lock_guard<std::mutex> lock(mu_);
  active_.erase(std::remove(active_.begin(), active_.end(), s), active_.end());
}

std::unique_ptr<StreamingByteSource> MakeStreamingSource(
    std::shared_ptr<const ByteSource> base, StreamingOptions options) {
  return std::make_unique<StreamingSource>(std::move(base), options);
}

}  // namespace stoker::io
