#include "io/node_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "io/posix_io.h"
#include "util/crc32c.h"
#include "util/strings.h"

// Entry file layout, all integers little-endian. N = CacheKey::size.
//
//   offset          bytes  field
//   0               N      content, exactly as fetch wrote it
//   N               4      B = bucket length, then B bytes of bucket
//   N+4+B           4      K = key length, then K bytes of key
//   N+8+B+K         4      E = ETag length, then E bytes of ETag
//   F = N+12+B+K+E  8      N again
//   F+8             4      I = 12+B+K+E, the identity's length
//   F+12            4      masked CRC-32C of the content
//   F+16            4      format version, kFormatVersion
//   F+20            4      masked CRC-32C of bytes [N, F+20)
//   F+24            8      magic: the ASCII bytes "STKCACHE"
//
// The trailer follows the content so that a fill streams the content straight
// to disk and writes the CRC once it knows it, and so that a cached object is
// read at the same offsets as the object. The file size is known from the key
// alone, so a truncated or extended entry fails before anything is read.
// A new layout bumps kFormatVersion, which is also hashed into the file name:
// old entries are never read by new code, and age out by LRU.

namespace stoker::io {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kFormatVersion = 1;
constexpr char kMagic[8] = {'S', 'T', 'K', 'C', 'A', 'C', 'H', 'E'};
constexpr size_t kFooterBytes = 8 + 4 + 4 + 4 + 4 + sizeof(kMagic);
constexpr size_t kIdentityFixedBytes = 3 * 4;
static_assert(kIdentityFixedBytes + kFooterBytes + kMaxIdentityBytes <= kMaxEntryOverhead);

constexpr char kLockName[] = "LOCK";
constexpr char kKeyLockName[] = "KEYLOCKS";
constexpr std::string_view kEntrySuffix = ".entry";
constexpr std::string_view kTempSuffix = ".tmp";
constexpr size_t kHashHexChars = 32;
constexpr size_t kIoChunk = size_t{1} << 20;


void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

std::string EncodeIdentity(const CacheKey& key) {
  std::string out;
  out.reserve(kIdentityFixedBytes + key.bucket.size() + key.key.size() + key.etag.size());
  for (const std::string* s : {&key.bucket, &key.key, &key.etag}) {
    PutU32(&out, static_cast<uint32_t>(s->size()));
    out += *s;
  }
  return out;
}

// Identity plus footer: everything after the content.
std::string EncodeTrailer(const CacheKey& key, uint32_t content_crc) {
  std::string t = EncodeIdentity(key);
  const uint32_t identity_len = static_cast<uint32_t>(t.size());
  PutU64(&t, key.size);
  PutU32(&t, identity_len);
  PutU32(&t, crc32c::Mask(content_crc));
  PutU32(&t, kFormatVersion);
  PutU32(&t, crc32c::Mask(crc32c::Value(t)));
  t.append(kMagic, sizeof(kMagic));
  return t;
}

uint64_t TrailerBytes(const CacheKey& key) {
  return kIdentityFixedBytes + key.bucket.size() + key.key.size() + key.etag.size() + kFooterBytes;
}

absl::Status CheckKey(const CacheKey& key) {
  // Far beyond any object store's limit; keeps every offset a valid off_t.
  if (key.size > (uint64_t{1} << 60)) {
    return absl::InvalidArgumentError(stoker::StrCat("cache key for ", key.bucket, "/",
                                                     key.key.substr(0, 200), " has size ", key.size,
                                                     ", more than 2^60 bytes"));
  }
  if (key.bucket.size() + key.key.size() + key.etag.size() > kMaxIdentityBytes) {
    return absl::InvalidArgumentError(
        stoker::StrCat("cache key for ", key.bucket, "/", key.key.substr(0, 200),
                       " is longer than ", kMaxIdentityBytes, " bytes (bucket + key + ETag)"));
  }
  return absl::OkStatus();
}

XXH128_hash_t HashKey(const CacheKey& key) {
  // The format version is part of the name so that a new layout never opens
  // an old entry; lengths come first so that ("ab","c") != ("a","bc").
  std::string buf = "stoker-node-cache/";
  PutU32(&buf, kFormatVersion);
  buf += EncodeIdentity(key);
  PutU64(&buf, key.size);
  return XXH3_128bits(buf.data(), buf.size());
}

std::string HashHex(const XXH128_hash_t& h) {
  return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

bool IsHashHex(std::string_view s) {
  return s.size() == kHashHexChars && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

bool IsEntryName(std::string_view name) {
  return name.size() == kHashHexChars + kEntrySuffix.size() && name.ends_with(kEntrySuffix) &&
         IsHashHex(name.substr(0, kHashHexChars));
}

// Parses "<hash>.<bytes>.<pid>.<rand>.tmp"; returns the reserved bytes.
std::optional<uint64_t> ParseTempName(std::string_view name) {
  if (!name.ends_with(kTempSuffix) || name.size() <= kHashHexChars + 1 ||
      !IsHashHex(name.substr(0, kHashHexChars)) || name[kHashHexChars] != '.') {
    return std::nullopt;
  }
  std::string_view rest = name.substr(kHashHexChars + 1);
  uint64_t bytes = 0;
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), bytes);
  if (ec != std::errc() || end == rest.data() || *end != '.') return std::nullopt;
  return bytes;
}

int64_t NowNs() {
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

int64_t MtimeNs(const struct stat& st) {
  return int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
}

// Marks an entry used now. Stamps strictly increase within a process, so two
// uses in a row are ordered even when the clock has not moved between them.
void Touch(int fd) {
  static std::atomic<int64_t> last{0};
  int64_t now = NowNs();
  int64_t prev = last.load(std::memory_order_relaxed);
  int64_t stamp;
  do {
    stamp = std::max(now, prev + 1);
  } while (!last.compare_exchange_weak(prev, stamp, std::memory_order_relaxed));
  struct timespec times[2];
  times[0].tv_sec = 0;
  times[0].tv_nsec = UTIME_OMIT;
  times[1].tv_sec = stamp / 1'000'000'000;
  times[1].tv_nsec = stamp % 1'000'000'000;
  // Best effort: a failed touch only makes the entry look older to LRU.
  (void)::futimens(fd, times);
}

std::string RandomHex() {
  // Seeded per thread; a forked child may repeat its parent's sequence, which
  // the pid in the temporary name and O_EXCL make harmless.
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{:016x}", rng());
}

// Holds a byte-range lock on KEYLOCKS, one byte per key, while one thread
// fills the key; the others wait. Each holder opens the file itself because
// OFD locks belong to an open file description: threads of one process
// sharing one would not exclude each other. The kernel drops the lock when
// the holder dies, so kill -9 leaves nothing behind (C12).
class KeyLock {
 public:
  KeyLock() = default;
  ~KeyLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  KeyLock(const KeyLock&) = delete;
  KeyLock& operator=(const KeyLock&) = delete;

  // Waits up to `wait` for the lock. Gives up silently (the caller fetches
  // anyway: a duplicate download, never wrong bytes) when the wait ends or
  // the file system has no such locks.
  void Acquire(int dir_fd, uint64_t hash, std::chrono::milliseconds wait) {
    fd_ = ::openat(dir_fd, kKeyLockName, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd_ < 0) return;
    struct flock fl = {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = static_cast<off_t>(hash >> 2);  // a non-negative off_t
    fl.l_len = 1;
    // Polling, not F_OFD_SETLKW: a blocking wait could not be bounded, and a
    // holder stuck on a dead connection must not stop everyone else.
    const auto deadline = std::chrono::steady_clock::now() + wait;
    auto nap = std::chrono::milliseconds(1);
    while (::fcntl(fd_, F_OFD_SETLK, &fl) != 0) {
      if ((errno != EAGAIN && errno != EACCES && errno != EINTR) ||
          std::chrono::steady_clock::now() >= deadline) {
        ::close(fd_);
        fd_ = -1;
        return;
      }
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::milliseconds(20));
    }
  }

 private:
  int fd_ = -1;
};

// The writer handed to fetch: streams into the temporary file, counts and
// checksums the bytes, and refuses more than the object's size. Its first
// error sticks, so a fetch that ignores a failed Append still fails the fill.
class FillWriter final : public WritableFile {
 public:
  FillWriter(int fd, std::string path, uint64_t expected)
      : fd_(fd), path_(std::move(path)), expected_(expected) {}

  absl::Status Append(std::string_view data) override {
    if (!status_.ok()) return status_;
    if (data.size() > expected_ - size_) {
      status_ = absl::DataLossError(
          stoker::StrCat("fetch wrote more than the ", expected_, " bytes expected into ", path_));
      return status_;
    }
    crc_ = crc32c::Extend(crc_, data.data(), data.size());
    size_ += data.size();
    if (buffer_.size() + data.size() > kIoChunk) status_ = Flush();
    if (status_.ok()) {
      if (data.size() >= kIoChunk) {
        status_ = WriteFully(fd_, data, path_);
      } else {
        buffer_.append(data.data(), data.size());
      }
    }
    return status_;
  }
  uint64_t size() const override { return size_; }
  absl::Status Commit() override {
    status_ = absl::FailedPreconditionError(stoker::StrCat(
        "fetch called Commit on ", path_, "; the node cache publishes entries itself"));
    return status_;
  }
  const std::string& name() const override { return path_; }

  // After fetch returned OK: checks the count, appends the trailer, fsyncs.
  absl::Status Finish(const CacheKey& key) {
    if (!status_.ok()) return status_;
    if (size_ != expected_) {
      return absl::DataLossError(stoker::StrCat("fetch wrote ", size_, " of the ", expected_,
                                                " bytes of ", key.bucket, "/", key.key));
    }
    buffer_ += EncodeTrailer(key, crc_);
    if (absl::Status s = Flush(); !s.ok()) return s;
    if (::fsync(fd_) != 0) return ErrnoToStatus(errno, "cannot fsync", path_);
    return absl::OkStatus();
  }

 private:
  absl::Status Flush() {
    absl::Status s = WriteFully(fd_, buffer_, path_);
    buffer_.clear();
    return s;
  }

  const int fd_;
  const std::string path_;
  const uint64_t expected_;
  std::string buffer_;
  uint64_t size_ = 0;
  uint32_t crc_ = 0;
  absl::Status status_;
};

}  // namespace

// (dev, inode) of every entry this process has open through a returned
// ByteSource; eviction spares them while it can. Shared with the sources so
// that they may outlive the cache.
struct NodeCache::OpenSet {
  using Id = std::pair<uint64_t, uint64_t>;
  absl::Mutex mu;
  std::map<Id, int> count ABSL_GUARDED_BY(mu);

