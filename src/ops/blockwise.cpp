#include "llmtrain/ops/blockwise.h"

#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "tables.h"

namespace llmtrain::ops {
namespace detail {

namespace {

at::Tensor midpoints(const at::Tensor& map) {
  return (map.narrow(0, 0, map.numel() - 1) + map.narrow(0, 1, map.numel() - 1)) / 2;
}

// One cache for both kinds of copies, keyed by the static table, what was made of it, and the device.
const at::Tensor& cached(const at::Tensor& table, bool mids, const at::Device& device) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, bool, int, int>, at::Tensor> copies;
  const std::lock_guard<std::mutex> lock(mutex);
  at::Tensor& copy = copies[{table.data_ptr(), mids, int(device.type()), int(device.index())}];
  if (!copy.defined()) copy = (mids ? midpoints(table) : table).to(device);
  return copy;
}

}  // namespace

const at::Tensor& table_on(const at::Tensor& table, const at::Device& device) {
  return device.is_cpu() ? table : cached(table, false, device);
}

const at::Tensor& midpoints_on(const at::Tensor& map, const at::Device& device) { return cached(map, true, device); }

std::pair<at::Tensor, at::Tensor> quantize_blocks(const at::Tensor& flat, int64_t block, const at::Tensor& mids) {
  const int64_t n = flat.numel(), rem = n % block, full = n - rem;
  std::vector<at::Tensor> absmax, scaled;
  if (full > 0) {
    const at::Tensor b = flat.narrow(0, 0, full).view({full / block, block});
    const at::Tensor am = b.abs().amax(1);
    absmax.push_back(am);
    scaled.push_back(at::clamp(b * (1.0 / am.clamp_min(1e-38)).view({-1, 1}), -1, 1).view(-1));
  }
  if (rem > 0) {
    const at::Tensor tail = flat.narrow(0, full, rem);
    const at::Tensor am = tail.abs().amax();
    absmax.push_back(am.view(1));
    scaled.push_back(at::clamp(tail / am.clamp_min(1e-38), -1, 1));
  }
  return {at::bucketize(at::cat(scaled), mids).to(at::kByte), at::cat(absmax)};
}

at::Tensor dequantize_blocks(const at::Tensor& codes, const at::Tensor& absmax, int64_t block, const at::Tensor& map) {
  const int64_t n = codes.numel();
  const at::Tensor v = map.index_select(0, codes.to(at::kLong).view(-1));
  return v * absmax.repeat_interleave(block).narrow(0, 0, n);
}

}  // namespace detail

const at::Tensor& dynamic_map(bool is_signed) {
  const auto make = [](bool sign) {
    std::vector<at::Tensor> parts;
    for (int i = 0; i < 7; ++i) {
      const at::Tensor b = at::linspace(0.1, 1, (int64_t(1) << (sign ? i : i + 1)) + 1, at::kFloat);
      const at::Tensor means = (b.narrow(0, 0, b.size(0) - 1) + b.narrow(0, 1, b.size(0) - 1)) / 2.0;
      const double scale = std::pow(10.0, double(-6 + i));
      parts.push_back(means * scale);
      if (sign) parts.push_back(means * -scale);
    }
    parts.push_back(at::tensor({0.0f, 1.0f}, at::kFloat));
    return std::get<0>(at::sort(at::cat(parts)));
  };
  static const at::Tensor signed_map = make(true), unsigned_map = make(false);
  return is_signed ? signed_map : unsigned_map;
}

}  // namespace llmtrain::ops
