// S3Client: requests as libcurl transfers driven by one multi handle per
// call, with retries, stall detection and the retry budget in one loop.
//
// Signing notes for libcurl 7.88 (Debian 12), checked against moto with
// authentication on:
//  * CURLOPT_AWS_SIGV4 signs the path and query exactly as given, so both are
//    built canonical here (UriEncode, sorted parameters, "uploads=").
//  * It signs every header we pass, and also the ones we pass with an empty
//    value to remove a default ("Expect:"), which are then not sent: the
//    signature breaks. So no header is ever removed that way.
//  * It does not add x-amz-content-sha256, which S3 requires; when we pass
//    one, it is signed and used as the payload hash. We send the hash of the
//    empty body for requests without one and UNSIGNED-PAYLOAD otherwise.
#include <curl/curl.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

#include "io/s3.h"
#include "io/s3_internal.h"
#include "util/strings.h"

namespace stoker::io {

// Named rather than anonymous: S3Client::Impl has members of these types.
namespace s3_client_detail {

using Clock = std::chrono::steady_clock;
namespace s3i = s3_internal;

constexpr size_t kMaxErrorBody = size_t{64} << 10;     // kept of an error body
constexpr size_t kMaxHeaderBytes = size_t{256} << 10;  // all headers of one response
constexpr size_t kMaxXmlBody = size_t{16} << 20;       // LIST and multipart replies
constexpr size_t kMaxGetObject = size_t{256} << 20;    // GetObject
constexpr size_t kMaxMessage = 300;                    // of the store's <Message>
constexpr char kEmptySha256[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string_view TrimView(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

std::string Quoted(std::string_view etag) {
  return stoker::StrCat("\"", s3i::StripQuotes(etag), "\"");
}

// One request as the caller described it, plus what its attempts learned.
// Lives on the caller's stack for the duration of one Execute().
struct Call {
  // ---- the request
  S3RequestKind kind = S3RequestKind::kGet;
  const char* method = "GET";
  std::string bucket;
  std::string key;
  std::string query;  // canonical, without '?'
  std::string what;   // "GET s3://b/k bytes 0-9", for messages; never a query
  std::vector<std::string> headers;
  std::string_view upload;  // request body
  bool has_body = false;
  // Ranged GET into dst[0, range_len) of bytes [range_offset, +range_len).
  bool ranged = false;
  uint64_t range_offset = 0;
  uint64_t range_len = 0;
  char* dst = nullptr;
  std::string if_match;  // quoted ETag, or empty
  // Other bodies go here, up to out_cap bytes.
  std::string out;
  size_t out_cap = kMaxXmlBody;

  // ---- across attempts
  int attempt = 0;
  int last_retry_cost = 0;
  uint64_t got = 0;         // ranged: bytes of dst filled; a retry resumes there
  std::string pinned_etag;  // ranged without if_match: the first response's ETag
  std::optional<uint64_t> object_size;  // ranged: the total a response reported
  Clock::time_point not_before{};

  // ---- one attempt (reset by Start)
  long status = 0;
  std::string etag;
  std::string request_id;
  std::string content_range;
  std::string bucket_region;
  std::optional<uint64_t> content_length;
  size_t header_bytes = 0;
  std::string error_body;
  bool error_body_capped = false;
  size_t upload_pos = 0;
  absl::Status abort_reason;  // why a callback stopped the transfer
  Clock::time_point last_progress{};
  uint64_t attempt_received = 0;
  uint64_t attempt_sent = 0;
  curl_slist* header_list = nullptr;
  CURL* easy = nullptr;
  char errbuf[CURL_ERROR_SIZE] = {0};

  bool Success() const { return status >= 200 && status < 300; }
  uint64_t WantFirst() const { return range_offset + got; }
  uint64_t WantLen() const { return range_len - got; }
};

// What the end of an attempt means.
struct Verdict {
  enum Kind { kDone, kRetry, kFail } kind = kDone;
  absl::Status error;  // kRetry: the reason (for the final message); kFail: the result
  bool timeout = false;
};

// Checks the headers of a 2xx answer to a ranged GET before any byte of the
// body is kept. A non-OK status stops the transfer for good: a server that
// answers with the wrong bytes would do it again, so none is retried (N11).
absl::Status CheckRangedHeaders(Call& c) {
  const uint64_t first = c.WantFirst();
  const uint64_t len = c.WantLen();
  const uint64_t last = first + len - 1;
  if (c.status == 206) {
    std::optional<s3i::ContentRange> cr = s3i::ParseContentRange(c.content_range);
    if (!cr) {
      return absl::InternalError(
          stoker::StrCat("206 answer without a valid Content-Range (got '", c.content_range, "')"));
    }
    if (cr->total) c.object_size = *cr->total;
    if (cr->first != first || cr->last > last) {
      return absl::InternalError(stoker::StrCat("asked for bytes ", first, "-", last,
                                                ", the answer's Content-Range is '",
                                                c.content_range, "'"));
    }
    if (cr->last < last) {
      if (cr->total && *cr->total <= last) {
        return absl::OutOfRangeError(stoker::StrCat("the object has only ", *cr->total, " bytes"));
      }
      return absl::InternalError(stoker::StrCat("asked for bytes ", first, "-", last,
                                                ", the answer's Content-Range is '",
                                                c.content_range, "'"));
    }
  } else if (c.status == 200) {
    // A 200 carries the whole object. That is the asked range only if the
    // range starts at 0 and is the object's size.
    if (!(first == 0 && c.content_length && *c.content_length == len)) {
      return absl::InternalError(stoker::StrCat(
          "answered 200 (the whole object",
          c.content_length ? stoker::StrCat(", ", *c.content_length, " bytes") : std::string(),
          ") to a request for bytes ", first, "-", last,
          ": the server or a proxy ignored the Range header"));
    }
    c.object_size = *c.content_length;
  } else {
    return absl::InternalError(stoker::StrCat("unexpected HTTP ", c.status, " to a ranged GET"));
  }
  if (c.etag.empty()) return absl::InternalError("the answer has no ETag");
  const std::string& expected = !c.if_match.empty() ? c.if_match : c.pinned_etag;
  if (!expected.empty() && s3i::StripQuotes(c.etag) != s3i::StripQuotes(expected)) {
    return absl::FailedPreconditionError(stoker::StrCat("object modified: ETag is now ", c.etag,
                                                        ", the read started at ", expected));
  }
  if (c.pinned_etag.empty()) c.pinned_etag = c.etag;
  return absl::OkStatus();
}

size_t OnHeader(char* data, size_t size, size_t nitems, void* user) {
  Call& c = *static_cast<Call*>(user);
  const size_t n = size * nitems;
  c.last_progress = Clock::now();
  c.header_bytes += n;
  if (c.header_bytes > kMaxHeaderBytes) {
    c.abort_reason = absl::InternalError(
        stoker::StrCat("response headers exceed ", kMaxHeaderBytes >> 10, " KiB"));
    return 0;
  }
  std::string_view line = TrimView(std::string_view(data, n));
  if (line.substr(0, 5) == "HTTP/") {
    // A new response (after a 100 Continue, for one): forget the last one.
    size_t sp = line.find(' ');
    c.status =
        sp == std::string_view::npos ? 0 : std::atol(std::string(line.substr(sp + 1, 3)).c_str());
    c.etag.clear();
    c.request_id.clear();
    c.content_range.clear();
    c.content_length.reset();
    return n;
  }
  if (line.empty()) {
    if (c.status >= 200) {
      if (c.ranged && c.Success()) {
        if (absl::Status s = CheckRangedHeaders(c); !s.ok()) {
          c.abort_reason = std::move(s);
          return 0;
        }
      } else if (!c.ranged && c.Success() && std::strcmp(c.method, "HEAD") != 0 &&
                 c.content_length && *c.content_length > c.out_cap) {
        c.abort_reason = absl::ResourceExhaustedError(
            stoker::StrCat("the answer is ", *c.content_length, " bytes, more than the ", c.out_cap,
                           " this request reads"));
        return 0;
      }
    }
    return n;
  }
  size_t colon = line.find(':');
  if (colon == std::string_view::npos) return n;
  std::string name = Lower(TrimView(line.substr(0, colon)));
  std::string_view value = TrimView(line.substr(colon + 1));
  if (name == "etag") {
    c.etag = std::string(value);
  } else if (name == "content-range") {
    c.content_range = std::string(value);
  } else if (name == "content-length") {
    uint64_t v = 0;
    if (!value.empty() && std::all_of(value.begin(), value.end(), ::isdigit)) {
      v = std::strtoull(std::string(value).c_str(), nullptr, 10);
      c.content_length = v;
    }
  } else if (name == "x-amz-request-id" || name == "x-amzn-requestid") {
    c.request_id = std::string(value);
  } else if (name == "x-amz-bucket-region") {
    c.bucket_region = std::string(value);
  }
  return n;
}

size_t OnBody(char* data, size_t size, size_t nmemb, void* user) {
  Call& c = *static_cast<Call*>(user);
  const size_t n = size * nmemb;
  c.last_progress = Clock::now();
  c.attempt_received += n;
  if (!c.Success()) {
    // Keep the start of an error body; an endless one is cut here (N17).
    size_t keep = std::min(n, kMaxErrorBody - c.error_body.size());
    c.error_body.append(data, keep);
    if (keep < n) {
      c.error_body_capped = true;
      return 0;
    }
    return n;
  }
  if (c.ranged) {
    if (n > c.WantLen()) {
      c.abort_reason = absl::InternalError(
          stoker::StrCat("the server sent more than the ", c.WantLen(), " bytes asked for"));
      return 0;
    }
    std::memcpy(c.dst + c.got, data, n);
    c.got += n;
    return n;
  }
  if (c.out.size() + n > c.out_cap) {
    c.abort_reason = absl::ResourceExhaustedError(
        stoker::StrCat("the answer exceeds the ", c.out_cap, " bytes this request reads"));
    return 0;
  }
  c.out.append(data, n);
  return n;
}

size_t OnRead(char* buffer, size_t size, size_t nitems, void* user) {
  Call& c = *static_cast<Call*>(user);
  size_t n = std::min(size * nitems, c.upload.size() - c.upload_pos);
  std::memcpy(buffer, c.upload.data() + c.upload_pos, n);
  c.upload_pos += n;
  c.attempt_sent += n;
  c.last_progress = Clock::now();
  return n;
}

int OnSeek(void* user, curl_off_t offset, int origin) {
  Call& c = *static_cast<Call*>(user);
  if (origin != SEEK_SET || offset < 0 || static_cast<uint64_t>(offset) > c.upload.size()) {
    return CURL_SEEKFUNC_FAIL;
  }
  c.upload_pos = static_cast<size_t>(offset);
  return CURL_SEEKFUNC_OK;
}

// "HTTP 503 SlowDown: Please reduce your request rate. (request id X)".
std::string DescribeHttp(const Call& c, const std::optional<s3i::S3ErrorBody>& body) {
  std::string d = stoker::StrCat("HTTP ", c.status);
  if (body && !body->code.empty()) stoker::StrAppend(&d, " ", body->code);
  if (body && !body->message.empty()) {
    std::string_view m = body->message;
    stoker::StrAppend(&d, ": ", m.substr(0, kMaxMessage), m.size() > kMaxMessage ? "..." : "");
  }
  std::string rid = c.request_id;
  if (rid.empty() && body) rid = body->request_id;
  if (!rid.empty()) stoker::StrAppend(&d, " (request id ", rid, ")");
  return d;
}

bool RetryableCode(std::string_view code) {
  return code == "RequestTimeout" || code == "RequestTimeTooSkewed" || code == "InternalError" ||
         code == "SlowDown" || code == "ServiceUnavailable" || code == "Throttling" ||
         code == "ThrottlingException" || code == "RequestLimitExceeded" ||
         code == "OperationAborted";
}

// The verdict on a finished HTTP exchange that is not a transport failure.
Verdict JudgeHttp(Call& c) {
  auto prefix = [&]() { return stoker::StrCat("S3 ", c.what, ": "); };
  if (c.Success()) {
    if (c.ranged && c.got < c.range_len) {
      // A body that ended early without a transport error (no Content-Length
      // and a closed connection): never a short success (N10).
      return {Verdict::kRetry, absl::UnavailableError(
                                   stoker::StrCat(prefix(), "the body ended after ", c.got, " of ",
                                                  c.range_len, " bytes (truncated read)"))};
    }
    // CompleteMultipartUpload (and, from broken stores, LIST) can answer 200
    // with an <Error> document: that is an error, not data (N3).
    if (!c.ranged && !c.out.empty()) {
      if (std::optional<s3i::S3ErrorBody> e = s3i::ParseS3Error(c.out)) {
        std::string msg =
            stoker::StrCat(prefix(), DescribeHttp(c, e), " (an <Error> in a 200 answer)");
        if (RetryableCode(e->code)) return {Verdict::kRetry, absl::UnavailableError(msg)};
        return {Verdict::kFail, absl::InternalError(msg)};
      }
    }
    return {Verdict::kDone, absl::OkStatus()};
  }
  std::optional<s3i::S3ErrorBody> body = s3i::ParseS3Error(c.error_body);
  const std::string code = body ? body->code : std::string();
  std::string msg = stoker::StrCat(prefix(), DescribeHttp(c, body));
  if (code == "RequestTimeTooSkewed") {
    msg +=
        "; this machine's clock differs from the store's by more than 15 minutes: "
        "check NTP";
  }
  const long st = c.status;
  if (st == 404 && code.empty()) msg += " (not found)";
  if (st == 500 || st == 502 || st == 503 || st == 504 || st == 429 || st == 408 ||
      RetryableCode(code)) {
    return {Verdict::kRetry, absl::UnavailableError(msg)};
  }
  absl::StatusCode sc;
  if (st == 404) {
    sc = absl::StatusCode::kNotFound;
  } else if (st == 401 || st == 403) {
    sc = absl::StatusCode::kPermissionDenied;
  } else if (st == 412) {
    sc = absl::StatusCode::kFailedPrecondition;
    msg = stoker::StrCat(prefix(), "object modified (If-Match ",
                         c.if_match.empty() ? c.pinned_etag : c.if_match,
                         " failed): ", DescribeHttp(c, body));
  } else if (st == 416) {
    sc = absl::StatusCode::kOutOfRange;
  } else if (st == 400) {
    sc = absl::StatusCode::kInvalidArgument;
  } else if (st == 405 || st == 501) {
    sc = absl::StatusCode::kUnimplemented;
  } else if (st == 301 || st == 307 || st == 308 || st == 409) {
    sc = absl::StatusCode::kFailedPrecondition;
    if (!c.bucket_region.empty()) {
      stoker::StrAppend(&msg, "; the bucket is in region ", c.bucket_region);
    }
  } else {
    sc = absl::StatusCode::kUnknown;
  }
  return {Verdict::kFail, absl::Status(sc, msg)};
}

// The verdict on an attempt that curl ended with `rc`.
Verdict Judge(Call& c, CURLcode rc) {
  auto prefix = [&]() { return stoker::StrCat("S3 ", c.what, ": "); };
  if (rc == CURLE_OK) return JudgeHttp(c);
  if (!c.abort_reason.ok()) {
    std::string msg = stoker::StrCat(prefix(), c.abort_reason.message());
    if (!c.request_id.empty()) stoker::StrAppend(&msg, " (request id ", c.request_id, ")");
    return {Verdict::kFail, absl::Status(c.abort_reason.code(), msg)};
  }
  if (c.error_body_capped) return JudgeHttp(c);  // cut on purpose; judge the status
  std::string detail = c.errbuf[0] ? std::string(c.errbuf) : curl_easy_strerror(rc);
  switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_UPLOAD_FAILED:
      if (rc == CURLE_PARTIAL_FILE || (c.ranged && c.got > 0)) {
        stoker::StrAppend(&detail, " (truncated read: ", c.got, " of ", c.range_len,
                          " bytes received)");
      }
      return {Verdict::kRetry, absl::UnavailableError(stoker::StrCat(prefix(), detail))};
    case CURLE_OPERATION_TIMEDOUT:
      return {Verdict::kRetry, absl::UnavailableError(stoker::StrCat(prefix(), detail)),
              /*timeout=*/true};
    default:
      return {Verdict::kFail, absl::InternalError(stoker::StrCat(prefix(), detail))};
  }
}

// A libcurl multi handle with its easy handles. The multi handle owns the
// pool of open connections, so reusing a session reuses its connections.
// Used by one thread at a time.
class Session {
 public:
  Session(CURLSH* share, int max_connections) : share_(share) {
    multi_ = curl_multi_init();
    curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, static_cast<long>(max_connections));
  }
  ~Session() {
    for (CURL* e : free_) curl_easy_cleanup(e);
    curl_multi_cleanup(multi_);
  }
  CURLM* multi() { return multi_; }
  CURL* TakeEasy() {
    if (free_.empty()) return curl_easy_init();
    CURL* e = free_.back();
    free_.pop_back();
    return e;
  }
  void GiveEasy(CURL* e) { free_.push_back(e); }
  CURLSH* share() { return share_; }

 private:
  CURLSH* share_;
  CURLM* multi_;
  std::vector<CURL*> free_;
};

}  // namespace s3_client_detail

using namespace s3_client_detail;  // NOLINT: this file's own helpers

// ---------------------------------------------------------------------------

class S3Client::Impl {
 public:
  explicit Impl(S3Config config) : config_(std::move(config)) {
    budget_ = config_.retry.budget ? config_.retry.budget : S3RetryBudget::Default();
    share_ = curl_share_init();
    curl_share_setopt(share_, CURLSHOPT_LOCKFUNC, &Impl::LockShare);
    curl_share_setopt(share_, CURLSHOPT_UNLOCKFUNC, &Impl::UnlockShare);
    curl_share_setopt(share_, CURLSHOPT_USERDATA, this);
    // Connections cannot be shared between threads; DNS and TLS sessions can.
    curl_share_setopt(share_, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_share_setopt(share_, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    if (!config_.anonymous) {
      sigv4_ = stoker::StrCat("aws:amz:", config_.region, ":s3");
    }
  }
  ~Impl() {
    {
      absl::MutexLock lock(&mu_);
      idle_.clear();
    }
    curl_share_cleanup(share_);
  }

  absl::Status ParseEndpoint() {
    std::string_view u = config_.endpoint_url;
    if (u.empty()) {
      scheme_ = "https";
      host_ = stoker::StrCat("s3.", config_.region, ".amazonaws.com");
      path_style_ = config_.path_style.value_or(false);
      return absl::OkStatus();
    }
    size_t sep = u.find("://");
    scheme_ = Lower(u.substr(0, sep));
    std::string_view authority = u.substr(sep + 3);
    authority = authority.substr(0, authority.find('/'));
    if (authority.front() == '[') {
      size_t close = authority.find(']');
      host_ = std::string(authority.substr(0, close + 1));
      if (close + 1 < authority.size()) port_ = std::string(authority.substr(close + 2));
    } else {
      size_t colon = authority.rfind(':');
      host_ = std::string(authority.substr(0, colon));
      if (colon != std::string_view::npos) port_ = std::string(authority.substr(colon + 1));
    }
    path_style_ = config_.path_style.value_or(true);
    return absl::OkStatus();
  }

  // N16: an endpoint whose name does not resolve is a configuration error,
  // reported once at start instead of after max_attempts retries.
  absl::Status ResolveEndpoint() const {
    if (host_.front() == '[') return absl::OkStatus();
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int rc = ::getaddrinfo(host_.c_str(), nullptr, &hints, &res);
    if (res) ::freeaddrinfo(res);
    if (rc != 0) {
      return absl::InvalidArgumentError(stoker::StrCat(
          "S3 endpoint host '", host_, "' does not resolve (", ::gai_strerror(rc), "); check ",
          config_.endpoint_url.empty() ? "the region" : "the endpoint URL"));
    }
    return absl::OkStatus();
  }

  const S3Config& config() const { return config_; }

  S3Stats stats() const {
    S3Stats s;
    for (int i = 0; i < kNumS3RequestKinds; ++i) {
      const Counters& c = counters_[i];
      s.by_kind[i].requests = c.requests.load();
      s.by_kind[i].retries = c.retries.load();
      s.by_kind[i].failures = c.failures.load();
      s.by_kind[i].stalls = c.stalls.load();
      s.by_kind[i].bytes_received = c.bytes_received.load();
      s.by_kind[i].bytes_sent = c.bytes_sent.load();
    }
    s.budget_exhausted = budget_exhausted_.load();
    return s;
  }

  // Builds the URL path (and host) of an object or bucket.
  std::string Url(const Call& c) const {
    const bool path_style =
        path_style_ || (scheme_ == "https" && c.bucket.find('.') != std::string::npos);
    std::string url = stoker::StrCat(scheme_, "://");
    if (!path_style) stoker::StrAppend(&url, c.bucket, ".");
    stoker::StrAppend(&url, host_);
    if (!port_.empty()) stoker::StrAppend(&url, ":", port_);
    if (path_style) stoker::StrAppend(&url, "/", c.bucket);
    if (path_style && c.key.empty()) {
      // "/bucket" for bucket requests.
    } else {
      stoker::StrAppend(&url, "/", s3i::UriEncode(c.key, /*keep_slash=*/true));
    }
    if (!c.query.empty()) stoker::StrAppend(&url, "?", c.query);
    return url;
  }

  // Runs the calls, up to max_parallel_parts at once, retrying each as the
  // policy says. Returns OK when all succeeded, else the first failure (the
  // others are abandoned).
  absl::Status Execute(std::vector<Call*>& calls) {
    std::unique_ptr<Session> session = AcquireSession();
    absl::Status s = Run(*session, calls);
    ReleaseSession(std::move(session));
    return s;
  }

  absl::Status ExecuteOne(Call& c) {
    std::vector<Call*> calls = {&c};
    return Execute(calls);
  }

 private:
  struct Counters {
    std::atomic<uint64_t> requests{0}, retries{0}, failures{0}, stalls{0}, bytes_received{0},
        bytes_sent{0};
  };

  static void LockShare(CURL*, curl_lock_data data, curl_lock_access, void* user) {
    static_cast<Impl*>(user)->share_locks_[data].lock();
  }
  static void UnlockShare(CURL*, curl_lock_data data, void* user) {
    static_cast<Impl*>(user)->share_locks_[data].unlock();
  }

  std::unique_ptr<Session> AcquireSession() {
    {
      absl::MutexLock lock(&mu_);
      if (!idle_.empty()) {
        std::unique_ptr<Session> s = std::move(idle_.back());
        idle_.pop_back();
        return s;
      }
    }
    return std::make_unique<Session>(share_, config_.max_parallel_parts + 1);
  }
  void ReleaseSession(std::unique_ptr<Session> s) {
    absl::MutexLock lock(&mu_);
    // Sessions beyond this many idle ones close their connections.
    if (idle_.size() < 64) idle_.push_back(std::move(s));
  }

  Counters& counters(const Call& c) { return counters_[static_cast<int>(c.kind)]; }

  void Start(Session& session, Call& c) {
    ++c.attempt;
    Counters& k = counters(c);
    k.requests.fetch_add(1, std::memory_order_relaxed);
    if (c.attempt > 1) k.retries.fetch_add(1, std::memory_order_relaxed);
    c.status = 0;
    c.etag.clear();
    c.request_id.clear();
    c.content_range.clear();
    c.bucket_region.clear();
    c.content_length.reset();
    c.header_bytes = 0;
    c.error_body.clear();
    c.error_body_capped = false;
    c.upload_pos = 0;
    c.abort_reason = absl::OkStatus();
    c.attempt_received = 0;
    c.attempt_sent = 0;
    c.errbuf[0] = 0;
    if (!c.ranged) c.out.clear();  // non-ranged bodies restart from scratch
    c.last_progress = Clock::now();

    CURL* e = session.TakeEasy();
    c.easy = e;
    curl_easy_reset(e);
    const std::string url = Url(c);
    curl_easy_setopt(e, CURLOPT_URL, url.c_str());
    curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);  // keys may hold "./" and "../"
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_SHARE, session.share());
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(config_.connect_timeout_seconds * 1000));
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 256L << 10);
    curl_easy_setopt(e, CURLOPT_UPLOAD_BUFFERSIZE, 256L << 10);
    curl_easy_setopt(e, CURLOPT_PRIVATE, &c);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c.errbuf);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &OnHeader);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, &c);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &OnBody);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &c);
    if (!config_.ca_bundle.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, config_.ca_bundle.c_str());

    std::vector<std::string> headers = c.headers;
    headers.push_back(
        stoker::StrCat("x-amz-content-sha256: ", c.has_body ? "UNSIGNED-PAYLOAD" : kEmptySha256));
    if (c.ranged) {
      headers.push_back(
          stoker::StrCat("Range: bytes=", c.WantFirst(), "-", c.WantFirst() + c.WantLen() - 1));
      const std::string& pin = !c.if_match.empty() ? c.if_match : c.pinned_etag;
      if (!pin.empty()) headers.push_back(stoker::StrCat("If-Match: ", Quoted(pin)));
    }
    if (!config_.anonymous) {
      curl_easy_setopt(e, CURLOPT_AWS_SIGV4, sigv4_.c_str());
      curl_easy_setopt(e, CURLOPT_USERNAME, config_.credentials->access_key_id.c_str());
      curl_easy_setopt(e, CURLOPT_PASSWORD, config_.credentials->secret_access_key.c_str());
      if (!config_.credentials->session_token.empty()) {
        headers.push_back(
            stoker::StrCat("x-amz-security-token: ", config_.credentials->session_token));
      }
    }
    const std::string_view method = c.method;
    if (method == "HEAD") {
      curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else if (method == "PUT") {
      curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(c.upload.size()));
      curl_easy_setopt(e, CURLOPT_READFUNCTION, &OnRead);
      curl_easy_setopt(e, CURLOPT_READDATA, &c);
      curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, &OnSeek);
      curl_easy_setopt(e, CURLOPT_SEEKDATA, &c);
    } else if (method == "POST") {
      curl_easy_setopt(e, CURLOPT_POST, 1L);
      curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(c.upload.size()));
      curl_easy_setopt(e, CURLOPT_READFUNCTION, &OnRead);
      curl_easy_setopt(e, CURLOPT_READDATA, &c);
      curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, &OnSeek);
      curl_easy_setopt(e, CURLOPT_SEEKDATA, &c);
    } else if (method != "GET") {
      curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, c.method);
    }
    curl_slist* list = nullptr;
    for (const std::string& h : headers) list = curl_slist_append(list, h.c_str());
    c.header_list = list;
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, list);
    curl_multi_add_handle(session.multi(), e);
  }

  // Detaches the attempt's easy handle and books its bytes.
  void Finish(Session& session, Call& c) {
    curl_multi_remove_handle(session.multi(), c.easy);
    session.GiveEasy(c.easy);
    c.easy = nullptr;
    curl_slist_free_all(c.header_list);
    c.header_list = nullptr;
    Counters& k = counters(c);
    k.bytes_received.fetch_add(c.attempt_received, std::memory_order_relaxed);
    k.bytes_sent.fetch_add(c.attempt_sent, std::memory_order_relaxed);
  }

  Clock::duration Backoff(int retry) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    double cap = config_.retry.base_backoff_seconds * std::ldexp(1.0, std::min(retry - 1, 30));
    cap = std::min(cap, config_.retry.max_backoff_seconds);
    std::uniform_real_distribution<double> jitter(0.0, cap);
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(jitter(rng)));
  }

  // Decides what follows a failed attempt. Returns OK and sets not_before
  // when the call should run again; else the final error.
  absl::Status PlanRetry(Call& c, const Verdict& v) {
    if (v.kind == Verdict::kFail) return v.error;
    if (c.attempt >= config_.retry.max_attempts) {
      return absl::UnavailableError(stoker::StrCat(
          "S3 ", c.what, ": gave up after ", c.attempt,
          " attempts; last error: ", StripPrefix(c, stoker::ToStd(v.error.message()))));
    }
    const S3RetryBudget::Options& bo = budget_->options();
    const int cost = v.timeout ? bo.timeout_cost : bo.retry_cost;
    if (!budget_->TryAcquire(cost)) {
      budget_exhausted_.fetch_add(1, std::memory_order_relaxed);
      return absl::UnavailableError(stoker::StrCat(
          "S3 ", c.what, ": gave up after ", c.attempt,
          " attempts: the S3 retry budget is spent (the store is failing many requests, so "
          "retries fail fast until requests succeed again); last error: ",
          StripPrefix(c, stoker::ToStd(v.error.message()))));
    }
    c.last_retry_cost = cost;
    c.not_before = Clock::now() + Backoff(c.attempt);
    return absl::OkStatus();
  }

  static std::string_view StripPrefix(const Call& c, std::string_view msg) {
    std::string p = stoker::StrCat("S3 ", c.what, ": ");
    if (msg.substr(0, p.size()) == p) msg.remove_prefix(p.size());
    return msg;
  }

  absl::Status Run(Session& session, std::vector<Call*>& calls) {
    std::deque<Call*> pending(calls.begin(), calls.end());
    std::vector<Call*> active;
    const size_t limit = static_cast<size_t>(config_.max_parallel_parts);
    const auto stall = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(config_.stall_seconds));
    absl::Status failure;

    // Handles one finished attempt; false when the whole Execute must stop.
    auto settle = [&](Call* c, const Verdict& v) -> bool {
      if (v.kind == Verdict::kDone) {
        budget_->Release(c->attempt == 1 ? budget_->options().success_refund : c->last_retry_cost);
        return true;
      }
      absl::Status s = PlanRetry(*c, v);
      if (!s.ok()) {
        counters(*c).failures.fetch_add(1, std::memory_order_relaxed);
        failure = std::move(s);
        return false;
      }
      pending.push_back(c);
      return true;
    };

    while (failure.ok()) {
      Clock::time_point now = Clock::now();
      for (auto it = pending.begin(); it != pending.end() && active.size() < limit;) {
        if ((*it)->not_before <= now) {
          Start(session, **it);
          active.push_back(*it);
          it = pending.erase(it);
        } else {
          ++it;
        }
      }
      if (active.empty() && pending.empty()) break;

      int running = 0;
      curl_multi_perform(session.multi(), &running);
      int left = 0;
      while (CURLMsg* msg = curl_multi_info_read(session.multi(), &left)) {
        if (msg->msg != CURLMSG_DONE) continue;
        CURL* easy = msg->easy_handle;
        const CURLcode rc = msg->data.result;  // copied: msg dies with the handle
        char* priv = nullptr;
        curl_easy_getinfo(easy, CURLINFO_PRIVATE, &priv);
        Call* c = reinterpret_cast<Call*>(priv);
        Finish(session, *c);
        active.erase(std::find(active.begin(), active.end(), c));
        if (!settle(c, Judge(*c, rc))) break;
      }
      if (!failure.ok()) break;
      if (active.empty() && pending.empty()) break;  // don't sleep after the last one

      // Stall detection (N8): libcurl's low-speed limit only checks whole
      // seconds; this catches a silent transfer to within the poll period.
      now = Clock::now();
      for (size_t i = 0; i < active.size();) {
        Call* c = active[i];
        if (now - c->last_progress <= stall) {
          ++i;
          continue;
        }
        Finish(session, *c);
        active.erase(active.begin() + i);
        counters(*c).stalls.fetch_add(1, std::memory_order_relaxed);
        Verdict v{Verdict::kRetry,
                  absl::UnavailableError(stoker::StrCat(
                      "S3 ", c->what, ": no byte moved for ", config_.stall_seconds, " s (stalled",
                      c->ranged ? stoker::StrCat(" after ", c->got, " of ", c->range_len, " bytes")
                                : std::string(),
                      ")")),
                  /*timeout=*/true};
        if (!settle(c, v)) break;
      }
      if (!failure.ok()) break;

      // Sleep until curl has work, the next retry is due, or a stall check.
      auto wait = std::chrono::milliseconds(100);
      if (active.empty() && !pending.empty()) {
        Clock::time_point next = pending.front()->not_before;
        for (Call* c : pending) next = std::min(next, c->not_before);
        wait = std::min(wait,
                        std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()) +
                            std::chrono::milliseconds(1));
        if (wait.count() > 0) std::this_thread::sleep_for(wait);
        continue;
      }
      if (!pending.empty() && active.size() < limit) {
        for (Call* c : pending) {
          wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(
                                    c->not_before - Clock::now()) +
                                    std::chrono::milliseconds(1));
        }
      }
      wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(stall / 4) +
                                std::chrono::milliseconds(1));
      curl_multi_poll(session.multi(), nullptr, 0,
                      static_cast<int>(std::max<int64_t>(wait.count(), 0)), nullptr);
    }
    for (Call* c : active) Finish(session, *c);
    return failure;
  }

  const S3Config config_;
  std::shared_ptr<S3RetryBudget> budget_;
  std::string sigv4_;
  std::string scheme_, host_, port_;
  bool path_style_ = true;
  CURLSH* share_ = nullptr;
  std::mutex share_locks_[CURL_LOCK_DATA_LAST];
  Counters counters_[kNumS3RequestKinds];
  std::atomic<uint64_t> budget_exhausted_{0};
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Session>> idle_ ABSL_GUARDED_BY(mu_);
};

