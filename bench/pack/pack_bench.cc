// pack_bench: `stoker pack` and `stoker verify` against their physical peers,
// measured in the same run on the same bytes (issue 3, "Foundation").
//
//   1. pack without --resize  vs  reading every source file fully (warm page
//      cache, same thread count, read() into a reused buffer).
//   2. Verify of the packed dataset  vs  a raw read of the same shard bytes
//      (same thread count, 8 MiB preads).
//   3. pack --resize 256, images/s per core with 1 worker and all workers, vs
//      single-core TurboJPEG full decode to RGB (tjDecompress2).
//
// Every measurement runs --repeat times; stoker and its peer alternate inside
// each repetition so that load from other processes hits both alike. The
// median is the headline figure; best and worst are printed beside it.
//
// Usage: pack_bench [--data DIR] [--threads N] [--repeat N] [--tmp DIR]
//                   [--skip-resize] [--json]
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "format/manifest.h"
#include "nlohmann/json.hpp"
#include "pack/sources.h"
#include "stoker/dataset.h"
#include "stoker/pack.h"
#include "util/crc32c.h"
#include "util/strings.h"

namespace stoker::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "pack_bench: %s\n", msg.c_str());
  std::exit(1);
}

struct Flags {
  std::string data;
  std::string tmp;  // empty: /dev/shm if it has room, else /tmp
  int threads = 0;
  int repeat = 3;
  bool json = false;
  bool skip_resize = false;
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  f.data =
      std::string(STOKER_SOURCE_DIR) + "/../shared/datasets/clothing-small";
  f.threads =
      static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--data") {
      f.data = value();
    } else if (a == "--tmp") {
      f.tmp = value();
    } else if (a == "--threads") {
      f.threads = std::atoi(value().c_str());
    } else if (a == "--repeat") {
      f.repeat = std::atoi(value().c_str());
    } else if (a == "--json") {
      f.json = true;
    } else if (a == "--skip-resize") {
      f.skip_resize = true;
    } else if (a == "--help" || a == "-h") {
      std::printf(
          "pack_bench [--data DIR] [--threads N] [--repeat N] [--tmp DIR] "
          "[--skip-resize] [--json]\n");
      std::exit(0);
    } else {
      Die("unknown flag " + a);
    }
  }
  if (f.threads < 1) Die("--threads must be >= 1");
  if (f.repeat < 1) Die("--repeat must be >= 1");
  std::error_code ec;
  if (!fs::is_directory(f.data, ec)) {
    Die(StrCat("dataset folder ", f.data,
               " not found; pass --data DIR (clothing-small lives in "
               "<repo>/../shared/datasets/)"));
  }
  f.data = fs::canonical(f.data).string();
  return f;
}

// ---------------------------------------------------------------- machine

std::string FirstMatch(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) {
      auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string v = line.substr(colon + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  }
  return "?";
}

std::string LoadAvg() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return StrCat(a, " ", b, " ", c);
}

nlohmann::json Machine() {
  nlohmann::json m;
  m["cpu"] = FirstMatch("/proc/cpuinfo", "model name");
  m["cores"] = std::thread::hardware_concurrency();
  std::string mem = FirstMatch("/proc/meminfo", "MemTotal");  // "24000000 kB"
  m["ram_gib"] = std::atof(mem.c_str()) / (1024.0 * 1024.0);
  struct utsname u;
  if (uname(&u) == 0) m["kernel"] = StrCat(u.sysname, " ", u.release);
  return m;
}

// ---------------------------------------------------------------- timing

double CpuSeconds() {
  struct rusage r;
  getrusage(RUSAGE_SELF, &r);
  auto s = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  return s(r.ru_utime) + s(r.ru_stime);
}

struct Sample {
  double wall = 0;  // seconds
  double cpu = 0;   // process CPU seconds (user + system) during the run
};

