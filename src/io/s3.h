// The S3 client: objects in any S3-compatible store read and written over
// HTTP(S) with libcurl, requests signed with SigV4 (CURLOPT_AWS_SIGV4).
//
//   S3Config       where and how to talk to the store; FromEnvironment() reads
//                  the AWS_* variables and the shared ~/.aws files, once.
//   S3Client       HEAD, LIST, ranged GET, PUT, multipart upload, DELETE, with
//                  retries, stall detection and a process-wide retry budget.
//   OpenS3Object   a ByteSource over one object version (ETag pinned).
//   NewS3Writer    a WritableFile whose bytes appear under the key on Commit().
//
// Failure policy (docs: ../shared/RELIABILITY.md rows N1-N17):
//   retried   HTTP 500, 502, 503 (SlowDown), 504, 429; 400 RequestTimeout;
//             RequestTimeTooSkewed; refused or reset connections; a body that
//             ends early; no byte moving for stall_seconds. Each retry waits
//             with full jitter and spends tokens of the retry budget.
//   not       403, 404, 412, 416 and every other 4xx; malformed responses
//             (a 206 without the asked Content-Range, a 200 to a ranged GET
//             that is not the whole object, a body longer than announced).
//   codes     404 -> NotFound; 403 -> PermissionDenied; 412 with If-Match ->
//             FailedPrecondition ("object modified"); 416 -> OutOfRange;
//             retries exhausted or budget empty -> Unavailable (never NotFound);
//             malformed response -> Internal; bad configuration ->
//             InvalidArgument; no credentials -> Unauthenticated.
// Every error message names the operation, s3://bucket/key, the byte range
// when there is one, and the S3 request id when the store sent one. Messages
// never contain a secret, a signature or a query string.
#ifndef STOKER_IO_S3_H_
#define STOKER_IO_S3_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "io/byte_source.h"
#include "io/writable_file.h"

namespace stoker::io {

// ---------------------------------------------------------------------------
// URIs

// An object (or a key prefix) in a bucket.
struct S3Location {
  std::string bucket;
  std::string key;  // may be empty ("s3://bucket" or "s3://bucket/")
};

// True when `uri` starts with "s3://" (case-insensitive scheme).
bool IsS3Uri(std::string_view uri);

// Splits "s3://bucket/key/or/prefix". The key is everything after the first
// '/' following the bucket, kept byte for byte (no percent-decoding).
// Returns InvalidArgument naming the URI when the scheme is not s3, the bucket
// is empty, or the bucket name has characters S3 does not allow.
absl::StatusOr<S3Location> ParseS3Uri(std::string_view uri);

// "s3://bucket/key".
std::string S3Uri(std::string_view bucket, std::string_view key);

// ---------------------------------------------------------------------------
// Configuration

// Static credentials. `source` says where they were found ("environment",
// "profile default in /home/u/.aws/credentials"); it appears in messages,
// the secret never does.
struct S3Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // empty when none (long-term keys)
  std::string source;
};

// A token bucket that bounds retries across every S3Client sharing it, so a
// store that fails every request makes later requests fail fast instead of
// each waiting through max_attempts (a retry storm). Modelled on the AWS
// SDKs' "standard" retry quota: a retry costs tokens, a request that
// succeeds at the first attempt returns `success_refund`, one that succeeds
// after retries returns what its last retry cost. Tokens never exceed
// `capacity`.
//
// Thread-safety: safe for concurrent use.
class S3RetryBudget {
 public:
  struct Options {
    int capacity = 500;
    int retry_cost = 5;     // a retry after an HTTP error or a reset
    int timeout_cost = 10;  // a retry after a stall or a connect timeout
    int success_refund = 1;
  };
  explicit S3RetryBudget(Options options);
  S3RetryBudget() : S3RetryBudget(Options{}) {}

  // The process-wide budget every client uses unless its config names
  // another. Never destroyed.
  static const std::shared_ptr<S3RetryBudget>& Default();

