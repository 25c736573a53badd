// The resampler's row loop built with -mavx2 (see resize_rows.inc and
// src/image/CMakeLists.txt).
#define STOKER_RESIZE_NS avx2
#include "image/resize_rows.inc"
