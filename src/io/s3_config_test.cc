// Tests of the S3 layer that need no server: URIs, SigV4 encoding, XML and
// INI parsing, the retry budget, configuration from the environment, and
// endpoint checks at start. The server tests are in s3_test.cc.
#include "io/s3.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "io/s3_internal.h"
#include "io/s3_test_util.h"

namespace stoker::io {
namespace {

using namespace ::stoker::io::s3_test;  // NOLINT: test helpers

// ===========================================================================
// Pure functions

TEST(S3Uri, ParsesBucketAndKey) {
  absl::StatusOr<S3Location> loc = ParseS3Uri("s3://my-bucket/a/b c/d.bin");
  ASSERT_TRUE(loc.ok()) << loc.status();
  EXPECT_EQ(loc->bucket, "my-bucket");
  EXPECT_EQ(loc->key, "a/b c/d.bin");
  loc = ParseS3Uri("S3://bkt");
  ASSERT_TRUE(loc.ok()) << loc.status();
  EXPECT_EQ(loc->bucket, "bkt");
  EXPECT_EQ(loc->key, "");
  loc = ParseS3Uri("s3://bkt/prefix/");
  ASSERT_TRUE(loc.ok());
  EXPECT_EQ(loc->key, "prefix/");
  EXPECT_TRUE(IsS3Uri("s3://x/y"));
  EXPECT_FALSE(IsS3Uri("/data/s3://x"));
  EXPECT_FALSE(IsS3Uri("s3:/x"));
  EXPECT_EQ(S3Uri("b", "k/1"), "s3://b/k/1");
}

TEST(S3Uri, RejectsMalformedUrisNamingThem) {
  for (const char* bad : {"http://bucket/key", "s3://", "s3:///key", "s3://bad bucket/key",
                          "s3://bu?cket/key", "bucket/key"}) {
    absl::StatusOr<S3Location> loc = ParseS3Uri(bad);
    ASSERT_FALSE(loc.ok()) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(loc.status())) << loc.status();
    EXPECT_TRUE(Contains(loc.status().message(), bad)) << loc.status();
  }
}

TEST(S3Internal, UriEncodeIsSigV4Canonical) {
  using s3_internal::UriEncode;
  EXPECT_EQ(UriEncode("a b+c/d~e_f.g-h", true), "a%20b%2Bc/d~e_f.g-h");
  EXPECT_EQ(UriEncode("a/b", false), "a%2Fb");
  EXPECT_EQ(UriEncode("\xc3\xa9", true), "%C3%A9");
  EXPECT_EQ(s3_internal::UriDecode("a%20b+c%2B%zz", true), "a b c+%zz");
  EXPECT_EQ(s3_internal::UriDecode("a+b", false), "a+b");
  // Sorted by name; every name has '='; values encoded.
  EXPECT_EQ(s3_internal::CanonicalQuery(
                {{"prefix", "a b/c"}, {"list-type", "2"}, {"continuation-token", "x+y="}}),
            "continuation-token=x%2By%3D&list-type=2&prefix=a%20b%2Fc");
  EXPECT_EQ(s3_internal::CanonicalQuery({{"uploads", ""}}), "uploads=");
  EXPECT_EQ(s3_internal::CanonicalQuery({{"uploadId", "u"}, {"partNumber", "10"}}),
            "partNumber=10&uploadId=u");
}

TEST(S3Internal, XmlParserHandlesWhatS3Sends) {
  absl::StatusOr<s3_internal::XmlElement> root = s3_internal::ParseXml(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!-- c -->"
      "<a:Root xmlns:a=\"urn:x\" attr='v>/'><A>x &amp; y &lt;&gt;&quot;&apos;&#65;&#x42;</A>"
      "<B/><C><![CDATA[<raw>&amp;]]></C><D> keep  spaces </D><!-- c --><?pi x?></a:Root>");
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(root->name, "Root");
  EXPECT_EQ(root->ChildText("A"), "x & y <>\"'AB");
  ASSERT_NE(root->Child("B"), nullptr);
  EXPECT_EQ(root->ChildText("B"), "");
  EXPECT_EQ(root->ChildText("C"), "<raw>&amp;");
  EXPECT_EQ(root->ChildText("D"), " keep  spaces ");
  EXPECT_EQ(root->Child("Missing"), nullptr);
}

TEST(S3Internal, XmlParserRejectsMalformedInput) {
  for (const char* bad : {"", "text", "<a>", "<a></b>", "<a><b></a>", "<a x=\"1></a>",
                          "<!DOCTYPE a [<!ENTITY e \"x\">]><a>&e;</a>", "<a><![CDATA[x</a>"}) {
    absl::StatusOr<s3_internal::XmlElement> root = s3_internal::ParseXml(bad);
    EXPECT_FALSE(root.ok()) << bad;
    if (!root.ok()) EXPECT_TRUE(absl::IsInvalidArgument(root.status()));
  }
  // Deep nesting is refused, not a stack overflow.
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "<a>";
  EXPECT_FALSE(s3_internal::ParseXml(deep).ok());
}

TEST(S3Internal, ParsesListObjectsV2Pages) {
  absl::StatusOr<s3_internal::ListPage> page = s3_internal::ParseListObjectsV2(
      "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
      "<Name>b</Name><IsTruncated>true</IsTruncated><EncodingType>url</EncodingType>"
      "<Contents><Key>a+b%2Bc/%C3%A9</Key><Size>12</Size>"
      "<ETag>&quot;abc&quot;</ETag></Contents>"
      "<Contents><Key>z</Key><Size>0</Size><ETag>\"def-2\"</ETag></Contents>"
      "<NextContinuationToken>tok/en==</NextContinuationToken></ListBucketResult>");
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->entries.size(), 2u);
  EXPECT_EQ(page->entries[0].key, "a b+c/\xc3\xa9");
  EXPECT_EQ(page->entries[0].size, 12u);
  EXPECT_EQ(page->entries[0].etag, "abc");
  EXPECT_EQ(page->entries[1].etag, "def-2");
  EXPECT_TRUE(page->truncated);
  EXPECT_EQ(page->next_continuation_token, "tok/en==");

