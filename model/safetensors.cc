#include "model/safetensors.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

namespace ferry {
namespace {

using nlohmann::json;

// Accepts only non-negative JSON integers (no floats, no negatives).
bool ReadUnsigned(const json& value, uint64_t* out) {
  if (value.is_number_unsigned()) {
    *out = value.get<uint64_t>();
    return true;
  }
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(value.get<int64_t>());
    return true;
  }
  return false;
}

// Builds the header's DOM in one linear pass (nlohmann's SAX parser, iterative), refusing
// before it grows: nesting deeper than kSafetensorsMaxJsonDepth, more than
// kSafetensorsMaxTensors top-level entries, and duplicate keys at any depth (nlohmann would
// keep the last). The callback parser this replaces was quadratic in the number of tensors.
class HeaderSax {
 public:
  explicit HeaderSax(json* root) : dom_(*root, true) {}
  std::string refusal;  // Why parsing stopped early; empty after a syntax error.

  bool null() { return Value() && dom_.null(); }
  bool boolean(bool v) { return Value() && dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return Value() && dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return Value() && dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const std::string& s) {
    return Value() && dom_.number_float(v, s);
  }
  bool string(json::string_t& v) { return Value() && dom_.string(v); }
  bool binary(json::binary_t& v) { return Value() && dom_.binary(v); }
  bool start_object(std::size_t n) {
    if (!Value()) {
      return false;
    }
    keys_.emplace_back();
    elements_.push_back(0);
    return Deeper() && dom_.start_object(n);
  }
  bool key(json::string_t& k) {
    if (keys_.size() >= 2 && keys_.back().size() >= kSafetensorsMaxEntries) {
      return Refuse("an object with more than " + std::to_string(kSafetensorsMaxEntries) +
                    " entries");
    }
    if (!keys_.back().insert(k).second) {
      return Refuse("duplicate key '" + k.substr(0, 256) + "' in header");
    }
    if (keys_.size() == 1 && k != "__metadata__" && ++tensors_ > kSafetensorsMaxTensors) {
      return Refuse("more than " + std::to_string(kSafetensorsMaxTensors) + " tensors");
    }
    return dom_.key(k);
  }
  bool end_object() {
    keys_.pop_back();
    elements_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    if (!Value()) {
      return false;
    }
    keys_.emplace_back();  // Arrays hold no keys; the entry counts depth.
    elements_.push_back(0);
    return Deeper() && dom_.start_array(n);
  }
  bool end_array() {
    keys_.pop_back();
    elements_.pop_back();
    return dom_.end_array();
  }
  bool parse_error(std::size_t position, const std::string& token,
                   const nlohmann::detail::exception& e) {
    return dom_.parse_error(position, token, e);  // Throws json::parse_error.
  }

 private:
  bool Deeper() {
    if (keys_.size() > kSafetensorsMaxJsonDepth) {
      return Refuse("JSON nested deeper than " + std::to_string(kSafetensorsMaxJsonDepth) +
                    " levels");
    }
    return true;
  }
  bool Refuse(std::string why) {
    if (refusal.empty()) {
      refusal = std::move(why);
    }
    return false;
  }

  // Counts a value into its enclosing array: arrays (shapes, offsets) hold at most
  // kSafetensorsMaxArray elements, refused before the DOM grows.
  bool Value() {
    if (!elements_.empty() && keys_.back().empty() && ++elements_.back() > kSafetensorsMaxArray) {
      return Refuse("an array with more than " + std::to_string(kSafetensorsMaxArray) +
                    " elements");
    }
    return true;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  std::vector<std::set<std::string>> keys_;
  std::vector<size_t> elements_;  // Values seen per open container.
  size_t tensors_ = 0;
};

Result<json> ParseHeaderJson(std::string_view text, const std::string& where) {
  json header;
  HeaderSax sax(&header);
  try {
    bool complete = json::sax_parse(text.begin(), text.end(), &sax);
    if (!complete) {
      return InvalidArgument(where + ": " + sax.refusal);
    }
  } catch (const json::exception& e) {
    return InvalidArgument(where + ": header is not valid UTF-8 JSON: " + e.what());
  }
  return header;
}

Result<TensorInfo> ParseTensorEntry(const std::string& name, const json& entry,
                                    const std::string& where) {
  std::string at = where + ": tensor '" + name + "'";
  if (name.empty()) {
    return InvalidArgument(where + ": a tensor has an empty name");
  }
  if (!entry.is_object()) {
    return InvalidArgument(at + ": expected an object");
  }
  for (const auto& [field, unused] : entry.items()) {
    if (field != "dtype" && field != "shape" && field != "data_offsets") {
      return InvalidArgument(at + ": unknown field '" + field + "'");
    }
  }
  TensorInfo info;
  info.name = name;
  auto dtype = entry.find("dtype");
  if (dtype == entry.end() || !dtype->is_string()) {
    return InvalidArgument(at + ": missing or non-string dtype");
  }
  auto parsed_dtype = DTypeFromSafetensors(dtype->get<std::string>());
  if (!parsed_dtype) {
    return InvalidArgument(at + ": unknown dtype '" + dtype->get<std::string>() + "'");
  }
  info.dtype = *parsed_dtype;

  auto shape = entry.find("shape");
  if (shape == entry.end() || !shape->is_array()) {
    return InvalidArgument(at + ": missing or non-array shape");
  }
  if (shape->size() > 16) {
    return InvalidArgument(at + ": shape has " + std::to_string(shape->size()) +
                           " dimensions, more than 16");
  }
  // Bits are multiplied dimension by dimension so an overflow is caught, not wrapped.
  uint64_t bits = static_cast<uint64_t>(DTypeBits(info.dtype));
  for (const json& dim : *shape) {
    uint64_t d = 0;
    if (!ReadUnsigned(dim, &d) || d > static_cast<uint64_t>(INT64_MAX)) {
      return InvalidArgument(at + ": shape holds a " + std::string(dim.type_name()) +
                             (dim.is_number() ? " " + dim.dump() : "") +
                             ", not a non-negative integer");
    }
    if (__builtin_mul_overflow(bits, d, &bits)) {
      return InvalidArgument(at + ": shape x dtype size overflows 64 bits");
    }
    info.shape.push_back(static_cast<int64_t>(d));
  }
  if (bits % 8 != 0) {
    return InvalidArgument(at + ": " + std::to_string(bits) +
                           " bits of data is not a whole number of bytes");
  }

  auto offsets = entry.find("data_offsets");
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2 ||
      !ReadUnsigned((*offsets)[0], &info.begin) || !ReadUnsigned((*offsets)[1], &info.end)) {
    return InvalidArgument(at + ": data_offsets must be [BEGIN, END] of non-negative integers");
  }
  if (info.end < info.begin) {
    return InvalidArgument(at + ": data_offsets end " + std::to_string(info.end) +
                           " is before begin " + std::to_string(info.begin));
  }
  if (info.bytes() != bits / 8) {
    return InvalidArgument(at + ": data_offsets span " + std::to_string(info.bytes()) +
                           " bytes but dtype and shape need " + std::to_string(bits / 8));
  }
  return info;
}

}  // namespace

