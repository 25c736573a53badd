#include "image/transform.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_format.h"
#include "image/resize.h"

namespace stoker::image {

CropBox RandomResizedCropBox(int width, int height, plan::SampleRng* rng) {
  constexpr double kScaleLo = 0.08, kScaleHi = 1.0;
  const double log_lo = std::log(3.0 / 4.0), log_hi = std::log(4.0 / 3.0);
  const double area = static_cast<double>(width) * height;
  CropBox box;
  bool found = false;
  for (int attempt = 0; attempt < 10 && !found; ++attempt) {
    const double target_area = area * rng->Uniform(kScaleLo, kScaleHi);
    const double ratio = std::exp(rng->Uniform(log_lo, log_hi));
    const int w = static_cast<int>(std::lround(std::sqrt(target_area * ratio)));
    const int h = static_cast<int>(std::lround(std::sqrt(target_area / ratio)));
    if (w > 0 && h > 0 && w <= width && h <= height) {
      box.y = static_cast<double>(rng->Below(static_cast<uint64_t>(height - h) + 1));
      box.x = static_cast<double>(rng->Below(static_cast<uint64_t>(width - w) + 1));
      box.width = w;
      box.height = h;
      found = true;
    }
  }
  if (!found) {  // centre crop, clamped to the ratio range
    const double in_ratio = static_cast<double>(width) / height;
    int w = width, h = height;
    if (in_ratio < 3.0 / 4.0) {
      h = static_cast<int>(std::lround(w / (3.0 / 4.0)));
    } else if (in_ratio > 4.0 / 3.0) {
      w = static_cast<int>(std::lround(h * (4.0 / 3.0)));
    }
    h = std::clamp(h, 1, height);
    w = std::clamp(w, 1, width);
    box.x = (width - w) / 2;
    box.y = (height - h) / 2;
    box.width = w;
    box.height = h;
  }
  box.flip = rng->Uniform() < 0.5;
  return box;
}

CropBox CenterCropBox(int width, int height, int size) {
  // Resize(round(size / 0.875)) then CenterCrop(size), as a source rectangle.
  const double resize_to = std::round(size / 0.875);
  const double shorter = std::min(width, height);
  const double side = std::min(shorter, size * shorter / resize_to);
  CropBox box;
  box.width = side;
  box.height = side;
  box.x = (width - side) / 2;
  box.y = (height - side) / 2;
  return box;
}

struct ImageTransform::State {
  TransformSpec spec;
  bool ready = false;
  std::vector<uint8_t> decoded;  // region of the JPEG, RGB rows
  std::vector<uint8_t> rgb;      // size x size x 3 after resampling
  std::vector<float> scratch;    // resampling scratch
  ResizeKernel kernel;
};

ImageTransform::ImageTransform() : state_(std::make_unique<State>()) {}
ImageTransform::~ImageTransform() = default;

absl::Status ImageTransform::Setup(const TransformSpec& spec) {
  if (spec.image_size < 1 || spec.image_size > 8192) {
    return absl::InvalidArgumentError(
        absl::StrFormat("image_size %d is outside 1..8192", spec.image_size));
  }
  if (spec.normalize && spec.dtype == DType::kUint8) {
    return absl::InvalidArgumentError("normalize needs dtype float32 or float16, not uint8");
  }
  for (float s : spec.std) {
    if (!(s > 0)) return absl::InvalidArgumentError("std values must be positive");
  }
  state_->spec = spec;
  const size_t n = static_cast<size_t>(spec.image_size) * spec.image_size * 3;
  state_->rgb.assign(n, 0);
  state_->ready = true;
  return absl::OkStatus();
}

size_t ImageTransform::output_bytes() const {
  const TransformSpec& s = state_->spec;
  const size_t elems = static_cast<size_t>(s.image_size) * s.image_size * 3;
  switch (s.dtype) {
    case DType::kUint8:
      return elems;
    case DType::kFloat16:
      return elems * 2;
    case DType::kFloat32:
      return elems * 4;
  }
  return 0;
}

namespace {

// Writes the size x size RGB image `rgb` (HWC, uint8) at dst in the spec's
// layout and dtype, mirrored horizontally when `flip`.
template <typename T>
void Emit(const TransformSpec& spec, const uint8_t* rgb, bool flip, T* dst) {
  const int n = spec.image_size;
  float scale[3], offset[3];
  for (int c = 0; c < 3; ++c) {
    if (spec.normalize) {  // (x / 255 - mean) / std == x * scale + offset
      scale[c] = 1.0f / (255.0f * spec.std[c]);
      offset[c] = -spec.mean[c] / spec.std[c];
    } else {
      scale[c] = 1.0f;
      offset[c] = 0.0f;
    }
  }
  auto convert = [&](uint8_t v, int c) -> T {
    if constexpr (std::is_same_v<T, uint8_t>) {
      return v;
    } else {
      return static_cast<T>(v * scale[c] + offset[c]);
    }
  };
  const size_t plane = static_cast<size_t>(n) * n;
  for (int y = 0; y < n; ++y) {
    const uint8_t* row = rgb + static_cast<size_t>(y) * n * 3;
    for (int x = 0; x < n; ++x) {
      const uint8_t* px = row + 3 * (flip ? n - 1 - x : x);
      if (spec.layout == Layout::kNHWC) {
        T* out = dst + (static_cast<size_t>(y) * n + x) * 3;
        for (int c = 0; c < 3; ++c) out[c] = convert(px[c], c);
      } else {
        const size_t at = static_cast<size_t>(y) * n + x;
        for (int c = 0; c < 3; ++c) dst[c * plane + at] = convert(px[c], c);
      }
    }
  }
}

PixelRect ToPixels(const CropBox& box, int width, int height) {
  PixelRect r;
  r.x = std::clamp(static_cast<int>(std::lround(box.x)), 0, width - 1);
  r.y = std::clamp(static_cast<int>(std::lround(box.y)), 0, height - 1);
  r.width = std::clamp(static_cast<int>(std::lround(box.width)), 1, width - r.x);
  r.height = std::clamp(static_cast<int>(std::lround(box.height)), 1, height - r.y);
  return r;
}

}  // namespace

absl::Status ImageTransform::Run(std::string_view jpeg, plan::SampleRng* rng, void* dst) {
  State& st = *state_;
  if (!st.ready) return absl::FailedPreconditionError("ImageTransform::Run before Setup");
  const TransformSpec& spec = st.spec;
  const int size = spec.image_size;
  bool flip = false;
  DecodedRegion region;
  absl::Status s = DecodeJpegRegion(
      jpeg, spec.limits,
      [&](const JpegInfo& info) {
        const CropBox box = spec.train ? RandomResizedCropBox(info.width, info.height, rng)
                                       : CenterCropBox(info.width, info.height, size);
        flip = box.flip;
        return ToPixels(box, info.width, info.height);
      },
      size, size, &st.decoded, &region);
  if (!s.ok()) return s;

  ResizeParams params;
  params.src_width = region.width;
  params.src_height = region.height;
  params.channels = 3;
  params.crop = region.region;
  params.dst_width = size;
  params.dst_height = size;
  if (s = st.kernel.Setup(params); !s.ok()) return s;
  if (st.scratch.size() < st.kernel.scratch_size()) st.scratch.resize(st.kernel.scratch_size());
  const ImageView src{st.decoded.data(), region.width, region.height, 3,
                      static_cast<ptrdiff_t>(region.width) * 3};
  const MutableImageView out{st.rgb.data(), size, size, 3, static_cast<ptrdiff_t>(size) * 3};
  if (s = st.kernel.Run(src, out, absl::MakeSpan(st.scratch)); !s.ok()) return s;

  switch (spec.dtype) {
    case DType::kUint8:
      Emit(spec, st.rgb.data(), flip, static_cast<uint8_t*>(dst));
      break;
    case DType::kFloat32:
      Emit(spec, st.rgb.data(), flip, static_cast<float*>(dst));
      break;
    case DType::kFloat16:
      Emit(spec, st.rgb.data(), flip, static_cast<_Float16*>(dst));
      break;
  }
  return absl::OkStatus();
}

}  // namespace stoker::image
