#include "image/resize.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"

namespace stoker::image {
namespace {

constexpr int kMaxDstSize = 1 << 16;
// Floats after each ring row and the widened row, for the spare lane of
// ResampleRgb's last load and store; 4 keeps rows 16-byte aligned when the
// row length allows.
constexpr size_t kRowSlack = 4;

// Four floats in one SSE/NEON register (GCC and Clang vector extension).
// An RGB tap loads one pixel plus the next pixel's red into the fourth lane,
// so a tap is one multiply-add; the fourth lane is garbage and discarded.
typedef float Float4 __attribute__((vector_size(16)));

// Widens `n` bytes (one crop row) to float.
void Widen(const uint8_t* __restrict src, int n, float* __restrict out) {
  for (int x = 0; x < n; ++x) out[x] = src[x];
}

// The horizontal pass over one widened row; every output has `taps` taps
// (PadToStride). kTaps > 0 fixes the tap count at compile time so the tap
// loop unrolls; 0 reads it from `taps`. Whole-Float4
// accesses run one float past the last pixel, so both `src` and `out` need one
// float of slack; the spare lane of each store is overwritten by the next
// pixel.
template <int kTaps>
void ResampleRgb(const float* src, const int* start, const float* weights,
                 int taps, int dst_width, float* out) {
  const int n = kTaps > 0 ? kTaps : taps;
  for (int i = 0; i < dst_width; ++i) {
    const float* p = src + 3 * start[i];
    const float* w = weights + static_cast<ptrdiff_t>(i) * n;
    Float4 acc = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int k = 0; k < n; ++k) {
      Float4 v;
      std::memcpy(&v, p + 3 * k, sizeof(v));
      acc += w[k] * v;
    }
    std::memcpy(out + 3 * i, &acc, sizeof(acc));
  }
}

template <int kTaps>
void ResampleGray(const float* src, const int* start, const float* weights,
                  int taps, int dst_width, float* out) {
  const int n = kTaps > 0 ? kTaps : taps;
  for (int i = 0; i < dst_width; ++i) {
    const float* p = src + start[i];
    const float* w = weights + static_cast<ptrdiff_t>(i) * n;
    float acc = 0.0f;
    for (int k = 0; k < n; ++k) acc += w[k] * p[k];
    out[i] = acc;
  }
}

template <int kChannels, int kTaps>
void ResampleWith(const float* src, const int* start, const float* weights,
                  int taps, int dst_width, float* out) {
  if constexpr (kChannels == 3) {
    ResampleRgb<kTaps>(src, start, weights, taps, dst_width, out);
  } else {
    ResampleGray<kTaps>(src, start, weights, taps, dst_width, out);
  }
}

// Unrolled versions for the tap counts of shrinking by up to ~3x, which
// covers pack --resize and most crops.
template <int kChannels>
void Resample(const float* src, const int* start, const float* weights,
              int taps, int dst_width, float* out) {
  switch (taps) {
#define STOKER_RESAMPLE_CASE(n)                                             \
  case n:                                                                   \
    return ResampleWith<kChannels, n>(src, start, weights, taps, dst_width, \
                                      out);
    STOKER_RESAMPLE_CASE(1)
    STOKER_RESAMPLE_CASE(2)
    STOKER_RESAMPLE_CASE(3)
    STOKER_RESAMPLE_CASE(4)
    STOKER_RESAMPLE_CASE(5)
    STOKER_RESAMPLE_CASE(6)
    STOKER_RESAMPLE_CASE(7)
    STOKER_RESAMPLE_CASE(8)
#undef STOKER_RESAMPLE_CASE
    default:
      return ResampleWith<kChannels, 0>(src, start, weights, taps, dst_width,
                                        out);
  }
}

inline uint8_t RoundToByte(float v) {
  // Round half up: add 0.5 and truncate. The triangle filter has no negative
  // lobes, so v >= 0 exactly and only float drift can pass 255.5; clamping
  // that one side keeps the loop cheap once vectorised (a two-sided clamp
  // costs GCC 12 twice the time). A filter with negative lobes must clamp
  // at 0 too.
  return static_cast<uint8_t>(static_cast<int32_t>(std::min(v + 0.5f, 255.0f)));
}

// The vertical pass: element-wise loops over whole rows, two taps per pass
// (the odd tap out pairs with itself at weight 0). __restrict tells the
// compiler the uint8_t output aliases no float row, so it vectorises without
// runtime overlap checks.
void Mul2(const float* __restrict a, float wa, const float* __restrict b,
          float wb, int n, float* __restrict acc) {
  for (int x = 0; x < n; ++x) acc[x] = wa * a[x] + wb * b[x];
}

void MulAdd2(const float* __restrict a, float wa, const float* __restrict b,
             float wb, int n, float* __restrict acc) {
  for (int x = 0; x < n; ++x) acc[x] += wa * a[x] + wb * b[x];
}

void Mul2ToBytes(const float* __restrict a, float wa, const float* __restrict b,
                 float wb, int n, uint8_t* __restrict out) {
  for (int x = 0; x < n; ++x) out[x] = RoundToByte(wa * a[x] + wb * b[x]);
}

void MulAdd2ToBytes(const float* __restrict acc, const float* __restrict a,
                    float wa, const float* __restrict b, float wb, int n,
                    uint8_t* __restrict out) {
  for (int x = 0; x < n; ++x) {
    out[x] = RoundToByte(acc[x] + (wa * a[x] + wb * b[x]));
  }
}

}  // namespace

