// Tests of the S3 client against a real moto_server with authentication on
// (so signatures are checked), directly or through
// src/io/testdata/fault_proxy.py, which injects the faults of
// ../shared/RELIABILITY.md rows N1-N17. Without moto_server they skip. The
// parts that need no server are in s3_config_test.cc.
//
// moto_server is found at $STOKER_MOTO_SERVER, else at
// <source>/.venv/bin/moto_server (`make venv` installs it).
#include "io/s3.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <malloc.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"
#include "io/s3_internal.h"
#include "io/s3_test_util.h"
#include "nlohmann/json.hpp"
#include "util/strings.h"

namespace stoker::io {
namespace {

using namespace ::stoker::io::s3_test;  // NOLINT: test helpers

// ===========================================================================
// Test servers: moto_server (authentication on) and the fault proxy.

// A child process in its own process group, killed with the test binary.
class ChildProcess {
 public:
  static std::unique_ptr<ChildProcess> Start(const std::vector<std::string>& argv,
                                             const std::string& log_path) {
    pid_t pid = ::fork();
    if (pid < 0) return nullptr;
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    auto p = std::make_unique<ChildProcess>();
    p->pid_ = pid;
    return p;
  }
  ~ChildProcess() {
    ::kill(-pid_, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::kill(-pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  bool Alive() const { return ::waitpid(pid_, nullptr, WNOHANG) == 0; }

 private:
  pid_t pid_ = -1;
};

// Waits until `path` holds `marker`; returns the digits right after it.
std::optional<int> WaitForPort(const std::string& path, const std::string& marker,
                               const ChildProcess& child, double timeout_s) {
  Clock::time_point start = Clock::now();
  while (SecondsSince(start) < timeout_s && child.Alive()) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    size_t at = text.find(marker);
    if (at != std::string::npos) {
      size_t p = at + marker.size();
      size_t e = p;
      while (e < text.size() && std::isdigit(static_cast<unsigned char>(text[e]))) ++e;
      if (e > p && e < text.size()) return std::stoi(text.substr(p, e - p));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return std::nullopt;
}

struct HttpResult {
  CURLcode rc = CURLE_OK;
  long status = 0;
  std::string body;
};

size_t AppendBody(char* p, size_t s, size_t n, void* out) {
  static_cast<std::string*>(out)->append(p, s * n);
  return s * n;
}

// One plain HTTP request, optionally SigV4-signed as "ak:sk" (test plumbing:
// bucket creation, moto's IAM and the proxy's control endpoint).
HttpResult Http(const std::string& method, const std::string& url, const std::string& body,
                std::vector<std::string> headers, const std::string& sign_as = "") {
  HttpResult r;
  CURL* e = curl_easy_init();
  curl_easy_setopt(e, CURLOPT_URL, url.c_str());
  curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_TIMEOUT, 20L);
  if (!body.empty() || method == "POST" || method == "PUT") {
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  }
  if (!sign_as.empty()) {
    curl_easy_setopt(e, CURLOPT_AWS_SIGV4, "aws:amz:us-east-1:s3");
    curl_easy_setopt(e, CURLOPT_USERPWD, sign_as.c_str());
    headers.push_back("x-amz-content-sha256: UNSIGNED-PAYLOAD");
  }
  curl_slist* list = nullptr;
  for (const std::string& h : headers) list = curl_slist_append(list, h.c_str());
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &AppendBody);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &r.body);
  r.rc = curl_easy_perform(e);
  curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &r.status);
  curl_slist_free_all(list);
  curl_easy_cleanup(e);
  return r;
}

std::string FormEscape(const std::string& s) {
  return s3_internal::UriEncode(s, /*keep_slash=*/false);
}

struct Servers {
  std::string moto_url;
  std::string proxy_url;
  std::string access_key;
  std::string secret_key;
  fs::path dir;
  std::unique_ptr<ChildProcess> moto;
  std::unique_ptr<ChildProcess> proxy;
  ~Servers() {
    proxy.reset();
    moto.reset();
    fs::remove_all(dir);
  }
};

Servers* g_servers = nullptr;
std::string g_skip_reason;

// Starts moto_server, creates an IAM user with an access key allowed
// everything, turns authentication on, then starts the proxy in front.
std::unique_ptr<Servers> StartServers(std::string* why) {
  std::string moto_path;
  if (const char* env = std::getenv("STOKER_MOTO_SERVER")) {
    moto_path = env;
  } else {
    moto_path = STOKER_SOURCE_DIR "/.venv/bin/moto_server";
  }
  if (::access(moto_path.c_str(), X_OK) != 0) {
    *why = stoker::StrCat("moto_server not found at ", moto_path,
                          " (install it with `.venv/bin/pip install \"moto[server]\"` or "
                          "`make venv`, or set STOKER_MOTO_SERVER)");
    return nullptr;
  }
  fs::path py = fs::path(moto_path).parent_path() / "python3";
  std::string python = ::access(py.c_str(), X_OK) == 0 ? py.string() : "/usr/bin/python3";

  auto s = std::make_unique<Servers>();
  char tmpl[] = "/tmp/stoker_s3_test_XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    *why = "cannot create a temporary folder";
    return nullptr;
  }
  s->dir = tmpl;
  const std::string moto_log = (s->dir / "moto.log").string();
  s->moto = ChildProcess::Start({moto_path, "-H", "127.0.0.1", "-p", "0"}, moto_log);
  std::optional<int> moto_port;
  if (s->moto) moto_port = WaitForPort(moto_log, "Running on http://127.0.0.1:", *s->moto, 60);
  if (!moto_port) {
    *why = stoker::StrCat("moto_server did not start; see ", moto_log);
    s->dir.clear();  // keep the log
    return nullptr;
  }
  s->moto_url = stoker::StrCat("http://127.0.0.1:", *moto_port);

  // moto's IAM, unauthenticated while INITIAL_NO_AUTH_ACTION_COUNT is
  // infinite. The Authorization header only routes the call to IAM.
  const std::string iam_auth =
      "Authorization: AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20240101/us-east-1/"
      "iam/aws4_request, SignedHeaders=host, Signature=0";
  const std::string form = "Content-Type: application/x-www-form-urlencoded";
  HttpResult r = Http("POST", s->moto_url + "/",
                      "Action=CreateUser&UserName=stoker&Version=2010-05-08", {iam_auth, form});
  if (r.status != 200) {
    *why = stoker::StrCat("moto IAM CreateUser failed: HTTP ", r.status, " ", r.body);
    return nullptr;
  }
  r = Http("POST", s->moto_url + "/", "Action=CreateAccessKey&UserName=stoker&Version=2010-05-08",
           {iam_auth, form});
  absl::StatusOr<s3_internal::XmlElement> xml = s3_internal::ParseXml(r.body);
  const s3_internal::XmlElement* key = nullptr;
  if (xml.ok() && xml->Child("CreateAccessKeyResult")) {
    key = xml->Child("CreateAccessKeyResult")->Child("AccessKey");
  }
  if (key == nullptr) {
    *why = stoker::StrCat("moto IAM CreateAccessKey failed: HTTP ", r.status, " ", r.body);
    return nullptr;
  }
  s->access_key = key->ChildText("AccessKeyId");
  s->secret_key = key->ChildText("SecretAccessKey");
  const std::string policy =
      R"({"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]})";
  r = Http("POST", s->moto_url + "/",
           "Action=PutUserPolicy&UserName=stoker&PolicyName=all&Version=2010-05-08&"
           "PolicyDocument=" +
               FormEscape(policy),
           {iam_auth, form});
  if (r.status != 200) {
    *why = stoker::StrCat("moto IAM PutUserPolicy failed: HTTP ", r.status);
    return nullptr;
  }
  r = Http("POST", s->moto_url + "/moto-api/reset-auth", "0", {"Content-Type: text/plain"});
  if (r.status != 200) {
    *why = stoker::StrCat("moto reset-auth failed: HTTP ", r.status);
    return nullptr;
  }

  const std::string proxy_log = (s->dir / "proxy.log").string();
  s->proxy = ChildProcess::Start({python, STOKER_SOURCE_DIR "/src/io/testdata/fault_proxy.py",
                                  "127.0.0.1", std::to_string(*moto_port)},
                                 proxy_log);
  std::optional<int> proxy_port;
  if (s->proxy) proxy_port = WaitForPort(proxy_log, "PORT ", *s->proxy, 30);
  if (!proxy_port) {
    *why = stoker::StrCat("fault_proxy.py did not start; see ", proxy_log);
    s->dir.clear();
    return nullptr;
  }
  s->proxy_url = stoker::StrCat("http://127.0.0.1:", *proxy_port);
  return s;
}

class ServersEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    delete g_servers;
    g_servers = nullptr;
  }
};
::testing::Environment* const kServersEnv =
    ::testing::AddGlobalTestEnvironment(new ServersEnvironment);

Servers* GetServers(std::string* why) {
  static std::once_flag once;
  std::call_once(once, [] {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    g_servers = StartServers(&g_skip_reason).release();
  });
  *why = g_skip_reason;
  return g_servers;
}

struct LogEntry {
  int conn = 0;
  std::string method, path, query, range, if_match, action;
};

// Fixture of the tests that talk to moto: a fresh bucket per test, no proxy
// rules, short timeouts and backoffs.
class S3Test : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    servers_ = GetServers(&why);
    if (servers_ == nullptr) GTEST_SKIP() << why;
    SetRules(nlohmann::json::array());
    static std::atomic<int> counter{0};
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    bucket_ = "t";
    for (char c : name) {
      if (std::isalnum(static_cast<unsigned char>(c))) {
        bucket_.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
      }
    }
    bucket_ = stoker::StrCat(bucket_.substr(0, 40), "-", ::getpid(), "-", counter++);
    HttpResult r = Http("PUT", servers_->moto_url + "/" + bucket_, "", {}, SignAs());
    ASSERT_EQ(r.status, 200) << r.body;
  }

  std::string SignAs() const { return servers_->access_key + ":" + servers_->secret_key; }

  S3Config Config(bool via_proxy) const {
    S3Config c;
    c.endpoint_url = via_proxy ? servers_->proxy_url : servers_->moto_url;
    c.credentials = S3Credentials{servers_->access_key, servers_->secret_key, "", "test"};
    c.retry.max_attempts = 4;
    c.retry.base_backoff_seconds = 0.01;
    c.retry.max_backoff_seconds = 0.05;
    c.retry.budget = std::make_shared<S3RetryBudget>();  // not the process-wide one
    c.stall_seconds = 1;
    c.connect_timeout_seconds = 1;
    return c;
  }
  std::shared_ptr<S3Client> Client(const S3Config& c) {
    absl::StatusOr<std::shared_ptr<S3Client>> client = S3Client::Create(c);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *client : nullptr;
  }
  std::shared_ptr<S3Client> Direct() { return Client(Config(false)); }
  std::shared_ptr<S3Client> Proxied() { return Client(Config(true)); }

  void SetRules(const nlohmann::json& rules) {
    HttpResult r = Http("POST", servers_->proxy_url + "/__fault__/rules", rules.dump(), {});
    ASSERT_EQ(r.status, 200);
  }
  std::vector<LogEntry> ProxyLog() {
    HttpResult r = Http("GET", servers_->proxy_url + "/__fault__/log", "", {});
    std::vector<LogEntry> out;
    for (const auto& j : nlohmann::json::parse(r.body)) {
      out.push_back({j["conn"].get<int>(), j["method"], j["path"], j["query"], j["range"],
                     j["if_match"], j["action"]});
    }
    return out;
  }
  std::vector<LogEntry> ProxyLog(const std::string& method) {
    std::vector<LogEntry> all = ProxyLog();
    std::vector<LogEntry> out;
    for (LogEntry& e : all) {
      if (e.method == method) out.push_back(std::move(e));
    }
    return out;
  }

  // Waits until the proxy's control endpoint answers (after a "refuse"
  // partition it listens again); false after `timeout_s`.
  bool WaitForProxy(double timeout_s) {
    Clock::time_point start = Clock::now();
    while (SecondsSince(start) < timeout_s) {
      if (Http("GET", servers_->proxy_url + "/__fault__/log", "", {}).status == 200) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // Uploads `data` under `key` straight to moto.
  void Put(const std::string& key, const std::string& data) {
    std::shared_ptr<S3Client> c = Direct();
    ASSERT_TRUE(c->PutObject(bucket_, key, data).ok());
  }

  // The rules every error message follows: what and where, no secrets, no
  // signatures, no query strings.
  void ExpectClean(const absl::Status& s, const std::string& key) {
    std::string m(s.message());
    EXPECT_TRUE(Contains(m, S3Uri(bucket_, key))) << m;
    EXPECT_FALSE(Contains(m, servers_->secret_key)) << m;
    for (const char* secretish : {"Signature=", "Credential=", "AWS4-HMAC",
                                  "uploadId=", "partNumber=", "list-type=", "x-amz-date"}) {
      EXPECT_FALSE(Contains(m, secretish)) << m;
    }
  }

  Servers* servers_ = nullptr;
  std::string bucket_;
};

// ===========================================================================
// Against moto, directly

TEST_F(S3Test, PutHeadGetDeleteRoundTrip) {
  std::shared_ptr<S3Client> client = Direct();
  const std::string data = RandomBytes(100000, 1);
  // Keys that need encoding in the signed path.
  for (const std::string key : {"plain.bin", "dir/with space+plus&amp=;.bin",
                                "unicode/\xc3\xa9t\xc3\xa9.bin", "dots/./and/../x"}) {
    ASSERT_TRUE(client->PutObject(bucket_, key, data).ok()) << key;
    absl::StatusOr<S3Client::Object> head = client->Head(bucket_, key);
    ASSERT_TRUE(head.ok()) << head.status();
    EXPECT_EQ(head->size, data.size());
    EXPECT_FALSE(head->etag.empty());
    EXPECT_EQ(head->etag.find('"'), std::string::npos);
    absl::StatusOr<std::string> all = client->GetObject(bucket_, key);
    ASSERT_TRUE(all.ok()) << all.status();
    EXPECT_EQ(*all, data) << key;
    ASSERT_TRUE(client->DeleteObject(bucket_, key).ok());
    head = client->Head(bucket_, key);
    EXPECT_TRUE(absl::IsNotFound(head.status())) << head.status();
  }
  // Deleting what is not there is not an error (S3 semantics).
  EXPECT_TRUE(client->DeleteObject(bucket_, "never-was").ok());
  // An empty object.
  ASSERT_TRUE(client->PutObject(bucket_, "empty", "").ok());
  absl::StatusOr<std::string> empty = client->GetObject(bucket_, "empty");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(*empty, "");

  S3Stats st = client->stats();
  EXPECT_EQ(st[S3RequestKind::kPut].requests, 5u);
  EXPECT_EQ(st[S3RequestKind::kPut].bytes_sent, 4 * data.size());
  EXPECT_EQ(st[S3RequestKind::kGet].bytes_received, 4 * data.size());
  EXPECT_EQ(st.total().retries, 0u);
}

TEST_F(S3Test, ListFollowsContinuationTokens) {
  S3Config config = Config(false);
  config.list_page_size = 7;
  std::shared_ptr<S3Client> client = Client(config);
  std::map<std::string, std::string> want;
  for (int i = 0; i < 23; ++i) {
    std::string key =
        stoker::StrCat("data/", i % 2 ? "odd " : "even+", i, i == 5 ? "\xc3\xa9" : "");
    want[key] = RandomBytes(i * 10, i);
    ASSERT_TRUE(client->PutObject(bucket_, key, want[key]).ok());
  }
  ASSERT_TRUE(client->PutObject(bucket_, "other/x", "x").ok());
  absl::StatusOr<std::vector<S3Client::Object>> list = client->List(bucket_, "data/");
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), want.size());
  auto it = want.begin();
  for (const S3Client::Object& o : *list) {
    EXPECT_EQ(o.key, it->first);  // key order, keys decoded
    EXPECT_EQ(o.size, it->second.size());
    absl::StatusOr<S3Client::Object> head = client->Head(bucket_, o.key);
    ASSERT_TRUE(head.ok()) << head.status();
    EXPECT_EQ(o.etag, head->etag);
    ++it;
  }
  EXPECT_EQ(client->stats()[S3RequestKind::kList].requests, 4u);  // 7 + 7 + 7 + 2

  list = client->List(bucket_, "nothing/");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_TRUE(list->empty());
  list = client->List(bucket_ + "-missing", "");
  EXPECT_TRUE(absl::IsNotFound(list.status())) << list.status();
  EXPECT_TRUE(Contains(list.status().message(), bucket_ + "-missing"));
}

