// S3 URIs, configuration from the environment, the retry budget, stats.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <system_error>

#include "io/s3.h"
#include "io/s3_internal.h"
#include "util/strings.h"

namespace stoker::io {
namespace {

using s3_internal::IniFile;

bool IsBucketChar(unsigned char c) {
  // S3's rules are stricter (lower case, 3-63 characters) but older buckets
  // and other stores allow upper case and '_'; the store has the last word.
  return std::isalnum(c) || c == '-' || c == '.' || c == '_';
}

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Looks a key up in one section; empty values count as absent.
std::optional<std::string> Lookup(const IniFile& ini, const std::string& section,
                                  const std::string& key) {
  auto s = ini.find(section);
  if (s == ini.end()) return std::nullopt;
  auto k = s->second.find(key);
  if (k == s->second.end() || k->second.empty()) return std::nullopt;
  return k->second;
}

// A shared AWS file: its path, whether it exists, and its sections.
struct SharedFile {
  std::string path;
  bool exists = false;
  IniFile ini;
  std::string Describe() const { return exists ? path : stoker::StrCat(path, " (no such file)"); }
};

absl::StatusOr<SharedFile> LoadShared(std::string path) {
  SharedFile f;
  f.path = std::move(path);
  absl::StatusOr<std::string> text = ReadFileToString(f.path);
  if (absl::IsNotFound(text.status())) return f;
  if (!text.ok()) return text.status();
  f.exists = true;
  f.ini = s3_internal::ParseIni(*text);
  return f;
}

// Settings that mean "get credentials some other way", which this client does
// not implement; named in the error so the user knows why a working AWS CLI
// profile does not work here.
constexpr const char* kUnsupportedCredentialKeys[] = {
    "credential_process", "sso_session", "sso_start_url", "role_arn", "web_identity_token_file"};

absl::StatusOr<std::optional<S3Credentials>> CredentialsFromSection(const SharedFile& file,
                                                                    const std::string& section,
                                                                    const std::string& profile) {
  std::optional<std::string> id = Lookup(file.ini, section, "aws_access_key_id");
  std::optional<std::string> secret = Lookup(file.ini, section, "aws_secret_access_key");
  if (!id && !secret) return std::optional<S3Credentials>();
  if (!id || !secret) {
    return absl::InvalidArgumentError(
        stoker::StrCat("profile ", profile, " in ", file.path, " has ",
                       id ? "aws_access_key_id but no aws_secret_access_key"
                          : "aws_secret_access_key but no aws_access_key_id"));
  }
  S3Credentials c;
  c.access_key_id = *id;
  c.secret_access_key = *secret;
  c.session_token = Lookup(file.ini, section, "aws_session_token").value_or("");
  c.source = stoker::StrCat("profile ", profile, " in ", file.path);
  return std::optional<S3Credentials>(std::move(c));
}

}  // namespace

bool IsS3Uri(std::string_view uri) { return uri.size() >= 5 && Lower(uri.substr(0, 5)) == "s3://"; }

absl::StatusOr<S3Location> ParseS3Uri(std::string_view uri) {
  if (!IsS3Uri(uri)) {
    return absl::InvalidArgumentError(
        stoker::StrCat("'", uri, "' is not an S3 URI (expected s3://bucket/key)"));
  }
  std::string_view rest = uri.substr(5);
  size_t slash = rest.find('/');
  std::string_view bucket = rest.substr(0, slash);
  if (bucket.empty()) {
    return absl::InvalidArgumentError(stoker::StrCat("S3 URI '", uri, "' has no bucket name"));
  }
  for (char c : bucket) {
    if (!IsBucketChar(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError(
          stoker::StrCat("S3 URI '", uri, "': bucket name '", bucket,
                         "' may only hold letters, digits, '-', '.' and '_'"));
    }
  }
  S3Location loc;
  loc.bucket = std::string(bucket);
  if (slash != std::string_view::npos) loc.key = std::string(rest.substr(slash + 1));
  return loc;
}

std::string S3Uri(std::string_view bucket, std::string_view key) {
  return stoker::StrCat("s3://", bucket, "/", key);
}

// ---------------------------------------------------------------------------

S3RetryBudget::S3RetryBudget(Options options) : options_(options), tokens_(options.capacity) {}

const std::shared_ptr<S3RetryBudget>& S3RetryBudget::Default() {
  static const auto* budget = new std::shared_ptr<S3RetryBudget>(std::make_shared<S3RetryBudget>());
  return *budget;
}

bool S3RetryBudget::TryAcquire(int cost) {
  absl::MutexLock lock(&mu_);
  if (tokens_ < cost) return false;
  tokens_ -= cost;
  return true;
}

void S3RetryBudget::Release(int tokens) {
  absl::MutexLock lock(&mu_);
  tokens_ = std::min(options_.capacity, tokens_ + tokens);
}

int S3RetryBudget::available() const {
  absl::MutexLock lock(&mu_);
  return tokens_;
}

// ---------------------------------------------------------------------------

std::string_view S3RequestKindName(S3RequestKind kind) {
  switch (kind) {
    case S3RequestKind::kHead:
      return "HEAD";
    case S3RequestKind::kList:
      return "LIST";
    case S3RequestKind::kGet:
      return "GET";
    case S3RequestKind::kPut:
      return "PUT";
    case S3RequestKind::kCreateMultipart:
      return "CREATE_MULTIPART";
    case S3RequestKind::kUploadPart:
      return "UPLOAD_PART";
    case S3RequestKind::kCompleteMultipart:
      return "COMPLETE_MULTIPART";
    case S3RequestKind::kAbortMultipart:
      return "ABORT_MULTIPART";
    case S3RequestKind::kDelete:
      return "DELETE";
  }
  return "?";
}

S3KindStats S3Stats::total() const {
  S3KindStats t;
  for (const S3KindStats& k : by_kind) {
    t.requests += k.requests;
    t.retries += k.retries;
    t.failures += k.failures;
    t.stalls += k.stalls;
    t.bytes_received += k.bytes_received;
    t.bytes_sent += k.bytes_sent;
  }
  return t;
}

// ---------------------------------------------------------------------------

absl::Status S3Config::Validate() const {
  if (!endpoint_url.empty()) {
    std::string_view u = endpoint_url;
    std::string_view rest;
    if (Lower(u.substr(0, 7)) == "http://") {
      rest = u.substr(7);
    } else if (Lower(u.substr(0, 8)) == "https://") {
      rest = u.substr(8);
    } else {
      return absl::InvalidArgumentError(
          stoker::StrCat("S3 endpoint '", endpoint_url, "' must start with http:// or https://"));
    }
    size_t slash = rest.find('/');
    std::string_view authority = rest.substr(0, slash);
    if (slash != std::string_view::npos && rest.substr(slash) != "/") {
      return absl::InvalidArgumentError(stoker::StrCat(
          "S3 endpoint '", endpoint_url, "' must not have a path, query or fragment"));
    }
    if (authority.empty() || authority.find('@') != std::string_view::npos) {
      return absl::InvalidArgumentError(
          stoker::StrCat("S3 endpoint '", endpoint_url, "' has no usable host"));
    }
    std::string_view port;
    if (authority.front() == '[') {
      size_t close = authority.find(']');
      if (close == std::string_view::npos || close == 1) {
        return absl::InvalidArgumentError(
            stoker::StrCat("S3 endpoint '", endpoint_url, "' has a malformed IPv6 host"));
      }
      std::string_view after = authority.substr(close + 1);
      if (!after.empty()) {
        if (after.front() != ':') {
          return absl::InvalidArgumentError(
              stoker::StrCat("S3 endpoint '", endpoint_url, "' has a malformed host"));
        }
        port = after.substr(1);
      }
    } else {
      size_t colon = authority.rfind(':');
      std::string_view host = authority.substr(0, colon);
      if (host.empty()) {
        return absl::InvalidArgumentError(
            stoker::StrCat("S3 endpoint '", endpoint_url, "' has no host"));
      }
      for (char c : host) {
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_') {
          return absl::InvalidArgumentError(stoker::StrCat(
              "S3 endpoint '", endpoint_url, "': host '", host, "' is not a valid host name"));
        }
      }
      if (colon != std::string_view::npos) port = authority.substr(colon + 1);
    }
    if (!port.empty() || authority.back() == ':') {
      int p = 0;
      for (char c : port) {
        if (!std::isdigit(static_cast<unsigned char>(c)) || (p = p * 10 + (c - '0')) > 65535) {
          p = -1;
          break;
        }
      }
      if (port.empty() || p <= 0) {
        return absl::InvalidArgumentError(
            stoker::StrCat("S3 endpoint '", endpoint_url, "' has an invalid port"));
      }
    }
  }
  if (region.empty() || !std::all_of(region.begin(), region.end(), [](unsigned char c) {
        return std::islower(c) || std::isdigit(c) || c == '-';
      })) {
    return absl::InvalidArgumentError(
        stoker::StrCat("S3 region '", region, "' is not a region name (such as us-east-1)"));
  }
  if (part_size < 1) return absl::InvalidArgumentError("S3 part_size must be at least 1 byte");
  if (max_parallel_parts < 1 || max_parallel_parts > 256) {
    return absl::InvalidArgumentError("S3 max_parallel_parts must be in 1..256");
  }
  if (list_page_size < 1 || list_page_size > 1000) {
    return absl::InvalidArgumentError("S3 list_page_size must be in 1..1000");
  }
  if (retry.max_attempts < 1) {
    return absl::InvalidArgumentError("S3 retry.max_attempts must be at least 1");
  }
  if (!(retry.base_backoff_seconds >= 0) || !(retry.max_backoff_seconds >= 0)) {
    return absl::InvalidArgumentError("S3 retry backoffs must not be negative");
  }
  if (!(stall_seconds > 0) || !(connect_timeout_seconds > 0)) {
    return absl::InvalidArgumentError(
        "S3 stall_seconds and connect_timeout_seconds must be positive");
  }
  if (!anonymous) {
    if (!credentials) {
      return absl::UnauthenticatedError(
          "no S3 credentials in the configuration, and anonymous access was not asked for");
    }
    if (credentials->access_key_id.empty() || credentials->secret_access_key.empty()) {
      return absl::UnauthenticatedError(
          stoker::StrCat("S3 credentials from ",
                         credentials->source.empty() ? "the configuration" : credentials->source,
                         " have an empty access key id or secret key"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<S3Config> S3Config::FromEnvironment(const S3ConfigOverrides& overrides) {
  return FromEnvironment(overrides, [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  });
}

absl::StatusOr<S3Config> S3Config::FromEnvironment(const S3ConfigOverrides& overrides,
                                                   const GetEnv& getenv) {
  // An empty variable counts as unset, as in the AWS CLI.
  auto env = [&](const char* name) -> std::optional<std::string> {
    std::optional<std::string> v = getenv(name);
    if (v && v->empty()) return std::nullopt;
    return v;
  };
  std::optional<std::string> named_profile = overrides.profile;
  if (!named_profile) named_profile = env("AWS_PROFILE");
  if (!named_profile) named_profile = env("AWS_DEFAULT_PROFILE");
  const std::string profile = named_profile.value_or("default");
  const std::string home = env("HOME").value_or("");

  std::string cred_path = env("AWS_SHARED_CREDENTIALS_FILE").value_or(home + "/.aws/credentials");
  std::string config_path = env("AWS_CONFIG_FILE").value_or(home + "/.aws/config");
  absl::StatusOr<SharedFile> cred_file = LoadShared(cred_path);
  if (!cred_file.ok()) return cred_file.status();
  absl::StatusOr<SharedFile> config_file = LoadShared(config_path);
  if (!config_file.ok()) return config_file.status();
  const std::string cred_section = profile;
  std::string config_section = profile == "default" ? "default" : "profile " + profile;
  if (profile == "default" && !config_file->ini.count("default") &&
      config_file->ini.count("profile default")) {
    config_section = "profile default";
  }
  const bool profile_exists =
      cred_file->ini.count(cred_section) > 0 || config_file->ini.count(config_section) > 0;
  if (named_profile && !profile_exists) {
    return absl::NotFoundError(stoker::StrCat("AWS profile '", profile, "' is in neither ",
                                              cred_file->Describe(), " nor ",
                                              config_file->Describe()));
  }

  S3Config config;
  if (overrides.region) {
    config.region = *overrides.region;
  } else if (auto r = env("AWS_REGION")) {
    config.region = *r;
  } else if (auto r2 = env("AWS_DEFAULT_REGION")) {
    config.region = *r2;
  } else if (auto r3 = Lookup(config_file->ini, config_section, "region")) {
    config.region = *r3;
  }
  if (overrides.endpoint_url) {
    config.endpoint_url = *overrides.endpoint_url;
  } else if (auto e = env("AWS_ENDPOINT_URL_S3")) {
    config.endpoint_url = *e;
  } else if (auto e2 = env("AWS_ENDPOINT_URL")) {
    config.endpoint_url = *e2;
  } else if (auto e3 = Lookup(config_file->ini, config_section, "endpoint_url")) {
    config.endpoint_url = *e3;
  }
  if (auto ca = env("AWS_CA_BUNDLE")) {
    config.ca_bundle = *ca;
  } else if (auto ca2 = Lookup(config_file->ini, config_section, "ca_bundle")) {
    config.ca_bundle = *ca2;
  }
  config.anonymous = overrides.anonymous;
  {
    // The AWS SDKs' names for the attempt limit (the first attempt included).
    std::string source = "AWS_MAX_ATTEMPTS";
    std::optional<std::string> v = env("AWS_MAX_ATTEMPTS");
    if (!v) {
      v = Lookup(config_file->ini, config_section, "max_attempts");
      source = stoker::StrCat("max_attempts in ", config_file->path);
    }
    if (v) {
      int n = 0;
      const char* end = v->data() + v->size();
      auto [ptr, ec] = std::from_chars(v->data(), end, n);
      if (ec != std::errc() || ptr != end || n < 1) {
        return absl::InvalidArgumentError(
            stoker::StrCat(source, " '", *v, "' is not a positive integer"));
      }
      config.retry.max_attempts = n;
    }
  }

  if (!config.anonymous) {
    std::optional<std::string> id = env("AWS_ACCESS_KEY_ID");
    std::optional<std::string> secret = env("AWS_SECRET_ACCESS_KEY");
    if (id || secret) {
      if (!id || !secret) {
        return absl::InvalidArgumentError(
            id ? "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not"
               : "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not");
      }
      S3Credentials c;
      c.access_key_id = *id;
      c.secret_access_key = *secret;
      c.session_token = env("AWS_SESSION_TOKEN").value_or(env("AWS_SECURITY_TOKEN").value_or(""));
      c.source = "environment (AWS_ACCESS_KEY_ID)";
      config.credentials = std::move(c);
    } else {
      for (const auto& [file, section] :
           {std::pair{&*cred_file, cred_section}, std::pair{&*config_file, config_section}}) {
        absl::StatusOr<std::optional<S3Credentials>> c =
            CredentialsFromSection(*file, section, profile);
        if (!c.ok()) return c.status();
        if (*c) {
          config.credentials = std::move(**c);
          break;
        }
      }
    }
    if (!config.credentials) {
      for (const auto& [file, section] :
           {std::pair{&*cred_file, cred_section}, std::pair{&*config_file, config_section}}) {
        for (const char* key : kUnsupportedCredentialKeys) {
          if (Lookup(file->ini, section, key)) {
            return absl::UnimplementedError(stoker::StrCat(
                "AWS profile '", profile, "' in ", file->path, " gets credentials through ", key,
                ", which stoker does not support; export AWS_ACCESS_KEY_ID, "
                "AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) instead, e.g. with "
                "`aws configure export-credentials --format env`"));
          }
        }
      }
      return absl::UnauthenticatedError(stoker::StrCat(
          "no S3 credentials found: looked for AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
          "in the environment, then for profile '",
          profile, "' in ", cred_file->Describe(), " and ", config_file->Describe(),
          ". Set them, choose a profile with AWS_PROFILE, or ask for anonymous access for a "
          "public bucket"));
    }
  }
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  return config;
}

}  // namespace stoker::io