  // Takes `cost` tokens; returns false (taking none) when fewer are left.
  bool TryAcquire(int cost);
  // Returns `tokens`, up to the capacity.
  void Release(int tokens);
  int available() const;
  const Options& options() const { return options_; }

 private:
  const Options options_;
  mutable absl::Mutex mu_;
  int tokens_ ABSL_GUARDED_BY(mu_);
};

struct S3RetryOptions {
  // Attempts per request, the first included. Default 10. FromEnvironment:
  // AWS_MAX_ATTEMPTS, then max_attempts in the profile's config section (the
  // AWS SDKs' names), a positive integer. With the default
  // backoff a request gives up after at most about 16 s of waiting (plus the
  // attempts themselves, each bounded by stall_seconds while no byte moves).
  int max_attempts = 10;
  // Full jitter: before retry r (1-based) sleep a uniform random time in
  // [0, min(max_backoff, base_backoff * 2^(r-1))]. Defaults 50 ms and 5 s.
  double base_backoff_seconds = 0.05;
  double max_backoff_seconds = 5.0;
  // The budget shared with other clients. Default (null): the process-wide
  // S3RetryBudget::Default(). Tests pass their own.
  std::shared_ptr<S3RetryBudget> budget;
};

// Overrides for FromEnvironment(); each set field wins over the environment.
struct S3ConfigOverrides {
  std::optional<std::string> endpoint_url;
  std::optional<std::string> region;
  std::optional<std::string> profile;
  // Send unsigned requests (public buckets) and do not look for credentials.
  bool anonymous = false;
};

// How S3Client talks to the store. Build it with FromEnvironment() or by
// hand; S3Client::Create validates it.
struct S3Config {
  // "http://host:port" or "https://host[:port]" of an S3-compatible store
  // (MinIO, Ceph, moto). Empty: AWS, https://s3.<region>.amazonaws.com.
  // FromEnvironment: AWS_ENDPOINT_URL_S3, then AWS_ENDPOINT_URL, then
  // endpoint_url in the profile's config section.
  std::string endpoint_url;
  // Signing region. FromEnvironment: AWS_REGION, then AWS_DEFAULT_REGION,
  // then region in the profile's config section, else us-east-1.
  std::string region = "us-east-1";
  // Required unless `anonymous`. FromEnvironment: AWS_ACCESS_KEY_ID,
  // AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, else the profile
  // (AWS_PROFILE, default "default") in AWS_SHARED_CREDENTIALS_FILE
  // (~/.aws/credentials), then in AWS_CONFIG_FILE (~/.aws/config,
  // "[profile name]" sections).
  std::optional<S3Credentials> credentials;
  // Unsigned requests. Only when asked; never a fallback for missing keys.
  bool anonymous = false;
  // Path-style URLs (endpoint/bucket/key) instead of virtual-hosted ones
  // (bucket.endpoint/key). Default: on when endpoint_url is set, and for
  // bucket names with dots (which break TLS host names); off for AWS.
  std::optional<bool> path_style;
  // Reads larger than this are split into parts of this size fetched in
  // parallel; a retry refetches only the unfinished rest of one part.
  // NewS3Writer uploads parts of max(part_size, 5 MiB), the S3 minimum.
  // Default 8 MiB.
  size_t part_size = size_t{8} << 20;
  // Parts of one GetRange (or one writer) in flight at once. Default 8.
  int max_parallel_parts = 8;
  // Keys per ListObjectsV2 page (max-keys), 1..1000. Default 1000.
  int list_page_size = 1000;
  S3RetryOptions retry;
  // A transfer that moves no byte (either way) for this long is aborted and
  // retried. Default 30 s.
  double stall_seconds = 30;
  // TCP (and TLS) connect timeout; a timeout is retried. Default 10 s.
  double connect_timeout_seconds = 10;
  // CA bundle file for https; empty: the system's. FromEnvironment:
  // AWS_CA_BUNDLE.
  std::string ca_bundle;

  // Checks ranges and the endpoint's syntax. Returns InvalidArgument naming
  // the field, or Unauthenticated when there are no credentials and
  // anonymous is false.
  absl::Status Validate() const;

