#include "image/jpeg.h"

// jpeglib.h needs FILE and size_t declared first.
#include <jerror.h>
#include <jpeglib.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "image/resize.h"

namespace stoker::image {
namespace {

// libjpeg reports errors by calling error_exit, which must not return; ours
// longjmps back to the Guarded() call that started the libjpeg work. That
// skips C++ destructors in the frames in between, so everything that lives
// across a Guarded() call is owned by the caller's frame (Decoder, Encoder,
// vectors allocated before the call), and this struct is trivially
// destructible and holds the message as a char array.
struct ErrorState {
  jpeg_error_mgr pub;  // first: libjpeg sees only this part
  jpeg_progress_mgr progress;
  std::jmp_buf jump;
  ImageLimits limits;
  bool encoding = false;
  absl::StatusCode code = absl::StatusCode::kOk;
  char message[JMSG_LENGTH_MAX + 128];
};

ErrorState& StateOf(j_common_ptr cinfo) {
  return *reinterpret_cast<ErrorState*>(cinfo->err);
}

// Writes the cap violation, if any, into `buf`. snprintf rather than
// absl::StrFormat because OnError leaves its frame by longjmp.
bool FormatLimitViolation(int64_t width, int64_t height,
                          const ImageLimits& limits, char* buf, size_t size) {
  if (width * height > limits.max_pixels) {
    std::snprintf(buf, size, "image %lldx%lld exceeds the pixel cap of %lld",
                  static_cast<long long>(width), static_cast<long long>(height),
                  static_cast<long long>(limits.max_pixels));
    return true;
  }
  if (std::max(width, height) > limits.max_dimension) {
    std::snprintf(buf, size, "image %lldx%lld exceeds the dimension cap of %d",
                  static_cast<long long>(width), static_cast<long long>(height),
                  limits.max_dimension);
    return true;
  }
  return false;
}

[[noreturn]] void Fail(ErrorState& state) { std::longjmp(state.jump, 1); }

void OnError(j_common_ptr cinfo) {
  ErrorState& state = StateOf(cinfo);
  const int code = cinfo->err->msg_code;
  if (code == JERR_IMAGE_TOO_BIG && cinfo->is_decompressor) {
    // libjpeg rejects dimensions above 65500 itself, while still reading the
    // header; report it like our own caps (the frame size is known by then).
    auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
    state.code = absl::StatusCode::kInvalidArgument;
    if (!FormatLimitViolation(d->image_width, d->image_height, state.limits,
                              state.message, sizeof(state.message))) {
      std::snprintf(state.message, sizeof(state.message),
                    "image %ux%u exceeds libjpeg's dimension limit of %d",
                    d->image_width, d->image_height,
                    static_cast<int>(JPEG_MAX_DIMENSION));
    }
    Fail(state);
  }
  char text[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, text);
  if (code == JERR_OUT_OF_MEMORY) {
    state.code = absl::StatusCode::kResourceExhausted;
    std::snprintf(state.message, sizeof(state.message), "libjpeg: %s", text);
  } else if (state.encoding) {
    state.code = absl::StatusCode::kInternal;
    std::snprintf(state.message, sizeof(state.message),
                  "JPEG encoding failed: %s", text);
  } else {
    state.code = absl::StatusCode::kDataLoss;
    std::snprintf(state.message, sizeof(state.message), "corrupt JPEG data: %s",
                  text);
  }
  Fail(state);
}

// Warnings (msg_level < 0) are how libjpeg reports damaged entropy data and
// truncation while still producing an image; a training set should not
// silently hold half-grey pictures, so they fail like errors.
void OnMessage(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;  // trace output
  switch (cinfo->err->msg_code) {
    case JWRN_JFIF_MAJOR:
    case JWRN_ADOBE_XFORM:
    case JWRN_BOGUS_ICC:
      return;  // metadata only; the pixels are fine
    default:
      OnError(cinfo);
  }
}

// Called by libjpeg at least once per scan while it buffers a multi-scan
// image, so a file with thousands of tiny scans stops at the cap.
void OnProgress(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  ErrorState& state = StateOf(cinfo);
  const int scans =
      reinterpret_cast<j_decompress_ptr>(cinfo)->input_scan_number;
  if (scans > state.limits.max_scans) {
    state.code = absl::StatusCode::kInvalidArgument;
    std::snprintf(state.message, sizeof(state.message),
                  "JPEG has more than %d scans (the scan cap)",
                  state.limits.max_scans);
    Fail(state);
  }
}

void InstallHandlers(ErrorState& state, const ImageLimits& limits) {
  jpeg_std_error(&state.pub);
  state.pub.error_exit = OnError;
  state.pub.emit_message = OnMessage;
  state.progress = {};
  state.progress.progress_monitor = OnProgress;
  state.limits = limits;
}

// Runs `fn` (libjpeg calls only; see ErrorState) and returns false if libjpeg
// failed, with state.code and state.message set. `fn` must not hold objects
// with destructors while it calls libjpeg.
template <typename Fn>
bool Guarded(ErrorState& state, Fn&& fn) {
  if (setjmp(state.jump) != 0) return false;
  fn();
  return true;
}

absl::Status StatusOf(const ErrorState& state) {
  return absl::Status(state.code, state.message);
}

// Owns a decompressor for one call.
struct Decoder {
  explicit Decoder(const ImageLimits& limits) {
    InstallHandlers(state, limits);
  }
  ~Decoder() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  ErrorState state;
  jpeg_decompress_struct cinfo;
  bool created = false;
};

// Owns a compressor and its malloc'ed output buffer for one call.
struct Encoder {
  Encoder() {
    InstallHandlers(state, ImageLimits{});
    state.encoding = true;
  }
  ~Encoder() {
    if (created) jpeg_destroy_compress(&cinfo);
    std::free(out);  // jpeg_mem_dest leaves the buffer to the caller
  }
  Encoder(const Encoder&) = delete;
  Encoder& operator=(const Encoder&) = delete;