absl::Status ResizeParams::Validate() const {
  if (src_width <= 0 || src_height <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "resize: source size %dx%d is not positive", src_width, src_height));
  }
  if (channels != 1 && channels != 3) {
    return absl::InvalidArgumentError(
        absl::StrFormat("resize: channels is %d, expected 1 or 3", channels));
  }
  if (dst_width <= 0 || dst_height <= 0 || dst_width > kMaxDstSize ||
      dst_height > kMaxDstSize) {
    return absl::InvalidArgumentError(
        absl::StrFormat("resize: output size %dx%d is not in [1, %d]",
                        dst_width, dst_height, kMaxDstSize));
  }
  if (crop.has_value()) {
    const PixelRect& r = *crop;
    // 64-bit sums: x + width must not overflow before the comparison.
    if (r.x < 0 || r.y < 0 || r.width <= 0 || r.height <= 0 ||
        int64_t{r.x} + r.width > src_width ||
        int64_t{r.y} + r.height > src_height) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "resize: crop %dx%d at (%d, %d) is empty or outside the %dx%d "
          "source",
          r.width, r.height, r.x, r.y, src_width, src_height));
    }
  }
  return absl::OkStatus();
}

ResizeKernel::AxisTable ResizeKernel::MakeAxisTable(int crop_size,
                                                    int dst_size) {
  // Output sample i sits at crop coordinate (i + 0.5) * scale and source
  // pixel j at j + 0.5. The triangle has radius 1 output pixel expressed in
  // source pixels, never less than 1 source pixel, so shrinking averages
  // every pixel it covers instead of skipping some.
  const double scale = static_cast<double>(crop_size) / dst_size;
  const double radius = std::max(scale, 1.0);
  const int max_taps =
      std::min(crop_size, static_cast<int>(std::ceil(2.0 * radius)) + 1);

  AxisTable table;
  table.start.resize(dst_size);
  table.count.resize(dst_size);
  table.weights.assign(static_cast<size_t>(dst_size) * max_taps, 0.0f);
  std::vector<double> w(max_taps + 2);
  for (int i = 0; i < dst_size; ++i) {
    const double center = (i + 0.5) * scale;
    int lo = std::max(0, static_cast<int>(std::ceil(center - radius - 0.5)));
    int hi = std::min(crop_size - 1,
                      static_cast<int>(std::floor(center - 0.5 + radius)));
    // Drop taps whose weight is exactly zero (the window edge).
    auto weight = [&](int j) {
      return std::max(0.0, 1.0 - std::abs(j + 0.5 - center) / radius);
    };
    while (lo < hi && weight(lo) <= 0.0) ++lo;
    while (hi > lo && weight(hi) <= 0.0) --hi;
    const int n = hi - lo + 1;
    double sum = 0.0;
    for (int k = 0; k < n; ++k) sum += w[k] = weight(lo + k);
    // sum > 0: the source pixel nearest the centre is within 0.5 of it and
    // always inside the window, with weight >= 0.5.
    float* out = &table.weights[static_cast<size_t>(i) * max_taps];
    for (int k = 0; k < n; ++k) out[k] = static_cast<float>(w[k] / sum);
    table.start[i] = lo;
    table.count[i] = n;
    table.stride = std::max(table.stride, n);
  }
  // Rows were laid out max_taps apart; compact them to the longest filter
  // actually used, which also sizes the row ring in Setup.
  const int longest = table.stride;
  if (longest < max_taps) {
    for (int i = 1; i < dst_size; ++i) {
      std::copy_n(&table.weights[static_cast<size_t>(i) * max_taps], longest,
                  &table.weights[static_cast<size_t>(i) * longest]);
    }
    table.weights.resize(static_cast<size_t>(dst_size) * longest);
  }
  return table;
}