TEST_F(S3Test, RangedReadsAreByteIdenticalAndSplitIntoParallelParts) {
  S3Config config = Config(true);
  config.part_size = 64 << 10;
  config.max_parallel_parts = 4;
  std::shared_ptr<S3Client> client = Client(config);
  const std::string data = RandomBytes((1 << 20) + 123, 2);
  Put("obj", data);
  struct Case {
    uint64_t offset;
    size_t n;
  };
  for (Case c : {Case{0, 1}, Case{0, data.size()}, Case{data.size() - 1, 1}, Case{12345, 54321},
                 Case{100, (64 << 10) * 3 + 7}, Case{65536, 65536}}) {
    SetRules(nlohmann::json::array());
    std::string buf(c.n, '\0');
    absl::Status s = client->GetRange(bucket_, "obj", c.offset, c.n, buf.data());
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(buf, data.substr(c.offset, c.n)) << c.offset << "+" << c.n;
    // One request per part, each for its own bytes.
    std::vector<LogEntry> gets = ProxyLog("GET");
    size_t parts = (c.n + config.part_size - 1) / config.part_size;
    ASSERT_EQ(gets.size(), parts);
    std::set<std::string> ranges;
    for (const LogEntry& e : gets) ranges.insert(e.range);
    for (size_t p = 0; p < parts; ++p) {
      uint64_t first = c.offset + p * config.part_size;
      uint64_t last = std::min<uint64_t>(first + config.part_size, c.offset + c.n) - 1;
      EXPECT_EQ(ranges.count(stoker::StrCat("bytes=", first, "-", last)), 1u);
    }
  }
  EXPECT_EQ(client->stats().total().retries, 0u);
}

TEST_F(S3Test, ReadPastTheEndIsOutOfRange) {
  std::shared_ptr<S3Client> client = Direct();
  Put("small", "0123456789");
  std::string buf(20, '\0');
  absl::Status s = client->GetRange(bucket_, "small", 5, 10, buf.data());
  EXPECT_TRUE(absl::IsOutOfRange(s)) << s;
  s = client->GetRange(bucket_, "small", 10, 1, buf.data());
  EXPECT_TRUE(absl::IsOutOfRange(s)) << s;
  ExpectClean(s, "small");
  EXPECT_EQ(client->stats().total().retries, 0u);

  absl::StatusOr<std::unique_ptr<ByteSource>> src = OpenS3Object(client, bucket_, "small");
  ASSERT_TRUE(src.ok()) << src.status();
  s = (*src)->ReadAt(8, 3, buf.data());
  EXPECT_TRUE(absl::IsOutOfRange(s)) << s;
  EXPECT_TRUE(Contains(s.message(), S3Uri(bucket_, "small"))) << s;
}

TEST_F(S3Test, MissingObjectIsNotFoundNamingBucketAndKey) {
  std::shared_ptr<S3Client> client = Direct();
  char buf[10];
  absl::Status s = client->GetRange(bucket_, "no/such key", 0, 10, buf);
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  ExpectClean(s, "no/such key");
  EXPECT_TRUE(Contains(s.message(), "bytes 0-9")) << s;
  EXPECT_TRUE(Contains(s.message(), "NoSuchKey")) << s;
  EXPECT_TRUE(Contains(s.message(), "request id")) << s;

  absl::StatusOr<S3Client::Object> head = client->Head(bucket_, "no/such key");
  EXPECT_TRUE(absl::IsNotFound(head.status())) << head.status();
  ExpectClean(head.status(), "no/such key");
  absl::StatusOr<std::string> get = client->GetObject(bucket_, "no/such key");
  EXPECT_TRUE(absl::IsNotFound(get.status())) << get.status();
  absl::StatusOr<std::unique_ptr<ByteSource>> src = OpenS3Object(client, bucket_, "no/such key");
  EXPECT_TRUE(absl::IsNotFound(src.status())) << src.status();

  S3Stats st = client->stats();
  EXPECT_EQ(st.total().retries, 0u);  // 404 is never retried
  EXPECT_EQ(st.total().requests, 4u);
  EXPECT_EQ(st.total().failures, 4u);
}

TEST_F(S3Test, BadCredentialsAre403WithoutRetryAndNoSecretInMessages) {
  Put("obj", "data");
  S3Config config = Config(false);
  const std::string wrong_secret = "WRONGSECRETwrongsecretWRONGSECRET0123456";
  config.credentials->secret_access_key = wrong_secret;
  std::shared_ptr<S3Client> client = Client(config);
  absl::StatusOr<S3Client::Object> head = client->Head(bucket_, "obj");
  EXPECT_TRUE(absl::IsPermissionDenied(head.status())) << head.status();
  char buf[4];
  absl::Status s = client->GetRange(bucket_, "obj", 0, 4, buf);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_TRUE(Contains(s.message(), "SignatureDoesNotMatch")) << s;
  ExpectClean(s, "obj");
  EXPECT_FALSE(Contains(s.message(), wrong_secret)) << s;
  s = client->PutObject(bucket_, "new", "x");
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_FALSE(Contains(s.message(), wrong_secret)) << s;
  EXPECT_EQ(client->stats().total().requests, 3u);
  EXPECT_EQ(client->stats().total().retries, 0u);

  config.credentials->access_key_id = "AKIAUNKNOWNUNKNOWN00";
  client = Client(config);
  head = client->Head(bucket_, "obj");
  EXPECT_TRUE(absl::IsPermissionDenied(head.status())) << head.status();
  absl::StatusOr<std::vector<S3Client::Object>> list = client->List(bucket_, "");
  EXPECT_TRUE(absl::IsPermissionDenied(list.status())) << list.status();
  EXPECT_TRUE(Contains(list.status().message(), "InvalidAccessKeyId")) << list.status();
  EXPECT_FALSE(Contains(list.status().message(), wrong_secret));
  EXPECT_EQ(client->stats().total().retries, 0u);
}

