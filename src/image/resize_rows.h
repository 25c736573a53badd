// Internal to the resampler: the row loop of ResizeKernel::Run, built once
// per instruction set (resize_rows.inc) and picked at run time.
#ifndef STOKER_IMAGE_RESIZE_ROWS_H_
#define STOKER_IMAGE_RESIZE_ROWS_H_

#include <cstddef>

#include "image/resize.h"

namespace stoker::image {

// Floats after each ring row and the widened row, for the spare lane of the
// RGB kernel's last load and store; 4 keeps rows 16-byte aligned when the
// row length allows.
inline constexpr size_t kResizeRowSlack = 4;

// One axis's taps (see ResizeKernel::AxisTable), borrowed.
struct AxisTableView {
  const int* start;
  const int* count;
  const float* weights;
  int stride;
};

// Everything one Run needs, validated by ResizeKernel::Run.
struct RowJob {
  const ResizeParams& params;
  const ImageView& src;
  const MutableImageView& dst;
  AxisTableView horizontal;
  AxisTableView vertical;
  float* scratch;  // ResizeKernel::scratch_size() floats
};

namespace generic {
void RunRows(const RowJob& job);  // baseline x86-64 / any CPU
}
namespace avx2 {
void RunRows(const RowJob& job);  // REQUIRES: the CPU has AVX2
}

// True when avx2::RunRows may run here (and tests have not turned it off).
bool HasAvx2();
// Tests: false makes Run use the baseline build even on an AVX2 CPU.
void AllowAvx2ForTesting(bool allow);

}  // namespace stoker::image

#endif  // STOKER_IMAGE_RESIZE_ROWS_H_