void ResizeKernel::PadToStride(int crop_size, AxisTable* table) {
  const int stride = table->stride;
  for (size_t i = 0; i < table->start.size(); ++i) {
    float* w = &table->weights[i * stride];
    // Near the far edge, slide the window back inside the crop and shift the
    // weights to match; the taps this adds get weight 0.
    const int shift = std::max(0, table->start[i] + stride - crop_size);
    if (shift > 0) {
      std::copy_backward(w, w + table->count[i], w + table->count[i] + shift);
      std::fill_n(w, shift, 0.0f);
      table->start[i] -= shift;
    }
    table->count[i] = stride;
  }
}

absl::Status ResizeKernel::Setup(const ResizeParams& params) {
  ready_ = false;
  scratch_size_ = 0;
  if (absl::Status s = params.Validate(); !s.ok()) return s;
  params_ = params;
  if (!params_.crop.has_value()) {
    params_.crop = PixelRect{0, 0, params.src_width, params.src_height};
  }
  const PixelRect& crop = *params_.crop;
  horizontal_ = MakeAxisTable(crop.width, params.dst_width);
  // Equal tap counts make the horizontal inner loop's exit predictable,
  // worth more than the zero taps cost; the vertical pass loops over whole
  // rows per tap and keeps exact counts.
  PadToStride(crop.width, &horizontal_);
  vertical_ = MakeAxisTable(crop.height, params.dst_height);
  // A ring of horizontally resampled rows, as many as the longest vertical
  // filter; an accumulator row; one crop row widened to float.
  const size_t row = static_cast<size_t>(params.dst_width) * params.channels;
  scratch_size_ = vertical_.stride * (row + kRowSlack) + row +
                  static_cast<size_t>(crop.width) * params.channels + kRowSlack;
  ready_ = true;
  return absl::OkStatus();
}

