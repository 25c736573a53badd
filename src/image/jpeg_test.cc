#include "image/jpeg.h"

#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "image/test_util.h"

namespace stoker::image {
namespace {

using ::testing::HasSubstr;

using namespace ::stoker::image::test_util;  // NOLINT: test helpers

// Up to `per_class` photos of every class of the shared data set, or empty.
std::vector<std::filesystem::path> RealPhotos(int per_class) {
  const std::filesystem::path root =
      STOKER_SOURCE_DIR "/../shared/datasets/clothing-small/train";
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  if (!std::filesystem::is_directory(root, ec)) return out;
  std::vector<std::filesystem::path> classes;
  for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
    if (e.is_directory()) classes.push_back(e.path());
  }
  std::sort(classes.begin(), classes.end());
  for (const auto& dir : classes) {
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".jpg") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (int i = 0; i < per_class && i < static_cast<int>(files.size()); ++i) {
      out.push_back(files[i]);
    }
  }
  return out;
}

#define SKIP_IF_NO_PHOTOS(photos)                                             \
  if ((photos).empty()) {                                                     \
    GTEST_SKIP()                                                              \
        << "clothing-small not found beside the checkout (" STOKER_SOURCE_DIR \
           "/../shared/datasets/clothing-small)";                             \
  }

// Offset of the SOFn marker (FF C0..C2), walking the marker segments.
size_t FindSof(const std::string& jpeg) {
  size_t pos = 2;
  while (pos + 4 <= jpeg.size()) {
    const auto marker = static_cast<unsigned char>(jpeg[pos + 1]);
    if (marker >= 0xC0 && marker <= 0xC2) return pos;
    const size_t len = (static_cast<unsigned char>(jpeg[pos + 2]) << 8) |
                       static_cast<unsigned char>(jpeg[pos + 3]);
    pos += 2 + len;
  }
  ADD_FAILURE() << "no SOF marker";
  return 0;
}

// Rewrites the frame size in the SOF header (height then width, big-endian).
std::string WithFrameSize(std::string jpeg, int width, int height) {
  const size_t sof = FindSof(jpeg);
  jpeg[sof + 5] = static_cast<char>(height >> 8);
  jpeg[sof + 6] = static_cast<char>(height & 0xFF);
  jpeg[sof + 7] = static_cast<char>(width >> 8);
  jpeg[sof + 8] = static_cast<char>(width & 0xFF);
  return jpeg;
}

Pixels Solid(int w, int h, std::vector<uint8_t> color) {
  return MakePixels(w, h, static_cast<int>(color.size()),
                    [&](int, int, int c) { return color[c]; });
}

ResizeJpegOptions Options(int shorter_side, int quality = 90) {
  ResizeJpegOptions options;
  options.shorter_side = shorter_side;
  options.quality = quality;
  return options;
}

std::string ResizeOrDie(const std::string& jpeg, int shorter_side,
                        int quality = 95) {
  auto r = ResizeJpegShorterSide(jpeg, Options(shorter_side, quality));
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok() || !r->has_value()) {
    ADD_FAILURE() << "no resized image";
    return "";
  }
  return **r;
}

TEST(LooksLikeJpegTest, ChecksStartOfImageMarker) {
  EXPECT_TRUE(LooksLikeJpeg(Encode(Solid(8, 8, {1, 2, 3}))));
  EXPECT_TRUE(LooksLikeJpeg(std::string("\xFF\xD8", 2)));
  EXPECT_FALSE(LooksLikeJpeg(""));
  EXPECT_FALSE(LooksLikeJpeg("\xFF"));
  EXPECT_FALSE(LooksLikeJpeg("\x89PNG\r\n\x1a\n"));
}

TEST(ReadJpegInfoTest, SyntheticImages) {
  auto rgb = ReadJpegInfo(Encode(Solid(37, 21, {9, 9, 9})));
  ASSERT_TRUE(rgb.ok()) << rgb.status();
  EXPECT_EQ(rgb->width, 37);
  EXPECT_EQ(rgb->height, 21);
  EXPECT_EQ(rgb->components, 3);
  EXPECT_FALSE(rgb->progressive);

  auto gray = ReadJpegInfo(Encode(Solid(5, 300, {200})));
  ASSERT_TRUE(gray.ok()) << gray.status();
  EXPECT_EQ(gray->width, 5);
  EXPECT_EQ(gray->height, 300);
  EXPECT_EQ(gray->components, 1);

  auto prog = ReadJpegInfo(Encode(Solid(64, 48, {1, 2, 3}), 90, true));
  ASSERT_TRUE(prog.ok()) << prog.status();
  EXPECT_TRUE(prog->progressive);
}

