// The node cache: whole objects fetched from an object store, kept in a local
// folder shared by every process and job on the machine, capped in bytes with
// least-recently-used eviction. It works on opaque object identities and a
// fetch callback; it knows nothing of S3 or HTTP.
#ifndef STOKER_IO_NODE_CACHE_H_
#define STOKER_IO_NODE_CACHE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "io/byte_source.h"
#include "io/writable_file.h"

namespace stoker::io {

// The identity of one version of one object. Two keys name the same cached
// bytes only if all four fields are equal, so an object replaced upstream (new
// ETag) never hits the old bytes.
struct CacheKey {
  std::string bucket;
  std::string key;
  std::string etag;
  uint64_t size = 0;  // bytes of the object
};

struct NodeCacheOptions {
  // Folder holding the cache. Created with mode 0700 (and missing parents) if
  // absent. Open refuses it unless it is owned by this process's effective
  // uid and is neither group- nor world-writable. Required.
  std::string dir;

  // Cap on the bytes in `dir` that belong to the cache: published entries
  // (content plus a trailer of at most kMaxEntryOverhead bytes each) plus the
  // full size of every fill in progress, in any process. Counted as file
  // sizes, not disk blocks. Required, > 0. Other files in `dir` are neither
  // counted nor removed.
  uint64_t limit_bytes = 0;

  // A temporary fill file not written for this long is taken as left behind
  // by a crashed process and removed (at Open, and whenever a fill makes
  // room). It holds its share of limit_bytes until then. Must exceed the
  // longest pause inside one fetch. Default 1 hour.
  std::chrono::seconds orphan_age{3600};

  // How long a fill waits for another thread or process that is filling the
  // same object before fetching the object itself (a duplicate download, still
  // correct). Default 5 minutes.
  std::chrono::milliseconds fill_wait{300000};

  // Whether to take file locks (flock on LOCK, OFD byte-range locks on
  // KEYLOCKS). They only serialise eviction and avoid duplicate downloads;
  // correctness never depends on them. false imitates the file systems where
  // locks silently do nothing (Lustre, some NFS mounts); tests use it.
  // Default true.
  bool file_locks = true;

  // Receives one line for each entry refused (symlink, foreign owner, wrong
  // mode) or deleted as corrupt, and each orphan removed. Called on the thread
  // that found it; must be safe to call concurrently. Default: none (the
  // stats count them anyway).
  std::function<void(std::string_view)> on_warning;

  // Returns InvalidArgument naming the field if dir is empty, limit_bytes is
  // 0, or orphan_age or fill_wait is negative.
  absl::Status Validate() const;
};

// Counters of one NodeCache object (not of the folder: each process has its
// own). Every Lookup counts exactly one hit or one miss.
struct NodeCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t fills = 0;             // entries this object fetched and published
  uint64_t fills_joined = 0;      // Fill calls served by another's fill
  uint64_t fill_failures = 0;     // Fill calls that returned an error
  uint64_t evictions = 0;         // entries this object unlinked to make room
  uint64_t corrupt_entries = 0;   // deleted: bad size, trailer or CRC, or EIO
  uint64_t rejected_entries = 0;  // deleted: symlink, not regular, foreign, bad mode
  uint64_t orphans_removed = 0;   // temporary files of crashed fills
  uint64_t bytes_filled = 0;      // content bytes of `fills`
};

// Bytes an entry may take beyond its content: the trailer with the identity
// (at most kMaxIdentityBytes of bucket + key + ETag) and checksums.
inline constexpr uint64_t kMaxIdentityBytes = 8192;
inline constexpr uint64_t kMaxEntryOverhead = kMaxIdentityBytes + 64;

// A folder of cached objects shared by processes on one machine.
//
// On disk (all files mode 0600, in `dir`):
//   <32 hex>.entry                          a published object: its content,
//                                           then a trailer with the identity
//                                           and CRC-32C (layout in the .cc)
//   <32 hex>.<bytes>.<pid>.<16 hex>.tmp     a fill in progress; <bytes> is the
//                                           size it reserves of the limit
//   LOCK, KEYLOCKS                          lock files, empty
// The hex name is a 128-bit XXH3 of the whole CacheKey, so a new ETag gets a
// new name. An entry is published by link() or rename() of a complete,
// fsynced temporary file, so the name is absent or complete after any crash,
// and concurrent fills of one key leave exactly one file. Recency is the
// entry's mtime, set on every hit; eviction unlinks the oldest entries, so a
// ByteSource already handed out keeps reading its bytes.
//
// Every hit reads the whole entry once to check its CRC before returning
// (about 12 ms per 128 MB from the page cache on our 2-core dev VM); the
// caller reads the bytes next, from a warm page cache. Bytes are not checked
// again while a returned ByteSource is read. A fill scans the folder once to
// make room: one fstatat per entry, under a lock shared with other fills.
//
// Thread-safety: safe for concurrent use by any number of threads, and by
// any number of processes sharing `dir`. ByteSources it returns may outlive it.
class NodeCache {
 public:
  // Opens or creates the cache in options.dir, removes orphaned temporary
  // files and evicts down to limit_bytes (the last user may have had a larger
  // limit). Returns InvalidArgument for bad options, PermissionDenied if dir
  // is owned by another uid or is group- or world-writable, or the error of
  // creating or opening it.
  static absl::StatusOr<std::shared_ptr<NodeCache>> Open(NodeCacheOptions options);