TEST_F(S3Test, WriterUploadsMultipartAndPublishesOnlyOnCommit) {
  S3Config config = Config(false);
  config.part_size = 8 << 20;
  config.max_parallel_parts = 2;  // parts 1-2 go up during Append, 3 at Commit
  std::shared_ptr<S3Client> client = Client(config);
  const std::string data = RandomBytes(20'000'000, 3);
  absl::StatusOr<std::unique_ptr<WritableFile>> w = NewS3Writer(client, bucket_, "big.bin");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->name(), S3Uri(bucket_, "big.bin"));
  size_t pos = 0;
  for (size_t step = 1; pos < data.size(); step = step * 7 + 1) {
    size_t n = std::min(step % (3 << 20) + 1, data.size() - pos);
    ASSERT_TRUE((*w)->Append(std::string_view(data).substr(pos, n)).ok());
    pos += n;
  }
  EXPECT_EQ((*w)->size(), data.size());
  EXPECT_EQ(client->stats()[S3RequestKind::kUploadPart].requests, 2u);
  // Nothing under the key before Commit.
  EXPECT_TRUE(absl::IsNotFound(client->Head(bucket_, "big.bin").status()));
  ASSERT_TRUE((*w)->Commit().ok());
  EXPECT_TRUE(absl::IsFailedPrecondition((*w)->Append("x")));

  S3Stats st = client->stats();
  EXPECT_EQ(st[S3RequestKind::kCreateMultipart].requests, 1u);
  EXPECT_EQ(st[S3RequestKind::kUploadPart].requests, 3u);
  EXPECT_EQ(st[S3RequestKind::kUploadPart].bytes_sent, data.size());
  EXPECT_EQ(st[S3RequestKind::kCompleteMultipart].requests, 1u);
  EXPECT_EQ(st[S3RequestKind::kPut].requests, 0u);

  absl::StatusOr<std::unique_ptr<ByteSource>> src = OpenS3Object(client, bucket_, "big.bin");
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ((*src)->size(), data.size());
  EXPECT_EQ((*src)->name(), S3Uri(bucket_, "big.bin"));
  EXPECT_EQ((*src)->preferred_read_size(), config.part_size);
  absl::StatusOr<std::string> back = ReadAll(**src);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == data);
}

TEST_F(S3Test, SmallWriterSendsOnePutAndUncommittedWriterAbortsItsUpload) {
  S3Config config = Config(false);
  config.part_size = 5 << 20;
  config.max_parallel_parts = 1;
  std::shared_ptr<S3Client> client = Client(config);
  {
    absl::StatusOr<std::unique_ptr<WritableFile>> w = NewS3Writer(client, bucket_, "small");
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Append("hello ").ok());
    ASSERT_TRUE((*w)->Append("world").ok());
    EXPECT_TRUE(absl::IsNotFound(client->Head(bucket_, "small").status()));
    ASSERT_TRUE((*w)->Commit().ok());
  }
  EXPECT_EQ(*client->GetObject(bucket_, "small"), "hello world");
  EXPECT_EQ(client->stats()[S3RequestKind::kPut].requests, 1u);
  EXPECT_EQ(client->stats()[S3RequestKind::kCreateMultipart].requests, 0u);
  {
    absl::StatusOr<std::unique_ptr<WritableFile>> w = NewS3Writer(client, bucket_, "dropped");
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Append(RandomBytes(6 << 20, 4)).ok());  // starts the upload
    EXPECT_EQ(client->stats()[S3RequestKind::kUploadPart].requests, 1u);
  }  // destroyed without Commit
  EXPECT_EQ(client->stats()[S3RequestKind::kAbortMultipart].requests, 1u);
  EXPECT_EQ(client->stats()[S3RequestKind::kAbortMultipart].failures, 0u);
  EXPECT_TRUE(absl::IsNotFound(client->Head(bucket_, "dropped").status()));
  // And the store holds no unfinished upload.
  HttpResult r = Http("GET", servers_->moto_url + "/" + bucket_ + "?uploads=", "", {}, SignAs());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_FALSE(Contains(r.body, "<Upload>")) << r.body;
}

TEST_F(S3Test, SourcePinsTheETagAndRefusesANewVersion) {
  // N12 against moto: the object is replaced between open and read.
  std::shared_ptr<S3Client> client = Direct();
  Put("obj", RandomBytes(1000, 5));
  absl::StatusOr<std::unique_ptr<ByteSource>> src = OpenS3Object(client, bucket_, "obj");
  ASSERT_TRUE(src.ok()) << src.status();
  char buf[100];
  ASSERT_TRUE((*src)->ReadAt(0, 100, buf).ok());
  Put("obj", RandomBytes(1000, 6));
  absl::Status s = (*src)->ReadAt(0, 100, buf);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_TRUE(Contains(s.message(), "object modified")) << s;
  ExpectClean(s, "obj");
  EXPECT_EQ(client->stats()[S3RequestKind::kGet].retries, 0u);

  // A manifest's stale ETag is refused at open.
  absl::StatusOr<S3Client::Object> head = client->Head(bucket_, "obj");
  ASSERT_TRUE(head.ok());
  src = OpenS3Object(client, bucket_, "obj", std::nullopt, std::string("\"0123\""));
  EXPECT_TRUE(absl::IsFailedPrecondition(src.status())) << src.status();
  // Size and ETag given: no HEAD at all.
  uint64_t heads = client->stats()[S3RequestKind::kHead].requests;
  src = OpenS3Object(client, bucket_, "obj", head->size, head->etag);
  ASSERT_TRUE(src.ok());
  EXPECT_EQ((*src)->version(), head->etag);
  EXPECT_EQ(client->stats()[S3RequestKind::kHead].requests, heads);
  ASSERT_TRUE((*src)->ReadAt(900, 100, buf).ok());
}