// Cross-checked against TurboJPEG's own header parser. Most photos are
// 400x533, but not all, nor all portrait.
TEST(ReadJpegInfoTest, RealPhotos) {
  const auto photos = RealPhotos(3);
  SKIP_IF_NO_PHOTOS(photos);
  tjhandle h = tjInitDecompress();
  for (const auto& path : photos) {
    const std::string jpeg = ReadFile(path);
    auto info = ReadJpegInfo(jpeg);
    ASSERT_TRUE(info.ok()) << path << ": " << info.status();
    int w = 0, ht = 0, subsamp = 0, colorspace = 0;
    ASSERT_EQ(tjDecompressHeader3(
                  h, reinterpret_cast<const unsigned char*>(jpeg.data()),
                  jpeg.size(), &w, &ht, &subsamp, &colorspace),
              0);
    EXPECT_EQ(info->width, w) << path;
    EXPECT_EQ(info->height, ht) << path;
    EXPECT_EQ(std::min(info->width, info->height), 400) << path;
    EXPECT_EQ(info->components, 3) << path;
    EXPECT_FALSE(info->progressive) << path;
  }
  tjDestroy(h);
}

TEST(ResizeJpegTest, OutputDimensions) {
  struct Case {
    int width, height, target, want_width, want_height;
  };
  const Case cases[] = {
      {400, 533, 256, 256, 341},  // 341.12
      {533, 400, 256, 341, 256},
      {640, 480, 224, 299, 224},  // 298.67
      {300, 300, 100, 100, 100},
      {1024, 100, 8, 82, 8},  // 81.92; DCT scale 1/8 exactly
      {401, 999, 7, 7, 17},   // 17.44
      {1000, 3, 2, 667, 2},   // 666.67
      {64, 65, 63, 63, 64},   // 63.98; scale 8/8
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message()
                 << c.width << "x" << c.height << " -> " << c.target);
    const std::string out =
        ResizeOrDie(Encode(Solid(c.width, c.height, {10, 20, 30})), c.target);
    auto info = ReadJpegInfo(out);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->width, c.want_width);
    EXPECT_EQ(info->height, c.want_height);
    EXPECT_EQ(info->components, 3);
    EXPECT_FALSE(info->progressive);
  }
}

TEST(ResizeJpegTest, NeverUpscales) {
  const std::string jpeg = Encode(Solid(200, 300, {1, 2, 3}));
  for (int target : {200, 201, 300, 5000}) {
    auto r = ResizeJpegShorterSide(jpeg, Options(target));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->has_value()) << target;
  }
  auto r = ResizeJpegShorterSide(jpeg, Options(199));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->has_value());
}

TEST(ResizeJpegTest, NoUpscaleStillValidatesInput) {
  auto r = ResizeJpegShorterSide("definitely not a jpeg", Options(100000));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ResizeJpegTest, GrayscaleStaysGrayscale) {
  const Pixels ramp =
      MakePixels(320, 240, 1, [](int x, int, int) { return x * 255 / 319; });
  const std::string out = ResizeOrDie(Encode(ramp), 120);
  auto info = ReadJpegInfo(out);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->components, 1);
  EXPECT_EQ(info->width, 160);
  EXPECT_EQ(info->height, 120);
}

// Every DCT scale n/8 is exercised by some target; a constant colour must
// come out constant (up to JPEG rounding) whichever was chosen.
TEST(ResizeJpegTest, ConstantColourStaysConstantAtEveryScale) {
  const std::vector<uint8_t> color = {200, 60, 30};
  const std::string jpeg = Encode(Solid(1024, 800, color));
  for (int target : {100, 150, 250, 350, 450, 550, 650, 799}) {
    SCOPED_TRACE(target);
    const Pixels out = Decode(ResizeOrDie(jpeg, target), 3);
    EXPECT_EQ(out.height, target);
    for (size_t i = 0; i < out.data.size(); ++i) {
      ASSERT_NEAR(out.data[i], color[i % 3], 4) << "byte " << i;
    }
  }
}

// A horizontal ramp checks the geometry (no shift, no flip, right scale) of
// the DCT scaling (here 4/8, to 400x300) plus the filter (to 373x280).
TEST(ResizeJpegTest, RampIsResampledInPlace) {
  const Pixels ramp =
      MakePixels(800, 600, 1, [](int x, int, int) { return x * 255 / 799; });
  const Pixels out = Decode(ResizeOrDie(Encode(ramp, 100), 280), 1);
  ASSERT_EQ(out.width, 373);
  ASSERT_EQ(out.height, 280);
  for (int y = 0; y < out.height; y += 37) {
    for (int x = 2; x < out.width - 2; ++x) {
      const double src_x = (x + 0.5) * 800.0 / 373.0 - 0.5;
      ASSERT_NEAR(out.at(x, y, 0), src_x * 255 / 799, 3) << x << "," << y;
    }
  }
}