  ~NodeCache();
  NodeCache(const NodeCache&) = delete;
  NodeCache& operator=(const NodeCache&) = delete;

  // Returns InvalidArgument, naming both numbers, if an object of
  // `largest_object` bytes cannot fit under limit_bytes. Call it at start
  // with the largest object of the dataset, so that a too-small cache is a
  // clear error then rather than failed fills later.
  absl::Status CheckFits(uint64_t largest_object) const;

  // Returns a source over the cached bytes of `key`, or nullptr on a miss.
  // An entry that is truncated, corrupt or for another identity, or that
  // fails the owner, type and mode checks, is deleted and counts as a miss.
  // Marks the entry most recently used. Returns InvalidArgument if the
  // identity is longer than kMaxIdentityBytes or the size above 2^60; I/O
  // errors on the entry are misses, not errors.
  absl::StatusOr<std::unique_ptr<ByteSource>> Lookup(const CacheKey& key);

  // Makes room, calls fetch() to write exactly key.size bytes into a fresh
  // temporary file, checks the count, fsyncs, publishes, and returns a source
  // over the new entry. fetch must not call Commit() and must not keep the
  // writer. If another thread or process is filling the same key, waits for
  // it (up to fill_wait) and returns its entry without calling fetch; if
  // another published first, returns theirs.
  //
  // On any error nothing of this fill stays in `dir` and the caller should
  // read the object from its source. Returns fetch's own error unchanged,
  // DataLoss if fetch wrote more or fewer than key.size bytes (also when it
  // ignored the writer's error), ResourceExhausted if the disk is full or the
  // limit is taken by fills in progress, InvalidArgument if the object cannot
  // fit (see CheckFits), or the I/O error.
  absl::StatusOr<std::unique_ptr<ByteSource>> Fill(
      const CacheKey& key, absl::FunctionRef<absl::Status(WritableFile*)> fetch);

  // Lookup, then Fill on a miss.
  absl::StatusOr<std::unique_ptr<ByteSource>> GetOrFill(
      const CacheKey& key, absl::FunctionRef<absl::Status(WritableFile*)> fetch);

  NodeCacheStats stats() const;
  const NodeCacheOptions& options() const { return options_; }

  // The file name, inside dir, of the entry for `key` (tests and tools).
  static std::string EntryName(const CacheKey& key);

 private:
  struct OpenSet;
  struct Counters;
  class DirLock;

  NodeCache(NodeCacheOptions options, int dir_fd, int lock_fd);

  // Opens and checks the entry `name`; nullptr if absent or bad (deleted).
  std::unique_ptr<ByteSource> OpenEntry(const std::string& name, const CacheKey& key);
  // Counts, reports and deletes a bad entry: `name` if it is still the file
  // `fd` has open (any file under `name` when fd < 0).
  void Discard(const std::string& name, int fd, bool corrupt, std::string_view why);
  // Scans dir, removes orphans other than `keep` and evicts the least
  // recently used entries until the cache's bytes are at most limit_bytes.
  // Returns ResourceExhausted if fills in progress alone exceed it.
  absl::Status MakeRoom(std::string_view keep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::unique_ptr<ByteSource>> FillImpl(
      const CacheKey& key, absl::FunctionRef<absl::Status(WritableFile*)> fetch);
  void Warn(std::string_view message) const;
  std::string PathOf(std::string_view name) const;

  const NodeCacheOptions options_;
  const int dir_fd_;   // every file operation is relative to it
  const int lock_fd_;  // LOCK, flocked while mu_ is held
  // Serialises scan, eviction and publication among this process's threads;
  // flock(lock_fd_) does the same across processes (flock alone would not:
  // all threads share lock_fd_'s open file description).
  absl::Mutex mu_;
  const std::shared_ptr<OpenSet> open_;  // entries this process has open
  const std::unique_ptr<Counters> counters_;
};

}  // namespace stoker::io

#endif  // STOKER_IO_NODE_CACHE_H_