TEST_F(S3Test, ConcurrentReadsOfOneSourceAreCorrect) {
  S3Config config = Config(false);
  config.part_size = 32 << 10;
  std::shared_ptr<S3Client> client = Client(config);
  const std::string data = RandomBytes(512 << 10, 7);
  Put("obj", data);
  absl::StatusOr<std::unique_ptr<ByteSource>> src = OpenS3Object(client, bucket_, "obj");
  ASSERT_TRUE(src.ok());
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 8; ++i) {
        uint64_t off = rng() % data.size();
        size_t n = 1 + rng() % std::min<size_t>(100 << 10, data.size() - off);
        std::string buf(n, '\0');
        absl::Status s = (*src)->ReadAt(off, n, buf.data());
        if (!s.ok() || buf != data.substr(off, n)) ++bad;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

// ===========================================================================
// Faults, through the proxy

TEST_F(S3Test, N1_SlowDownKTimesIsRetriedAndSucceeds) {
  std::shared_ptr<S3Client> client = Proxied();
  const std::string data = RandomBytes(5000, 8);
  Put("obj", data);
  SetRules({{{"method", "GET"},
             {"action", "status"},
             {"status", 503},
             {"code", "SlowDown"},
             {"times", 3}}});
  std::string buf(data.size(), '\0');
  absl::Status s = client->GetRange(bucket_, "obj", 0, data.size(), buf.data());
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(buf, data);
  EXPECT_EQ(client->stats()[S3RequestKind::kGet].retries, 3u);
  EXPECT_EQ(client->stats()[S3RequestKind::kGet].requests, 4u);
  EXPECT_EQ(ProxyLog("GET").size(), 4u);
}

TEST_F(S3Test, N2_SlowDownBeyondTheAttemptLimitIsUnavailableNeverNotFound) {
  S3Config config = Config(true);
  config.retry.max_attempts = 5;
  std::shared_ptr<S3Client> client = Client(config);
  Put("obj", "0123456789");
  SetRules({{{"action", "status"}, {"status", 503}, {"code", "SlowDown"}, {"times", -1}}});
  Clock::time_point start = Clock::now();
  char buf[10];
  absl::Status s = client->GetRange(bucket_, "obj", 2, 5, buf);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_FALSE(absl::IsNotFound(s));
  ExpectClean(s, "obj");
  EXPECT_TRUE(Contains(s.message(), "bytes 2-6")) << s;
  EXPECT_TRUE(Contains(s.message(), "SlowDown")) << s;
  EXPECT_TRUE(Contains(s.message(), "FAULTPROXYREQ")) << s;  // the request id
  EXPECT_TRUE(Contains(s.message(), "5 attempts")) << s;
  EXPECT_LT(SecondsSince(start), 2.0);
  EXPECT_EQ(client->stats()[S3RequestKind::kGet].requests, 5u);
  EXPECT_EQ(client->stats()[S3RequestKind::kGet].failures, 1u);

  absl::StatusOr<S3Client::Object> head = client->Head(bucket_, "obj");
  EXPECT_TRUE(absl::IsUnavailable(head.status())) << head.status();
}

TEST_F(S3Test, N3_ServerErrorsRetriedAndErrorIn200IsNotData) {
  std::shared_ptr<S3Client> client = Proxied();
  Put("a", "1");
  Put("b", "22");
  SetRules({{{"method", "HEAD"},
             {"action", "status"},
             {"status", 500},
             {"code", "InternalError"},
             {"times", 2}},
            {{"method", "GET"},
             {"query", "list-type"},
             {"action", "error_in_200"},
             {"code", "InternalError"},
             {"times", 1}}});
  absl::StatusOr<S3Client::Object> head = client->Head(bucket_, "b");
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->size, 2u);
  EXPECT_EQ(client->stats()[S3RequestKind::kHead].retries, 2u);
  absl::StatusOr<std::vector<S3Client::Object>> list = client->List(bucket_, "");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->size(), 2u);
  EXPECT_EQ(client->stats()[S3RequestKind::kList].retries, 1u);

  // An <Error> in a 200 that is not a transient one: an error, not a listing.
  SetRules({{{"query", "list-type"},
             {"action", "error_in_200"},
             {"code", "AccessDenied"},
             {"times", -1}}});
  list = client->List(bucket_, "");
  EXPECT_FALSE(list.ok());
  EXPECT_TRUE(absl::IsInternal(list.status())) << list.status();
  EXPECT_TRUE(Contains(list.status().message(), "AccessDenied")) << list.status();
  EXPECT_EQ(client->stats()[S3RequestKind::kList].retries, 1u);
}

TEST_F(S3Test, N4_RequestTimeoutAndClockSkewAreRetried) {
  std::shared_ptr<S3Client> client = Proxied();
  Put("obj", "abc");
  // S3 answers a skewed clock with 403 RequestTimeTooSkewed; the code in the
  // body is what makes it retryable (a HEAD has no body, so there it is a
  // plain 403).
  SetRules({{{"method", "GET"},
             {"query", "list-type"},
             {"action", "status"},
             {"status", 403},
             {"code", "RequestTimeTooSkewed"},
             {"times", 1}},
            {{"method", "GET"},
             {"action", "status"},
             {"status", 400},
             {"code", "RequestTimeout"},
             {"times", 1}}});
  absl::StatusOr<std::string> got = client->GetObject(bucket_, "obj");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "abc");
  absl::StatusOr<std::vector<S3Client::Object>> list = client->List(bucket_, "");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->size(), 1u);
  EXPECT_EQ(client->stats()[S3RequestKind::kGet].retries, 1u);
  EXPECT_EQ(client->stats()[S3RequestKind::kList].retries, 1u);

  SetRules(
      {{{"action", "status"}, {"status", 403}, {"code", "RequestTimeTooSkewed"}, {"times", -1}}});
  got = client->GetObject(bucket_, "obj");
  EXPECT_TRUE(absl::IsUnavailable(got.status())) << got.status();
  EXPECT_TRUE(Contains(got.status().message(), "clock")) << got.status();
  EXPECT_EQ(client->stats()[S3RequestKind::kGet].retries, 1u + 3u);
}

TEST_F(S3Test, N5_ClientErrorsAreNotRetried) {
  std::shared_ptr<S3Client> client = Proxied();
  Put("obj", "0123456789");
  struct Case {
    int status;
    const char* code;
    absl::StatusCode want;
  };
  for (Case c : {Case{403, "AccessDenied", absl::StatusCode::kPermissionDenied},
                 Case{404, "NoSuchKey", absl::StatusCode::kNotFound},
                 Case{416, "InvalidRange", absl::StatusCode::kOutOfRange},
                 Case{400, "InvalidArgument", absl::StatusCode::kInvalidArgument},
                 Case{409, "OperationConflict", absl::StatusCode::kFailedPrecondition},
                 Case{418, "Teapot", absl::StatusCode::kUnknown}}) {
    SetRules({{{"action", "status"}, {"status", c.status}, {"code", c.code}, {"times", -1}}});
    uint64_t before = client->stats()[S3RequestKind::kGet].requests;
    char buf[4];
    absl::Status s = client->GetRange(bucket_, "obj", 3, 4, buf);
    EXPECT_EQ(s.code(), c.want) << s;
    EXPECT_EQ(client->stats()[S3RequestKind::kGet].requests, before + 1) << c.status;
    ExpectClean(s, "obj");
    EXPECT_TRUE(Contains(s.message(), "bytes 3-6")) << s;
    EXPECT_TRUE(Contains(s.message(), c.code)) << s;
    EXPECT_TRUE(Contains(s.message(), "request id FAULTPROXYREQ")) << s;
  }
  EXPECT_EQ(client->stats().total().retries, 0u);
}

TEST_F(S3Test, N6_RefusedConnectionsAreRetriedWithinABoundedTime) {
  // A port nobody listens on.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  S3Config config = Config(false);
  config.endpoint_url = stoker::StrCat("http://127.0.0.1:", ntohs(addr.sin_port));
  std::shared_ptr<S3Client> client = Client(config);
  Clock::time_point start = Clock::now();
  char buf[4];
  absl::Status s = client->GetRange(bucket_, "obj", 0, 4, buf);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  ExpectClean(s, "obj");
  EXPECT_TRUE(Contains(s.message(), "4 attempts")) << s;
  EXPECT_LT(SecondsSince(start), 2.0);
  EXPECT_EQ(client->stats()[S3RequestKind::kGet].requests, 4u);
}

TEST_F(S3Test, N7_ResetMidBodyRefetchesOnlyTheRest) {
  S3Config config = Config(true);
  config.part_size = 4 << 20;
  std::shared_ptr<S3Client> client = Client(config);
  const std::string data = RandomBytes(1 << 20, 9);
  Put("obj", data);
  absl::StatusOr<std::unique_ptr<ByteSource>> src = OpenS3Object(client, bucket_, "obj");
  ASSERT_TRUE(src.ok());
  SetRules({{{"method", "GET"}, {"action", "reset"}, {"after", 300000}}});
  std::string buf(data.size() - 10, '\0');
  absl::Status s = (*src)->ReadAt(10, buf.size(), buf.data());
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(buf == data.substr(10)) << "bytes differ";
  std::vector<LogEntry> gets = ProxyLog("GET");
  ASSERT_EQ(gets.size(), 2u);
  EXPECT_EQ(gets[0].range, stoker::StrCat("bytes=10-", data.size() - 1));
  // The retry asks only for what had not arrived, of the same version.
  uint64_t resume = std::stoull(gets[1].range.substr(6));
  EXPECT_GT(resume, 10u);
  EXPECT_LE(resume, 10u + 300000u);
  EXPECT_EQ(gets[1].range, stoker::StrCat("bytes=", resume, "-", data.size() - 1));
  EXPECT_EQ(s3_internal::StripQuotes(gets[1].if_match), s3_internal::StripQuotes(gets[0].if_match));
  EXPECT_FALSE(gets[1].if_match.empty());
  EXPECT_EQ(client->stats()[S3RequestKind::kGet].retries, 1u);
}

