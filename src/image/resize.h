#ifndef STOKER_SRC_IMAGE_RESIZE_H_
#define STOKER_SRC_IMAGE_RESIZE_H_

// Separable, antialiased resampling of 8-bit interleaved images.
//
// The kernel follows the Setup/Run split of every stoker transform: Setup
// turns the geometry into per-output index and weight tables and says how
// much scratch memory Run needs; Run resamples into memory the caller owns
// and never allocates. It is the hot path of `stoker pack --resize` and of
// RandomResizedCrop in the loader.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace stoker::image {

// A read-only window onto 8-bit pixels stored row by row, channels
// interleaved (RGBRGB... or one byte per pixel). Does not own the pixels,
// which must remain live while a call that receives the view runs.
struct ImageView {
  const uint8_t* data = nullptr;  // first byte of the top-left pixel
  int width = 0;                  // in pixels
  int height = 0;                 // in rows
  int channels = 0;               // 1 (gray) or 3 (RGB)
  // Bytes from the start of one row to the start of the next. Any value whose
  // magnitude is at least width * channels; negative walks rows bottom-up.
  ptrdiff_t row_stride = 0;
};

// As ImageView, for output. Bytes between width * channels and row_stride
// (row padding) are never written.
struct MutableImageView {
  uint8_t* data = nullptr;
  int width = 0;
  int height = 0;
  int channels = 0;
  ptrdiff_t row_stride = 0;
};

// A rectangle of whole source pixels: columns [x, x + width), rows
// [y, y + height).
struct PixelRect {
  int x = 0;
  int y = 0;
  int width = 0;
  int height = 0;
};

// The geometry of one resize. Checked by Validate(), which Setup calls.
struct ResizeParams {
  int src_width = 0;   // source image size, pixels; > 0
  int src_height = 0;  // > 0
  int channels = 3;    // 1 or 3
  // Part of the source to resample; unset means the whole source. Must lie
  // inside the source and be non-empty. Only pixels inside the crop are read,
  // so the result equals cropping first and resizing the crop (the
  // torchvision RandomResizedCrop semantics), and a decoder may fill just
  // the crop.
  std::optional<PixelRect> crop;
  int dst_width = 0;   // output size, pixels; > 0, at most 1 << 16
  int dst_height = 0;  // > 0, at most 1 << 16

  // Returns InvalidArgument, naming the field, if any constraint above fails.
  absl::Status Validate() const;
};

// Resamples with a triangle (bilinear) filter. When shrinking along an axis by
// a factor s > 1 the filter is stretched to a radius of s source pixels, so
// every source pixel contributes (antialiasing, as PIL's Image.resize with
// BILINEAR); when enlarging it is plain bilinear interpolation. Pixel centres
// are aligned (half-pixel convention), edges are clamped to the crop, and
// results are rounded to nearest and clamped to [0, 255]. Accumulation is in
// float; a constant image stays exactly constant.
//
// Typical use (error checks elided):
//   ResizeKernel kernel;
//   absl::Status s = kernel.Setup(params);
//   scratch.resize(kernel.scratch_size());  // a std::vector<float>, reused
//   s = kernel.Run(src, dst, absl::MakeSpan(scratch));
//
// Thread safety: Setup mutates and must not run concurrently with anything
// else on the same object. After Setup, Run is const and safe for concurrent
// use from many threads, each with its own scratch and output.
class ResizeKernel {
 public:
  ResizeKernel() = default;

  // Computes the weight tables and scratch size for `params`. Allocates (the
  // tables); may be called again to reconfigure. Returns InvalidArgument if
  // params.Validate() fails, leaving the kernel unconfigured.
  absl::Status Setup(const ResizeParams& params);

  // Number of floats of scratch Run needs; 0 before a successful Setup.
  // About (taps + 1) * dst_width * channels + 4 * crop width, where taps,
  // the vertical filter length, is at most 2 * max(1, crop height /
  // dst_height) + 2. For 400x533 -> 256x341 RGB: about 16 KiB.
  size_t scratch_size() const { return scratch_size_; }

  // The parameters of the last successful Setup.
  const ResizeParams& params() const { return params_; }

  // Resamples params().crop of `src` into all of `dst`. Does not allocate.
  // Returns FailedPrecondition before a successful Setup, and InvalidArgument
  // if `src` or `dst` does not match params() (size, channels, too small a
  // stride, null data) or `scratch` holds fewer than scratch_size() floats.
  // `src` and `dst` must not overlap.
  absl::Status Run(const ImageView& src, const MutableImageView& dst,
                   absl::Span<float> scratch) const;

 private:
  // For each output index i along one axis: source taps
  // [start[i], start[i] + count[i]) (relative to the crop) weighted by
  // weights[i * stride + k]; the weights of one output sum to 1.
  struct AxisTable {
    std::vector<int> start;
    std::vector<int> count;
    std::vector<float> weights;
    int stride = 0;  // max count
  };
  static AxisTable MakeAxisTable(int crop_size, int dst_size);
  // Gives every output `stride` taps (zero weights added), all in the crop.
  static void PadToStride(int crop_size, AxisTable* table);

  ResizeParams params_;
  bool ready_ = false;
  AxisTable horizontal_;
  AxisTable vertical_;
  size_t scratch_size_ = 0;
};

// Convenience for one-off use (tests, tools): Setup plus Run with scratch
// allocated per call. `dst` gives the output size; `crop` as in ResizeParams.
// Returns the errors of Setup and Run. Safe for concurrent use.
absl::Status ResizeImage(const ImageView& src,
                         const std::optional<PixelRect>& crop,
                         const MutableImageView& dst);

}  // namespace stoker::image

#endif  // STOKER_SRC_IMAGE_RESIZE_H_