  // Reads the environment and the shared AWS files as described per field.
  // Returns InvalidArgument for a malformed endpoint or region, NotFound
  // when an explicitly named profile exists in neither file, Unimplemented
  // for a profile that only has credential_process/SSO/role settings, and
  // Unauthenticated naming every place looked in when no credentials are
  // found and overrides.anonymous is false.
  static absl::StatusOr<S3Config> FromEnvironment(const S3ConfigOverrides& overrides = {});
  // The same with the variables read through `getenv` (tests). HOME comes
  // from it too.
  using GetEnv = std::function<std::optional<std::string>(const std::string& name)>;
  static absl::StatusOr<S3Config> FromEnvironment(const S3ConfigOverrides& overrides,
                                                  const GetEnv& getenv);
};

// ---------------------------------------------------------------------------
// Statistics

enum class S3RequestKind {
  kHead,
  kList,
  kGet,
  kPut,
  kCreateMultipart,
  kUploadPart,
  kCompleteMultipart,
  kAbortMultipart,
  kDelete,
};
inline constexpr int kNumS3RequestKinds = 9;
std::string_view S3RequestKindName(S3RequestKind kind);  // "HEAD", "LIST", ...

struct S3KindStats {
  uint64_t requests = 0;        // HTTP attempts sent, retries included
  uint64_t retries = 0;         // attempts after the first of a request
  uint64_t failures = 0;        // requests that ended in an error
  uint64_t stalls = 0;          // attempts aborted by the stall timeout
  uint64_t bytes_received = 0;  // response body bytes, failed attempts included
  uint64_t bytes_sent = 0;      // request body bytes, failed attempts included
};

struct S3Stats {
  std::array<S3KindStats, kNumS3RequestKinds> by_kind{};
  uint64_t budget_exhausted = 0;  // retries refused by the retry budget
  const S3KindStats& operator[](S3RequestKind k) const { return by_kind[static_cast<int>(k)]; }
  S3KindStats total() const;
};

// ---------------------------------------------------------------------------
// Client

// A connection to one S3-compatible endpoint with one set of credentials.
//
// Thread-safety: every method is safe for concurrent use. Each call borrows a
// session (a libcurl multi handle with its easy handles and its pool of open
// connections) from a pool, so concurrent calls run in parallel and later
// calls reuse the connections of earlier ones. Calls block the calling thread.
class S3Client {
 public:
  struct Object {
    std::string key;
    uint64_t size = 0;
    std::string etag;  // without the surrounding quotes
  };

  // Validates `config` (see S3Config::Validate) and, for an endpoint given by
  // host name, resolves it once: an unknown host is InvalidArgument now, not
  // max_attempts retries later.
  static absl::StatusOr<std::shared_ptr<S3Client>> Create(S3Config config);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  // Size and ETag of an object. Returns NotFound naming s3://bucket/key.
  absl::StatusOr<Object> Head(std::string_view bucket, std::string_view key);

  // Every object whose key starts with `prefix` (flat: no delimiter), in key
  // order, following ListObjectsV2 continuation tokens. Returns NotFound for
  // a missing bucket; a 200 whose body is an S3 <Error> is an error.
  absl::StatusOr<std::vector<Object>> List(std::string_view bucket, std::string_view prefix);

  // Reads exactly n bytes at `offset` into dst. Reads larger than part_size
  // go as parallel parts. With `if_match_etag` (quotes optional) every part
  // carries If-Match and a changed object is FailedPrecondition "object
  // modified"; without it each part pins the ETag of its first response for
  // its own retries, and parts that saw different ETags fail the same way.
  // Returns OutOfRange if the object ends before offset + n. Never returns
  // success with fewer than n bytes.
  // REQUIRES: dst has room for n bytes.
  absl::Status GetRange(std::string_view bucket, std::string_view key, uint64_t offset, size_t n,
                        char* dst, std::string_view if_match_etag = {});