// ---------------------------------------------------------------------------

namespace {

Call MakeCall(S3RequestKind kind, const char* method, std::string_view bucket,
              std::string_view key) {
  Call c;
  c.kind = kind;
  c.method = method;
  c.bucket = std::string(bucket);
  c.key = std::string(key);
  return c;
}

}  // namespace

S3Client::S3Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
S3Client::~S3Client() = default;

absl::StatusOr<std::shared_ptr<S3Client>> S3Client::Create(S3Config config) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  GlobalInit();
  auto impl = std::make_unique<Impl>(std::move(config));
  if (absl::Status s = impl->ParseEndpoint(); !s.ok()) return s;
  if (absl::Status s = impl->ResolveEndpoint(); !s.ok()) return s;
  return std::shared_ptr<S3Client>(new S3Client(std::move(impl)));
}

S3Stats S3Client::stats() const { return impl_->stats(); }
const S3Config& S3Client::config() const { return impl_->config(); }

absl::StatusOr<S3Client::Object> S3Client::Head(std::string_view bucket, std::string_view key) {
  Call c = MakeCall(S3RequestKind::kHead, "HEAD", bucket, key);
  c.what = stoker::StrCat("HEAD ", S3Uri(bucket, key));
  if (absl::Status s = impl_->ExecuteOne(c); !s.ok()) return s;
  if (!c.content_length) {
    return absl::InternalError(stoker::StrCat("S3 ", c.what, ": the answer has no Content-Length"));
  }
  Object o;
  o.key = std::string(key);
  o.size = *c.content_length;
  o.etag = s3i::StripQuotes(c.etag);
  return o;
}