TEST_F(S3Test, N8_StallsAreAbortedAndRetried) {
  S3Config config = Config(true);
  config.stall_seconds = 0.5;
  std::shared_ptr<S3Client> client = Client(config);
  const std::string data = RandomBytes(200000, 10);
  Put("obj", data);
  // Headers and 1000 bytes, then silence for far longer than the test.
  SetRules({{{"method", "GET"}, {"action", "stall"}, {"after", 1000}, {"seconds", 30}},
            {{"method", "HEAD"}, {"action", "stall_before_headers"}, {"seconds", 30}}});
  Clock::time_point start = Clock::now();
  std::string buf(data.size(), '\0');
  absl::Status s = client->GetRange(bucket_, "obj", 0, data.size(), buf.data());
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(buf == data);
  absl::StatusOr<S3Client::Object> head = client->Head(bucket_, "obj");
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_LT(SecondsSince(start), 3.0);
  EXPECT_EQ(client->stats()[S3RequestKind::kGet].stalls, 1u);
  EXPECT_EQ(client->stats()[S3RequestKind::kHead].stalls, 1u);
  std::vector<LogEntry> gets = ProxyLog("GET");
  ASSERT_EQ(gets.size(), 2u);
  EXPECT_NE(gets[1].range, gets[0].range);  // resumed after the bytes that came

  // Stalling forever: a bounded failure, not a hang.
  SetRules(
      {{{"method", "GET"}, {"action", "stall"}, {"after", 10}, {"seconds", 30}, {"times", -1}}});
  config.retry.max_attempts = 2;
  client = Client(config);
  start = Clock::now();
  s = client->GetRange(bucket_, "obj", 0, 100, buf.data());
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_TRUE(Contains(s.message(), "stalled")) << s;
  ExpectClean(s, "obj");
  EXPECT_LT(SecondsSince(start), 2.5);
}

// Bytes the process's heap has handed out and not taken back (malloc and
// new, every arena, mmapped blocks included). Unlike VmRSS it does not hide
// a new buffer that lands on pages an earlier test freed but kept resident.
uint64_t HeapInUse() {
  struct mallinfo2 m = ::mallinfo2();
  return m.uordblks + m.hblkhd;
}

