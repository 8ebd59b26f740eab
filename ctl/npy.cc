#include "ctl/npy.h"

#include <charconv>
#include <cstring>

#include "common/file.h"

namespace ferry::ctl {
namespace {

struct Descr {
  const char* text;
  DType dtype;
};
constexpr Descr kDescrs[] = {
    {"|b1", DType::kBool}, {"|u1", DType::kU8},  {"|i1", DType::kI8},  {"<u2", DType::kU16},
    {"<i2", DType::kI16},  {"<u4", DType::kU32}, {"<i4", DType::kI32}, {"<u8", DType::kU64},
    {"<i8", DType::kI64},  {"<f2", DType::kF16}, {"<f4", DType::kF32}, {"<f8", DType::kF64},
};

// The value of 'key' in the header dict: the text after "'key':" up to its end.
std::string_view Field(std::string_view header, std::string_view key) {
  std::string quoted = "'" + std::string(key) + "'";
  size_t at = header.find(quoted);
  if (at == std::string_view::npos) {
    return {};
  }
  size_t colon = header.find(':', at + quoted.size());
  if (colon == std::string_view::npos) {
    return {};
  }
  std::string_view rest = header.substr(colon + 1);
  size_t start = rest.find_first_not_of(' ');
  return start == std::string_view::npos ? std::string_view{} : rest.substr(start);
}

}  // namespace

Result<client::Tensor> ParseNpy(std::string_view bytes, const std::string& name) {
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0) {
    return InvalidArgument("not a .npy file (no \\x93NUMPY magic)");
  }
  uint8_t major = static_cast<uint8_t>(bytes[6]);
  size_t header_len = 0;
  size_t prefix = 0;
  if (major == 1) {
    header_len =
        static_cast<uint8_t>(bytes[8]) | (static_cast<size_t>(static_cast<uint8_t>(bytes[9])) << 8);
    prefix = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) {
      return InvalidArgument(".npy header truncated");
    }
    for (int i = 0; i < 4; ++i) {
      header_len |= static_cast<size_t>(static_cast<uint8_t>(bytes[8 + i])) << (8 * i);
    }
    prefix = 12;
  } else {
    return InvalidArgument(".npy format version " + std::to_string(major) + " is not 1, 2 or 3");
  }
  if (header_len > (1 << 20) || bytes.size() - prefix < header_len) {
    return InvalidArgument(".npy header length " + std::to_string(header_len) +
                           " exceeds the file or 1 MiB");
  }
  std::string_view header = bytes.substr(prefix, header_len);
  std::string_view descr = Field(header, "descr");
  client::Tensor t;
  t.name = name;
  bool known = false;
  for (const Descr& d : kDescrs) {
    size_t n = std::strlen(d.text);
    if (descr.size() >= n + 2 && descr[0] == '\'' && descr.substr(1, n) == d.text &&
        descr[n + 1] == '\'') {
      t.dtype = d.dtype;
      known = true;
    }
  }
  if (!known) {
    return InvalidArgument(".npy dtype " + std::string(descr.substr(0, descr.find(','))) +
                           " is not one ferry takes (little-endian bool, int, uint, float)");
  }
  if (Field(header, "fortran_order").substr(0, 5) != "False") {
    return InvalidArgument(".npy file is in Fortran order; save it in C order");
  }
  std::string_view shape = Field(header, "shape");
  if (shape.empty() || shape[0] != '(') {
    return InvalidArgument(".npy header has no shape tuple");
  }
  size_t close = shape.find(')');
  if (close == std::string_view::npos) {
    return InvalidArgument(".npy shape tuple is not closed");
  }
  std::string_view dims = shape.substr(1, close - 1);
  while (!dims.empty()) {
    size_t start = dims.find_first_not_of(" ,");
    if (start == std::string_view::npos) {
      break;
    }
    dims.remove_prefix(start);
    int64_t d = 0;
    auto [end, ec] = std::from_chars(dims.data(), dims.data() + dims.size(), d);
    if (ec != std::errc() || d < 0 || t.shape.size() >= 16) {
      return InvalidArgument(".npy shape is not a tuple of at most 16 non-negative integers");
    }
    t.shape.push_back(d);
    dims.remove_prefix(static_cast<size_t>(end - dims.data()));
  }
  std::optional<uint64_t> size = TensorByteSize(t.dtype, t.shape);
  size_t data_at = prefix + header_len;
  if (!size || *size != bytes.size() - data_at) {
    return InvalidArgument(".npy data holds " + std::to_string(bytes.size() - data_at) +
                           " bytes but its shape and dtype make " +
                           (size ? std::to_string(*size) : std::string("too many")));
  }
  t.bytes.assign(bytes.begin() + static_cast<std::ptrdiff_t>(data_at), bytes.end());
  return t;
}

Result<client::Tensor> ReadNpy(const std::string& path, const std::string& name) {
  FERRY_ASSIGN_OR_RETURN(std::string bytes, ReadRegularFile(path, kMaxNpyBytes, Symlinks::kFollow));
  Result<client::Tensor> t = ParseNpy(bytes, name);
  if (!t.ok()) {
    return InvalidArgument(path + ": " + t.error().message);
  }
  return t;
}

std::string EncodeNpy(const client::Tensor& tensor) {
  std::string descr = "<f4";
  for (const Descr& d : kDescrs) {
    if (d.dtype == tensor.dtype) {
      descr = d.text;
    }
  }
  std::string shape = "(";
  for (int64_t d : tensor.shape) {
    shape += std::to_string(d) + ", ";
  }
  if (tensor.shape.size() > 1) {
    shape.resize(shape.size() - 2);
  } else if (tensor.shape.size() == 1) {
    shape.resize(shape.size() - 1);
  }
  shape += ")";
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Padded with spaces so the data starts at a multiple of 64, ending in '\n'.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(1);
  out += static_cast<char>(0);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>((header.size() >> 8) & 0xff);
  out += header;
  out.append(reinterpret_cast<const char*>(tensor.bytes.data()), tensor.bytes.size());
  return out;
}

}  // namespace ferry::ctl
