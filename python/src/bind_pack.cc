// Shims for stoker/pack.h: pack() and parse_byte_size().
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <optional>
#include <string>

#include "bind.h"
#include "stoker/pack.h"

namespace stoker::python {
namespace {

// Same keys as `stoker pack --json`.
nb::dict SummaryToDict(const PackSummary& s) {
  nb::dict d;
  d["records"] = s.records;
  d["shards"] = s.shards;
  d["bytes"] = s.bytes;
  d["payload_bytes"] = s.payload_bytes;
  d["source_bytes"] = s.source_bytes;
  d["classes"] = s.classes;
  nb::list names;
  for (const std::string& n : s.label_names) names.append(Str(n));
  d["label_names"] = names;
  d["resized"] = s.resized;
  d["skipped_hidden"] = s.skipped_hidden;
  d["seconds"] = s.seconds;
  d["fingerprint"] = s.fingerprint;
  nb::list rejected;
  for (const Rejection& r : s.rejected) {
    nb::dict e;
    e["path"] = Str(r.path);
    e["reason"] = Str(r.reason);
    rejected.append(e);
  }
  d["rejected"] = rejected;
  return d;
}

nb::dict PackShim(std::string src, std::string dst, std::optional<std::string> manifest,
                  std::optional<std::string> split, std::string path_column,
                  std::string label_column, std::string path_template, uint64_t shard_size,
                  std::optional<int> workers, std::optional<int> resize, int quality,
                  std::optional<uint64_t> shuffle_seed, bool strict, nb::object progress) {
  PackOptions o;
  o.src = std::move(src);
  o.dst = std::move(dst);
  o.manifest = std::move(manifest);
  o.split = std::move(split);
  o.path_column = std::move(path_column);
  o.label_column = std::move(label_column);
  o.path_template = std::move(path_template);
  o.shard_size = shard_size;
  o.workers = workers;
  o.resize = resize;
  o.quality = quality;
  o.shuffle_seed = shuffle_seed;
  o.strict = strict;
  ThrowIfError(o.Validate());
  for (const std::string& w : o.Warnings()) {
    // stacklevel 2: the warning points at the caller of stoker.pack().
    if (PyErr_WarnEx(PyExc_UserWarning, w.c_str(), 2) != 0) throw nb::python_error();
  }

  // The callback runs on a packer thread while this one waits without the
  // GIL. It holds the callable by raw pointer (kept alive by this call's
  // arguments) so copying the std::function needs no GIL. Pack cannot be
  // cancelled: an exception from the callback stops further calls and is
  // raised once Pack returns.
  std::optional<nb::python_error> callback_error;
  if (!progress.is_none()) {
    PyObject* callable = progress.ptr();
    o.progress = [callable, &callback_error](const PackProgress& p) {
      nb::gil_scoped_acquire acquire;
      if (callback_error) return;
      try {
        nb::handle fn(callable);
        fn(p.files_done, p.files_total, p.bytes_in, p.bytes_out, p.seconds);
        if (PyErr_CheckSignals() != 0) throw nb::python_error();
      } catch (nb::python_error& e) {
        callback_error.emplace(std::move(e));
      }
    };
  }
  absl::StatusOr<PackSummary> summary = WithoutGil([&] { return Pack(o); });
  if (callback_error) throw *callback_error;
  return SummaryToDict(ValueOrThrow(std::move(summary)));
}

}  // namespace

void BindPack(nb::module_& m) {
  m.def("pack", &PackShim, nb::kw_only(), nb::arg("src"), nb::arg("dst"),
        nb::arg("manifest").none(), nb::arg("split").none(), nb::arg("path_column"),
        nb::arg("label_column"), nb::arg("path_template"), nb::arg("shard_size"),
        nb::arg("workers").none(), nb::arg("resize").none(), nb::arg("quality"),
        nb::arg("shuffle_seed").none(), nb::arg("strict"), nb::arg("progress").none(),
        "stoker::Pack; see stoker.pack.");
  m.def(
      "parse_byte_size",
      [](const std::string& text) { return ValueOrThrow(ParseByteSize(text)); },
      nb::arg("text"), "stoker::ParseByteSize; see stoker.parse_byte_size.");
}

}  // namespace stoker::python