  ErrorState state;
  jpeg_compress_struct cinfo;
  bool created = false;
  unsigned char* out = nullptr;
  unsigned long out_size = 0;
};

// Creates the decompressor, reads the headers and applies the size caps.
absl::Status ReadHeader(Decoder& d, std::string_view bytes,
                        const ImageLimits& limits) {
  if (!LooksLikeJpeg(bytes)) {
    return absl::InvalidArgumentError(
        "not a JPEG image (no start-of-image marker)");
  }
  const bool ok = Guarded(d.state, [&] {
    d.cinfo.err = &d.state.pub;
    jpeg_create_decompress(&d.cinfo);
    d.created = true;
    d.cinfo.progress = &d.state.progress;
    jpeg_mem_src(&d.cinfo, reinterpret_cast<const unsigned char*>(bytes.data()),
                 bytes.size());
    jpeg_read_header(&d.cinfo, TRUE);
  });
  if (!ok) return StatusOf(d.state);
  char message[256];
  if (FormatLimitViolation(d.cinfo.image_width, d.cinfo.image_height, limits,
                           message, sizeof(message))) {
    return absl::InvalidArgumentError(message);
  }
  return absl::OkStatus();
}

// Adobe files store CMYK inverted (0 = full ink), so the ink-free share of
// each primary is simply C * K / 255. Plain CMYK is inverted first.
void CmykToRgb(const uint8_t* cmyk, int width, bool inverted, uint8_t* rgb) {
  const int flip = inverted ? 0 : 255;
  for (int x = 0; x < width; ++x) {
    const int k = cmyk[4 * x + 3] ^ flip;
    for (int c = 0; c < 3; ++c) {
      rgb[3 * x + c] =
          static_cast<uint8_t>(((cmyk[4 * x + c] ^ flip) * k + 127) / 255);
    }
  }
}

// Picks the decoder's output: RGB (or gray when keep_gray and the image is
// gray), or CMYK for CMYK/YCCK images, which the caller converts to RGB
// (*cmyk set).
absl::Status SetOutColorSpace(jpeg_decompress_struct* cinfo, bool keep_gray, bool* cmyk) {
  *cmyk = false;
  switch (cinfo->jpeg_color_space) {
    case JCS_GRAYSCALE:
      cinfo->out_color_space = keep_gray ? JCS_GRAYSCALE : JCS_RGB;
      return absl::OkStatus();
    case JCS_YCbCr:
    case JCS_RGB:
      cinfo->out_color_space = JCS_RGB;
      return absl::OkStatus();
    case JCS_CMYK:
    case JCS_YCCK:
      cinfo->out_color_space = JCS_CMYK;
      *cmyk = true;
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(absl::StrFormat(
          "unsupported JPEG colour space (%d components)", cinfo->num_components));
  }
}

}  // namespace

bool LooksLikeJpeg(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0xFF &&
         static_cast<unsigned char>(bytes[1]) == 0xD8;
}

absl::StatusOr<JpegInfo> ReadJpegInfo(std::string_view bytes,
                                      const ImageLimits& limits) {
  Decoder d(limits);
  if (absl::Status s = ReadHeader(d, bytes, limits); !s.ok()) return s;
  return JpegInfo{static_cast<int>(d.cinfo.image_width),
                  static_cast<int>(d.cinfo.image_height),
                  d.cinfo.num_components, d.cinfo.progressive_mode != 0};
}

absl::StatusOr<std::optional<std::string>> ResizeJpegShorterSide(
    std::string_view jpeg, const ResizeJpegOptions& options) {
  const int target = options.shorter_side;
  if (target < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "resize: shorter_side is %d, must be at least 1", target));
  }
  if (options.quality < 1 || options.quality > 100) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "resize: quality is %d, must be in 1..100", options.quality));
  }
  Decoder d(options.limits);
  if (absl::Status s = ReadHeader(d, jpeg, options.limits); !s.ok()) return s;
  jpeg_decompress_struct& cinfo = d.cinfo;

  const int64_t width = cinfo.image_width;
  const int64_t height = cinfo.image_height;
  const int64_t shorter = std::min(width, height);
  if (shorter <= target) return std::nullopt;
  const int64_t longer = std::max(width, height);
  // round(longer * target / shorter), halves up, in exact integers.
  const int longer_out =
      static_cast<int>((2 * longer * target + shorter) / (2 * shorter));
  const int out_width = width <= height ? target : longer_out;
  const int out_height = width <= height ? longer_out : target;

  bool cmyk = false;
  if (absl::Status s = SetOutColorSpace(&cinfo, /*keep_gray=*/true, &cmyk); !s.ok()) return s;
  const int channels = cinfo.out_color_space == JCS_GRAYSCALE ? 1 : 3;

  // The smallest DCT scale n/8 whose output still covers the target, so the
  // filter below only ever shrinks (by less than 8/7 unless n = 1).
  const bool scaled = Guarded(d.state, [&] {
    cinfo.scale_denom = 8;
    for (unsigned n = 1; n <= 8; ++n) {
      cinfo.scale_num = n;
      jpeg_calc_output_dimensions(&cinfo);
      if (std::min(cinfo.output_width, cinfo.output_height) >=
          static_cast<JDIMENSION>(target)) {
        break;
      }
    }
  });
  if (!scaled) return StatusOf(d.state);
  const int dec_width = static_cast<int>(cinfo.output_width);
  const int dec_height = static_cast<int>(cinfo.output_height);
  const size_t dec_row = static_cast<size_t>(dec_width) * channels;

  std::vector<uint8_t> decoded(dec_row * dec_height);
  std::vector<uint8_t> cmyk_rows;
  constexpr int kRowsPerRead = 4;
  if (cmyk) cmyk_rows.resize(size_t{4} * dec_width * kRowsPerRead);
  const bool inverted = cinfo.saw_Adobe_marker != 0;
  const bool decoded_ok = Guarded(d.state, [&] {
    jpeg_start_decompress(&cinfo);
    while (cinfo.output_scanline < cinfo.output_height) {
      const int first = static_cast<int>(cinfo.output_scanline);
      const int want = std::min(kRowsPerRead, dec_height - first);
      JSAMPROW rows[kRowsPerRead];
      for (int i = 0; i < want; ++i) {
        rows[i] = cmyk ? &cmyk_rows[size_t{4} * dec_width * i]
                       : &decoded[(first + i) * dec_row];
      }
      const int got = static_cast<int>(jpeg_read_scanlines(&cinfo, rows, want));
      if (cmyk) {
        for (int i = 0; i < got; ++i) {
          CmykToRgb(rows[i], dec_width, inverted,
                    &decoded[(first + i) * dec_row]);
        }
      }
    }
    jpeg_finish_decompress(&cinfo);
  });
  if (!decoded_ok) return StatusOf(d.state);

  const size_t out_row = static_cast<size_t>(out_width) * channels;
  std::vector<uint8_t> resized(out_row * out_height);
  const ImageView src{decoded.data(), dec_width, dec_height, channels,
                      static_cast<ptrdiff_t>(dec_row)};
  const MutableImageView dst{resized.data(), out_width, out_height, channels,
                             static_cast<ptrdiff_t>(out_row)};
  if (absl::Status s = ResizeImage(src, std::nullopt, dst); !s.ok()) return s;

  Encoder e;
  const int quality = options.quality;
  const bool encoded = Guarded(e.state, [&] {
    jpeg_compress_struct& c = e.cinfo;
    c.err = &e.state.pub;
    jpeg_create_compress(&c);
    e.created = true;
    jpeg_mem_dest(&c, &e.out, &e.out_size);
    c.image_width = static_cast<JDIMENSION>(out_width);
    c.image_height = static_cast<JDIMENSION>(out_height);
    c.input_components = channels;
    c.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
    // Defaults: YCbCr with 2x2 luma sampling (4:2:0), standard Huffman
    // tables, JFIF header, accurate integer DCT.
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, quality, TRUE);
    c.optimize_coding = FALSE;
    c.dct_method = JDCT_ISLOW;
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
      JSAMPROW row = &resized[c.next_scanline * out_row];
      jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
  });
  if (!encoded) return StatusOf(e.state);
  return std::string(reinterpret_cast<const char*>(e.out), e.out_size);
}

