// The pure helpers of s3_internal.h.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>

#include "io/s3_internal.h"
#include "util/strings.h"

namespace stoker::io::s3_internal {
namespace {

bool IsUnreserved(unsigned char c) {
  return std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Appends `raw` with entities decoded. Unknown or malformed entities are
// kept literally: S3 only emits the standard ones, and dropping bytes of a
// key would be worse than keeping an odd '&'.
void AppendDecoded(std::string_view raw, std::string* out) {
  size_t i = 0;
  while (i < raw.size()) {
    size_t amp = raw.find('&', i);
    if (amp == std::string_view::npos) {
      out->append(raw.substr(i));
      return;
    }
    out->append(raw.substr(i, amp - i));
    size_t semi = raw.find(';', amp);
    if (semi == std::string_view::npos || semi - amp > 12) {
      out->push_back('&');
      i = amp + 1;
      continue;
    }
    std::string_view ent = raw.substr(amp + 1, semi - amp - 1);
    bool ok = true;
    if (ent == "amp") {
      out->push_back('&');
    } else if (ent == "lt") {
      out->push_back('<');
    } else if (ent == "gt") {
      out->push_back('>');
    } else if (ent == "quot") {
      out->push_back('"');
    } else if (ent == "apos") {
      out->push_back('\'');
    } else if (ent.size() > 1 && ent[0] == '#') {
      uint32_t cp = 0;
      bool hex = ent[1] == 'x' || ent[1] == 'X';
      std::string_view digits = ent.substr(hex ? 2 : 1);
      auto [p, ec] =
          std::from_chars(digits.data(), digits.data() + digits.size(), cp, hex ? 16 : 10);
      ok = !digits.empty() && ec == std::errc() && p == digits.data() + digits.size() &&
           cp <= 0x10FFFF;
      if (ok) AppendUtf8(cp, out);
    } else {
      ok = false;
    }
    if (!ok) {
      out->push_back('&');
      i = amp + 1;
    } else {
      i = semi + 1;
    }
  }
}

std::string_view LocalName(std::string_view name) {
  size_t colon = name.rfind(':');
  return colon == std::string_view::npos ? name : name.substr(colon + 1);
}

class XmlParser {
 public:
  explicit XmlParser(std::string_view doc) : s_(doc) {}

  absl::StatusOr<XmlElement> Parse() {
    if (absl::Status st = SkipMisc(/*allow_doctype=*/true); !st.ok()) return st;
    if (pos_ >= s_.size() || s_[pos_] != '<') return Error("no root element");
    XmlElement root;
    if (absl::Status st = ParseElement(&root, 1); !st.ok()) return st;
    return root;
  }

 private:
  static constexpr int kMaxDepth = 64;

  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(stoker::StrCat("malformed XML at byte ", pos_, ": ", what));
  }
  bool StartsWith(std::string_view p) const { return s_.substr(pos_, p.size()) == p; }
  void SkipSpace() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  // Moves past the next `end`; false if there is none.
  bool SkipPast(std::string_view end) {
    size_t e = s_.find(end, pos_);
    if (e == std::string_view::npos) return false;
    pos_ = e + end.size();
    return true;
  }
  // Whitespace, comments, processing instructions (and a DOCTYPE) outside the
  // root element.
  absl::Status SkipMisc(bool allow_doctype) {
    while (true) {
      SkipSpace();
      if (StartsWith("<?")) {
        if (!SkipPast("?>")) return Error("unterminated processing instruction");
      } else if (StartsWith("<!--")) {
        if (!SkipPast("-->")) return Error("unterminated comment");
      } else if (allow_doctype && StartsWith("<!DOCTYPE")) {
        // No internal subsets: S3 never sends one, and entity definitions
        // are how XML bombs work.
        size_t gt = s_.find('>', pos_);
        if (gt == std::string_view::npos ||
            s_.substr(pos_, gt - pos_).find('[') != std::string_view::npos) {
          return Error("unsupported DOCTYPE");
        }
        pos_ = gt + 1;
      } else {
        return absl::OkStatus();
      }
    }
  }
  std::string_view ReadName() {
    size_t start = pos_;
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (std::isspace(static_cast<unsigned char>(c)) || c == '/' || c == '>' || c == '<' ||
          c == '=') {
        break;
      }
      ++pos_;
    }
    return s_.substr(start, pos_ - start);
  }

