#include "io/storage.h"

#include <filesystem>
#include <map>
#include <mutex>
#include <system_error>
#include <utility>

#include "util/strings.h"

namespace stoker::io {

absl::StatusOr<std::shared_ptr<S3Client>> SharedS3Client(const StorageOptions& options) {
  static std::mutex mu;
  static auto* clients =
      new std::map<std::pair<std::string, bool>, std::shared_ptr<S3Client>>();
  const auto id = std::make_pair(options.endpoint_url.value_or(""), options.anonymous);
  std::lock_guard<std::mutex> lock(mu);
  auto it = clients->find(id);
  if (it != clients->end()) return it->second;
  S3ConfigOverrides overrides;
  overrides.endpoint_url = options.endpoint_url;
  overrides.anonymous = options.anonymous;
  absl::StatusOr<S3Config> config = S3Config::FromEnvironment(overrides);
  if (!config.ok()) return config.status();
  absl::StatusOr<std::shared_ptr<S3Client>> client = S3Client::Create(*std::move(config));
  if (!client.ok()) return client.status();
  (*clients)[id] = *client;
  return *client;
}

namespace {

// The client and location of an s3:// URI.
struct S3Target {
  std::shared_ptr<S3Client> client;
  S3Location loc;
};

absl::StatusOr<S3Target> ResolveS3(const std::string& uri, const StorageOptions& options) {
  absl::StatusOr<S3Location> loc = ParseS3Uri(uri);
  if (!loc.ok()) return loc.status();
  absl::StatusOr<std::shared_ptr<S3Client>> client = SharedS3Client(options);
  if (!client.ok()) return client.status();
  return S3Target{*std::move(client), *std::move(loc)};
}

}  // namespace

absl::StatusOr<std::unique_ptr<ByteSource>> OpenUri(const std::string& uri,
                                                    const StorageOptions& options) {
  if (!IsS3Uri(uri)) return OpenLocalFile(uri);
  absl::StatusOr<S3Target> t = ResolveS3(uri, options);
  if (!t.ok()) return t.status();
  return OpenS3Object(t->client, t->loc.bucket, t->loc.key);
}

absl::StatusOr<std::string> ReadUri(const std::string& uri, const StorageOptions& options) {
  if (!IsS3Uri(uri)) return ReadFileToString(uri);
  absl::StatusOr<S3Target> t = ResolveS3(uri, options);
  if (!t.ok()) return t.status();
  return t->client->GetObject(t->loc.bucket, t->loc.key);
}

absl::StatusOr<std::unique_ptr<WritableFile>> NewUriWriter(const std::string& uri,
                                                           const StorageOptions& options) {
  if (!IsS3Uri(uri)) return NewLocalWritableFile(uri);
  absl::StatusOr<S3Target> t = ResolveS3(uri, options);
  if (!t.ok()) return t.status();
  return NewS3Writer(t->client, t->loc.bucket, t->loc.key);
}

absl::Status WriteUriAtomically(const std::string& uri, std::string_view data,
                                const StorageOptions& options) {
  if (!IsS3Uri(uri)) return WriteFileAtomically(uri, data);
  absl::StatusOr<S3Target> t = ResolveS3(uri, options);
  if (!t.ok()) return t.status();
  return t->client->PutObject(t->loc.bucket, t->loc.key, data);  // atomic in S3
}

absl::Status RemoveUri(const std::string& uri, const StorageOptions& options) {
  if (!IsS3Uri(uri)) {
    std::error_code ec;
    std::filesystem::remove(uri, ec);
    if (ec) return absl::UnavailableError(StrCat("cannot remove ", uri, ": ", ec.message()));
    return absl::OkStatus();
  }
  absl::StatusOr<S3Target> t = ResolveS3(uri, options);
  if (!t.ok()) return t.status();
  absl::Status s = t->client->DeleteObject(t->loc.bucket, t->loc.key);
  return absl::IsNotFound(s) ? absl::OkStatus() : s;
}

absl::Status MakeFolder(const std::string& uri) {
  if (IsS3Uri(uri)) return absl::OkStatus();
  std::error_code ec;
  std::filesystem::create_directories(uri, ec);
  if (ec) return absl::UnavailableError(StrCat("cannot create folder ", uri, ": ", ec.message()));
  return absl::OkStatus();
}

std::string JoinUri(std::string_view base, std::string_view name) {
  if (base.empty()) return std::string(name);
  if (base.back() == '/') return StrCat(base, name);
  return StrCat(base, "/", name);
}

}  // namespace stoker::io
