// How the input modes read a remote object (see docs/input_modes.md):
//   file      DownloadToLocal: the whole object to a local file first,
//             resuming an interrupted download, then read locally;
//   pipe      StreamingSource: read ahead in large sequential parts through a
//             bounded ring of memory, nothing written to disk;
//   fastfile  the node cache (io/node_cache.h) on first use of the object.
// All of them work on any ByteSource (S3 in production, local files and
// fault-injecting fakes in tests).
#ifndef STOKER_IO_REMOTE_SOURCES_H_
#define STOKER_IO_REMOTE_SOURCES_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "io/byte_source.h"

namespace stoker::io {

struct DownloadOptions {
  size_t chunk_bytes = size_t{8} << 20;  // read from the source as up to 8 ranges at once
  // The object's CRC-32C when known (the manifest has every shard's): a
  // finished download that does not match is deleted and fetched once more,
  // then reported as DataLoss. An existing complete file that matches is
  // kept without reading the source.
  std::optional<uint32_t> crc32c;
  // Called after each chunk with the bytes of this object written so far.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

// Copies `src` to local `path`. Bytes go to `path + ".part"`, appended; an
// interrupted download resumes from the part file's length; the part file is
// renamed to `path` when complete (and checked). Returns the bytes fetched
// from the source by this call (0 when `path` was already complete).
// Errors name the source and the path.
absl::StatusOr<uint64_t> DownloadToLocal(const ByteSource& src, const std::string& path,
                                         const DownloadOptions& options = {});

// Caps how many streaming sources hold a ring at once: when one more starts,
// the one used least recently gives its parts back (and refills if read
// again). Shared by the shards of one dataset in pipe mode, it bounds memory
// to max_active * parts * part_bytes however many shards an epoch touches.
class StreamBudget;
std::shared_ptr<StreamBudget> MakeStreamBudget(int max_active_sources);

struct StreamingOptions {
  size_t part_bytes = size_t{8} << 20;  // one read from the source
  int parts = 4;                        // parts held: the memory bound is parts * part_bytes
  std::shared_ptr<StreamBudget> budget;  // optional: shared with other sources
  // Called once, on the first read (not on Warm), before it is served.
  std::function<void()> on_first_read;
};

// A streaming source whose read-ahead can be started before its first read.
class StreamingByteSource : public ByteSource {
 public:
  // Starts filling the ring now (and counts as in use for the budget).
  virtual void Warm() = 0;
  // Gives back the ring's memory now (a shard read to its end); a later
  // read fetches again.
  virtual void Release() = 0;
};

// A source that serves reads from a ring of `parts` consecutive parts of
// `base`, fetching the next part on a background thread while the current
// one is read, so a forward scan (with jitter inside the ring) waits only for
// the first part. Nothing is fetched before the first read. A read just past
// the ring moves the ring forward; one far behind it or far ahead of it (the
// index at a shard's end) is served by a direct read of just those bytes
// without moving the ring. Memory stays under parts *
// part_bytes plus the bytes of direct reads in flight.
//
// Thread-safety: safe for concurrent use; reads are served in any order.
std::unique_ptr<StreamingByteSource> MakeStreamingSource(
    std::shared_ptr<const ByteSource> base, StreamingOptions options = {});

}  // namespace stoker::io

#endif  // STOKER_IO_REMOTE_SOURCES_H_
