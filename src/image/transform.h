// The per-sample image transform of the loader: JPEG decode of only the
// region needed, DCT-domain scaling, RandomResizedCrop + flip (train) or
// resize + centre crop (eval), and the output layout and dtype.
#ifndef STOKER_IMAGE_TRANSFORM_H_
#define STOKER_IMAGE_TRANSFORM_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "image/jpeg.h"
#include "plan/epoch_plan.h"
#include "stoker/loader.h"

namespace stoker::image {

struct TransformSpec {
  int image_size = 224;  // output height = width
  bool train = true;
  Layout layout = Layout::kNCHW;
  DType dtype = DType::kUint8;
  bool normalize = false;  // (x / 255 - mean) / std, float dtypes only
  std::array<float, 3> mean = {0.485f, 0.456f, 0.406f};
  std::array<float, 3> std = {0.229f, 0.224f, 0.225f};
  ImageLimits limits;
};

// Crop rectangle chosen for one sample, in source pixels (exposed for tests).
struct CropBox {
  double x = 0, y = 0, width = 0, height = 0;
  bool flip = false;
};

// torchvision's RandomResizedCrop.get_params (scale 0.08-1, ratio 3/4-4/3,
// log-uniform ratio, 10 tries, then a centre crop clamped to the ratio range)
// plus a flip with p = 0.5, drawn from rng in a fixed order.
CropBox RandomResizedCropBox(int width, int height, plan::SampleRng* rng);
// Eval: shorter side resized to round(size / 0.875), centre crop of `size`,
// expressed as the source rectangle that maps onto the output.
CropBox CenterCropBox(int width, int height, int size);

// Decodes and transforms one JPEG into a fixed-size output.
//
// Kernel style: Setup once, then Run many times; Run reuses the scratch held
// by the object and allocates only when an image needs more scratch than any
// before it. Thread-safety: not safe for concurrent use; keep one per thread.
class ImageTransform {
 public:
  ImageTransform();
  ~ImageTransform();
  ImageTransform(const ImageTransform&) = delete;
  ImageTransform& operator=(const ImageTransform&) = delete;

  // Returns InvalidArgument for a bad spec (size 0, normalize with uint8).
  absl::Status Setup(const TransformSpec& spec);
  // Bytes Run writes: 3 * size * size * sizeof(dtype).
  size_t output_bytes() const;

  // Decodes `jpeg` (only the rows and columns of the crop, at the smallest
  // DCT scale that keeps the crop at least image_size on both sides), takes
  // the random draws from rng (train) and writes output_bytes() at dst.
  // Grayscale input is expanded to 3 channels. Returns InvalidArgument /
  // DataLoss for a non-JPEG, corrupt or truncated image, ResourceExhausted
  // when it exceeds the pixel or scan caps; dst is then unspecified.
  absl::Status Run(std::string_view jpeg, plan::SampleRng* rng, void* dst);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace stoker::image

#endif  // STOKER_IMAGE_TRANSFORM_H_
