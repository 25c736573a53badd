#include "pipeline/buffer_pool.h"

#include <cstdlib>
#include <new>

namespace stoker::pipeline {

BufferPool::~BufferPool() {
  absl::MutexLock lock(&mu_);
  for (void* p : free_) std::free(p);
}

void* BufferPool::Acquire() {
  {
    absl::MutexLock lock(&mu_);
    ++outstanding_;
    if (!free_.empty()) {
      void* p = free_.back();
      free_.pop_back();
      return p;
    }
    ++allocated_;
  }
  const size_t bytes = (std::max<size_t>(buffer_bytes_, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void BufferPool::Release(void* p) {
  absl::MutexLock lock(&mu_);
  --outstanding_;
  free_.push_back(p);
}

uint64_t BufferPool::allocated() const {
  absl::MutexLock lock(&mu_);
  return allocated_;
}

uint64_t BufferPool::outstanding() const {
  absl::MutexLock lock(&mu_);
  return outstanding_;
}

}  // namespace stoker::pipeline