TEST(ResizeJpegTest, QualityControlsSize) {
  std::mt19937 rng(7);
  const Pixels noise =
      MakePixels(300, 300, 3, [&](int, int, int) { return rng() & 0xFF; });
  const std::string jpeg = Encode(noise);
  EXPECT_LT(ResizeOrDie(jpeg, 150, 30).size(),
            ResizeOrDie(jpeg, 150, 95).size());
}

TEST(ResizeJpegTest, ProgressiveInput) {
  const std::string out = ResizeOrDie(
      Encode(Solid(500, 400, {50, 100, 150}), 90, /*progressive=*/true), 200);
  auto info = ReadJpegInfo(out);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->width, 250);
  EXPECT_FALSE(info->progressive);
}

// TurboJPEG writes CMYK as Adobe YCCK, inverted (255 = no ink), so
// (0, 255, 255, 255) is full cyan: RGB (0, 255, 255).
TEST(ResizeJpegTest, CmykBecomesRgb) {
  const std::string jpeg = Encode(Solid(200, 160, {0, 255, 255, 255}));
  auto info = ReadJpegInfo(jpeg);
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_EQ(info->components, 4);
  const std::string out = ResizeOrDie(jpeg, 80);
  auto out_info = ReadJpegInfo(out);
  ASSERT_TRUE(out_info.ok()) << out_info.status();
  EXPECT_EQ(out_info->components, 3);
  const Pixels px = Decode(out, 3);
  EXPECT_NEAR(px.at(50, 40, 0), 0, 6);
  EXPECT_NEAR(px.at(50, 40, 1), 255, 6);
  EXPECT_NEAR(px.at(50, 40, 2), 255, 6);
}

TEST(ResizeJpegTest, RealPhotos) {
  const auto photos = RealPhotos(2);
  SKIP_IF_NO_PHOTOS(photos);
  for (const auto& path : photos) {
    const std::string jpeg = ReadFile(path);
    auto in_info = ReadJpegInfo(jpeg);
    ASSERT_TRUE(in_info.ok()) << path << ": " << in_info.status();
    const std::string out = ResizeOrDie(jpeg, 256, 90);
    auto info = ReadJpegInfo(out);
    ASSERT_TRUE(info.ok()) << path << ": " << info.status();
    const int shorter = std::min(in_info->width, in_info->height);
    const int longer = std::max(in_info->width, in_info->height);
    const int want_longer =
        static_cast<int>(std::lround(longer * 256.0 / shorter));  // 533 -> 341
    const bool portrait = in_info->width <= in_info->height;
    EXPECT_EQ(info->width, portrait ? 256 : want_longer) << path;
    EXPECT_EQ(info->height, portrait ? want_longer : 256) << path;
    EXPECT_LT(out.size(), jpeg.size()) << path;
    // Low-resolution content agrees with the original: compare means.
    const Pixels a = Decode(jpeg, 3), b = Decode(out, 3);
    double mean_a = 0, mean_b = 0;
    for (uint8_t v : a.data) mean_a += v;
    for (uint8_t v : b.data) mean_b += v;
    EXPECT_NEAR(mean_a / a.data.size(), mean_b / b.data.size(), 1.5) << path;
  }
}

TEST(ResizeJpegTest, RejectsBadOptions) {
  const std::string jpeg = Encode(Solid(64, 64, {1, 2, 3}));
  for (ResizeJpegOptions o :
       {Options(0), Options(-5), Options(32, 0), Options(32, 101)}) {
    auto r = ResizeJpegShorterSide(jpeg, o);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
        << r.status();
  }
}

TEST(ResizeJpegTest, ConcurrentCallsAgree) {
  const std::string jpeg =
      Encode(MakePixels(300, 200, 3, [](int x, int y, int c) {
        return (x * 7 + y * 3 + c) & 0xFF;
      }));
  const std::string want = ResizeOrDie(jpeg, 100);
  std::vector<std::string> got(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        auto r = ResizeJpegShorterSide(jpeg, Options(100, 95));
        if (r.ok() && r->has_value()) got[t] = **r;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const std::string& g : got) EXPECT_EQ(g, want);
}

// --- Corrupt and hostile input: one test per case, never a crash. ---

TEST(CorruptJpegTest, NotAJpeg) {
  for (std::string bytes : {std::string(), std::string("GIF89a...."),
                            std::string("\xD8\xFF\xE0", 3)}) {
    auto info = ReadJpegInfo(bytes);
    EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(info.status().message(), HasSubstr("not a JPEG image"));
    auto r = ResizeJpegShorterSide(bytes, Options(10));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr("not a JPEG image"));
  }
}