  EXPECT_FALSE(s3_internal::ParseListObjectsV2("<Error><Code>X</Code></Error>").ok());
  EXPECT_FALSE(s3_internal::ParseListObjectsV2(
                   "<ListBucketResult><Contents><Key>k</Key><Size>-1</Size></Contents>"
                   "</ListBucketResult>")
                   .ok());
  EXPECT_FALSE(s3_internal::ParseListObjectsV2(
                   "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>")
                   .ok());
}

TEST(S3Internal, ParsesErrorsAndContentRanges) {
  std::optional<s3_internal::S3ErrorBody> e = s3_internal::ParseS3Error(
      "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><Message>gone</Message>"
      "<RequestId>R1</RequestId></Error>");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code, "NoSuchKey");
  EXPECT_EQ(e->message, "gone");
  EXPECT_EQ(e->request_id, "R1");
  EXPECT_FALSE(s3_internal::ParseS3Error("<html>Bad Gateway</html>").has_value());
  EXPECT_FALSE(s3_internal::ParseS3Error("").has_value());

  std::optional<s3_internal::ContentRange> r = s3_internal::ParseContentRange("bytes 5-9/100");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->first, 5u);
  EXPECT_EQ(r->last, 9u);
  EXPECT_EQ(r->total, 100u);
  r = s3_internal::ParseContentRange("bytes 0-0/*");
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->total.has_value());
  for (const char* bad : {"", "bytes */100", "bytes 9-5/100", "bytes 5-9/9", "items 0-1/2",
                          "bytes 1-x/5", "bytes5-9/100"}) {
    EXPECT_FALSE(s3_internal::ParseContentRange(bad).has_value()) << bad;
  }
  EXPECT_EQ(s3_internal::StripQuotes("\"abc\""), "abc");
  EXPECT_EQ(s3_internal::StripQuotes("W/\"abc\""), "abc");
  EXPECT_EQ(s3_internal::StripQuotes("abc"), "abc");
}

TEST(S3Internal, ParsesAwsIniFiles) {
  s3_internal::IniFile ini = s3_internal::ParseIni(
      "# comment\n[default]\naws_access_key_id = AK\nAWS_Secret_Access_Key=SK==\n"
      "s3 =\n  addressing_style = path\n  max_concurrent_requests = 4\n"
      "region = eu-west-1\n; other\n[profile   dev]\nregion=us-west-2\n[broken\nx=y\n");
  EXPECT_EQ(ini["default"]["aws_access_key_id"], "AK");
  EXPECT_EQ(ini["default"]["aws_secret_access_key"], "SK==");
  EXPECT_EQ(ini["default"]["region"], "eu-west-1");
  EXPECT_EQ(ini["default"].count("addressing_style"), 0u);
  EXPECT_EQ(ini["profile dev"]["region"], "us-west-2");
  EXPECT_EQ(ini["profile dev"].count("x"), 0u);
}

TEST(S3RetryBudget, TakesAndRefundsTokensUpToCapacity) {
  S3RetryBudget budget(S3RetryBudget::Options{.capacity = 12, .retry_cost = 5});
  EXPECT_TRUE(budget.TryAcquire(5));
  EXPECT_TRUE(budget.TryAcquire(5));
  EXPECT_FALSE(budget.TryAcquire(5));
  EXPECT_EQ(budget.available(), 2);
  budget.Release(100);
  EXPECT_EQ(budget.available(), 12);
  EXPECT_EQ(S3RetryBudget::Default().get(), S3RetryBudget::Default().get());
}

