#include "image/resize.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "image/resize_rows.h"

// The baseline build of the row loop.
#define STOKER_RESIZE_NS generic
#include "image/resize_rows.inc"
#undef STOKER_RESIZE_NS

namespace stoker::image {
namespace {

constexpr int kMaxDstSize = 1 << 16;
constexpr size_t kRowSlack = kResizeRowSlack;

}  // namespace

namespace {
std::atomic<bool> allow_avx2{true};
}  // namespace

bool HasAvx2() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx2");
  return has && allow_avx2.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

void AllowAvx2ForTesting(bool allow) { allow_avx2.store(allow); }

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

  const RowJob job{p,
                   src,
                   dst,
                   {horizontal_.start.data(), horizontal_.count.data(),
                    horizontal_.weights.data(), horizontal_.stride},
                   {vertical_.start.data(), vertical_.count.data(), vertical_.weights.data(),
                    vertical_.stride},
                   scratch.data()};
  if (HasAvx2()) {
    avx2::RunRows(job);
  } else {
    generic::RunRows(job);
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