// Runs of one measurement; figures derive from the median wall time.
struct Series {
  explicit Series(std::string n) : name(std::move(n)) {}
  std::string name;
  std::vector<Sample> samples;
  void Add(const std::function<void()>& fn) {
    const double c0 = CpuSeconds();
    const auto t0 = Clock::now();
    fn();
    Sample s;
    s.wall = std::chrono::duration<double>(Clock::now() - t0).count();
    s.cpu = CpuSeconds() - c0;
    samples.push_back(s);
  }
  std::vector<double> Sorted() const {
    std::vector<double> v;
    for (const Sample& s : samples) v.push_back(s.wall);
    std::sort(v.begin(), v.end());
    return v;
  }
  double Median() const {
    auto v = Sorted();
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  }
  double Best() const { return Sorted().front(); }
  double Worst() const { return Sorted().back(); }
  // CPU seconds per wall second, averaged over the runs (1.0 = one core busy).
  double CpuUtil() const {
    double c = 0, w = 0;
    for (const Sample& s : samples) {
      c += s.cpu;
      w += s.wall;
    }
    return w > 0 ? c / w : 0;
  }
  nlohmann::json Json() const {
    nlohmann::json j;
    j["median_s"] = Median();
    j["best_s"] = Best();
    j["worst_s"] = Worst();
    j["cpu_util"] = CpuUtil();
    nlohmann::json all = nlohmann::json::array();
    for (const Sample& s : samples)
      all.push_back({{"wall_s", s.wall}, {"cpu_s", s.cpu}});
    j["runs"] = all;
    return j;
  }
};

// ---------------------------------------------------------------- peers