  // Reads several ranges of one object, one request each, all in flight at
  // once (a vectored read). If-Match and ETag pinning as for GetRange; with
  // `seen`, reports the ETag (without quotes) and the object size that the
  // answers carried (the size from Content-Range, when the server sent it).
  struct RangeRead {
    uint64_t offset = 0;
    size_t n = 0;
    char* dst = nullptr;
  };
  struct ObjectSeen {
    std::string etag;
    std::optional<uint64_t> size;
  };
  absl::Status GetRanges(std::string_view bucket, std::string_view key,
                         std::span<const RangeRead> ranges, std::string_view if_match_etag = {},
                         ObjectSeen* seen = nullptr);

  // The whole object, for small ones (manifests). Returns ResourceExhausted
  // for objects over 256 MiB.
  absl::StatusOr<std::string> GetObject(std::string_view bucket, std::string_view key);

  // Creates or replaces the object in one request.
  absl::Status PutObject(std::string_view bucket, std::string_view key, std::string_view data);

  // Deletes the object. Deleting a missing key succeeds (S3 semantics).
  absl::Status DeleteObject(std::string_view bucket, std::string_view key);

  // Multipart upload, the pieces NewS3Writer is made of. Part numbers are
  // 1..10000; UploadPart returns the part's ETag for Complete.
  absl::StatusOr<std::string> CreateMultipartUpload(std::string_view bucket, std::string_view key);
  struct UploadPartSpec {
    int part_number = 0;
    std::string_view data;
  };
  // Uploads the parts in parallel (up to max_parallel_parts at once) and
  // returns their ETags in the order given.
  absl::StatusOr<std::vector<std::string>> UploadParts(std::string_view bucket,
                                                       std::string_view key,
                                                       std::string_view upload_id,
                                                       const std::vector<UploadPartSpec>& parts);
  // `etags[i]` is the ETag of part i + 1.
  absl::Status CompleteMultipartUpload(std::string_view bucket, std::string_view key,
                                       std::string_view upload_id,
                                       const std::vector<std::string>& etags);
  absl::Status AbortMultipartUpload(std::string_view bucket, std::string_view key,
                                    std::string_view upload_id);

  // Counters since creation.
  S3Stats stats() const;
  const S3Config& config() const;

  class Impl;

 private:
  explicit S3Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A ByteSource over one version of s3://bucket/key. Without `size` it sends
// a HEAD (which must report `etag` when one is given, else FailedPrecondition
// "object modified"). With a `size` it sends nothing now: without an `etag`
// the first read learns the object's ETag from its answer (and checks the
// size the answer reports). Every later read carries If-Match on the pinned
// ETag, so bytes of two versions never mix. ReadRanges sends its ranges (cut
// at part_size) in parallel. name() is the s3:// URI; preferred_read_size()
// is config().part_size; version() is the pinned ETag (without quotes; empty
// until learned). Returns NotFound when the HEAD finds no object.
//
// Thread-safety: safe for concurrent use (as every ByteSource).
absl::StatusOr<std::unique_ptr<ByteSource>> OpenS3Object(std::shared_ptr<S3Client> client,
                                                         std::string_view bucket,
                                                         std::string_view key,
                                                         std::optional<uint64_t> size = {},
                                                         std::optional<std::string> etag = {});

// A WritableFile that uploads to s3://bucket/key. Appends are buffered; once
// max_parallel_parts parts of max(part_size, 5 MiB) are full they go up as a
// multipart upload in parallel. Commit() sends the rest and completes the
// upload, or, when everything fit in one part, sends one PutObject. Nothing
// is visible under the key before Commit() succeeds; destroying the writer
// without a successful Commit() aborts the multipart upload. After an error
// every later call returns that error.
//
// Thread-safety: not safe for concurrent use (one writer per object).
absl::StatusOr<std::unique_ptr<WritableFile>> NewS3Writer(std::shared_ptr<S3Client> client,
                                                          std::string_view bucket,
                                                          std::string_view key);

}  // namespace stoker::io

#endif  // STOKER_IO_S3_H_
