// A pool of equally sized, aligned buffers for batches.
#ifndef STOKER_PIPELINE_BUFFER_POOL_H_
#define STOKER_PIPELINE_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace stoker::pipeline {

// Hands out buffers of buffer_bytes() and takes them back. A buffer returned
// is reused by the next Acquire, so in steady state no batch allocates. The
// pool grows when every buffer is out (the consumer may hold batches as long
// as it likes); bounded queues upstream bound how many the loader itself
// holds.
//
// Thread-safety: safe for concurrent use. Buffers may be released after the
// loader is gone: hold the pool by shared_ptr.
class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  explicit BufferPool(size_t buffer_bytes) : buffer_bytes_(buffer_bytes) {}
  ~BufferPool();

  // Returns a buffer of buffer_bytes(), 64-byte aligned.
  void* Acquire();
  // REQUIRES: p came from Acquire() of this pool.
  void Release(void* p);

  size_t buffer_bytes() const { return buffer_bytes_; }
  // Buffers ever allocated (tests check this stays flat in steady state).
  uint64_t allocated() const;
  uint64_t outstanding() const;

 private:
  const size_t buffer_bytes_;
  mutable absl::Mutex mu_;
  std::vector<void*> free_ ABSL_GUARDED_BY(mu_);
  uint64_t allocated_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace stoker::pipeline

#endif  // STOKER_PIPELINE_BUFFER_POOL_H_