TEST(CorruptJpegTest, TruncatedScanData) {
  const Pixels img = MakePixels(
      256, 256, 3, [](int x, int y, int c) { return (x ^ y) + c * 40; });
  const std::string jpeg = Encode(img);
  const std::string half = jpeg.substr(0, jpeg.size() / 2);
  EXPECT_TRUE(ReadJpegInfo(half).ok());  // the headers are all there
  auto r = ResizeJpegShorterSide(half, Options(100));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("corrupt JPEG data"));
  EXPECT_THAT(r.status().message(), HasSubstr("Premature end"));
}

TEST(CorruptJpegTest, TruncatedHeader) {
  const std::string jpeg = Encode(Solid(64, 64, {1, 2, 3}));
  for (size_t n : {size_t{2}, size_t{3}, size_t{20}, FindSof(jpeg) + 4}) {
    auto info = ReadJpegInfo(jpeg.substr(0, n));
    EXPECT_FALSE(info.ok()) << n;
    EXPECT_FALSE(info.status().message().empty());
    auto r = ResizeJpegShorterSide(jpeg.substr(0, n), Options(10));
    EXPECT_FALSE(r.ok()) << n;
  }
}

TEST(CorruptJpegTest, HugeFrameRejectedByPixelCap) {
  const std::string small = Encode(Solid(16, 16, {1, 2, 3}));
  // 65535 is over libjpeg's own 65500 limit, 60000 is not: both paths.
  for (int side : {65535, 60000}) {
    const std::string bomb = WithFrameSize(small, side, side);
    auto info = ReadJpegInfo(bomb);
    EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string want = "image " + std::to_string(side) + "x" +
                             std::to_string(side) + " exceeds the pixel cap";
    EXPECT_THAT(info.status().message(), HasSubstr(want));
    // Rejected from the header, before the ~10 GB pixel buffer is allocated.
    auto r = ResizeJpegShorterSide(bomb, Options(256));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr(want));
  }
}

TEST(CorruptJpegTest, CustomLimits) {
  const std::string jpeg = Encode(Solid(400, 533, {1, 2, 3}));
  ImageLimits limits;
  limits.max_dimension = 500;
  auto dim = ReadJpegInfo(jpeg, limits);
  EXPECT_EQ(dim.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dim.status().message(),
              HasSubstr("image 400x533 exceeds the dimension cap of 500"));
  ResizeJpegOptions options = Options(100);
  options.limits.max_pixels = 400 * 533 - 1;
  auto px = ResizeJpegShorterSide(jpeg, options);
  EXPECT_THAT(px.status().message(), HasSubstr("exceeds the pixel cap"));
  limits = ImageLimits();
  limits.max_pixels = 400 * 533;
  EXPECT_TRUE(ReadJpegInfo(jpeg, limits).ok());
}

TEST(CorruptJpegTest, ScanCap) {
  const std::string prog = Encode(Solid(300, 200, {5, 6, 7}), 90, true);
  ResizeJpegOptions options = Options(100);
  options.limits.max_scans = 2;
  auto r = ResizeJpegShorterSide(prog, options);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("more than 2 scans"));
  EXPECT_TRUE(ResizeJpegShorterSide(prog, Options(100)).ok());
}

TEST(CorruptJpegTest, GarbageAfterStartOfImage) {
  for (uint32_t seed = 0; seed < 50; ++seed) {
    std::mt19937 rng(seed);
    std::string bytes("\xFF\xD8", 2);
    for (int i = 0; i < 4096; ++i) bytes.push_back(static_cast<char>(rng()));
    auto info = ReadJpegInfo(bytes);
    EXPECT_FALSE(info.ok()) << seed;
    EXPECT_FALSE(info.status().message().empty());
    auto r = ResizeJpegShorterSide(bytes, Options(8));
    EXPECT_FALSE(r.ok()) << seed;
    EXPECT_TRUE(r.status().code() == absl::StatusCode::kDataLoss ||
                r.status().code() == absl::StatusCode::kInvalidArgument)
        << r.status();
  }
}

// Random byte damage: any outcome but a crash; errors carry a message and
// successes are valid JPEGs.
TEST(CorruptJpegTest, ByteFlipsNeverCrash) {
  const std::string jpeg = Encode(MakePixels(
      120, 90, 3, [](int x, int y, int c) { return (x * y + c * 50) & 0xFF; }));
  std::mt19937 rng(1234);
  int failures = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string bad = jpeg;
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int i = 0; i < flips; ++i) {
      bad[2 + rng() % (bad.size() - 2)] = static_cast<char>(rng());
    }
    auto r = ResizeJpegShorterSide(bad, Options(40));
    if (!r.ok()) {
      ++failures;
      EXPECT_FALSE(r.status().message().empty());
    } else if (r->has_value()) {
      EXPECT_TRUE(ReadJpegInfo(**r).ok());
    }
  }
  EXPECT_GT(failures, 0);
}

}  // namespace
}  // namespace stoker::image