absl::Status DecodeJpegRegion(std::string_view jpeg, const ImageLimits& limits,
                              absl::FunctionRef<PixelRect(const JpegInfo&)> choose_region,
                              int min_width, int min_height, std::vector<uint8_t>* pixels,
                              DecodedRegion* out) {
  Decoder d(limits);
  if (absl::Status s = ReadHeader(d, jpeg, limits); !s.ok()) return s;
  jpeg_decompress_struct& cinfo = d.cinfo;
  const int width = static_cast<int>(cinfo.image_width);
  const int height = static_cast<int>(cinfo.image_height);
  bool cmyk = false;
  // RGB out, gray included (libjpeg-turbo expands it itself).
  if (absl::Status s = SetOutColorSpace(&cinfo, /*keep_gray=*/false, &cmyk); !s.ok()) return s;
  const PixelRect rect = choose_region(JpegInfo{width, height, cinfo.num_components,
                                                cinfo.progressive_mode != 0});
  if (rect.width <= 0 || rect.height <= 0 || rect.x < 0 || rect.y < 0 ||
      rect.x + rect.width > width || rect.y + rect.height > height) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "region %dx%d at (%d, %d) is not inside the %dx%d image", rect.width, rect.height,
        rect.x, rect.y, width, height));
  }
  // Smallest n with the scaled rectangle still covering the minimum, among
  // 1/8, 2/8, 4/8 and 8/8: libjpeg-turbo has SIMD inverse DCTs for just
  // these, and its plain-C 3/8..7/8 ones are slower than a full-size decode
  // (measured on clothing-small: 6/8 took 497 us per image, 8/8 314 us).
  int n = 1;
  while (n < 8 && (static_cast<int64_t>(rect.width) * n < int64_t{8} * min_width ||
                   static_cast<int64_t>(rect.height) * n < int64_t{8} * min_height)) {
    n *= 2;
  }
  JDIMENSION x_offset = 0, crop_width = 0;
  int row0 = 0, rows = 0, skip_x = 0, region_w = 0;
  const bool started = Guarded(d.state, [&] {
    cinfo.scale_num = static_cast<unsigned>(n);
    cinfo.scale_denom = 8;
    jpeg_start_decompress(&cinfo);
    const int64_t ow = cinfo.output_width, oh = cinfo.output_height;
    // The rectangle in scaled pixels, widened to whole pixels.
    const int x0 = static_cast<int>(rect.x * ow / width);
    const int x1 = static_cast<int>(
        std::min<int64_t>(ow, ((rect.x + rect.width) * ow + width - 1) / width));
    const int y0 = static_cast<int>(rect.y * oh / height);
    const int y1 = static_cast<int>(
        std::min<int64_t>(oh, ((rect.y + rect.height) * oh + height - 1) / height));
    x_offset = static_cast<JDIMENSION>(x0);
    crop_width = static_cast<JDIMENSION>(x1 - x0);
    if (crop_width < cinfo.output_width) jpeg_crop_scanline(&cinfo, &x_offset, &crop_width);
    skip_x = x0 - static_cast<int>(x_offset);
    region_w = x1 - x0;
    row0 = y0;
    rows = y1 - y0;
    if (row0 > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(row0));
  });
  if (!started) return StatusOf(d.state);
  const int buf_w = static_cast<int>(cinfo.output_width);  // after the column crop
  const size_t row_bytes = static_cast<size_t>(buf_w) * 3;
  if (pixels->size() < row_bytes * rows) pixels->resize(row_bytes * rows);
  std::vector<uint8_t> cmyk_row;
  if (cmyk) cmyk_row.resize(static_cast<size_t>(buf_w) * 4);
  const bool inverted = cinfo.saw_Adobe_marker != 0;
  uint8_t* base = pixels->data();
  const bool decoded = Guarded(d.state, [&] {
    for (int r = 0; r < rows;) {
      JSAMPROW row = cmyk ? cmyk_row.data() : base + r * row_bytes;
      const int got = static_cast<int>(jpeg_read_scanlines(&cinfo, &row, 1));
      if (got == 0) break;  // cannot happen with a memory source; avoids a spin
      if (cmyk) CmykToRgb(cmyk_row.data(), buf_w, inverted, base + r * row_bytes);
      r += got;
    }
  });
  if (!decoded) return StatusOf(d.state);
  // The rest of the image is not needed; the Decoder's destructor aborts.
  out->width = buf_w;
  out->height = rows;
  out->region = PixelRect{skip_x, 0, region_w, rows};
  out->scale_num = n;
  return absl::OkStatus();
}

}  // namespace stoker::image
