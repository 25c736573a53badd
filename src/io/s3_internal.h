// Pieces of the S3 client that are pure functions, exposed for its tests:
// URI encoding for SigV4, a minimal XML reader, Content-Range parsing and the
// INI reader for the shared AWS files. Not part of the public API.
#ifndef STOKER_IO_S3_INTERNAL_H_
#define STOKER_IO_S3_INTERNAL_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace stoker::io::s3_internal {

// Percent-encodes every byte except A-Z a-z 0-9 - _ . ~ (and '/' when
// keep_slash), with upper-case hex: the SigV4 "UriEncode". libcurl 7.88 signs
// the path and query exactly as given, so they must already be canonical.
std::string UriEncode(std::string_view s, bool keep_slash);
// Decodes %XX escapes (and '+' as space when plus_is_space). Malformed escapes
// are kept as they are.
std::string UriDecode(std::string_view s, bool plus_is_space);

// The canonical SigV4 query string: pairs sorted by name, then value, each
// UriEncoded, joined with '&', every name followed by '=' (even "uploads=").
std::string CanonicalQuery(std::vector<std::pair<std::string, std::string>> params);

// A parsed XML element: name without namespace prefix, decoded text (the
// concatenation of its direct character data and CDATA), children in order.
struct XmlElement {
  std::string name;
  std::string text;
  std::vector<XmlElement> children;

  // First child called `name`, or null.
  const XmlElement* Child(std::string_view name) const;
  // Text of the first child called `name`, or empty.
  std::string ChildText(std::string_view name) const;
};

// Parses a document into its root element. Handles the XML declaration,
// comments, processing instructions, CDATA, attributes (ignored), self-closing
// tags and the five named entities plus &#N; / &#xN;. Returns InvalidArgument
// for malformed input, mismatched tags, or nesting deeper than 64.
absl::StatusOr<XmlElement> ParseXml(std::string_view doc);

// The fields of an S3 <Error> body; empty strings when absent or unparsable.
struct S3ErrorBody {
  std::string code;
  std::string message;
  std::string request_id;
};
// Reads an S3 error document. Returns nullopt when `body` is not one (not
// XML, or the root is not <Error>).
std::optional<S3ErrorBody> ParseS3Error(std::string_view body);

struct ListPage {
  struct Entry {
    std::string key;
    uint64_t size = 0;
    std::string etag;  // quotes removed
  };
  std::vector<Entry> entries;
  bool truncated = false;
  std::string next_continuation_token;
};
// Parses one ListObjectsV2 response (a <ListBucketResult>), url-decoding keys
// when <EncodingType>url</EncodingType>. Returns InvalidArgument when the
// document is not a ListBucketResult or an entry lacks Key or Size.
absl::StatusOr<ListPage> ParseListObjectsV2(std::string_view body);

// "bytes FIRST-LAST/TOTAL" ("*" for an unknown total).
struct ContentRange {
  uint64_t first = 0;
  uint64_t last = 0;
  std::optional<uint64_t> total;
};
std::optional<ContentRange> ParseContentRange(std::string_view value);

// Removes one pair of surrounding double quotes (and a W/ weak prefix).
std::string StripQuotes(std::string_view etag);

// An INI file as the AWS tools write it: section name -> key -> value.
// Section names are kept as written ("default", "profile dev"); keys are
// lower-cased; '#' and ';' start comments; indented lines under a key with an
// empty value (nested settings such as "s3 =") are skipped.
using IniFile = std::map<std::string, std::map<std::string, std::string>>;
IniFile ParseIni(std::string_view text);

}  // namespace stoker::io::s3_internal

#endif  // STOKER_IO_S3_INTERNAL_H_
