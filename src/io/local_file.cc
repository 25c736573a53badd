#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include "util/strings.h"
#include "io/byte_source.h"
#include "io/posix_io.h"
#include "io/writable_file.h"

namespace stoker::io {
namespace {


class LocalFileSource final : public ByteSource {
 public:
  LocalFileSource(int fd, uint64_t size, std::string path, std::function<void()> on_close)
      : fd_(fd), size_(size), path_(std::move(path)), on_close_(std::move(on_close)) {}
  ~LocalFileSource() override {
    ::close(fd_);
    if (on_close_) on_close_();
  }

  absl::Status ReadAt(uint64_t offset, size_t n, char* dst) const override {
    if (offset > size_ || n > size_ - offset) {
      return absl::OutOfRangeError(stoker::StrCat("read of ", n, " bytes at offset ", offset,
                                                " is past the end of ", path_, " (",
                                                size_, " bytes)"));
    }
    return ReadFully(fd_, offset, n, dst, path_);
  }
  uint64_t size() const override { return size_; }
  const std::string& name() const override { return path_; }

 private:
  const int fd_;
  const uint64_t size_;
  const std::string path_;
  const std::function<void()> on_close_;
};

class MemorySource final : public ByteSource {
 public:
  MemorySource(std::string bytes, std::string name)
      : bytes_(std::move(bytes)), name_(std::move(name)) {}
  absl::Status ReadAt(uint64_t offset, size_t n, char* dst) const override {
    if (offset > bytes_.size() || n > bytes_.size() - offset) {
      return absl::OutOfRangeError(stoker::StrCat("read of ", n, " bytes at offset ", offset,
                                                " is past the end of ", name_, " (",
                                                bytes_.size(), " bytes)"));
    }
    std::memcpy(dst, bytes_.data() + offset, n);
    return absl::OkStatus();
  }
  uint64_t size() const override { return bytes_.size(); }
  const std::string& name() const override { return name_; }

 private:
  const std::string bytes_;
  const std::string name_;
};

class FaultySource final : public ByteSourceWrapper {
 public:
  FaultySource(const ByteSource* base, FaultSpec spec)
      : ByteSourceWrapper(base), spec_(std::move(spec)) {}
  absl::Status ReadAt(uint64_t offset, size_t n, char* dst) const override {
    if (offset < spec_.fail_to && offset + n > spec_.fail_from) return spec_.error;
    absl::Status s = base_->ReadAt(offset, n, dst);
    if (s.ok() && spec_.flip_offset >= offset && spec_.flip_offset < offset + n) {
      dst[spec_.flip_offset - offset] ^= static_cast<char>(spec_.xor_mask);
    }
    return s;
  }

 private:
  const FaultSpec spec_;
};

std::string UniqueSuffix() {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return stoker::StrCat(".tmp.", ::getpid(), ".", counter.fetch_add(1), ".", rng() % 1000000);
}

absl::Status FsyncDir(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "cannot open folder", dir);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some file systems (tmpfs on old kernels, some FUSE) refuse fsync on a
  // folder; the rename is still atomic there.
  if (rc != 0 && err != EINVAL && err != EROFS) return ErrnoToStatus(err, "cannot fsync", dir);
  return absl::OkStatus();
}

class LocalWritableFile final : public WritableFile {
 public:
  LocalWritableFile(int fd, std::string tmp, std::string path)
      : fd_(fd), tmp_(std::move(tmp)), path_(std::move(path)) {}
  ~LocalWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  absl::Status Append(std::string_view data) override {
    if (fd_ < 0) return absl::FailedPreconditionError(stoker::StrCat(path_, " is closed"));
    if (buffer_.size() + data.size() > kBufferBytes) {
      if (absl::Status s = Flush(); !s.ok()) return s;
    }
    if (data.size() >= kBufferBytes) {
      if (absl::Status s = WriteRaw(data); !s.ok()) return s;
    } else {
      buffer_.append(data);
    }
    size_ += data.size();
    return absl::OkStatus();
  }
  uint64_t size() const override { return size_; }
  const std::string& name() const override { return path_; }
  absl::Status Commit() override {
    if (absl::Status s = Flush(); !s.ok()) return s;
    if (::fsync(fd_) != 0) return ErrnoToStatus(errno, "cannot fsync", tmp_);
    if (::close(fd_) != 0) {
      fd_ = -1;
      return ErrnoToStatus(errno, "cannot close", tmp_);
    }
    fd_ = -1;
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
      return ErrnoToStatus(errno, "cannot rename into", path_);
    }
    committed_ = true;
    return FsyncDir(path_);
  }

 private:
  static constexpr size_t kBufferBytes = size_t{1} << 20;
  absl::Status Flush() {
    absl::Status s = WriteRaw(buffer_);
    buffer_.clear();
    return s;
  }
  absl::Status WriteRaw(std::string_view data) { return WriteFully(fd_, data, path_); }

  int fd_;
  const std::string tmp_;
  const std::string path_;
  std::string buffer_;
  uint64_t size_ = 0;
  bool committed_ = false;
};

}  // namespace

std::unique_ptr<ByteSource> MakeFdSource(int fd, uint64_t size, std::string name,
                                         std::function<void()> on_close) {
  return std::make_unique<LocalFileSource>(fd, size, std::move(name), std::move(on_close));
}

absl::StatusOr<std::unique_ptr<ByteSource>> OpenLocalFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "cannot open", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoToStatus(err, "cannot stat", path);
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(stoker::StrCat(path, " is a folder, not a file"));
  }
  return MakeFdSource(fd, static_cast<uint64_t>(st.st_size), path);
}

std::unique_ptr<ByteSource> MakeMemorySource(std::string bytes, std::string name) {
  return std::make_unique<MemorySource>(std::move(bytes), std::move(name));
}

std::unique_ptr<ByteSource> MakeFaultySource(const ByteSource* base, FaultSpec spec) {
  return std::make_unique<FaultySource>(base, std::move(spec));
}

absl::StatusOr<std::string> ReadAll(const ByteSource& source) {
  std::string out(source.size(), '\0');
  if (absl::Status s = source.ReadAt(0, out.size(), out.data()); !s.ok()) return s;
  return out;
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  absl::StatusOr<std::unique_ptr<ByteSource>> src = OpenLocalFile(path);
  if (!src.ok()) return src.status();
  return ReadAll(**src);
}

absl::StatusOr<std::unique_ptr<WritableFile>> NewLocalWritableFile(const std::string& path) {
  std::string tmp = path + UniqueSuffix();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, "cannot create", tmp);
  return std::make_unique<LocalWritableFile>(fd, std::move(tmp), path);
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view data) {
  absl::StatusOr<std::unique_ptr<WritableFile>> f = NewLocalWritableFile(path);
  if (!f.ok()) return f.status();
  if (absl::Status s = (*f)->Append(data); !s.ok()) return s;
  return (*f)->Commit();
}

}  // namespace stoker::io