// Samples HeapInUse() every few milliseconds until destroyed; peak() is the
// most it saw.
class HeapPeakSampler {
 public:
  HeapPeakSampler() : peak_(HeapInUse()), thread_([this] {
    while (!done_.load()) {
      uint64_t now = HeapInUse();
      uint64_t p = peak_.load();
      while (now > p && !peak_.compare_exchange_weak(p, now)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }) {}
  ~HeapPeakSampler() { Stop(); }
  void Stop() {
    done_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  uint64_t peak() const { return peak_.load(); }

 private:
  std::atomic<bool> done_{false};
  std::atomic<uint64_t> peak_;
  std::thread thread_;
};

TEST_F(S3Test, N9_SlowLinkCompletesWithoutFalseStallsAndMemoryStaysFlat) {
  // 192 KiB at 64 KiB/s: about 3 s for the whole body, a slice of 3.2 KiB
  // every 50 ms. stall_seconds = 0.5 is ten times the gap between slices and
  // a sixth of the transfer, so only a monitor of bytes moving passes; a
  // timeout on the whole request would abort every attempt.
  S3Config config = Config(true);
  config.stall_seconds = 0.5;
  std::shared_ptr<S3Client> client = Client(config);
  const size_t n = 192 << 10;
  const uint64_t offset = 1000;
  const std::string data = RandomBytes(n + 2 * offset, 15);
  Put("obj", data);
  std::string buf(n, '\0');
  // Warm-up at full speed: the session, its connection and its curl handle
  // exist before the measured reads.
  ASSERT_TRUE(client->GetRange(bucket_, "obj", offset, n, buf.data()).ok());
  std::fill(buf.begin(), buf.end(), '\0');
  SetRules({{{"method", "GET"},
             {"action", "bandwidth"},
             {"bytes_per_second", 64 << 10},
             {"times", -1}}});

  // The most the heap grows during a read of `len` bytes through the link.
  auto read = [&](size_t len, double* seconds) -> uint64_t {
    HeapPeakSampler sampler;
    const uint64_t before = HeapInUse();
    Clock::time_point start = Clock::now();
    absl::Status s = client->GetRange(bucket_, "obj", offset, len, buf.data());
    *seconds = SecondsSince(start);
    sampler.Stop();
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_TRUE(buf.compare(0, len, data, offset, len) == 0) << "bytes differ";
    return sampler.peak() > before ? sampler.peak() - before : 0;
  };
  // A short read first: what a transfer costs whatever its size (curl's
  // receive buffer and the request's state).
  const size_t small = 16 << 10;
  double seconds = 0;
  const uint64_t small_growth = read(small, &seconds);
  const uint64_t growth = read(n, &seconds);

  // The cap was in force: the read took far longer than stall_seconds.
  EXPECT_GT(seconds, 2.5);
  EXPECT_LT(seconds, 8.0);
  const S3KindStats get = client->stats()[S3RequestKind::kGet];
  EXPECT_EQ(get.stalls, 0u);
  EXPECT_EQ(get.retries, 0u);
  std::vector<LogEntry> gets = ProxyLog("GET");
  ASSERT_EQ(gets.size(), 2u);
  EXPECT_EQ(gets[1].action, "bandwidth");
  // Memory stays flat: the body goes straight into `buf`, so 12 times the
  // bytes cost no more heap than the short read. A client that kept its own
  // copy of the body, or queued what the socket delivered, would grow by
  // about n - small.
  EXPECT_LT(growth, small_growth + (n - small) / 2)
      << "heap grew by " << growth << " bytes during a read of " << n << ", by " << small_growth
      << " during a read of " << small;
}

// N15 with the store down ("refuse": connections refused or closed) and with
// packets dropped ("drop": accepted, never answered). The proxy starts the
// partition at the first GET, which is its first casualty.
nlohmann::json Partition(const std::string& mode, double seconds) {
  return nlohmann::json::array(
      {{{"method", "GET"}, {"action", "partition"}, {"mode", mode}, {"seconds", seconds}}});
}

TEST_F(S3Test, N15_ShortPartitionIsRiddenOutByteIdentical) {
  // Store down for 0.5 s. 19 retries of up to 0.2 s of backoff each wait
  // 1.9 s on average: the retries outlast the partition.
  S3Config config = Config(true);
  config.part_size = 256 << 10;
  config.max_parallel_parts = 4;
  config.retry.max_attempts = 20;
  config.retry.base_backoff_seconds = 0.1;
  config.retry.max_backoff_seconds = 0.2;
  std::shared_ptr<S3Client> client = Client(config);
  const std::string data = RandomBytes(1 << 20, 16);
  Put("obj", data);
  SetRules(Partition("refuse", 0.5));
  Clock::time_point start = Clock::now();
  std::string buf(data.size(), '\0');
  absl::Status s = client->GetRange(bucket_, "obj", 0, data.size(), buf.data());
  const double seconds = SecondsSince(start);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(buf == data) << "bytes differ";
  EXPECT_GE(seconds, 0.5);  // nothing got through before the store was back
  EXPECT_LT(seconds, 5.0);
  EXPECT_GE(client->stats()[S3RequestKind::kGet].retries, 1u);
  EXPECT_EQ(client->stats()[S3RequestKind::kGet].failures, 0u);
  std::vector<LogEntry> gets = ProxyLog("GET");
  ASSERT_FALSE(gets.empty());
  EXPECT_EQ(gets[0].action, "partition");

  // Packets dropped for 1.2 s, stall_seconds 0.4: the silent attempts are
  // aborted as stalls and retried until one gets through, byte-identical.
  config.stall_seconds = 0.4;
  client = Client(config);
  SetRules(Partition("drop", 1.2));
  std::fill(buf.begin(), buf.end(), '\0');
  start = Clock::now();
  s = client->GetRange(bucket_, "obj", 0, data.size(), buf.data());
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(buf == data) << "bytes differ";
  EXPECT_GE(SecondsSince(start), 1.2);
  EXPECT_LT(SecondsSince(start), 6.0);
  EXPECT_GE(client->stats()[S3RequestKind::kGet].stalls, 1u);
  EXPECT_EQ(client->stats()[S3RequestKind::kGet].failures, 0u);

  // Dropped for less than stall_seconds: a pause, not a fault.
  config.stall_seconds = 1.0;
  client = Client(config);
  SetRules(Partition("drop", 0.3));
  std::fill(buf.begin(), buf.end(), '\0');
  s = client->GetRange(bucket_, "obj", 0, data.size(), buf.data());
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(buf == data) << "bytes differ";
  EXPECT_EQ(client->stats()[S3RequestKind::kGet].stalls, 0u);
  EXPECT_EQ(client->stats()[S3RequestKind::kGet].retries, 0u);
}

TEST_F(S3Test, N15_LongPartitionIsACleanBoundedErrorAndTheNextReadSucceeds) {
  // The fixture's budget: 4 attempts with backoffs of at most 50 ms.
  std::shared_ptr<S3Client> client = Proxied();
  const std::string data = RandomBytes(300000, 17);
  Put("obj", data);
  std::string buf(data.size(), '\0');

  // Store down for 2 s: the read gives up long before the store is back.
  SetRules(Partition("refuse", 2.0));
  Clock::time_point start = Clock::now();
  absl::Status s = client->GetRange(bucket_, "obj", 0, data.size(), buf.data());
  EXPECT_TRUE(absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) << s;
  ExpectClean(s, "obj");
  EXPECT_TRUE(Contains(s.message(), "4 attempts")) << s;
  EXPECT_LT(SecondsSince(start), 1.5);
  EXPECT_EQ(client->stats()[S3RequestKind::kGet].failures, 1u);
  // Once it is back, the same client reads again (no broken connection
  // kept in its pool, no state left from the failure).
  ASSERT_TRUE(WaitForProxy(10)) << "the proxy did not come back";
  EXPECT_GE(SecondsSince(start), 1.9);
  std::fill(buf.begin(), buf.end(), '\0');
  s = client->GetRange(bucket_, "obj", 0, data.size(), buf.data());
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(buf == data) << "bytes differ";

  // Packets dropped for 2.5 s: every attempt stalls; 3 attempts of 0.3 s.
  S3Config config = Config(true);
  config.stall_seconds = 0.3;
  config.retry.max_attempts = 3;
  client = Client(config);
  SetRules(Partition("drop", 2.5));
  start = Clock::now();
  s = client->GetRange(bucket_, "obj", 1000, 5000, buf.data());
  EXPECT_TRUE(absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) << s;
  ExpectClean(s, "obj");
  EXPECT_TRUE(Contains(s.message(), "stalled")) << s;
  EXPECT_TRUE(Contains(s.message(), "3 attempts")) << s;
  EXPECT_GE(SecondsSince(start), 0.9);
  EXPECT_LT(SecondsSince(start), 2.0);
  EXPECT_EQ(client->stats()[S3RequestKind::kGet].stalls, 3u);
  std::this_thread::sleep_until(start + std::chrono::milliseconds(2600));
  std::fill(buf.begin(), buf.end(), '\0');
  s = client->GetRange(bucket_, "obj", 1000, 5000, buf.data());
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(buf.substr(0, 5000) == data.substr(1000, 5000)) << "bytes differ";
}

TEST_F(S3Test, N10_TruncatedBodyIsRetriedNeverAShortSuccess) {
  std::shared_ptr<S3Client> client = Proxied();
  const std::string data = RandomBytes(100000, 11);
  Put("obj", data);
  SetRules({{{"method", "GET"}, {"action", "truncate"}, {"after", 5000}, {"times", 2}}});
  std::string buf(data.size(), '\0');
  absl::Status s = client->GetRange(bucket_, "obj", 0, data.size(), buf.data());
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(buf == data);
  std::vector<LogEntry> gets = ProxyLog("GET");
  ASSERT_EQ(gets.size(), 3u);
  EXPECT_EQ(gets[1].range, stoker::StrCat("bytes=5000-", data.size() - 1));
  EXPECT_EQ(gets[2].range, stoker::StrCat("bytes=10000-", data.size() - 1));

  // Truncated every time: an error, never the bytes that came.
  SetRules({{{"method", "GET"}, {"action", "truncate"}, {"after", 10}, {"times", -1}}});
  std::fill(buf.begin(), buf.end(), '\0');
  s = client->GetRange(bucket_, "obj", 0, 1000, buf.data());
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_TRUE(Contains(s.message(), "truncated")) << s;
  absl::StatusOr<std::string> whole = client->GetObject(bucket_, "obj");
  EXPECT_TRUE(absl::IsUnavailable(whole.status())) << whole.status();
}

TEST_F(S3Test, N11_MalformedRangeAnswersAreErrors) {
  std::shared_ptr<S3Client> client = Proxied();
  const std::string data = RandomBytes(3000, 12);
  Put("obj", data);
  absl::StatusOr<S3Client::Object> head = client->Head(bucket_, "obj");
  ASSERT_TRUE(head.ok());
  // What a server (or proxy) that ignores Range sends: 200, the whole object.
  const nlohmann::json whole_object = {
      {"method", "GET"},
      {"action", "respond"},
      {"status", 200},
      {"headers", {{"ETag", "\"" + head->etag + "\""}, {"Content-Type", "binary/octet-stream"}}},
      {"body_b64", Base64(data)},
      {"times", -1}};
  std::string buf(data.size(), '\0');
  struct Case {
    nlohmann::json rule;
    const char* says;
  };
  for (const Case& c :
       {Case{whole_object, "ignored the Range"},
        Case{{{"method", "GET"}, {"action", "drop_content_range"}, {"times", -1}}, "Content-Range"},
        Case{{{"method", "GET"}, {"action", "shift_content_range"}, {"times", -1}},
             "Content-Range"},
        Case{{{"method", "GET"}, {"action", "drop_etag"}, {"times", -1}}, "no ETag"}}) {
    SetRules(nlohmann::json::array({c.rule}));
    uint64_t before = client->stats()[S3RequestKind::kGet].requests;
    absl::Status s = client->GetRange(bucket_, "obj", 100, 200, buf.data());
    EXPECT_TRUE(absl::IsInternal(s)) << c.rule.dump() << ": " << s;
    EXPECT_TRUE(Contains(s.message(), c.says)) << s;
    ExpectClean(s, "obj");
    EXPECT_EQ(client->stats()[S3RequestKind::kGet].requests, before + 1) << c.rule.dump();
  }
  // A 200 to a range that is the whole object is exactly the asked bytes.
  SetRules(nlohmann::json::array({whole_object}));
  absl::Status s = client->GetRange(bucket_, "obj", 0, data.size(), buf.data());
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(buf, data);
  // No ETag on HEAD: a source cannot pin a version.
  SetRules({{{"method", "HEAD"}, {"action", "drop_etag"}, {"times", -1}}});
  absl::StatusOr<std::unique_ptr<ByteSource>> src = OpenS3Object(client, bucket_, "obj");
  EXPECT_TRUE(absl::IsInternal(src.status())) << src.status();
  EXPECT_TRUE(Contains(src.status().message(), "no ETag")) << src.status();
}

TEST_F(S3Test, N12_EveryPartCarriesIfMatchAnd412IsObjectModified) {
  S3Config config = Config(true);
  config.part_size = 1000;
  config.max_parallel_parts = 1;  // parts in order, so "after the first" is exact
  std::shared_ptr<S3Client> client = Client(config);
  const std::string data = RandomBytes(4000, 13);
  Put("obj", data);
  absl::StatusOr<std::unique_ptr<ByteSource>> src = OpenS3Object(client, bucket_, "obj");
  ASSERT_TRUE(src.ok());
  absl::StatusOr<S3Client::Object> head = client->Head(bucket_, "obj");
  ASSERT_TRUE(head.ok());
  std::string buf(data.size(), '\0');
  ASSERT_TRUE((*src)->ReadAt(0, data.size(), buf.data()).ok());
  std::vector<LogEntry> gets = ProxyLog("GET");
  ASSERT_EQ(gets.size(), 4u);
  for (const LogEntry& e : gets) EXPECT_EQ(e.if_match, "\"" + head->etag + "\"");

  // The store says the object changed after the first part.
  SetRules({{{"method", "GET"},
             {"skip", 1},
             {"action", "status"},
             {"status", 412},
             {"code", "PreconditionFailed"},
             {"times", -1}}});
  absl::Status s = (*src)->ReadAt(0, data.size(), buf.data());
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_TRUE(Contains(s.message(), "object modified")) << s;
  ExpectClean(s, "obj");
  EXPECT_EQ(ProxyLog("GET").size(), 2u);  // no retry, no further parts

  // Without a caller's ETag, a part answered by another version is refused
  // too: the first part pins, the resumed part must match.
  SetRules({{{"method", "GET"}, {"action", "truncate"}, {"after", 10}}});
  Put("obj2", data.substr(0, 500));
  std::string small(500, '\0');
  ASSERT_TRUE(client->GetRange(bucket_, "obj2", 0, 500, small.data()).ok());
  gets = ProxyLog("GET");
  ASSERT_EQ(gets.size(), 2u);
  EXPECT_TRUE(gets[0].if_match.empty());
  EXPECT_FALSE(gets[1].if_match.empty());  // the resume is pinned
}

TEST_F(S3Test, N14_RetryStormEmptiesTheBudgetAndLaterRequestsFailFast) {
  S3Config config = Config(true);
  config.retry.max_attempts = 10;
  config.retry.budget = std::make_shared<S3RetryBudget>(S3RetryBudget::Options{
      .capacity = 20, .retry_cost = 5, .timeout_cost = 10, .success_refund = 1});
  std::shared_ptr<S3Client> client = Client(config);
  Put("obj", "0123456789");
  SetRules({{{"method", "GET"},
             {"action", "status"},
             {"status", 500},
             {"code", "InternalError"},
             {"times", -1}}});
  std::vector<std::thread> threads;
  std::atomic<int> unavailable{0};
  Clock::time_point start = Clock::now();
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&] {
      char buf[4];
      if (absl::IsUnavailable(client->GetRange(bucket_, "obj", 0, 4, buf))) ++unavailable;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(unavailable.load(), 16);
  // 16 first attempts plus the 4 retries 20 tokens pay for, instead of 160.
  EXPECT_EQ(client->stats()[S3RequestKind::kGet].requests, 20u);
  EXPECT_EQ(client->stats().budget_exhausted, 16u);
  EXPECT_EQ(config.retry.budget->available(), 0);
  EXPECT_LT(SecondsSince(start), 2.0);

  // Recovery refills the bucket.
  SetRules(nlohmann::json::array());
  for (int i = 0; i < 5; ++i) {
    char buf[4];
    ASSERT_TRUE(client->GetRange(bucket_, "obj", 0, 4, buf).ok());
  }
  EXPECT_EQ(config.retry.budget->available(), 5);
}

TEST_F(S3Test, N17_EndlessErrorBodyIsCutAndBounded) {
  S3Config config = Config(true);
  config.retry.max_attempts = 3;
  std::shared_ptr<S3Client> client = Client(config);
  Put("obj", "0123456789");
  SetRules({{{"method", "GET"}, {"action", "endless"}, {"status", 500}, {"times", -1}}});
  Clock::time_point start = Clock::now();
  char buf[4];
  absl::Status s = client->GetRange(bucket_, "obj", 0, 4, buf);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  ExpectClean(s, "obj");
  EXPECT_LT(s.message().size(), 2000u);
  EXPECT_LT(SecondsSince(start), 3.0);
  EXPECT_EQ(client->stats()[S3RequestKind::kGet].requests, 3u);
  // Each attempt stopped after the error-body cap (64 KiB) plus one buffer.
  EXPECT_LT(client->stats()[S3RequestKind::kGet].bytes_received, 3u * (1u << 20));
}

TEST_F(S3Test, UploadPartFailureIsRetried) {
  S3Config config = Config(true);
  config.part_size = 5 << 20;
  std::shared_ptr<S3Client> client = Client(config);
  const std::string data = RandomBytes(11 << 20, 14);
  SetRules({{{"method", "PUT"},
             {"query", "partNumber=2"},
             {"action", "status"},
             {"status", 500},
             {"code", "InternalError"}},
            {{"method", "POST"},
             {"query", "uploadId"},
             {"action", "error_in_200"},
             {"code", "InternalError"}}});
  absl::StatusOr<std::unique_ptr<WritableFile>> w = NewS3Writer(client, bucket_, "obj");
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Append(data).ok());
  ASSERT_TRUE((*w)->Commit().ok());
  EXPECT_EQ(client->stats()[S3RequestKind::kUploadPart].retries, 1u);
  EXPECT_EQ(client->stats()[S3RequestKind::kCompleteMultipart].retries, 1u);
  absl::StatusOr<std::string> back = client->GetObject(bucket_, "obj");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == data);

  // A failed commit leaves the writer failed and nothing under the key.
  SetRules({{{"method", "PUT"},
             {"action", "status"},
             {"status", 403},
             {"code", "AccessDenied"},
             {"times", -1}}});
  w = NewS3Writer(client, bucket_, "denied");
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Append("abc").ok());
  absl::Status s = (*w)->Commit();
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_EQ((*w)->Append("more").code(), s.code());
  SetRules(nlohmann::json::array());
  EXPECT_TRUE(absl::IsNotFound(client->Head(bucket_, "denied").status()));
}

TEST_F(S3Test, ConnectionsAreReused) {
  std::shared_ptr<S3Client> client = Proxied();
  Put("obj", "abc");
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(client->Head(bucket_, "obj").ok());
  std::vector<LogEntry> heads = ProxyLog("HEAD");
  ASSERT_EQ(heads.size(), 5u);
  for (const LogEntry& e : heads) EXPECT_EQ(e.conn, heads[0].conn);
}

}  // namespace
}  // namespace stoker::io
