// Test helpers for image code: synthetic pixels, and JPEG encode/decode with
// TurboJPEG as an independent reference. Tests only.
#ifndef STOKER_IMAGE_TEST_UTIL_H_
#define STOKER_IMAGE_TEST_UTIL_H_

#include <turbojpeg.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace stoker::image::test_util {

// Pixels of a test image: width * height * channels bytes, row-major.
struct Pixels {
  int width = 0;
  int height = 0;
  int channels = 0;  // 1, 3 or 4 (CMYK)
  std::vector<uint8_t> data;
  uint8_t at(int x, int y, int c) const {
    return data[(static_cast<size_t>(y) * width + x) * channels + c];
  }
};

inline Pixels MakePixels(int width, int height, int channels,
                  const std::function<uint8_t(int x, int y, int c)>& fn) {
  Pixels p{
      width, height, channels,
      std::vector<uint8_t>(static_cast<size_t>(width) * height * channels)};
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c) {
        p.data[(static_cast<size_t>(y) * width + x) * channels + c] =
            fn(x, y, c);
      }
    }
  }
  return p;
}

// Encodes with TurboJPEG so most tests need no files.
inline std::string Encode(const Pixels& p, int quality = 95,
                   bool progressive = false) {
  tjhandle h = tjInitCompress();
  EXPECT_NE(h, nullptr);
  const int format =
      p.channels == 1 ? TJPF_GRAY : (p.channels == 3 ? TJPF_RGB : TJPF_CMYK);
  const int subsamp = p.channels == 1 ? TJSAMP_GRAY : TJSAMP_420;
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  const int rc =
      tjCompress2(h, p.data.data(), p.width, 0, p.height, format, &buf, &size,
                  subsamp, quality, progressive ? TJFLAG_PROGRESSIVE : 0);
  EXPECT_EQ(rc, 0) << tjGetErrorStr2(h);
  std::string out(reinterpret_cast<const char*>(buf), size);
  tjFree(buf);
  tjDestroy(h);
  return out;
}

// Decodes with TurboJPEG to gray (channels == 1) or RGB.
inline Pixels Decode(const std::string& jpeg, int channels) {
  tjhandle h = tjInitDecompress();
  EXPECT_NE(h, nullptr);
  int w = 0, ht = 0, subsamp = 0, colorspace = 0;
  const auto* buf = reinterpret_cast<const unsigned char*>(jpeg.data());
  EXPECT_EQ(
      tjDecompressHeader3(h, buf, jpeg.size(), &w, &ht, &subsamp, &colorspace),
      0);
  Pixels p{w, ht, channels,
           std::vector<uint8_t>(static_cast<size_t>(w) * ht * channels)};
  EXPECT_EQ(tjDecompress2(h, buf, jpeg.size(), p.data.data(), w, 0, ht,
                          channels == 1 ? TJPF_GRAY : TJPF_RGB, 0),
            0)
      << tjGetErrorStr2(h);
  tjDestroy(h);
  return p;
}

inline std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace stoker::image::test_util

#endif  // STOKER_IMAGE_TEST_UTIL_H_