// ---------------------------------------------------------------------------
// Configuration from the environment

class S3ConfigEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           stoker::StrCat("stoker_s3cfg_", ::getpid(), "_",
                          ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / ".aws");
    env_["HOME"] = dir_.string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / ".aws" / name) << text;
  }
  absl::StatusOr<S3Config> Load(const S3ConfigOverrides& o = {}) {
    return S3Config::FromEnvironment(o, [this](const std::string& n) -> std::optional<std::string> {
      auto it = env_.find(n);
      if (it == env_.end()) return std::nullopt;
      return it->second;
    });
  }
  fs::path dir_;
  std::map<std::string, std::string> env_;
};

TEST_F(S3ConfigEnvTest, EnvironmentCredentialsRegionAndEndpoint) {
  env_["AWS_ACCESS_KEY_ID"] = "AKENV";
  env_["AWS_SECRET_ACCESS_KEY"] = "SKENV";
  env_["AWS_SESSION_TOKEN"] = "TOKEN";
  env_["AWS_DEFAULT_REGION"] = "eu-central-1";
  env_["AWS_ENDPOINT_URL"] = "http://generic:9000";
  env_["AWS_ENDPOINT_URL_S3"] = "http://127.0.0.1:9000";
  Write("credentials", "[default]\naws_access_key_id=AKFILE\naws_secret_access_key=SKFILE\n");
  absl::StatusOr<S3Config> c = Load();
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->credentials.has_value());
  EXPECT_EQ(c->credentials->access_key_id, "AKENV");  // environment beats files
  EXPECT_EQ(c->credentials->secret_access_key, "SKENV");
  EXPECT_EQ(c->credentials->session_token, "TOKEN");
  EXPECT_EQ(c->region, "eu-central-1");
  EXPECT_EQ(c->endpoint_url, "http://127.0.0.1:9000");  // the S3-specific one wins
  EXPECT_FALSE(c->anonymous);
  EXPECT_EQ(c->part_size, size_t{8} << 20);
  EXPECT_EQ(c->max_parallel_parts, 8);
  EXPECT_EQ(c->retry.max_attempts, 10);
  EXPECT_EQ(c->stall_seconds, 30);

  env_["AWS_REGION"] = "ap-south-1";
  S3ConfigOverrides o;
  o.endpoint_url = "https://minio.local";
  c = Load(o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->region, "ap-south-1");
  EXPECT_EQ(c->endpoint_url, "https://minio.local");

  env_.erase("AWS_SECRET_ACCESS_KEY");
  c = Load();
  EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << c.status();
  EXPECT_TRUE(Contains(c.status().message(), "AWS_SECRET_ACCESS_KEY")) << c.status();
}

TEST_F(S3ConfigEnvTest, ProfilesFromTheSharedFiles) {
  Write("credentials",
        "[default]\naws_access_key_id=AKDEF\naws_secret_access_key=SKDEF\n"
        "[dev]\naws_access_key_id = AKDEV\naws_secret_access_key = SKDEV\n"
        "aws_session_token = TOKDEV\n");
  Write("config",
        "[default]\nregion = us-west-1\n[profile dev]\nregion = eu-west-3\n"
        "endpoint_url = http://localhost:4566\n"
        "[profile cfgonly]\naws_access_key_id=AKCFG\naws_secret_access_key=SKCFG\n");
  absl::StatusOr<S3Config> c = Load();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->credentials->access_key_id, "AKDEF");
  EXPECT_EQ(c->region, "us-west-1");
  EXPECT_EQ(c->endpoint_url, "");
  EXPECT_TRUE(Contains(c->credentials->source, "credentials")) << c->credentials->source;

  env_["AWS_PROFILE"] = "dev";
  c = Load();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->credentials->access_key_id, "AKDEV");
  EXPECT_EQ(c->credentials->session_token, "TOKDEV");
  EXPECT_EQ(c->region, "eu-west-3");
  EXPECT_EQ(c->endpoint_url, "http://localhost:4566");

  S3ConfigOverrides o;
  o.profile = "cfgonly";  // keys in the config file, under [profile cfgonly]
  c = Load(o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->credentials->access_key_id, "AKCFG");
  EXPECT_EQ(c->region, "us-east-1");  // the default

  // Other file locations.
  fs::rename(dir_ / ".aws" / "credentials", dir_ / "creds");
  env_["AWS_SHARED_CREDENTIALS_FILE"] = (dir_ / "creds").string();
  c = Load();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->credentials->access_key_id, "AKDEV");
}