// Reads every file fully with `threads` threads pulling paths from a shared
// counter; read() into one reused buffer per thread. Returns bytes read.
uint64_t ReadFilesRaw(const std::vector<std::string>& paths, int threads) {
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> total{0};
  auto work = [&] {
    std::vector<char> buf(size_t{1} << 20);
    uint64_t bytes = 0;
    for (size_t i;
         (i = next.fetch_add(1, std::memory_order_relaxed)) < paths.size();) {
      int fd = ::open(paths[i].c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) Die(StrCat("cannot open ", paths[i]));
      for (;;) {
        ssize_t r = ::read(fd, buf.data(), buf.size());
        if (r < 0) Die(StrCat("cannot read ", paths[i]));
        if (r == 0) break;
        bytes += static_cast<uint64_t>(r);
      }
      ::close(fd);
    }
    total += bytes;
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  return total.load();
}

// Reads the given files in `chunk`-byte preads with `threads` threads.
// per_file: a thread takes a whole file at a time (as Verify does with its
// shards); otherwise threads pull single chunks, so the load is balanced
// whatever the file sizes. crc: also CRC-32C every byte once.
uint64_t ReadChunksRaw(const std::vector<std::string>& paths, int threads,
                       size_t chunk, bool per_file, bool crc) {
  struct Piece {
    int fd;
    uint64_t off;
    uint64_t len;
  };
  std::vector<int> fds;
  std::vector<std::vector<Piece>> jobs;  // one job = pieces read in order
  for (const std::string& p : paths) {
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) Die(StrCat("cannot open ", p));
    struct stat st;
    fstat(fd, &st);
    fds.push_back(fd);
    std::vector<Piece> pieces;
    for (uint64_t off = 0; off < static_cast<uint64_t>(st.st_size);
         off += chunk) {
      pieces.push_back({fd, off, std::min<uint64_t>(chunk, st.st_size - off)});
    }
    if (per_file) {
      jobs.push_back(std::move(pieces));
    } else {
      for (const Piece& pc : pieces) jobs.push_back({pc});
    }
  }
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> total{0};
  std::atomic<uint32_t> sink{0};
  auto work = [&] {
    std::vector<char> buf(chunk);
    uint64_t bytes = 0;
    uint32_t c = 0;
    for (size_t i;
         (i = next.fetch_add(1, std::memory_order_relaxed)) < jobs.size();) {
      for (const Piece& pc : jobs[i]) {
        size_t done = 0;
        while (done < pc.len) {
          ssize_t r =
              ::pread(pc.fd, buf.data() + done, pc.len - done, pc.off + done);
          if (r <= 0) Die("shard read failed");
          done += static_cast<size_t>(r);
        }
        if (crc) c ^= crc32c::Extend(0, buf.data(), pc.len);
        bytes += pc.len;
      }
    }
    total += bytes;
    sink ^= c;
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  for (int fd : fds) ::close(fd);
  return total.load();
}

// Single-thread TurboJPEG decode of every image. scale_to > 0: decode with
// the smallest n/8 DCT scale whose shorter side is still >= scale_to (what
// pack --resize does before its resampling filter) and re-encode that image
// at quality 90, 4:2:0; otherwise a full-size decode to RGB only.
void TurboJpegPass(const std::vector<std::string>& jpegs, int scale_to) {
  tjhandle dec = tjInitDecompress();
  tjhandle enc = scale_to > 0 ? tjInitCompress() : nullptr;
  std::vector<unsigned char> rgb;
  unsigned char* out = nullptr;
  unsigned long out_size = 0;
  for (const std::string& j : jpegs) {
    auto* src = reinterpret_cast<const unsigned char*>(j.data());
    int w, h, subsamp, colorspace;
    if (tjDecompressHeader3(dec, src, j.size(), &w, &h, &subsamp,
                            &colorspace) != 0) {
      Die(StrCat("tjDecompressHeader3: ", tjGetErrorStr2(dec)));
    }
    int dw = w, dh = h;
    if (scale_to > 0) {
      for (int n = 1; n <= 8; ++n) {
        tjscalingfactor sf{n, 8};
        dw = TJSCALED(w, sf);
        dh = TJSCALED(h, sf);
        if (std::min(dw, dh) >= scale_to) break;
      }
    }
    rgb.resize(size_t{3} * dw * dh);
    if (tjDecompress2(dec, src, j.size(), rgb.data(), dw, 0, dh, TJPF_RGB, 0) !=
        0) {
      Die(StrCat("tjDecompress2: ", tjGetErrorStr2(dec)));
    }
    if (enc && tjCompress2(enc, rgb.data(), dw, 0, dh, TJPF_RGB, &out,
                           &out_size, TJSAMP_420, 90, 0) != 0) {
      Die(StrCat("tjCompress2: ", tjGetErrorStr2(enc)));
    }
  }
  if (out) tjFree(out);
  if (enc) tjDestroy(enc);
  tjDestroy(dec);
}

// ---------------------------------------------------------------- helpers

uint64_t FileSize(const std::string& p) {
  struct stat st;
  if (stat(p.c_str(), &st) != 0) Die("cannot stat " + p);
  return static_cast<uint64_t>(st.st_size);
}

std::string PickTmp(const Flags& f, uint64_t need) {
  if (!f.tmp.empty()) return f.tmp;
  struct statvfs v;
  if (statvfs("/dev/shm", &v) == 0 &&
      static_cast<uint64_t>(v.f_bavail) * v.f_frsize > need) {
    return "/dev/shm";
  }
  return "/tmp";
}

PackSummary MustPack(const PackOptions& o) {
  absl::StatusOr<PackSummary> s = Pack(o);
  if (!s.ok()) Die(StrCat("pack failed: ", s.status().ToString()));
  return *s;
}

std::string Fmt(double v, int prec = 1) {
  return fmt::format("{:.{}f}", v, prec);
}

std::string Range(const Series& s, double work, double scale, int prec) {
  // work/time for the best and worst run, e.g. "[95.1 - 120.3]".
  return fmt::format("[{:.{}f} - {:.{}f}]", work / s.Worst() / scale, prec,
                     work / s.Best() / scale, prec);
}

}  // namespace