const TensorInfo* SafetensorsIndex::Find(std::string_view name) const {
  auto it = by_name.find(name);
  return it == by_name.end() ? nullptr : &tensors[it->second];
}

Result<SafetensorsIndex> ParseSafetensors(std::span<const uint8_t> file, std::string_view source) {
  std::string where(source);
  if (file.size() < 8) {
    return InvalidArgument(where + ": file is " + std::to_string(file.size()) +
                           " bytes, too short for the 8-byte header length");
  }
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) {
    header_length = (header_length << 8) | file[static_cast<size_t>(i)];
  }
  if (header_length > kSafetensorsMaxHeaderBytes) {
    return InvalidArgument(where + ": header length " + std::to_string(header_length) +
                           " exceeds the limit of " + std::to_string(kSafetensorsMaxHeaderBytes));
  }
  if (header_length > file.size() - 8) {
    return InvalidArgument(where + ": header length " + std::to_string(header_length) +
                           " runs past the end of the " + std::to_string(file.size()) +
                           "-byte file");
  }
  if (header_length == 0 || file[8] != '{') {
    return InvalidArgument(where + ": header does not begin with '{'");
  }
  std::string_view text(reinterpret_cast<const char*>(file.data() + 8), header_length);
  FERRY_ASSIGN_OR_RETURN(json header, ParseHeaderJson(text, where));
  if (!header.is_object()) {
    return InvalidArgument(where + ": header is not a JSON object");
  }

  SafetensorsIndex index;
  index.data_start = 8 + header_length;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) {
        return InvalidArgument(where + ": __metadata__ must be an object of strings");
      }
      for (const auto& [meta_key, meta_value] : value.items()) {
        if (!meta_value.is_string()) {
          return InvalidArgument(where + ": __metadata__ value of '" + meta_key +
                                 "' is not a string");
        }
        index.metadata[meta_key] = meta_value.get<std::string>();
      }
      continue;
    }
    FERRY_ASSIGN_OR_RETURN(TensorInfo info, ParseTensorEntry(key, value, where));
    index.tensors.push_back(std::move(info));
  }

  std::sort(index.tensors.begin(), index.tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  uint64_t expected_begin = 0;
  for (const TensorInfo& tensor : index.tensors) {
    if (tensor.begin != expected_begin) {
      return InvalidArgument(where + ": tensor '" + tensor.name + "' begins at " +
                             std::to_string(tensor.begin) + " but the previous tensor ends at " +
                             std::to_string(expected_begin) +
                             (tensor.begin < expected_begin ? " (overlap)" : " (hole)"));
    }
    expected_begin = tensor.end;
  }
  for (size_t i = 0; i < index.tensors.size(); ++i) {
    index.by_name.emplace(index.tensors[i].name, i);
  }
  uint64_t buffer_bytes = file.size() - index.data_start;
  if (expected_begin != buffer_bytes) {
    return InvalidArgument(where + ": tensors cover " + std::to_string(expected_begin) +
                           " bytes but the data buffer holds " + std::to_string(buffer_bytes));
  }
  return index;
}

Result<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  FERRY_ASSIGN_OR_RETURN(SafetensorsIndex index, ParseSafetensors(file.bytes(), path));
  return SafetensorsFile(std::move(file), std::move(index));
}

std::span<const uint8_t> SafetensorsFile::Data(const TensorInfo& tensor) const {
  return file_.bytes().subspan(index_.data_start + tensor.begin, tensor.bytes());
}

std::string EncodeSafetensors(const std::vector<Float32Tensor>& tensors) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  uint64_t offset = 0;
  for (const Float32Tensor& t : tensors) {
    uint64_t bytes = t.values.size() * sizeof(float);
    header[t.name] = {
        {"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t length = text.size();
  for (int i = 0; i < 8; ++i) {
    out[static_cast<size_t>(i)] = static_cast<char>(length >> (8 * i));
  }
  out += text;
  out.reserve(out.size() + offset);
  for (const Float32Tensor& t : tensors) {
    out.append(reinterpret_cast<const char*>(t.values.data()), t.values.size() * sizeof(float));
  }
  return out;
}

}  // namespace ferry