TEST_F(S3ConfigEnvTest, MissingCredentialsNameWhereTheyWereSought) {
  absl::StatusOr<S3Config> c = Load();
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::IsUnauthenticated(c.status())) << c.status();
  EXPECT_TRUE(Contains(c.status().message(), "AWS_ACCESS_KEY_ID")) << c.status();
  EXPECT_TRUE(Contains(c.status().message(), (dir_ / ".aws" / "credentials").string()));
  EXPECT_TRUE(Contains(c.status().message(), (dir_ / ".aws" / "config").string()));
  EXPECT_TRUE(Contains(c.status().message(), "anonymous")) << c.status();

  S3ConfigOverrides anon;
  anon.anonymous = true;
  c = Load(anon);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->anonymous);
  EXPECT_FALSE(c->credentials.has_value());

  env_["AWS_PROFILE"] = "nope";
  c = Load();
  EXPECT_TRUE(absl::IsNotFound(c.status())) << c.status();
  EXPECT_TRUE(Contains(c.status().message(), "nope"));

  Write("config", "[profile sso]\nsso_start_url = https://x\nregion = us-east-2\n");
  env_["AWS_PROFILE"] = "sso";
  c = Load();
  EXPECT_TRUE(absl::IsUnimplemented(c.status())) << c.status();
  EXPECT_TRUE(Contains(c.status().message(), "sso_start_url")) << c.status();
}

TEST_F(S3ConfigEnvTest, MaxAttemptsFromTheEnvironmentOrTheProfile) {
  env_["AWS_ACCESS_KEY_ID"] = "AK";
  env_["AWS_SECRET_ACCESS_KEY"] = "SK";
  Write("config", "[default]\nmax_attempts = 4\n[profile dev]\nmax_attempts = 6\n");
  absl::StatusOr<S3Config> c = Load();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->retry.max_attempts, 4);
  env_["AWS_PROFILE"] = "dev";
  c = Load();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->retry.max_attempts, 6);
  env_["AWS_MAX_ATTEMPTS"] = "2";  // the environment beats the profile
  c = Load();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->retry.max_attempts, 2);
  env_["AWS_MAX_ATTEMPTS"] = "";  // empty counts as unset
  c = Load();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->retry.max_attempts, 6);
  for (const char* bad : {"0", "-1", "3x", "ten", " 3", "99999999999"}) {
    env_["AWS_MAX_ATTEMPTS"] = bad;
    c = Load();
    EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << bad << ": " << c.status();
    EXPECT_TRUE(Contains(c.status().message(), "AWS_MAX_ATTEMPTS")) << c.status();
  }
  env_.erase("AWS_MAX_ATTEMPTS");
  Write("config", "[profile dev]\nmax_attempts = many\n");
  c = Load();
  EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << c.status();
  EXPECT_TRUE(Contains(c.status().message(), "max_attempts in ")) << c.status();
}

TEST_F(S3ConfigEnvTest, InvalidEndpointOrRegionIsAConfigurationError) {
  env_["AWS_ACCESS_KEY_ID"] = "AK";
  env_["AWS_SECRET_ACCESS_KEY"] = "SK";
  for (const char* bad :
       {"ftp://host", "host:9000", "http://", "http://host:0", "http://host:99999",
        "http://host/path", "http://us er@host", "http://[::1", "http://ho st"}) {
    env_["AWS_ENDPOINT_URL"] = bad;
    absl::StatusOr<S3Config> c = Load();
    EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << bad << ": " << c.status();
  }
  for (const char* good :
       {"http://127.0.0.1:9000", "https://s3.example.com/", "http://[::1]:9000", "http://minio"}) {
    env_["AWS_ENDPOINT_URL"] = good;
    absl::StatusOr<S3Config> c = Load();
    EXPECT_TRUE(c.ok()) << good << ": " << c.status();
  }
  env_.erase("AWS_ENDPOINT_URL");
  env_["AWS_REGION"] = "us-east-1:evil";
  EXPECT_TRUE(absl::IsInvalidArgument(Load().status()));
}

TEST(S3Client, UnresolvableEndpointFailsAtCreateNotAfterRetries) {
  // N16: a configuration error at start, quickly, not max_attempts retries.
  S3Config config;
  config.endpoint_url = "http://no-such-host.invalid:9000";
  config.credentials = S3Credentials{"AK", "SK", "", "test"};
  Clock::time_point start = Clock::now();
  absl::StatusOr<std::shared_ptr<S3Client>> client = S3Client::Create(config);
  ASSERT_FALSE(client.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(client.status())) << client.status();
  EXPECT_TRUE(Contains(client.status().message(), "no-such-host.invalid")) << client.status();
  EXPECT_LT(SecondsSince(start), 5.0);

  config.endpoint_url = "http://127.0.0.1:9000";
  config.credentials.reset();
  client = S3Client::Create(config);
  EXPECT_TRUE(absl::IsUnauthenticated(client.status())) << client.status();
}

}  // namespace
}  // namespace stoker::io