absl::StatusOr<std::vector<S3Client::Object>> S3Client::List(std::string_view bucket,
                                                             std::string_view prefix) {
  std::vector<Object> objects;
  std::string token;
  for (int page = 1;; ++page) {
    Call c = MakeCall(S3RequestKind::kList, "GET", bucket, "");
    c.what = stoker::StrCat("LIST ", S3Uri(bucket, prefix), " (page ", page, ")");
    std::vector<std::pair<std::string, std::string>> q = {
        {"list-type", "2"},
        {"prefix", std::string(prefix)},
        {"max-keys", std::to_string(impl_->config().list_page_size)},
        {"encoding-type", "url"}};
    if (!token.empty()) q.emplace_back("continuation-token", token);
    c.query = s3i::CanonicalQuery(std::move(q));
    if (absl::Status s = impl_->ExecuteOne(c); !s.ok()) return s;
    absl::StatusOr<s3i::ListPage> p = s3i::ParseListObjectsV2(c.out);
    if (!p.ok()) {
      return absl::InternalError(
          stoker::StrCat("S3 ", c.what, ": unreadable answer: ", p.status().message()));
    }
    for (s3i::ListPage::Entry& e : p->entries) {
      objects.push_back(Object{std::move(e.key), e.size, std::move(e.etag)});
    }
    if (!p->truncated) break;
    if (p->next_continuation_token == token) {
      return absl::InternalError(
          stoker::StrCat("S3 ", c.what, ": the continuation token did not advance"));
    }
    token = std::move(p->next_continuation_token);
  }
  return objects;
}