absl::Status ResizeKernel::Run(const ImageView& src,
                               const MutableImageView& dst,
                               absl::Span<float> scratch) const {
  if (!ready_) {
    return absl::FailedPreconditionError(
        "resize: Run before a successful Setup");
  }
  const ResizeParams& p = params_;
  if (src.data == nullptr || src.width != p.src_width ||
      src.height != p.src_height || src.channels != p.channels ||
      std::abs(src.row_stride) < ptrdiff_t{src.width} * src.channels) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "resize: source view %dx%dx%d (stride %d) does not match the "
        "configured %dx%dx%d",
        src.width, src.height, src.channels, src.row_stride, p.src_width,
        p.src_height, p.channels));
  }
  if (dst.data == nullptr || dst.width != p.dst_width ||
      dst.height != p.dst_height || dst.channels != p.channels ||
      std::abs(dst.row_stride) < ptrdiff_t{dst.width} * dst.channels) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "resize: output view %dx%dx%d (stride %d) does not match the "
        "configured %dx%dx%d",
        dst.width, dst.height, dst.channels, dst.row_stride, p.dst_width,
        p.dst_height, p.channels));
  }
  if (scratch.size() < scratch_size_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("resize: scratch holds %d floats, Setup asked for %d",
                        scratch.size(), scratch_size_));
  }

  const PixelRect& crop = *p.crop;
  const int row_len = p.dst_width * p.channels;
  const size_t ring_stride = static_cast<size_t>(row_len) + kRowSlack;
  const int ring = vertical_.stride;
  float* const ring_base = scratch.data();
  float* const acc = ring_base + ring * ring_stride;
  float* const wide = acc + row_len;
  // The slack read by ResampleRgb's last tap: any finite value will do.
  std::fill_n(wide + crop.width * p.channels, kRowSlack, 0.0f);
  auto ring_row = [&](int crop_row) {
    return ring_base + (crop_row % ring) * ring_stride;
  };
  const int* h_start = horizontal_.start.data();
  const float* h_weights = horizontal_.weights.data();

  // Windows only move down as the output row grows, so each source row is
  // resampled horizontally once, into the ring slot it keeps while any
  // window still needs it.
  int next_row = vertical_.start[0];
  for (int y = 0; y < p.dst_height; ++y) {
    const int first = vertical_.start[y];
    const int n = vertical_.count[y];
    next_row = std::max(next_row, first);
    for (; next_row < first + n; ++next_row) {
      const uint8_t* src_row = src.data + (crop.y + next_row) * src.row_stride +
                               static_cast<ptrdiff_t>(crop.x) * p.channels;
      Widen(src_row, crop.width * p.channels, wide);
      if (p.channels == 3) {
        Resample<3>(wide, h_start, h_weights, horizontal_.stride, p.dst_width,
                    ring_row(next_row));
      } else {
        Resample<1>(wide, h_start, h_weights, horizontal_.stride, p.dst_width,
                    ring_row(next_row));
      }
    }

    // Taps go in pairs; the first pair initialises the accumulator and the
    // last is fused with rounding, so n taps cost ceil(n / 2) passes.
    const float* w =
        vertical_.weights.data() + static_cast<size_t>(y) * vertical_.stride;
    uint8_t* out = dst.data + y * dst.row_stride;
    auto row_a = [&](int k) { return ring_row(first + k); };
    auto row_b = [&](int k) {
      return ring_row(first + std::min(k + 1, n - 1));
    };
    auto weight_b = [&](int k) { return k + 1 < n ? w[k + 1] : 0.0f; };
    if (n <= 2) {
      Mul2ToBytes(row_a(0), w[0], row_b(0), weight_b(0), row_len, out);
      continue;
    }
    Mul2(row_a(0), w[0], row_b(0), w[1], row_len, acc);
    int k = 2;
    for (; k + 2 < n; k += 2) {
      MulAdd2(row_a(k), w[k], row_b(k), w[k + 1], row_len, acc);
    }
    MulAdd2ToBytes(acc, row_a(k), w[k], row_b(k), weight_b(k), row_len, out);
  }
  return absl::OkStatus();
}

absl::Status ResizeImage(const ImageView& src,
                         const std::optional<PixelRect>& crop,
                         const MutableImageView& dst) {
  ResizeParams params;
  params.src_width = src.width;
  params.src_height = src.height;
  params.channels = src.channels;
  params.crop = crop;
  params.dst_width = dst.width;
  params.dst_height = dst.height;
  ResizeKernel kernel;
  if (absl::Status s = kernel.Setup(params); !s.ok()) return s;
  std::vector<float> scratch(kernel.scratch_size());
  return kernel.Run(src, dst, absl::MakeSpan(scratch));
}

}  // namespace stoker::image