  void Add(Id id) {
    absl::MutexLock l(&mu);
    ++count[id];
  }
  void Remove(Id id) {
    absl::MutexLock l(&mu);
    auto it = count.find(id);
    if (it != count.end() && --it->second == 0) count.erase(it);
  }
  bool Contains(Id id) {
    absl::MutexLock l(&mu);
    return count.contains(id);
  }
};

struct NodeCache::Counters {
  std::atomic<uint64_t> hits{0}, misses{0}, fills{0}, fills_joined{0}, fill_failures{0},
      evictions{0}, corrupt_entries{0}, rejected_entries{0}, orphans_removed{0}, bytes_filled{0};
};

// mu_ for the threads of this process, flock for other processes. flock is
// advisory and may do nothing (Lustre): it only keeps two evictors from
// counting the same files, never guards correctness.
class ABSL_SCOPED_LOCKABLE NodeCache::DirLock {
 public:
  explicit DirLock(NodeCache* cache) ABSL_EXCLUSIVE_LOCK_FUNCTION(cache->mu_) : cache_(cache) {
    cache_->mu_.Lock();
    if (cache_->options_.file_locks) {
      // Errors other than EINTR (ENOLCK on some NFS mounts) mean no lock;
      // carry on without it.
      while (::flock(cache_->lock_fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
    }
  }
  ~DirLock() ABSL_UNLOCK_FUNCTION() {
    if (cache_->options_.file_locks) ::flock(cache_->lock_fd_, LOCK_UN);
    cache_->mu_.Unlock();
  }
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  NodeCache* const cache_;
};

namespace {

// Closes an fd on scope exit unless released.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

}  // namespace

absl::Status NodeCacheOptions::Validate() const {
  if (dir.empty()) return absl::InvalidArgumentError("node cache: dir is empty");
  if (limit_bytes == 0) {
    return absl::InvalidArgumentError(
        stoker::StrCat("node cache ", dir, ": limit_bytes is 0; give a size or turn it off"));
  }
  if (orphan_age.count() < 0 || fill_wait.count() < 0) {
    return absl::InvalidArgumentError(
        stoker::StrCat("node cache ", dir, ": orphan_age and fill_wait must not be negative"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<NodeCache>> NodeCache::Open(NodeCacheOptions options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  const std::string& dir = options.dir;
  fs::path path(dir);
  if (!path.has_filename()) path = path.parent_path();  // "a/b/" -> "a/b"
  if (path.has_parent_path()) {
    std::error_code ignored;  // mkdir below reports what matters
    fs::create_directories(path.parent_path(), ignored);
  }
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoToStatus(errno, "cannot create node cache folder", dir);
  }
  // Following a symlink here is deliberate (a cache dir on another disk is
  // often a link); the checks below apply to the folder it leads to.
  int dir_fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return ErrnoToStatus(errno, "cannot open node cache folder", dir);
  FdCloser dir_closer(dir_fd);
  struct stat st;
  if (::fstat(dir_fd, &st) != 0) return ErrnoToStatus(errno, "cannot stat", dir);
  // Whoever else can write the folder can plant or swap entries (C5).
  if (st.st_uid != ::geteuid()) {
    return absl::PermissionDeniedError(
        stoker::StrCat("node cache folder ", dir, " is owned by uid ", st.st_uid,
                       ", not by this user (uid ", ::geteuid(), "); use a folder of your own"));
  }
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    return absl::PermissionDeniedError(stoker::StrCat(
        "node cache folder ", dir, " has mode ", fmt::format("{:o}", st.st_mode & 07777),
        " and others can write it; use chmod 700 or another folder"));
  }
  int lock_fd = -1;
  for (const char* name : {kKeyLockName, kLockName}) {  // LOCK last: it is kept open
    int fd = ::openat(dir_fd, name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return ErrnoToStatus(errno, "cannot open lock file in", dir);
    FdCloser closer(fd);
    if (::fstat(fd, &st) != 0) return ErrnoToStatus(errno, "cannot stat lock file in", dir);
    if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
      return absl::PermissionDeniedError(stoker::StrCat(
          "lock file ", dir, "/", name, " is not a regular file of this user; remove it"));
    }
    if (std::strcmp(name, kLockName) == 0) lock_fd = closer.release();
  }
  std::shared_ptr<NodeCache> cache(
      new NodeCache(std::move(options), dir_closer.release(), lock_fd));
  {
    DirLock lock(cache.get());
    // Only fills in progress elsewhere can keep this above the limit; they
    // finish or are swept as orphans, and our own fills then wait their turn.
    (void)cache->MakeRoom({});
  }
  return cache;
}

NodeCache::NodeCache(NodeCacheOptions options, int dir_fd, int lock_fd)
    : options_(std::move(options)),
      dir_fd_(dir_fd),
      lock_fd_(lock_fd),
      open_(std::make_shared<OpenSet>()),
      counters_(std::make_unique<Counters>()) {}

NodeCache::~NodeCache() {
  ::close(lock_fd_);
  ::close(dir_fd_);
}

std::string NodeCache::EntryName(const CacheKey& key) {
  return stoker::StrCat(HashHex(HashKey(key)), kEntrySuffix);
}

std::string NodeCache::PathOf(std::string_view name) const {
  return stoker::StrCat(options_.dir, options_.dir.ends_with('/') ? "" : "/", name);
}

void NodeCache::Warn(std::string_view message) const {
  if (options_.on_warning) options_.on_warning(message);
}

absl::Status NodeCache::CheckFits(uint64_t largest_object) const {
  const uint64_t limit = options_.limit_bytes;
  if (largest_object > limit || limit - largest_object < kMaxEntryOverhead) {
    return absl::InvalidArgumentError(stoker::StrCat(
        "node cache ", options_.dir, " has a limit of ", limit,
        " bytes, too small for the largest object of ", largest_object, " bytes (plus up to ",
        kMaxEntryOverhead, " bytes of entry trailer); raise the limit or turn the cache off"));
  }
  return absl::OkStatus();
}

void NodeCache::Discard(const std::string& name, int fd, bool corrupt, std::string_view why) {
  (corrupt ? counters_->corrupt_entries : counters_->rejected_entries)
      .fetch_add(1, std::memory_order_relaxed);
  Warn(stoker::StrCat("node cache: ", PathOf(name), " ", why, "; deleted, will fetch again"));
  // Unlink only the file we judged: another process may have replaced it with
  // a good one since we opened it.
  struct stat ours, now;
  if (fd >= 0 && ::fstat(fd, &ours) == 0 &&
      ::fstatat(dir_fd_, name.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 &&
      (ours.st_dev != now.st_dev || ours.st_ino != now.st_ino)) {
    return;
  }
  ::unlinkat(dir_fd_, name.c_str(), 0);
}

std::unique_ptr<ByteSource> NodeCache::OpenEntry(const std::string& name, const CacheKey& key) {
  // O_NOFOLLOW: a symlink planted under an entry name is refused, not read.
  // O_NONBLOCK: a planted FIFO would otherwise block the open forever.
  int fd = ::openat(dir_fd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP) Discard(name, -1, /*corrupt=*/false, "is a symlink");
    return nullptr;
  }
  FdCloser closer(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) return nullptr;
  if (!S_ISREG(st.st_mode)) {
    Discard(name, fd, /*corrupt=*/false, "is not a regular file");
    return nullptr;
  }
  if (st.st_uid != ::geteuid()) {
    Discard(name, fd, /*corrupt=*/false,
            stoker::StrCat("is owned by uid ", st.st_uid, ", not ", ::geteuid()));
    return nullptr;
  }
  if (st.st_mode & 077) {
    Discard(name, fd, /*corrupt=*/false,
            stoker::StrCat("has mode ", fmt::format("{:o}", st.st_mode & 07777), ", not 600"));
    return nullptr;
  }
  const uint64_t trailer_bytes = TrailerBytes(key);
  const uint64_t file_bytes = key.size + trailer_bytes;
  if (static_cast<uint64_t>(st.st_size) != file_bytes) {
    Discard(name, fd, /*corrupt=*/true,
            stoker::StrCat("has ", st.st_size, " bytes, not ", file_bytes));
    return nullptr;
  }
  const std::string path = PathOf(name);
  std::string trailer(trailer_bytes, '\0');
  if (!ReadFully(fd, key.size, trailer.size(), trailer.data(), path).ok()) {
    Discard(name, fd, /*corrupt=*/true, "cannot be read");
    return nullptr;
  }
  // Rebuilding the trailer from the key and comparing checks magic, version,
  // identity and both lengths at once; only the content CRC is unknown.
  const size_t crc_at = trailer.size() - kFooterBytes + 12;
  const uint32_t stored_crc = crc32c::Unmask(GetU32(trailer.data() + crc_at));
  if (trailer != EncodeTrailer(key, stored_crc)) {
    Discard(name, fd, /*corrupt=*/true, "has a trailer for another object or a damaged one");
    return nullptr;
  }
  // Reading every byte is the price of catching a flipped bit before it
  // reaches a decoder; it also warms the page cache for the caller.
  std::unique_ptr<char[]> buf(new char[kIoChunk]);
  uint32_t crc = 0;
  for (uint64_t off = 0; off < key.size; off += kIoChunk) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kIoChunk, key.size - off));
    if (!ReadFully(fd, off, n, buf.get(), path).ok()) {
      Discard(name, fd, /*corrupt=*/true, "cannot be read");
      return nullptr;
    }
    crc = crc32c::Extend(crc, buf.get(), n);
  }
  if (crc != stored_crc) {
    Discard(name, fd, /*corrupt=*/true, "fails its CRC-32C");
    return nullptr;
  }
  Touch(fd);
  const OpenSet::Id id{st.st_dev, st.st_ino};
  open_->Add(id);
  return MakeFdSource(closer.release(), key.size, path,
                      [open = open_, id] { open->Remove(id); });
}

absl::Status NodeCache::MakeRoom(std::string_view keep) {
  struct Candidate {
    bool open;
    int64_t mtime_ns;
    std::string name;
    uint64_t bytes;
  };
  // A fresh descriptor: readdir's position belongs to the open file
  // description, which dir_fd_ must not have moved under it.
  int fd = ::openat(dir_fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "cannot list", options_.dir);
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    return ErrnoToStatus(errno, "cannot list", options_.dir);
  }
  const int64_t now = NowNs();
  const int64_t orphan_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(options_.orphan_age).count();
  std::vector<Candidate> entries;
  uint64_t used = 0;
  while (struct dirent* de = ::readdir(d)) {
    const std::string_view name = de->d_name;
    const bool is_entry = IsEntryName(name);
    const std::optional<uint64_t> reserved = is_entry ? std::nullopt : ParseTempName(name);
    if (!is_entry && !reserved) continue;  // not ours: never counted, never removed
    struct stat st;
    if (::fstatat(dir_fd_, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (reserved) {
      if (name != keep && now - MtimeNs(st) > orphan_ns) {
        if (::unlinkat(dir_fd_, de->d_name, 0) == 0) {
          counters_->orphans_removed.fetch_add(1, std::memory_order_relaxed);
          Warn(stoker::StrCat("node cache: removed ", PathOf(name),
                              ", left by a fill that stopped (crashed process?)"));
        }
        continue;
      }
      used += std::max<uint64_t>(*reserved, st.st_size);
      continue;
    }
    entries.push_back({open_->Contains({st.st_dev, st.st_ino}), MtimeNs(st), std::string(name),
                       static_cast<uint64_t>(st.st_size)});
    used += st.st_size;
  }
  ::closedir(d);
  if (used <= options_.limit_bytes) return absl::OkStatus();
  // Least recently used first, but entries this process is reading last: they
  // stay readable when unlinked, yet their space is freed only on close.
  std::sort(entries.begin(), entries.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(a.open, a.mtime_ns, a.name) < std::tie(b.open, b.mtime_ns, b.name);
  });
  for (const Candidate& c : entries) {
    if (used <= options_.limit_bytes) break;
    // ENOENT means another process evicted it first (flock may be a no-op);
    // either way its bytes are gone.
    if (::unlinkat(dir_fd_, c.name.c_str(), 0) == 0) {
      counters_->evictions.fetch_add(1, std::memory_order_relaxed);
    }
    used -= c.bytes;
  }
  if (used <= options_.limit_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      stoker::StrCat("node cache ", options_.dir, " is full: ", used, " bytes of its limit of ",
                     options_.limit_bytes, " are held by fills in progress"));
}

absl::StatusOr<std::unique_ptr<ByteSource>> NodeCache::Lookup(const CacheKey& key) {
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  std::unique_ptr<ByteSource> entry = OpenEntry(EntryName(key), key);
  (entry ? counters_->hits : counters_->misses).fetch_add(1, std::memory_order_relaxed);
  return entry;
}

absl::StatusOr<std::unique_ptr<ByteSource>> NodeCache::GetOrFill(
    const CacheKey& key, absl::FunctionRef<absl::Status(WritableFile*)> fetch) {
  absl::StatusOr<std::unique_ptr<ByteSource>> hit = Lookup(key);
  if (!hit.ok() || *hit != nullptr) return hit;
  return Fill(key, fetch);
}

absl::StatusOr<std::unique_ptr<ByteSource>> NodeCache::Fill(
    const CacheKey& key, absl::FunctionRef<absl::Status(WritableFile*)> fetch) {
  absl::StatusOr<std::unique_ptr<ByteSource>> result = FillImpl(key, fetch);
  if (!result.ok()) counters_->fill_failures.fetch_add(1, std::memory_order_relaxed);
  return result;
}

absl::StatusOr<std::unique_ptr<ByteSource>> NodeCache::FillImpl(
    const CacheKey& key, absl::FunctionRef<absl::Status(WritableFile*)> fetch) {
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  const uint64_t trailer_bytes = TrailerBytes(key);
  if (key.size > options_.limit_bytes || options_.limit_bytes - key.size < trailer_bytes) {
    return absl::InvalidArgumentError(
        stoker::StrCat("node cache ", options_.dir, " has a limit of ", options_.limit_bytes,
                       " bytes, too small for ", key.bucket, "/", key.key, " of ", key.size,
                       " bytes plus its ", trailer_bytes, "-byte trailer"));
  }
  const uint64_t file_bytes = key.size + trailer_bytes;
  const XXH128_hash_t hash = HashKey(key);
  const std::string hex = HashHex(hash);
  const std::string name = stoker::StrCat(hex, kEntrySuffix);

  KeyLock key_lock;
  if (options_.file_locks) key_lock.Acquire(dir_fd_, hash.low64, options_.fill_wait);
  // Whoever held the lock before us, or any process between the caller's
  // Lookup and now, may have published it.
  if (std::unique_ptr<ByteSource> theirs = OpenEntry(name, key)) {
    counters_->fills_joined.fetch_add(1, std::memory_order_relaxed);
    return theirs;
  }

  // The temporary name carries its reservation, so every process's scan
  // counts this fill against the limit from now until it is published.
  std::string tmp;
  int fd = -1;
  {
    DirLock lock(this);
    for (int attempt = 0; fd < 0; ++attempt) {
      tmp = stoker::StrCat(hex, ".", file_bytes, ".", ::getpid(), ".", RandomHex(), kTempSuffix);
      fd = ::openat(dir_fd_, tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (fd < 0 && (errno != EEXIST || attempt == 3)) {
        return ErrnoToStatus(errno, "cannot create", PathOf(tmp));
      }
    }
    if (absl::Status s = MakeRoom(tmp); !s.ok()) {
      ::unlinkat(dir_fd_, tmp.c_str(), 0);
      ::close(fd);
      return s;
    }
  }
  // Until published, every exit removes the temporary file (C1, C8).
  struct TempGuard {
    int dir_fd, fd;
    const std::string& name;
    bool armed = true;
    ~TempGuard() {
      if (!armed) return;
      ::unlinkat(dir_fd, name.c_str(), 0);
      ::close(fd);
    }
  } guard{dir_fd_, fd, tmp};

  const std::string tmp_path = PathOf(tmp);
  // Take the disk blocks before downloading, so that a full disk fails now
  // and not after the object has crossed the network. File systems without
  // fallocate fall back to allocating as the bytes arrive.
  if (::fallocate(fd, 0, 0, static_cast<off_t>(file_bytes)) != 0 && errno != EOPNOTSUPP &&
      errno != ENOSYS) {
    return ErrnoToStatus(errno, "cannot reserve space for", tmp_path);
  }
  FillWriter writer(fd, tmp_path, key.size);
  if (absl::Status s = fetch(&writer); !s.ok()) return s;
  if (absl::Status s = writer.Finish(key); !s.ok()) return s;
  Touch(fd);

  // Publish. link() fails if the name exists, so the first complete file
  // wins and stays the only one; rename() is the fallback where hard links
  // are missing, and replaces a complete file with an identical one.
  bool lost_race = false;
  {
    DirLock lock(this);
    if (::linkat(dir_fd_, tmp.c_str(), dir_fd_, name.c_str(), 0) == 0) {
      ::unlinkat(dir_fd_, tmp.c_str(), 0);
    } else if (errno == EEXIST) {
      lost_race = true;
    } else if (errno == EPERM || errno == EOPNOTSUPP || errno == EMLINK || errno == ENOSYS) {
      if (::renameat(dir_fd_, tmp.c_str(), dir_fd_, name.c_str()) != 0) {
        return ErrnoToStatus(errno, "cannot publish", PathOf(name));
      }
    } else {
      return ErrnoToStatus(errno, "cannot publish", PathOf(name));
    }
  }
  if (lost_race) {
    // Checked outside the lock: it reads the whole entry.
    if (std::unique_ptr<ByteSource> theirs = OpenEntry(name, key)) {
      counters_->fills_joined.fetch_add(1, std::memory_order_relaxed);
      return theirs;  // the guard removes our copy
    }
    // Theirs was bad and is deleted now; ours replaces whatever is there.
    if (::renameat(dir_fd_, tmp.c_str(), dir_fd_, name.c_str()) != 0) {
      return ErrnoToStatus(errno, "cannot publish", PathOf(name));
    }
  }
  guard.armed = false;
  // The entry survives a power cut only once the folder is synced too. Some
  // file systems refuse fsync on a folder; the rename is atomic there anyway.
  if (::fsync(dir_fd_) != 0 && errno != EINVAL && errno != EROFS) {
    Warn(stoker::StrCat("node cache: cannot fsync ", options_.dir, ": ", std::strerror(errno)));
  }
  counters_->fills.fetch_add(1, std::memory_order_relaxed);
  counters_->bytes_filled.fetch_add(key.size, std::memory_order_relaxed);
  struct stat st;
  OpenSet::Id id{0, 0};
  if (::fstat(fd, &st) == 0) id = {st.st_dev, st.st_ino};
  open_->Add(id);
  return MakeFdSource(fd, key.size, PathOf(name),
                      [open = open_, id] { open->Remove(id); });
}

NodeCacheStats NodeCache::stats() const {
  const Counters& c = *counters_;
  NodeCacheStats s;
  s.hits = c.hits.load(std::memory_order_relaxed);
  s.misses = c.misses.load(std::memory_order_relaxed);
  s.fills = c.fills.load(std::memory_order_relaxed);
  s.fills_joined = c.fills_joined.load(std::memory_order_relaxed);
  s.fill_failures = c.fill_failures.load(std::memory_order_relaxed);
  s.evictions = c.evictions.load(std::memory_order_relaxed);
  s.corrupt_entries = c.corrupt_entries.load(std::memory_order_relaxed);
  s.rejected_entries = c.rejected_entries.load(std::memory_order_relaxed);
  s.orphans_removed = c.orphans_removed.load(std::memory_order_relaxed);
  s.bytes_filled = c.bytes_filled.load(std::memory_order_relaxed);
  return s;
}

}  // namespace stoker::io
