// OpenS3Object (a ByteSource) and NewS3Writer (a WritableFile) over S3Client.
#include <algorithm>
#include <mutex>
#include <vector>

#include "io/s3.h"
#include "io/s3_internal.h"
#include "util/strings.h"

namespace stoker::io {
namespace {

// S3 refuses parts below 5 MiB (except the last) and more than 10,000 parts.
constexpr size_t kMinUploadPart = size_t{5} << 20;
constexpr int kMaxParts = 10000;

// Reads pin one version of the object: with an ETag known at open (from a
// HEAD or the caller) every request carries If-Match; without one (opened
// with a size only, no HEAD) the first answer's ETag is learned and every
// later request carries it, and the first answers must agree on it and on
// the object's size.
class S3ObjectSource final : public ByteSource {
 public:
  S3ObjectSource(std::shared_ptr<S3Client> client, std::string bucket, std::string key,
                 uint64_t size, std::string etag)
      : client_(std::move(client)),
        bucket_(std::move(bucket)),
        key_(std::move(key)),
        size_(size),
        etag_(std::move(etag)),
        name_(S3Uri(bucket_, key_)) {}

  absl::Status ReadAt(uint64_t offset, size_t n, char* dst) const override {
    const Range r{offset, n, dst};
    return ReadRanges(std::span<const Range>(&r, 1));
  }

  absl::Status ReadRanges(std::span<const Range> ranges) const override {
    std::vector<S3Client::RangeRead> reads;
    const size_t part = client_->config().part_size;
    for (const Range& r : ranges) {
      if (r.offset > size_ || r.n > size_ - r.offset) {
        return absl::OutOfRangeError(stoker::StrCat("read of ", r.n, " bytes at offset ", r.offset,
                                                    " is past the end of ", name_, " (", size_,
                                                    " bytes)"));
      }
      for (uint64_t done = 0; done < r.n; done += part) {  // no request above part_size
        reads.push_back({r.offset + done,
                         static_cast<size_t>(std::min<uint64_t>(part, r.n - done)),
                         r.dst + done});
      }
    }
    const std::string pinned = version();
    S3Client::ObjectSeen seen;
    if (absl::Status s = client_->GetRanges(bucket_, key_, reads, pinned, &seen); !s.ok()) {
      return s;
    }
    if (!pinned.empty() || reads.empty()) return absl::OkStatus();
    if (seen.size && *seen.size != size_) {
      return absl::FailedPreconditionError(stoker::StrCat(
          name_, ": object modified: it has ", *seen.size, " bytes, expected ", size_));
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (learned_etag_.empty()) {
      learned_etag_ = seen.etag;
    } else if (learned_etag_ != seen.etag) {
      return absl::FailedPreconditionError(
          stoker::StrCat(name_, ": object modified: ETag is now ", seen.etag,
                         ", the first read saw ", learned_etag_));
    }
    return absl::OkStatus();
  }

  uint64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }
  size_t preferred_read_size() const override { return client_->config().part_size; }
  std::string version() const override {
    if (!etag_.empty()) return etag_;
    std::lock_guard<std::mutex> lock(mu_);
    return learned_etag_;
  }

 private:
  const std::shared_ptr<S3Client> client_;
  const std::string bucket_;
  const std::string key_;
  const uint64_t size_;
  const std::string etag_;  // from the HEAD or the caller; empty: learned
  const std::string name_;
  mutable std::mutex mu_;
  mutable std::string learned_etag_;  // guarded by mu_
};

class S3Writer final : public WritableFile {
 public:
  S3Writer(std::shared_ptr<S3Client> client, std::string bucket, std::string key)
      : client_(std::move(client)),
        bucket_(std::move(bucket)),
        key_(std::move(key)),
        name_(S3Uri(bucket_, key_)),
        part_size_(std::max(client_->config().part_size, kMinUploadPart)),
        batch_parts_(static_cast<size_t>(client_->config().max_parallel_parts)) {}

  ~S3Writer() override {
    // Best effort: an upload left open costs storage until a lifecycle rule
    // removes it, but a destructor has nobody to report a failure to.
    if (!committed_ && !upload_id_.empty()) {
      (void)client_->AbortMultipartUpload(bucket_, key_, upload_id_);
    }
  }

  absl::Status Append(std::string_view data) override {
    if (absl::Status s = Usable(); !s.ok()) return s;
    const size_t batch_bytes = part_size_ * batch_parts_;
    while (!data.empty()) {
      size_t take = std::min(data.size(), batch_bytes - buffer_.size());
      buffer_.append(data.substr(0, take));
      data.remove_prefix(take);
      size_ += take;
      if (buffer_.size() == batch_bytes) {
        if (absl::Status s = Upload(/*last=*/false); !s.ok()) return Fail(s);
      }
    }
    return absl::OkStatus();
  }

  uint64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }

  absl::Status Commit() override {
    if (absl::Status s = Usable(); !s.ok()) return s;
    if (upload_id_.empty() && buffer_.size() <= part_size_) {
      // One part's worth or less: one PUT, atomic by itself.
      if (absl::Status s = client_->PutObject(bucket_, key_, buffer_); !s.ok()) return Fail(s);
    } else {
      if (absl::Status s = Upload(/*last=*/true); !s.ok()) return Fail(s);
      if (absl::Status s = client_->CompleteMultipartUpload(bucket_, key_, upload_id_, etags_);
          !s.ok()) {
        return Fail(s);
      }
    }
    committed_ = true;
    buffer_.clear();
    buffer_.shrink_to_fit();
    return absl::OkStatus();
  }

 private:
  absl::Status Usable() const {
    if (!error_.ok()) return error_;
    if (committed_) {
      return absl::FailedPreconditionError(stoker::StrCat(name_, " is already committed"));
    }
    return absl::OkStatus();
  }
  absl::Status Fail(absl::Status s) {
    error_ = s;
    return s;
  }

  // Sends the buffer as parts: whole parts, plus the remainder when `last`.
  absl::Status Upload(bool last) {
    if (upload_id_.empty()) {
      absl::StatusOr<std::string> id = client_->CreateMultipartUpload(bucket_, key_);
      if (!id.ok()) return id.status();
      upload_id_ = *std::move(id);
    }
    std::vector<S3Client::UploadPartSpec> specs;
    size_t pos = 0;
    while (pos < buffer_.size()) {
      size_t len = std::min(part_size_, buffer_.size() - pos);
      if (len < part_size_ && !last) break;
      int number = static_cast<int>(etags_.size() + specs.size()) + 1;
      if (number > kMaxParts) {
        return absl::ResourceExhaustedError(stoker::StrCat(
            name_, ": more than ", kMaxParts, " parts of ", part_size_, " bytes; raise part_size"));
      }
      specs.push_back({number, std::string_view(buffer_).substr(pos, len)});
      pos += len;
    }
    // A multipart upload needs at least one part, even an empty one.
    if (last && specs.empty() && etags_.empty()) {
      specs.push_back({1, std::string_view()});
    }
    if (specs.empty()) return absl::OkStatus();
    absl::StatusOr<std::vector<std::string>> tags =
        client_->UploadParts(bucket_, key_, upload_id_, specs);
    if (!tags.ok()) return tags.status();
    etags_.insert(etags_.end(), tags->begin(), tags->end());
    buffer_.erase(0, pos);
    return absl::OkStatus();
  }

  const std::shared_ptr<S3Client> client_;
  const std::string bucket_;
  const std::string key_;
  const std::string name_;
  const size_t part_size_;
  const size_t batch_parts_;
  std::string buffer_;  // at most part_size_ * batch_parts_ bytes
  std::string upload_id_;
  std::vector<std::string> etags_;
  uint64_t size_ = 0;
  absl::Status error_;
  bool committed_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ByteSource>> OpenS3Object(std::shared_ptr<S3Client> client,
                                                         std::string_view bucket,
                                                         std::string_view key,
                                                         std::optional<uint64_t> size,
                                                         std::optional<std::string> etag) {
  if (!size) {
    absl::StatusOr<S3Client::Object> head = client->Head(bucket, key);
    if (!head.ok()) return head.status();
    if (head->etag.empty()) {
      return absl::InternalError(
          stoker::StrCat("S3 HEAD ", S3Uri(bucket, key),
                         ": the answer has no ETag, so reads cannot be pinned "
                         "to one version of the object"));
    }
    if (etag && !etag->empty() && s3_internal::StripQuotes(*etag) != head->etag) {
      return absl::FailedPreconditionError(
          stoker::StrCat(S3Uri(bucket, key), ": object modified: ETag is ", head->etag,
                         ", expected ", s3_internal::StripQuotes(*etag)));
    }
    if (size && *size != head->size) {
      return absl::FailedPreconditionError(stoker::StrCat(
          S3Uri(bucket, key), ": object modified: ", head->size, " bytes, expected ", *size));
    }
    size = head->size;
    etag = head->etag;
  }
  return std::unique_ptr<ByteSource>(
      new S3ObjectSource(std::move(client), std::string(bucket), std::string(key), *size,
                         etag ? s3_internal::StripQuotes(*etag) : std::string()));
}

absl::StatusOr<std::unique_ptr<WritableFile>> NewS3Writer(std::shared_ptr<S3Client> client,
                                                          std::string_view bucket,
                                                          std::string_view key) {
  if (bucket.empty() || key.empty()) {
    return absl::InvalidArgumentError(
        stoker::StrCat("cannot write to ", S3Uri(bucket, key), ": bucket and key are required"));
  }
  return std::unique_ptr<WritableFile>(
      new S3Writer(std::move(client), std::string(bucket), std::string(key)));
}

}  // namespace stoker::io
