// Shims for stoker/dataset.h: inspect(), verify() and the Dataset class.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>

#include <memory>
#include <optional>
#include <string>

#include "bind.h"
#include "format/manifest.h"
#include "nlohmann/json.hpp"
#include "stoker/dataset.h"

namespace stoker::python {
namespace {

nb::object ToPython(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return nb::none();
    case nlohmann::json::value_t::boolean:
      return nb::bool_(j.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return nb::int_(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return nb::int_(j.get<uint64_t>());
    case nlohmann::json::value_t::number_float:
      return nb::float_(j.get<double>());
    case nlohmann::json::value_t::string:
      return Str(j.get_ref<const std::string&>());
    case nlohmann::json::value_t::array: {
      nb::list l;
      for (const nlohmann::json& e : j) l.append(ToPython(e));
      return l;
    }
    case nlohmann::json::value_t::object: {
      nb::dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d[Str(it.key())] = ToPython(it.value());
      return d;
    }
    default:  // binary, discarded: never in a parsed manifest
      return nb::none();
  }
}

nb::list StrList(const std::vector<std::string>& v) {
  nb::list l;
  for (const std::string& s : v) l.append(Str(s));
  return l;
}

// Same keys as `stoker inspect --json --shards`.
nb::dict InspectShim(const std::string& uri) {
  Manifest m = ValueOrThrow(WithoutGil([&] { return Inspect(uri); }));
  nb::dict d;
  d["uri"] = uri;
  d["records"] = m.records;
  d["shards"] = m.shards.size();
  d["bytes"] = m.bytes;
  d["payload_bytes"] = m.payload_bytes;
  d["classes"] = m.num_classes;
  d["label_names"] = StrList(m.label_names);
  d["unlabeled"] = m.unlabeled;
  d["fingerprint"] = m.fingerprint;
  d["created_by"] = m.created_by;
  d["pack_options"] = ToPython(m.pack_options);
  nb::list shards;
  for (const ShardInfo& s : m.shards) {
    nb::dict e;
    e["path"] = Str(s.path);
    e["bytes"] = s.bytes;
    e["records"] = s.records;
    shards.append(e);
  }
  d["shard_list"] = shards;
  return d;
}

// Same keys as `stoker verify --json`.
nb::dict VerifyShim(const std::string& uri, std::optional<int> workers) {
  VerifyOptions o;
  o.workers = workers;
  VerifyReport r = ValueOrThrow(WithoutGil([&] { return Verify(uri, o); }));
  nb::dict d;
  d["uri"] = uri;
  d["ok"] = r.ok();
  d["shards"] = r.shards;
  d["records_ok"] = r.records_ok;
  d["records_bad"] = r.records_bad;
  d["bytes"] = r.bytes;
  d["seconds"] = r.seconds;
  nb::list corruptions;
  for (const shard::Corruption& c : r.corruptions) {
    nb::dict e;
    e["shard"] = Str(c.shard);
    e["offset"] = c.offset;
    e["key"] = Str(c.key);
    e["reason"] = Str(c.reason);
    corruptions.append(e);
  }
  d["corruptions"] = corruptions;
  return d;
}

}  // namespace

void BindDataset(nb::module_& m) {
  m.def("inspect", &InspectShim, nb::arg("uri"), "stoker::Inspect; see stoker.inspect.");
  m.def("verify", &VerifyShim, nb::arg("uri"), nb::kw_only(), nb::arg("workers").none(),
        "stoker::Verify; see stoker.verify.");

  // Read is const and safe for concurrent use, so reads run without the GIL
  // and Python threads may share one Dataset.
  nb::class_<Dataset>(m, "Dataset", "stoker::Dataset; see stoker.Dataset.")
      .def_static(
          "open",
          [](const std::string& uri) {
            return ValueOrThrow(WithoutGil([&] { return Dataset::Open(uri); }));
          },
          nb::arg("uri"))
      .def("__len__", &Dataset::size)
      .def_prop_ro("manifest",
                   [](const Dataset& d) {
                     return ToPython(nlohmann::json::parse(ManifestToJson(d.manifest())));
                   })
      .def_prop_ro("label_names",
                   [](const Dataset& d) { return StrList(d.manifest().label_names); })
      // Returns (key, label, meta, payload): meta is the JSON text ("" if
      // none), label is -1 when the record has none.
      .def(
          "read",
          [](const Dataset& d, uint64_t i) {
            Record r = ValueOrThrow(WithoutGil([&] { return d.Read(i); }));
            return nb::make_tuple(Str(r.key), r.label, Str(r.meta),
                                  nb::bytes(r.payload.data(), r.payload.size()));
          },
          nb::arg("index"));
}

}  // namespace stoker::python