  // pos_ is at '<' of a start tag.
  absl::Status ParseElement(XmlElement* out, int depth) {
    if (depth > kMaxDepth) return Error("elements nested too deeply");
    ++pos_;
    std::string_view name = ReadName();
    if (name.empty()) return Error("empty element name");
    out->name = std::string(LocalName(name));
    // Attributes: skipped, but quoted values may hold '>' or '/'.
    while (true) {
      SkipSpace();
      if (pos_ >= s_.size()) return Error("unterminated start tag");
      char c = s_[pos_];
      if (c == '>') {
        ++pos_;
        break;
      }
      if (c == '/') {
        if (!StartsWith("/>")) return Error("stray '/' in a start tag");
        pos_ += 2;
        return absl::OkStatus();
      }
      if (c == '"' || c == '\'') {
        size_t close = s_.find(c, pos_ + 1);
        if (close == std::string_view::npos) return Error("unterminated attribute value");
        pos_ = close + 1;
      } else {
        ++pos_;
      }
    }
    // Content.
    while (true) {
      if (pos_ >= s_.size()) return Error(stoker::StrCat("<", out->name, "> is not closed"));
      if (StartsWith("</")) {
        pos_ += 2;
        std::string_view end = ReadName();
        SkipSpace();
        if (pos_ >= s_.size() || s_[pos_] != '>') return Error("malformed end tag");
        ++pos_;
        if (LocalName(end) != out->name) {
          return Error(stoker::StrCat("</", end, "> closes <", out->name, ">"));
        }
        return absl::OkStatus();
      }
      if (StartsWith("<!--")) {
        if (!SkipPast("-->")) return Error("unterminated comment");
      } else if (StartsWith("<![CDATA[")) {
        size_t start = pos_ + 9;
        size_t end = s_.find("]]>", start);
        if (end == std::string_view::npos) return Error("unterminated CDATA");
        out->text.append(s_.substr(start, end - start));
        pos_ = end + 3;
      } else if (StartsWith("<?")) {
        if (!SkipPast("?>")) return Error("unterminated processing instruction");
      } else if (StartsWith("<!")) {
        return Error("unexpected markup declaration");
      } else if (s_[pos_] == '<') {
        out->children.emplace_back();
        if (absl::Status st = ParseElement(&out->children.back(), depth + 1); !st.ok()) {
          return st;
        }
      } else {
        size_t lt = s_.find('<', pos_);
        if (lt == std::string_view::npos) lt = s_.size();
        AppendDecoded(s_.substr(pos_, lt - pos_), &out->text);
        pos_ = lt;
      }
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool ParseU64(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

std::string UriEncode(std::string_view s, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size() * 3);
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (IsUnreserved(c) || (keep_slash && c == '/')) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string UriDecode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 && HexValue(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2])));
      i += 2;
    } else if (plus_is_space && s[i] == '+') {
      out.push_back(' ');
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::string CanonicalQuery(std::vector<std::pair<std::string, std::string>> params) {
  for (auto& [k, v] : params) {
    k = UriEncode(k, false);
    v = UriEncode(v, false);
  }
  std::sort(params.begin(), params.end());
  std::string out;
  for (const auto& [k, v] : params) {
    if (!out.empty()) out.push_back('&');
    out += k;
    out.push_back('=');
    out += v;
  }
  return out;
}

const XmlElement* XmlElement::Child(std::string_view child) const {
  for (const XmlElement& c : children) {
    if (c.name == child) return &c;
  }
  return nullptr;
}

std::string XmlElement::ChildText(std::string_view child) const {
  const XmlElement* c = Child(child);
  return c ? c->text : std::string();
}

absl::StatusOr<XmlElement> ParseXml(std::string_view doc) { return XmlParser(doc).Parse(); }

std::optional<S3ErrorBody> ParseS3Error(std::string_view body) {
  // Cheap test first: most bodies handed here are empty or HTML.
  if (body.find("<Error") == std::string_view::npos) return std::nullopt;
  absl::StatusOr<XmlElement> root = ParseXml(body);
  if (!root.ok() || root->name != "Error") return std::nullopt;
  S3ErrorBody e;
  e.code = std::string(Trim(root->ChildText("Code")));
  e.message = std::string(Trim(root->ChildText("Message")));
  e.request_id = std::string(Trim(root->ChildText("RequestId")));
  return e;
}

absl::StatusOr<ListPage> ParseListObjectsV2(std::string_view body) {
  absl::StatusOr<XmlElement> root = ParseXml(body);
  if (!root.ok()) return root.status();
  if (root->name != "ListBucketResult") {
    return absl::InvalidArgumentError(
        stoker::StrCat("expected <ListBucketResult>, got <", root->name, ">"));
  }
  bool url_encoded = Trim(root->ChildText("EncodingType")) == "url";
  ListPage page;
  page.truncated = Trim(root->ChildText("IsTruncated")) == "true";
  page.next_continuation_token = std::string(Trim(root->ChildText("NextContinuationToken")));
  for (const XmlElement& c : root->children) {
    if (c.name != "Contents") continue;
    const XmlElement* key = c.Child("Key");
    const XmlElement* size = c.Child("Size");
    if (key == nullptr || size == nullptr) {
      return absl::InvalidArgumentError("a <Contents> entry lacks <Key> or <Size>");
    }
    ListPage::Entry e;
    // S3 encodes a space as '+' (and a '+' as %2B) under encoding-type=url.
    e.key = url_encoded ? UriDecode(key->text, /*plus_is_space=*/true) : key->text;
    if (!ParseU64(Trim(size->text), &e.size)) {
      return absl::InvalidArgumentError(
          stoker::StrCat("bad <Size> '", size->text, "' for key ", e.key));
    }
    e.etag = StripQuotes(Trim(c.ChildText("ETag")));
    page.entries.push_back(std::move(e));
  }
  if (page.truncated && page.next_continuation_token.empty()) {
    return absl::InvalidArgumentError("truncated listing without <NextContinuationToken>");
  }
  return page;
}

std::optional<ContentRange> ParseContentRange(std::string_view v) {
  v = Trim(v);
  if (v.size() < 6) return std::nullopt;
  for (int i = 0; i < 5; ++i) {
    if (std::tolower(static_cast<unsigned char>(v[i])) != "bytes"[i]) return std::nullopt;
  }
  v.remove_prefix(5);
  if (v.empty() || v.front() != ' ') return std::nullopt;
  v = Trim(v);
  size_t dash = v.find('-');
  size_t slash = v.find('/');
  if (dash == std::string_view::npos || slash == std::string_view::npos || dash > slash) {
    return std::nullopt;
  }
  ContentRange r;
  if (!ParseU64(v.substr(0, dash), &r.first) ||
      !ParseU64(v.substr(dash + 1, slash - dash - 1), &r.last) || r.last < r.first) {
    return std::nullopt;
  }
  std::string_view total = v.substr(slash + 1);
  if (total != "*") {
    uint64_t t = 0;
    if (!ParseU64(total, &t) || t <= r.last) return std::nullopt;
    r.total = t;
  }
  return r;
}

std::string StripQuotes(std::string_view etag) {
  if (etag.substr(0, 2) == "W/") etag.remove_prefix(2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    etag = etag.substr(1, etag.size() - 2);
  }
  return std::string(etag);
}

IniFile ParseIni(std::string_view text) {
  IniFile ini;
  std::string section;
  bool have_section = false;
  bool nested = false;  // inside "key =" followed by indented sub-settings
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    bool indented = !line.empty() && (line[0] == ' ' || line[0] == '\t');
    std::string_view t = Trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (indented && nested) continue;
    nested = false;
    if (t.front() == '[') {
      size_t close = t.find(']');
      if (close == std::string_view::npos) {
        have_section = false;
        continue;
      }
      section = std::string(Trim(t.substr(1, close - 1)));
      // "[profile   dev]" means "[profile dev]".
      if (section.rfind("profile", 0) == 0 && section.size() > 7 &&
          std::isspace(static_cast<unsigned char>(section[7]))) {
        section = "profile " + std::string(Trim(std::string_view(section).substr(7)));
      }
      have_section = true;
      ini[section];
      continue;
    }
    size_t eq = t.find('=');
    if (!have_section || eq == std::string_view::npos) continue;
    std::string key(Trim(t.substr(0, eq)));
    std::transform(key.begin(), key.end(), key.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    std::string_view value = Trim(t.substr(eq + 1));
    if (value.empty()) {
      nested = true;
      continue;
    }
    ini[section][key] = std::string(value);
  }
  return ini;
}

}  // namespace stoker::io::s3_internal