int Main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  nlohmann::json out;
  out["machine"] = Machine();
  out["load_before"] = LoadAvg();
  out["data"] = flags.data;
  out["threads"] = flags.threads;
  out["repeat"] = flags.repeat;

  // The exact file list pack reads, from the packer's own lister.
  PackOptions list_opts;
  list_opts.src = flags.data;
  list_opts.dst = "/nonexistent";
  absl::StatusOr<pack::SourceList> listed = pack::ListSources(list_opts);
  if (!listed.ok())
    Die(StrCat("cannot list ", flags.data, ": ", listed.status().ToString()));
  std::vector<std::string> paths;
  uint64_t src_bytes = 0;
  for (const pack::SourceItem& it : listed->items) {
    paths.push_back(it.path);
    src_bytes += FileSize(it.path);
  }
  if (paths.empty()) Die("no input files in " + flags.data);
  const std::string tmp_root =
      PickTmp(flags, 3 * src_bytes + (uint64_t{256} << 20));
  const std::string work_dir = StrCat(tmp_root, "/pack_bench.", getpid());
  fs::create_directories(work_dir);
  out["tmp"] = tmp_root;
  out["files"] = paths.size();
  out["source_bytes"] = src_bytes;

  auto log = [&](const std::string& s) {
    std::fprintf(stderr, "%s\n", s.c_str());
  };
  const nlohmann::json& m = out["machine"];
  std::string header = fmt::format(
      "machine: {}, {} cores, {:.1f} GiB RAM, {}\nload average before: {}\n"
      "data: {} ({} files, {:.1f} MB)\nthreads: {}, repeat: {}, pack output "
      "under: {}\n",
      m["cpu"].get<std::string>(), m["cores"].get<unsigned>(),
      m["ram_gib"].get<double>(), m.value("kernel", std::string("?")),
      out["load_before"].get<std::string>(), flags.data, paths.size(),
      src_bytes / 1e6, flags.threads, flags.repeat, tmp_root);
  if (!flags.json) std::printf("%s\n", header.c_str());

  // ------------------------------------------------ 1. pack vs raw file read
  PackOptions po;
  po.src = flags.data;
  po.dst = work_dir + "/plain";
  po.workers = flags.threads;
  Series listing{"list"};
  listing.Add([&] {
    if (!pack::ListSources(list_opts).ok()) Die("list failed");
  });
  log("pack: warming the page cache");
  if (ReadFilesRaw(paths, flags.threads) != src_bytes)
    Die("raw read size mismatch");
  PackSummary plain =
      MustPack(po);  // untimed warm-up (also the dataset verified below)
  if (plain.records != paths.size()) {
    Die(StrCat("pack wrote ", plain.records, " records for ", paths.size(),
               " files"));
  }
  Series raw_files{"raw file read"}, pack_plain{"stoker pack"};
  for (int r = 0; r < flags.repeat; ++r) {
    log(StrCat("pack: run ", r + 1, "/", flags.repeat));
    raw_files.Add([&] {
      if (ReadFilesRaw(paths, flags.threads) != src_bytes)
        Die("raw read size mismatch");
    });
    pack_plain.Add([&] { plain = MustPack(po); });
  }
  const double n_files = static_cast<double>(paths.size());
  const double pack_ratio = raw_files.Median() / pack_plain.Median();
  nlohmann::json j1;
  j1["raw"] = raw_files.Json();
  j1["pack"] = pack_plain.Json();
  j1["list_sources_s"] = listing.Median();
  j1["raw_mb_s"] = src_bytes / raw_files.Median() / 1e6;
  j1["raw_files_s"] = n_files / raw_files.Median();
  j1["pack_mb_s"] = src_bytes / pack_plain.Median() / 1e6;
  j1["pack_files_s"] = n_files / pack_plain.Median();
  j1["ratio"] = pack_ratio;
  j1["goal"] = 0.8;
  j1["shards"] = plain.shards;
  j1["shard_bytes"] = plain.bytes;
  out["pack"] = j1;

  // ------------------------------------------------ 2. verify vs raw shard
  // read
  absl::StatusOr<Manifest> man = LoadManifest(po.dst);
  if (!man.ok()) Die(man.status().ToString());
  std::vector<std::string> shard_paths;
  uint64_t shard_bytes = 0;
  for (const ShardInfo& s : man->shards) {
    shard_paths.push_back(ShardPath(po.dst, s));
    shard_bytes += s.bytes;
  }
  constexpr size_t kChunk = size_t{8} << 20;
  VerifyOptions vo;
  vo.workers = flags.threads;
  log("verify: warming");
  ReadChunksRaw(shard_paths, flags.threads, kChunk, false, false);
  Series raw_shards{"raw shard read"}, verify{"stoker verify"};
  Series raw_crc{"raw read + crc32c"},
      raw_per_file{"raw, one shard per thread"};
  for (int r = 0; r < flags.repeat; ++r) {
    log(StrCat("verify: run ", r + 1, "/", flags.repeat));
    raw_shards.Add([&] {
      if (ReadChunksRaw(shard_paths, flags.threads, kChunk, false, false) !=
          shard_bytes) {
        Die("shard read size mismatch");
      }
    });
    verify.Add([&] {
      absl::StatusOr<VerifyReport> rep = Verify(po.dst, vo);
      if (!rep.ok()) Die(rep.status().ToString());
      if (!rep->ok() || rep->bytes != shard_bytes) Die("verify found damage");
    });
    raw_crc.Add([&] {
      ReadChunksRaw(shard_paths, flags.threads, kChunk, false, true);
    });
    raw_per_file.Add([&] {
      ReadChunksRaw(shard_paths, flags.threads, kChunk, true, false);
    });
  }
  const double verify_ratio = raw_shards.Median() / verify.Median();
  nlohmann::json j2;
  j2["shards"] = shard_paths.size();
  j2["shard_bytes"] = shard_bytes;
  j2["raw"] = raw_shards.Json();
  j2["verify"] = verify.Json();
  j2["raw_crc"] = raw_crc.Json();
  j2["raw_per_shard"] = raw_per_file.Json();
  j2["raw_gb_s"] = shard_bytes / raw_shards.Median() / 1e9;
  j2["verify_gb_s"] = shard_bytes / verify.Median() / 1e9;
  j2["raw_crc_gb_s"] = shard_bytes / raw_crc.Median() / 1e9;
  j2["raw_per_shard_gb_s"] = shard_bytes / raw_per_file.Median() / 1e9;
  j2["ratio"] = verify_ratio;
  j2["goal"] = 0.8;
  out["verify"] = j2;

  // ------------------------------------------------ 3. pack --resize 256
  nlohmann::json j3;
  Series tj_full{"turbojpeg full decode"},
      tj_scaled{"turbojpeg scaled decode+encode"};
  Series resize_1{"pack --resize 256, 1 worker"},
      resize_n{"pack --resize 256, all workers"};
  uint64_t n_jpeg = 0;
  if (!flags.skip_resize) {
    std::vector<std::string> jpegs;
    for (const std::string& p : paths) {
      std::ifstream in(p, std::ios::binary);
      std::string b((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
      if (b.size() >= 2 && static_cast<unsigned char>(b[0]) == 0xFF &&
          static_cast<unsigned char>(b[1]) == 0xD8) {
        jpegs.push_back(std::move(b));
      }
    }
    n_jpeg = jpegs.size();
    PackOptions ro = po;
    ro.dst = work_dir + "/resized";
    ro.resize = 256;
    PackSummary rs;
    for (int r = 0; r < flags.repeat; ++r) {
      log(StrCat("resize: run ", r + 1, "/", flags.repeat));
      tj_full.Add([&] { TurboJpegPass(jpegs, 0); });
      ro.workers = 1;
      resize_1.Add([&] { rs = MustPack(ro); });
      ro.workers = flags.threads;
      resize_n.Add([&] { rs = MustPack(ro); });
      tj_scaled.Add([&] { TurboJpegPass(jpegs, 256); });
    }
    if (rs.records != paths.size()) Die("resize pack lost records");
    const double tj_rate = n_jpeg / tj_full.Median();
    const double r1 = n_jpeg / resize_1.Median();
    const double rn_per_core = n_jpeg / resize_n.Median() / flags.threads;
    j3["images"] = n_jpeg;
    j3["resized"] = rs.resized;
    j3["output_bytes"] = rs.bytes;
    j3["turbojpeg_full_decode"] = tj_full.Json();
    j3["turbojpeg_scaled_decode_encode"] = tj_scaled.Json();
    j3["pack_1_worker"] = resize_1.Json();
    j3["pack_all_workers"] = resize_n.Json();
    j3["turbojpeg_full_decode_img_s"] = tj_rate;
    j3["turbojpeg_scaled_decode_encode_img_s"] = n_jpeg / tj_scaled.Median();
    j3["pack_1_worker_img_s_per_core"] = r1;
    j3["pack_all_workers_img_s"] = n_jpeg / resize_n.Median();
    j3["pack_all_workers_img_s_per_core"] = rn_per_core;
    j3["fraction_1_worker"] = r1 / tj_rate;
    j3["fraction_all_workers"] = rn_per_core / tj_rate;
    j3["scaling"] = (n_jpeg / resize_n.Median()) / r1;
    out["resize"] = j3;
  }
  out["load_after"] = LoadAvg();
  std::error_code ec;
  fs::remove_all(work_dir, ec);

  if (flags.json) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  // ------------------------------------------------ text report
  const double mb = 1e6, gb = 1e9;
  std::printf(
      "1. pack (no --resize), %d threads, %zu files, %.1f MB -> %llu "
      "shard(s)\n",
      flags.threads, paths.size(), src_bytes / mb,
      (unsigned long long)plain.shards);
  std::printf("   %-28s %10s %18s %10s %9s\n", "", "MB/s", "[worst - best]",
              "files/s", "cpu util");
  auto row1 = [&](const Series& s) {
    std::printf("   %-28s %10s %18s %10s %9s\n", s.name.c_str(),
                Fmt(src_bytes / s.Median() / mb).c_str(),
                Range(s, src_bytes, mb, 1).c_str(),
                Fmt(n_files / s.Median(), 0).c_str(),
                Fmt(s.CpuUtil(), 2).c_str());
  };
  row1(raw_files);
  row1(pack_plain);
  std::printf(
      "   ratio pack/raw: %.2f (goal >= 0.80: %s); of pack's time, listing the "
      "source "
      "tree: %.3f s\n\n",
      pack_ratio, pack_ratio >= 0.8 ? "met" : "MISSED", listing.Median());

  std::printf("2. verify, %d threads, %zu shard(s), %.1f MB, 8 MiB reads\n",
              flags.threads, shard_paths.size(), shard_bytes / mb);
  std::printf("   %-28s %10s %18s %9s\n", "", "GB/s", "[worst - best]",
              "cpu util");
  auto row2 = [&](const Series& s) {
    std::printf("   %-28s %10s %18s %9s\n", s.name.c_str(),
                Fmt(shard_bytes / s.Median() / gb, 2).c_str(),
                Range(s, shard_bytes, gb, 2).c_str(),
                Fmt(s.CpuUtil(), 2).c_str());
  };
  row2(raw_shards);
  row2(verify);
  std::printf("   diagnostics:\n");
  row2(raw_crc);
  row2(raw_per_file);
  std::printf("   ratio verify/raw: %.2f (goal >= 0.80: %s)\n\n", verify_ratio,
              verify_ratio >= 0.8 ? "met" : "MISSED");

  if (!flags.skip_resize) {
    std::printf("3. pack --resize 256, %llu JPEGs (%llu resized)\n",
                (unsigned long long)n_jpeg,
                (unsigned long long)j3["resized"].get<uint64_t>());
    std::printf("   %-34s %8s %18s %12s %9s\n", "", "img/s", "[worst - best]",
                "img/s/core", "cpu util");
    auto row3 = [&](const Series& s, int cores) {
      std::printf("   %-34s %8s %18s %12s %9s\n", s.name.c_str(),
                  Fmt(n_jpeg / s.Median()).c_str(),
                  Range(s, n_jpeg, 1, 1).c_str(),
                  Fmt(n_jpeg / s.Median() / cores).c_str(),
                  Fmt(s.CpuUtil(), 2).c_str());
    };
    row3(tj_full, 1);
    row3(resize_1, 1);
    row3(resize_n, flags.threads);
    std::printf("   diagnostic:\n");
    row3(tj_scaled, 1);
    std::printf(
        "   fraction of 1-core TurboJPEG full decode: 1 worker %.2f, %d "
        "workers %.2f "
        "per core; scaling %d workers / 1 worker: %.2fx\n\n",
        j3["fraction_1_worker"].get<double>(), flags.threads,
        j3["fraction_all_workers"].get<double>(), flags.threads,
        j3["scaling"].get<double>());
  }
  std::printf("load average after: %s\n",
              out["load_after"].get<std::string>().c_str());
  return 0;
}

}  // namespace stoker::bench

int main(int argc, char** argv) { return stoker::bench::Main(argc, argv); }