absl::Status S3Client::GetRange(std::string_view bucket, std::string_view key, uint64_t offset,
                                size_t n, char* dst, std::string_view if_match_etag) {
  const size_t part = impl_->config().part_size;
  std::vector<RangeRead> ranges;
  for (uint64_t done = 0; done < n; done += part) {
    ranges.push_back({offset + done, static_cast<size_t>(std::min<uint64_t>(part, n - done)),
                      dst + done});
  }
  return GetRanges(bucket, key, ranges, if_match_etag);
}

absl::Status S3Client::GetRanges(std::string_view bucket, std::string_view key,
                                 std::span<const RangeRead> ranges,
                                 std::string_view if_match_etag, ObjectSeen* seen) {
  std::vector<Call> calls;
  calls.reserve(ranges.size());
  std::vector<Call*> ptrs;
  const std::string uri = S3Uri(bucket, key);
  const std::string if_match = if_match_etag.empty() ? "" : Quoted(if_match_etag);
  uint64_t lo = UINT64_MAX, hi = 0;
  for (const RangeRead& r : ranges) {
    if (r.n == 0) continue;
    Call& c = calls.emplace_back(MakeCall(S3RequestKind::kGet, "GET", bucket, key));
    c.ranged = true;
    c.range_offset = r.offset;
    c.range_len = r.n;
    c.dst = r.dst;
    c.if_match = if_match;
    c.what = stoker::StrCat("GET ", uri, " bytes ", c.range_offset, "-",
                            c.range_offset + c.range_len - 1);
    lo = std::min(lo, r.offset);
    hi = std::max(hi, r.offset + r.n);
  }
  if (calls.empty()) return absl::OkStatus();
  for (Call& c : calls) ptrs.push_back(&c);
  if (absl::Status s = impl_->Execute(ptrs); !s.ok()) return s;
  if (if_match.empty()) {
    // Without a caller's ETag each request pinned its own; they must agree.
    for (const Call& c : calls) {
      if (s3i::StripQuotes(c.pinned_etag) != s3i::StripQuotes(calls[0].pinned_etag)) {
        return absl::FailedPreconditionError(
            stoker::StrCat("S3 GET ", uri, " bytes ", lo, "-", hi - 1,
                           ": object modified during the read (parts saw ETags ",
                           calls[0].pinned_etag, " and ", c.pinned_etag, ")"));
      }
    }
  }
  if (seen != nullptr) {
    seen->etag = s3i::StripQuotes(calls[0].pinned_etag.empty() ? calls[0].etag
                                                                : calls[0].pinned_etag);
    seen->size = calls[0].object_size;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> S3Client::GetObject(std::string_view bucket, std::string_view key) {
  Call c = MakeCall(S3RequestKind::kGet, "GET", bucket, key);
  c.what = stoker::StrCat("GET ", S3Uri(bucket, key));
  c.out_cap = kMaxGetObject;
  if (absl::Status s = impl_->ExecuteOne(c); !s.ok()) return s;
  return std::move(c.out);
}

absl::Status S3Client::PutObject(std::string_view bucket, std::string_view key,
                                 std::string_view data) {
  Call c = MakeCall(S3RequestKind::kPut, "PUT", bucket, key);
  c.what = stoker::StrCat("PUT ", S3Uri(bucket, key), " (", data.size(), " bytes)");
  c.upload = data;
  c.has_body = true;
  c.headers.push_back("Content-Type: application/octet-stream");
  return impl_->ExecuteOne(c);
}

absl::Status S3Client::DeleteObject(std::string_view bucket, std::string_view key) {
  Call c = MakeCall(S3RequestKind::kDelete, "DELETE", bucket, key);
  c.what = stoker::StrCat("DELETE ", S3Uri(bucket, key));
  return impl_->ExecuteOne(c);
}

absl::StatusOr<std::string> S3Client::CreateMultipartUpload(std::string_view bucket,
                                                            std::string_view key) {
  Call c = MakeCall(S3RequestKind::kCreateMultipart, "POST", bucket, key);
  c.what = stoker::StrCat("CreateMultipartUpload ", S3Uri(bucket, key));
  c.query = s3i::CanonicalQuery({{"uploads", ""}});
  c.headers.push_back("Content-Type: application/octet-stream");
  if (absl::Status s = impl_->ExecuteOne(c); !s.ok()) return s;
  absl::StatusOr<s3i::XmlElement> root = s3i::ParseXml(c.out);
  std::string id;
  if (root.ok() && root->name == "InitiateMultipartUploadResult") id = root->ChildText("UploadId");
  if (id.empty()) {
    return absl::InternalError(stoker::StrCat("S3 ", c.what, ": the answer has no <UploadId>"));
  }
  return id;
}

absl::StatusOr<std::vector<std::string>> S3Client::UploadParts(
    std::string_view bucket, std::string_view key, std::string_view upload_id,
    const std::vector<UploadPartSpec>& parts) {
  std::vector<Call> calls(parts.size());
  std::vector<Call*> ptrs;
  for (size_t i = 0; i < parts.size(); ++i) {
    Call& c = calls[i];
    c = MakeCall(S3RequestKind::kUploadPart, "PUT", bucket, key);
    c.what = stoker::StrCat("UploadPart ", parts[i].part_number, " (", parts[i].data.size(),
                            " bytes) of ", S3Uri(bucket, key));
    c.query = s3i::CanonicalQuery({{"partNumber", std::to_string(parts[i].part_number)},
                                   {"uploadId", std::string(upload_id)}});
    c.upload = parts[i].data;
    c.has_body = true;
    ptrs.push_back(&c);
  }
  if (absl::Status s = impl_->Execute(ptrs); !s.ok()) return s;
  std::vector<std::string> etags;
  for (const Call& c : calls) {
    if (c.etag.empty()) {
      return absl::InternalError(stoker::StrCat("S3 ", c.what, ": the answer has no ETag"));
    }
    etags.push_back(s3i::StripQuotes(c.etag));
  }
  return etags;
}

absl::Status S3Client::CompleteMultipartUpload(std::string_view bucket, std::string_view key,
                                               std::string_view upload_id,
                                               const std::vector<std::string>& etags) {
  std::string body = "<CompleteMultipartUpload>";
  for (size_t i = 0; i < etags.size(); ++i) {
    stoker::StrAppend(&body, "<Part><PartNumber>", i + 1, "</PartNumber><ETag>&quot;",
                      s3i::StripQuotes(etags[i]), "&quot;</ETag></Part>");
  }
  body += "</CompleteMultipartUpload>";
  Call c = MakeCall(S3RequestKind::kCompleteMultipart, "POST", bucket, key);
  c.what =
      stoker::StrCat("CompleteMultipartUpload ", S3Uri(bucket, key), " (", etags.size(), " parts)");
  c.query = s3i::CanonicalQuery({{"uploadId", std::string(upload_id)}});
  c.upload = body;
  c.has_body = true;
  c.headers.push_back("Content-Type: application/xml");
  return impl_->ExecuteOne(c);
}

absl::Status S3Client::AbortMultipartUpload(std::string_view bucket, std::string_view key,
                                            std::string_view upload_id) {
  Call c = MakeCall(S3RequestKind::kAbortMultipart, "DELETE", bucket, key);
  c.what = stoker::StrCat("AbortMultipartUpload ", S3Uri(bucket, key));
  c.query = s3i::CanonicalQuery({{"uploadId", std::string(upload_id)}});
  return impl_->ExecuteOne(c);
}

}  // namespace stoker::io
