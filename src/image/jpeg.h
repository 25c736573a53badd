#ifndef STOKER_SRC_IMAGE_JPEG_H_
#define STOKER_SRC_IMAGE_JPEG_H_

// JPEG inspection and pack-time resizing on libjpeg-turbo.
//
// Every function here takes untrusted bytes. None of them exits, aborts or
// throws on bad data: libjpeg errors and corrupt-data warnings become a
// Status, and size caps are checked from the frame header before any pixel
// memory is allocated. All functions keep their state per call and are safe
// for concurrent use from any number of threads.
//
// Error codes, shared by the functions below:
//   InvalidArgument  the bytes are not a JPEG ("not a JPEG image"); the
//                    image exceeds an ImageLimits cap ("image 65535x65535
//                    exceeds the pixel cap of ..."); bad options.
//   DataLoss         the JPEG is corrupt or truncated ("corrupt JPEG data:
//                    <libjpeg message>"). libjpeg's corrupt-data warnings
//                    (premature end of data, bad Huffman code, extraneous
//                    bytes before a marker, ...), which it would otherwise
//                    paper over with grey blocks, count as corruption too.
//                    Harmless metadata warnings (unknown JFIF revision,
//                    unknown Adobe transform, bad ICC marker) are ignored.
//   ResourceExhausted  libjpeg ran out of memory.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "image/resize.h"

namespace stoker::image {

// Caps against decompression bombs: a few hundred bytes can declare a
// gigapixel frame or thousands of tiny progressive scans. Checked right after
// the frame header is read, before any allocation proportional to the image.
struct ImageLimits {
  // Largest width * height accepted. Default 2^28 (268M pixels, about 800 MB
  // of RGB); ImageNet's largest photo is far below.
  int64_t max_pixels = int64_t{1} << 28;
  // Largest width or height accepted, pixels. Default 65500, which is also
  // libjpeg's own limit.
  int max_dimension = 65500;
  // Largest number of scans accepted, counted as they are read (a libjpeg
  // progress monitor). Baseline files have 1 scan (3 if not interleaved),
  // typical progressive files about 10. Default 256.
  int max_scans = 256;
};

// What the frame header says.
struct JpegInfo {
  int width;         // pixels
  int height;        // pixels
  int components;    // 1 (gray), 3 (YCbCr or RGB) or 4 (CMYK or YCCK)
  bool progressive;  // progressive (SOF2/SOF10) rather than sequential
};

// True if `bytes` starts with the JPEG start-of-image marker (FF D8). Cheap;
// says nothing about the rest of the data.
bool LooksLikeJpeg(std::string_view bytes);

// Reads the headers up to the first scan; decodes no pixels. Returns the
// errors listed at the top of this file; the scan cap does not apply since
// no scan is read.
absl::StatusOr<JpegInfo> ReadJpegInfo(std::string_view bytes,
                                      const ImageLimits& limits = {});

struct ResizeJpegOptions {
  // Target length of the shorter side, pixels; must be >= 1. The longer side
  // becomes round(longer * shorter_side / shorter), keeping the aspect ratio.
  int shorter_side = 0;
  // libjpeg quality of the re-encoded image, 1..100. Default 90.
  int quality = 90;
  ImageLimits limits;
};

// Shrinks `jpeg` so its shorter side is exactly options.shorter_side, and
// re-encodes it as a baseline JPEG (4:2:0 chroma subsampling for colour,
// standard Huffman tables, no metadata: EXIF, ICC and comments are dropped).
//
// Returns std::nullopt when the shorter side is already <= shorter_side: the
// image is never enlarged, and the caller keeps the original bytes. The image
// is still checked against options.limits and its header read first, so a
// non-JPEG or over-sized input is an error either way.
//
// Pixels: the decoder first scales in the DCT domain by the smallest n/8
// (n = 1..8) whose output is still at least the target, which is much faster
// than a full decode; a triangle filter with antialiasing (ResizeKernel)
// then produces the exact size. Grayscale stays grayscale (one component);
// colour becomes YCbCr. CMYK and YCCK (Adobe, inverted, as Photoshop writes
// them) are converted to RGB with the naive formula R = C * K / 255 (no
// colour management).
//
// Returns InvalidArgument if shorter_side < 1 or quality is outside 1..100,
// and otherwise the errors listed at the top of this file.
absl::StatusOr<std::optional<std::string>> ResizeJpegShorterSide(
    std::string_view jpeg, const ResizeJpegOptions& options);

// What DecodeJpegRegion produced: RGB rows holding the requested region,
// decoded at DCT scale scale_num/8.
struct DecodedRegion {
  int width = 0;   // pixels per row in the buffer (at least region.width:
                   // decoding starts at an iMCU column boundary)
  int height = 0;  // rows in the buffer
  // Where the requested source rectangle lies in the buffer, in decoded
  // (scaled) pixels.
  PixelRect region;
  int scale_num = 8;
};

// Decodes only the part of a JPEG that a crop needs, to RGB (grayscale is
// expanded, CMYK/YCCK converted as in ResizeJpegShorterSide):
//   1. reads the header and checks `limits`, then asks choose_region for the
//      source rectangle (so a random crop can depend on the image size);
//   2. picks the smallest DCT scale n/8, n in {1, 2, 4, 8} (the scales with
//      SIMD inverse DCTs), that keeps the rectangle at least min_width x
//      min_height (n = 8 when even full size is smaller), so the decoder does
//      up to 64x less work on large photos;
//   3. decodes just the rows of the rectangle (skipping those above, and
//      stopping after the last) and just its columns (from the iMCU column
//      containing its left edge).
// Rows below the region are never decoded, so damage there goes unnoticed;
// damage inside the decoded part is DataLoss. *pixels is resized as needed
// and reused across calls. Errors as listed at the top of this file; the
// rectangle must lie inside the image (InvalidArgument otherwise).
absl::Status DecodeJpegRegion(std::string_view jpeg, const ImageLimits& limits,
                              absl::FunctionRef<PixelRect(const JpegInfo&)> choose_region,
                              int min_width, int min_height, std::vector<uint8_t>* pixels,
                              DecodedRegion* out);

}  // namespace stoker::image

#endif  // STOKER_SRC_IMAGE_JPEG_H_
