#include "image/resize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "image/resize_rows.h"

namespace stoker::image {
namespace {

using ::testing::HasSubstr;

// A tightly packed image owning its pixels.
struct Image {
  int width = 0;
  int height = 0;
  int channels = 0;
  std::vector<uint8_t> data;

  Image(int w, int h, int c, uint8_t fill = 0)
      : width(w),
        height(h),
        channels(c),
        data(static_cast<size_t>(w) * h * c, fill) {}
  uint8_t& at(int x, int y, int c) {
    return data[(static_cast<size_t>(y) * width + x) * channels + c];
  }
  uint8_t at(int x, int y, int c) const {
    return data[(static_cast<size_t>(y) * width + x) * channels + c];
  }
  ImageView view() const {
    return {data.data(), width, height, channels,
            static_cast<ptrdiff_t>(width) * channels};
  }
  MutableImageView mutable_view() {
    return {data.data(), width, height, channels,
            static_cast<ptrdiff_t>(width) * channels};
  }
};

ResizeParams Params(int src_width, int src_height, int channels, int dst_width,
                    int dst_height,
                    std::optional<PixelRect> crop = std::nullopt) {
  ResizeParams p;
  p.src_width = src_width;
  p.src_height = src_height;
  p.channels = channels;
  p.crop = crop;
  p.dst_width = dst_width;
  p.dst_height = dst_height;
  return p;
}

Image RandomImage(int w, int h, int c, std::mt19937& rng) {
  Image img(w, h, c);
  for (uint8_t& v : img.data) v = static_cast<uint8_t>(rng());
  return img;
}

Image Resized(const Image& src, int w, int h,
              std::optional<PixelRect> crop = std::nullopt) {
  Image dst(w, h, src.channels);
  const absl::Status s = ResizeImage(src.view(), crop, dst.mutable_view());
  EXPECT_TRUE(s.ok()) << s;
  return dst;
}

// The filter written straight from its definition, in double, one output
// pixel at a time: an independent check of the tables, the row ring and the
// two passes.
std::vector<double> ReferenceWeights(double center, double scale, int size,
                                     int* first) {
  const double radius = std::max(scale, 1.0);
  std::vector<double> w;
  *first = -1;
  for (int j = 0; j < size; ++j) {
    const double v = 1.0 - std::abs(j + 0.5 - center) / radius;
    if (v <= 0) continue;
    if (*first < 0) *first = j;
    w.resize(j - *first + 1, 0.0);
    w.back() = v;
  }
  double sum = 0;
  for (double v : w) sum += v;
  for (double& v : w) v /= sum;
  return w;
}

Image Reference(const Image& src, PixelRect crop, int w, int h) {
  Image dst(w, h, src.channels);
  const double sx = static_cast<double>(crop.width) / w;
  const double sy = static_cast<double>(crop.height) / h;
  for (int y = 0; y < h; ++y) {
    int y0;
    const auto wy = ReferenceWeights((y + 0.5) * sy, sy, crop.height, &y0);
    for (int x = 0; x < w; ++x) {
      int x0;
      const auto wx = ReferenceWeights((x + 0.5) * sx, sx, crop.width, &x0);
      for (int c = 0; c < src.channels; ++c) {
        double acc = 0;
        for (size_t j = 0; j < wy.size(); ++j) {
          for (size_t i = 0; i < wx.size(); ++i) {
            acc += wy[j] * wx[i] *
                   src.at(crop.x + x0 + static_cast<int>(i),
                          crop.y + y0 + static_cast<int>(j), c);
          }
        }
        dst.at(x, y, c) =
            static_cast<uint8_t>(std::clamp(std::lround(acc), 0L, 255L));
      }
    }
  }
  return dst;
}

int MaxDiff(const Image& a, const Image& b) {
  int d = 0;
  for (size_t i = 0; i < a.data.size(); ++i) {
    d = std::max(d, std::abs(a.data[i] - b.data[i]));
  }
  return d;
}

TEST(ResizeParamsTest, Validate) {
  const ResizeParams ok = Params(10, 8, 3, 5, 4);
  EXPECT_TRUE(ok.Validate().ok());

  ResizeParams p = ok;
  p.channels = 2;
  EXPECT_THAT(p.Validate().message(), HasSubstr("channels"));
  p = ok;
  p.src_width = 0;
  EXPECT_EQ(p.Validate().code(), absl::StatusCode::kInvalidArgument);
  p = ok;
  p.dst_height = 0;
  EXPECT_EQ(p.Validate().code(), absl::StatusCode::kInvalidArgument);
  p = ok;
  p.dst_width = (1 << 16) + 1;
  EXPECT_EQ(p.Validate().code(), absl::StatusCode::kInvalidArgument);
  for (PixelRect bad :
       {PixelRect{-1, 0, 5, 5}, PixelRect{6, 0, 5, 5}, PixelRect{0, 4, 10, 5},
        PixelRect{0, 0, 0, 5}, PixelRect{0, 0, 5, -1},
        PixelRect{1, 0, 2147483647, 1}}) {
    p = ok;
    p.crop = bad;
    EXPECT_THAT(p.Validate().message(), HasSubstr("crop")) << bad.x;
  }
  p = ok;
  p.crop = PixelRect{0, 0, 10, 8};
  EXPECT_TRUE(p.Validate().ok());
}

TEST(ResizeKernelTest, RunChecksItsArguments) {
  Image src(10, 8, 3), dst(5, 4, 3);
  std::vector<float> scratch(1 << 12);
  ResizeKernel kernel;
  EXPECT_EQ(kernel.Run(src.view(), dst.mutable_view(), absl::MakeSpan(scratch))
                .code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(kernel.Setup(Params(10, 8, 3, 5, 4)).ok());
  ASSERT_GT(kernel.scratch_size(), 0u);
  EXPECT_TRUE(
      kernel.Run(src.view(), dst.mutable_view(), absl::MakeSpan(scratch)).ok());

  Image wrong_src(10, 9, 3), wrong_dst(5, 4, 1);
  EXPECT_THAT(
      kernel.Run(wrong_src.view(), dst.mutable_view(), absl::MakeSpan(scratch))
          .message(),
      HasSubstr("source"));
  EXPECT_THAT(
      kernel.Run(src.view(), wrong_dst.mutable_view(), absl::MakeSpan(scratch))
          .message(),
      HasSubstr("output"));
  ImageView short_stride = src.view();
  short_stride.row_stride = 29;
  EXPECT_FALSE(
      kernel.Run(short_stride, dst.mutable_view(), absl::MakeSpan(scratch))
          .ok());
  EXPECT_THAT(
      kernel
          .Run(src.view(), dst.mutable_view(),
               absl::MakeSpan(scratch.data(), kernel.scratch_size() - 1))
          .message(),
      HasSubstr("scratch"));
  // A failed Setup leaves the kernel unconfigured.
  EXPECT_FALSE(kernel.Setup(Params(10, 8, 4, 5, 4)).ok());
  EXPECT_EQ(kernel.scratch_size(), 0u);
  EXPECT_EQ(kernel.Run(src.view(), dst.mutable_view(), absl::MakeSpan(scratch))
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ResizeKernelTest, ConstantImageStaysConstant) {
  struct Case {
    int sw, sh, dw, dh;
  };
  for (int channels : {1, 3}) {
    for (Case c :
         {Case{400, 533, 256, 341}, Case{100, 100, 7, 3}, Case{13, 17, 50, 61},
          Case{1000, 1, 3, 1}, Case{1, 1000, 1, 9}, Case{64, 64, 64, 64}}) {
      for (uint8_t value :
           {uint8_t{0}, uint8_t{1}, uint8_t{128}, uint8_t{254}, uint8_t{255}}) {
        Image src(c.sw, c.sh, channels, value);
        const Image dst = Resized(src, c.dw, c.dh);
        for (uint8_t v : dst.data) {
          ASSERT_EQ(v, value) << c.sw << "x" << c.sh << " -> " << c.dw << "x"
                              << c.dh << " channels " << channels;
        }
      }
    }
  }
}

TEST(ResizeKernelTest, SameSizeIsExactCopy) {
  std::mt19937 rng(1);
  const Image src = RandomImage(37, 23, 3, rng);
  EXPECT_EQ(Resized(src, 37, 23).data, src.data);
  const Image crop = Resized(src, 10, 5, PixelRect{4, 6, 10, 5});
  for (int y = 0; y < 5; ++y) {
    for (int x = 0; x < 10; ++x) {
      for (int c = 0; c < 3; ++c) {
        ASSERT_EQ(crop.at(x, y, c), src.at(x + 4, y + 6, c));
      }
    }
  }
}

// 4 -> 2 by hand: centres at 1 and 3, radius 2, taps (0.75, 0.75, 0.25) and
// (0.25, 0.75, 0.75) over 1.75: (75 + 50) / 1.75 = 71.4, (25 + 150 + 30) /
// 1.75 = 117.1. Pins the filter shape (PIL's antialiased BILINEAR).
TEST(ResizeKernelTest, HalvingByHand) {
  Image src(4, 1, 1);
  src.data = {0, 100, 200, 40};
  EXPECT_EQ(Resized(src, 2, 1).data, (std::vector<uint8_t>{71, 117}));
  // Enlarging is plain bilinear with clamped edges: 2 -> 4 gives centres at
  // source -0.25, 0.25, 0.75, 1.25.
  Image small(2, 1, 1);
  small.data = {0, 200};
  EXPECT_EQ(Resized(small, 4, 1).data, (std::vector<uint8_t>{0, 50, 150, 200}));
}

TEST(ResizeKernelTest, HorizontalRampStaysMonotoneAndKeepsItsMean) {
  struct Case {
    int sw, sh, dw, dh;
    std::optional<PixelRect> crop;
  };
  for (int channels : {1, 3}) {
    for (const Case& c :
         {Case{400, 30, 256, 20, std::nullopt},
          Case{317, 9, 100, 9, std::nullopt}, Case{256, 16, 3, 5, std::nullopt},
          Case{300, 40, 123, 17, PixelRect{40, 5, 200, 30}},
          Case{60, 4, 250, 4, std::nullopt}}) {
      SCOPED_TRACE(testing::Message() << c.sw << " -> " << c.dw);
      Image src(c.sw, c.sh, channels);
      for (int y = 0; y < c.sh; ++y) {
        for (int x = 0; x < c.sw; ++x) {
          for (int ch = 0; ch < channels; ++ch) {
            src.at(x, y, ch) = static_cast<uint8_t>(x * 255 / (c.sw - 1));
          }
        }
      }
      const Image dst = Resized(src, c.dw, c.dh, c.crop);
      const PixelRect r = c.crop.value_or(PixelRect{0, 0, c.sw, c.sh});
      double src_mean = 0, dst_mean = 0;
      for (int x = r.x; x < r.x + r.width; ++x) src_mean += src.at(x, r.y, 0);
      src_mean /= r.width;
      for (int y = 0; y < c.dh; ++y) {
        double row_mean = 0;
        for (int x = 0; x < c.dw; ++x) {
          for (int ch = 0; ch < channels; ++ch) {
            ASSERT_EQ(dst.at(x, y, ch),
                      dst.at(x, 0, 0));  // rows, channels agree
          }
          if (x > 0) {
            ASSERT_GE(dst.at(x, y, 0), dst.at(x - 1, y, 0)) << x;
          }
          row_mean += dst.at(x, y, 0);
        }
        dst_mean += row_mean / c.dw;
      }
      dst_mean /= c.dh;
      EXPECT_NEAR(dst_mean, src_mean, 1.0);
    }
  }
}

TEST(ResizeKernelTest, MatchesReferenceOnRandomImages) {
  std::mt19937 rng(42);
  auto uniform = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  for (int trial = 0; trial < 60; ++trial) {
    const int channels = trial % 2 == 0 ? 3 : 1;
    const Image src =
        RandomImage(uniform(1, 90), uniform(1, 90), channels, rng);
    PixelRect crop{0, 0, src.width, src.height};
    if (trial % 3 != 0) {
      crop.width = uniform(1, src.width);
      crop.height = uniform(1, src.height);
      crop.x = uniform(0, src.width - crop.width);
      crop.y = uniform(0, src.height - crop.height);
    }
    const int w = uniform(1, 120), h = uniform(1, 120);
    SCOPED_TRACE(testing::Message()
                 << "trial " << trial << ": " << src.width << "x" << src.height
                 << " crop " << crop.width << "x" << crop.height << "+"
                 << crop.x << "+" << crop.y << " -> " << w << "x" << h);
    EXPECT_LE(MaxDiff(Resized(src, w, h, crop), Reference(src, crop, w, h)), 1);
  }
}

TEST(ResizeKernelTest, Avx2BuildIsBitIdenticalToBaseline) {
  AllowAvx2ForTesting(true);
  if (!HasAvx2()) GTEST_SKIP() << "this CPU has no AVX2";
  std::mt19937 rng(3);
  struct Case {
    int sw, sh, channels, dw, dh;
  };
  for (const Case& c : {Case{350, 350, 3, 224, 224}, Case{640, 480, 3, 300, 97},
                        Case{97, 61, 3, 224, 224}, Case{500, 333, 1, 123, 77}}) {
    std::vector<uint8_t> src(static_cast<size_t>(c.sw) * c.sh * c.channels);
    for (uint8_t& v : src) v = static_cast<uint8_t>(rng());
    const ImageView in{src.data(), c.sw, c.sh, c.channels,
                       static_cast<ptrdiff_t>(c.sw) * c.channels};
    std::vector<uint8_t> wide(static_cast<size_t>(c.dw) * c.dh * c.channels);
    std::vector<uint8_t> base(wide.size());
    const std::optional<PixelRect> crop = PixelRect{3, 2, c.sw - 5, c.sh - 4};
    const ptrdiff_t stride = static_cast<ptrdiff_t>(c.dw) * c.channels;
    ASSERT_TRUE(ResizeImage(in, crop, {wide.data(), c.dw, c.dh, c.channels, stride}).ok());
    AllowAvx2ForTesting(false);
    ASSERT_TRUE(ResizeImage(in, crop, {base.data(), c.dw, c.dh, c.channels, stride}).ok());
    AllowAvx2ForTesting(true);
    EXPECT_EQ(wide, base) << c.sw << "x" << c.sh << " -> " << c.dw << "x" << c.dh;
  }
}

TEST(ResizeKernelTest, StridesAndPadding) {
  std::mt19937 rng(3);
  const Image packed = RandomImage(50, 40, 3, rng);
  const PixelRect crop{5, 7, 33, 29};
  const Image want = Resized(packed, 20, 17, crop);

  // Source rows padded with 0xEE bytes, which must not leak in.
  const ptrdiff_t src_stride = 50 * 3 + 13;
  std::vector<uint8_t> src_buf(src_stride * 40, 0xEE);
  for (int y = 0; y < 40; ++y) {
    std::copy_n(&packed.data[y * 150], 150, &src_buf[y * src_stride]);
  }
  // Output rows padded with a sentinel that must survive.
  const ptrdiff_t dst_stride = 20 * 3 + 5;
  std::vector<uint8_t> dst_buf(dst_stride * 17, 0x5A);

  ResizeKernel kernel;
  ASSERT_TRUE(kernel.Setup(Params(50, 40, 3, 20, 17, crop)).ok());
  std::vector<float> scratch(kernel.scratch_size());
  ASSERT_TRUE(kernel
                  .Run({src_buf.data(), 50, 40, 3, src_stride},
                       {dst_buf.data(), 20, 17, 3, dst_stride},
                       absl::MakeSpan(scratch))
                  .ok());
  for (int y = 0; y < 17; ++y) {
    for (int i = 0; i < 60; ++i) {
      ASSERT_EQ(dst_buf[y * dst_stride + i], want.data[y * 60 + i]);
    }
    for (int i = 60; i < dst_stride; ++i) {
      ASSERT_EQ(dst_buf[y * dst_stride + i], 0x5A);
    }
  }

  // A negative stride walks the rows bottom-up: a vertically flipped source.
  Image flipped(20, 17, 3);
  ASSERT_TRUE(
      kernel
          .Run({src_buf.data() + 39 * src_stride, 50, 40, 3, -src_stride},
               flipped.mutable_view(), absl::MakeSpan(scratch))
          .ok());
  Image mirror(50, 40, 3);
  for (int y = 0; y < 40; ++y) {
    std::copy_n(&packed.data[(39 - y) * 150], 150, &mirror.data[y * 150]);
  }
  EXPECT_EQ(flipped.data, Resized(mirror, 20, 17, crop).data);
}

TEST(ResizeKernelTest, ConcurrentRunsShareOneKernel) {
  std::mt19937 rng(9);
  const Image src = RandomImage(300, 200, 3, rng);
  ResizeKernel kernel;
  ASSERT_TRUE(kernel.Setup(Params(300, 200, 3, 111, 74)).ok());
  const Image want = Resized(src, 111, 74);
  std::vector<Image> out(6, Image(111, 74, 3));
  std::vector<std::thread> threads;
  for (size_t t = 0; t < out.size(); ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> scratch(kernel.scratch_size());
      for (int i = 0; i < 10; ++i) {
        ASSERT_TRUE(
            kernel
                .Run(src.view(), out[t].mutable_view(), absl::MakeSpan(scratch))
                .ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const Image& o : out) EXPECT_EQ(o.data, want.data);
}

}  // namespace
}  // namespace stoker::image
