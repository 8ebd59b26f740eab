// The KServe v2 infer request parsed with simdjson's On-Demand API: no DOM of the document,
// no vector of doubles between the text and the tensor's bytes (kserve_codec.h states the
// rules; docs/frontend.md why simdjson).
#include <simdjson.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "hookhost/frontend/json_parameters.h"
#include "hookhost/frontend/json_strings.h"
#include "hookhost/frontend/kserve_codec.h"

namespace ferry::frontend {
namespace {

namespace od = simdjson::ondemand;

// Documents up to this size reuse the thread's parser and padded buffer; a larger one gets
// its own, freed after it (a parser keeps index space of a few times the largest document).
constexpr size_t kReusedParserBytes = 1 << 20;

Error NotAnObject() { return InvalidArgument("the request body is not a JSON object"); }

template <typename T>
void Put(uint8_t* dst, T v) {
  std::memcpy(dst, &v, sizeof(T));
}

template <typename T>
Status PutInteger(od::value& v, uint8_t* dst) {
  od::number n;
  if (v.get_number().get(n)) {
    return InvalidArgument("an integer was expected");
  }
  od::number_type type = n.get_number_type();
  if (type == od::number_type::floating_point_number) {
    return InvalidArgument("an integer was expected");
  }
  if (type == od::number_type::unsigned_integer) {
    uint64_t x = n.get_uint64();
    if (x > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
      return InvalidArgument("value " + std::to_string(x) + " out of range");
    }
    Put<T>(dst, static_cast<T>(x));
    return OkStatus();
  }
  int64_t x = n.get_int64();
  if (x < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
      (x > 0 && static_cast<uint64_t>(x) > static_cast<uint64_t>(std::numeric_limits<T>::max()))) {
    return InvalidArgument("value " + std::to_string(x) + " out of range");
  }
  Put<T>(dst, static_cast<T>(x));
  return OkStatus();
}

// A number read as a double into an FP32 or FP64 element; FP32 refuses what it cannot hold
// (rounding to infinity) rather than storing infinity.
Status PutFloating(DType dtype, double x, uint8_t* dst) {
  if (dtype == DType::kF64) {
    Put<double>(dst, x);
    return OkStatus();
  }
  auto f = static_cast<float>(x);
  if (std::isinf(f)) {
    return InvalidArgument("value out of the range of FP32");
  }
  Put<float>(dst, f);
  return OkStatus();
}

// One element of `dtype` from `v` into dst.
Status PutElement(DType dtype, od::value& v, uint8_t* dst) {
  switch (dtype) {
    case DType::kF32:
    case DType::kF64: {
      double x;
      if (v.get_double().get(x)) {
        return InvalidArgument("a number was expected");
      }
      return PutFloating(dtype, x, dst);
    }
    case DType::kBool: {
      bool b;
      if (v.get_bool().get(b)) {
        return InvalidArgument("true or false was expected");
      }
      *dst = b ? 1 : 0;
      return OkStatus();
    }
    case DType::kU8:
      return PutInteger<uint8_t>(v, dst);
    case DType::kI8:
      return PutInteger<int8_t>(v, dst);
    case DType::kU16:
      return PutInteger<uint16_t>(v, dst);
    case DType::kI16:
      return PutInteger<int16_t>(v, dst);
    case DType::kU32:
      return PutInteger<uint32_t>(v, dst);
    case DType::kI32:
      return PutInteger<int32_t>(v, dst);
    case DType::kU64:
      return PutInteger<uint64_t>(v, dst);
    case DType::kI64:
      return PutInteger<int64_t>(v, dst);
    default:
      return InvalidArgument(std::string(KServeName(dtype)) +
                             " tensors must be sent as binary data (binary_data_size)");
  }
}

// "data": nested arrays (row-major) of exactly `count` elements written into `out`.
class DataReader {
 public:
  DataReader(DType dtype, uint8_t* out, size_t count)
      : dtype_(dtype), out_(out), count_(count), elem_(static_cast<size_t>(DTypeBits(dtype) / 8)) {}

  // INVALID_ARGUMENT naming the element, "more" when there are more than `count`.
  Status Read(od::value& data, int depth) {
    od::json_type type;
    if (data.type().get(type)) {
      return InvalidArgument("\"data\" is not valid JSON");
    }
    if (type != od::json_type::array) {
      return Element(data);
    }
    if (depth >= kMaxJsonDepth) {
      return InvalidArgument("\"data\" nested deeper than " + std::to_string(kMaxJsonDepth));
    }
    od::array array;
    if (data.get_array().get(array)) {
      return InvalidArgument("\"data\" is not valid JSON");
    }
    for (simdjson::simdjson_result<od::value> item : array) {
      od::value v;
      if (item.get(v)) {
        return InvalidArgument("\"data\" is not valid JSON");
      }
      double x;
      bool floating = dtype_ == DType::kF32 || dtype_ == DType::kF64;
      if (floating && read_ < count_ && !v.get_double().get(x)) {
        // The common case: a number, read once (a nested array or a mistyped value fails
        // get_double without being consumed, and takes the general path below).
        Status put = PutFloating(dtype_, x, out_ + read_ * elem_);
        if (!put.ok()) {
          return InvalidArgument("element " + std::to_string(read_) + ": " + put.error().message);
        }
        ++read_;
        continue;
      }
      FERRY_RETURN_IF_ERROR(Read(v, depth + 1));
    }
    return OkStatus();
  }

  size_t read() const { return read_; }
  bool more() const { return more_; }

 private:
  Status Element(od::value& v) {
    if (read_ >= count_) {
      more_ = true;
      return InvalidArgument("more elements than its shape holds");
    }
    Status put = PutElement(dtype_, v, out_ + read_ * elem_);
    if (!put.ok()) {
      return InvalidArgument("element " + std::to_string(read_) + ": " + put.error().message);
    }
    ++read_;
    return OkStatus();
  }

  DType dtype_;
  uint8_t* out_;
  size_t count_;
  size_t elem_;
  size_t read_ = 0;
  bool more_ = false;
};

Result<std::string> ReadString(od::value& v, std::string_view what) {
  std::string_view s;
  if (v.get_string().get(s)) {
    return InvalidArgument(std::string(what));
  }
  return Clip(s, 256);
}

Result<Shape> ReadShape(od::value& v, const std::string& name) {
  od::array array;
  Error wrong =
      InvalidArgument("input '" + name + "': \"shape\" must be an array of at most 16 dims");
  if (v.get_array().get(array)) {
    return wrong;
  }
  Shape out;
  for (simdjson::simdjson_result<od::value> item : array) {
    int64_t d;
    if (item.get_int64().get(d) || d < 0) {
      return InvalidArgument("input '" + name + "': shape dims must be integers >= 0");
    }
    if (out.size() == 16) {
      return wrong;
    }
    out.push_back(d);
  }
  return out;
}

// The fields of one input tensor, in any order; "data" is read once the shape is known.
struct TensorFields {
  std::optional<std::string> name, datatype;
  std::optional<Shape> shape;
  JsonParameters parameters;
  bool has_data = false;
};

Status ReadFields(od::object& tensor, TensorFields* f) {
  for (simdjson::simdjson_result<od::field> field : tensor) {
    std::string_view key;
    od::value v;
    if (field.unescaped_key().get(key) || field.value().get(v)) {
      return NotAnObject();
    }
    if (key == "name") {
      FERRY_ASSIGN_OR_RETURN(f->name, ReadString(v, "each input needs a string \"name\""));
    } else if (key == "datatype") {
      FERRY_ASSIGN_OR_RETURN(f->datatype, ReadString(v, "\"datatype\" must be a string"));
    } else if (key == "shape") {
      FERRY_ASSIGN_OR_RETURN(f->shape, ReadShape(v, f->name.value_or("?")));
    } else if (key == "parameters") {
      FERRY_RETURN_IF_ERROR(ReadParameters(v, &f->parameters));
    } else if (key == "data") {
      f->has_data = true;  // Read in a second pass, once name, type and shape are known.
    }
  }
  return OkStatus();
}

// The input's name, type and shape, checked; its size in bytes (BYTES: unknown until its data
// is read) and elements.
struct CheckedInput {
  hookhost::ClientTensor client;
  uint64_t bytes = 0;
  uint64_t count = 0;
};

Result<CheckedInput> CheckFields(const TensorFields& f) {
  if (!f.name) {
    return InvalidArgument("each input needs a string \"name\"");
  }
  const std::string& name = *f.name;
  if (!f.datatype) {
    return InvalidArgument("input '" + name + "': \"datatype\" must be a string");
  }
  std::optional<DType> dtype = DTypeFromKServe(*f.datatype);
  if (!dtype) {
    return InvalidArgument("input '" + name + "': unsupported datatype '" +
                           f.datatype->substr(0, 32) + "'");
  }
  if (!f.shape) {
    return InvalidArgument("input '" + name + "': \"shape\" must be an array of at most 16 dims");
  }
  std::optional<uint64_t> count = ElementCount(*f.shape);
  std::optional<uint64_t> bytes =
      *dtype == DType::kBytes ? std::optional<uint64_t>(0) : TensorByteSize(*dtype, *f.shape);
  if (!bytes || !count || *bytes > (uint64_t{1} << 40) || *count > (uint64_t{1} << 40)) {
    return InvalidArgument("input '" + name + "': shape too large");
  }
  return CheckedInput{{name, *dtype, *f.shape, {}}, *bytes, *count};
}

// The input's bytes from the binary section at *offset (binary_data_size: `size`).
Status TakeBinary(CheckedInput& in, int64_t size, std::string_view binary, size_t* offset) {
  const std::string& name = in.client.name;
  if (in.client.dtype == DType::kBytes) {  // Its size is its data's: checked element by element.
    if (binary.size() - *offset < static_cast<uint64_t>(size)) {
      return InvalidArgument("input '" + name + "': the binary section is truncated (" +
                             std::to_string(binary.size() - *offset) + " bytes left, " +
                             std::to_string(size) + " expected)");
    }
    auto data = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(binary.data()) + *offset,
                                         static_cast<size_t>(size));
    if (Status well_formed = CheckBytesTensor(data, in.count); !well_formed.ok()) {
      return InvalidArgument("input '" + name + "': " + well_formed.error().message);
    }
    in.client.bytes = data;
    *offset += data.size();
    return OkStatus();
  }
  if (static_cast<uint64_t>(size) != in.bytes) {
    return InvalidArgument("input '" + name + "': binary_data_size " + std::to_string(size) +
                           " but shape and datatype make " + std::to_string(in.bytes) + " bytes");
  }
  if (binary.size() - *offset < in.bytes) {
    return InvalidArgument("input '" + name + "': the binary section is truncated (" +
                           std::to_string(binary.size() - *offset) + " bytes left, " +
                           std::to_string(in.bytes) + " expected)");
  }
  in.client.bytes =
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(binary.data()) + *offset, in.bytes);
  *offset += in.bytes;
  return OkStatus();
}

// A BYTES input's strings from its "data", into a new block of parsed->storage.
Status ReadStrings(CheckedInput& in, od::object& tensor, size_t text_bytes, ParsedInfer* parsed) {
  od::value data;
  if (tensor.find_field_unordered("data").get(data)) {
    return NotAnObject();
  }
  std::vector<uint8_t>& storage = parsed->storage.emplace_back();
  FERRY_RETURN_IF_ERROR(ReadJsonStrings(data, in.client.name, in.count, text_bytes, &storage));
  in.client.bytes = storage;
  return OkStatus();
}

// The input's bytes from its "data" (`text_bytes`: the document's size, which bounds how many
// elements it can hold), into a new block of parsed->storage.
Status ReadData(CheckedInput& in, od::object& tensor, size_t text_bytes, ParsedInfer* parsed) {
  const std::string& name = in.client.name;
  DType dtype = in.client.dtype;
  if (dtype == DType::kBytes) {
    return ReadStrings(in, tensor, text_bytes, parsed);
  }
  size_t elem = static_cast<size_t>(DTypeBits(dtype) / 8);
  if (elem == 0 || dtype == DType::kF16 || dtype == DType::kBF16) {
    return InvalidArgument("input '" + name + "': " + std::string(KServeName(dtype)) +
                           " tensors must be sent as binary data (binary_data_size)");
  }
  size_t count = in.bytes / elem;
  // n elements take at least 2n - 1 characters: a shape that lies about its size is refused
  // before its bytes are allocated.
  if (count > text_bytes / 2 + 1) {
    return InvalidArgument("input '" + name + "': shape holds " + std::to_string(count) +
                           " elements but a body of " + std::to_string(text_bytes) +
                           " bytes cannot");
  }
  od::value data;
  if (tensor.find_field_unordered("data").get(data)) {
    return NotAnObject();
  }
  std::vector<uint8_t>& storage = parsed->storage.emplace_back(in.bytes);
  DataReader reader(dtype, storage.data(), count);
  Status read = reader.Read(data, 0);
  if (reader.more() || (read.ok() && reader.read() != count)) {
    return InvalidArgument("input '" + name + "': shape holds " + std::to_string(count) +
                           " elements but \"data\" has " +
                           (reader.more() ? "more" : std::to_string(reader.read())));
  }
  if (!read.ok()) {
    return InvalidArgument("input '" + name + "' " + read.error().message);
  }
  in.client.bytes = storage;
  return OkStatus();
}

Status ReadInput(od::object& tensor, size_t text_bytes, std::string_view binary, size_t* offset,
                 ParsedInfer* parsed) {
  TensorFields f;
  FERRY_RETURN_IF_ERROR(ReadFields(tensor, &f));
  FERRY_ASSIGN_OR_RETURN(CheckedInput in, CheckFields(f));
  if (f.parameters.shared_memory_region) {
    if (f.has_data || f.parameters.binary_data_size) {
      return InvalidArgument("input '" + in.client.name +
                             "': shared_memory_region with \"data\" or binary_data_size");
    }
    FERRY_ASSIGN_OR_RETURN(
        SharedTensor place,
        SharedPlace("input '" + in.client.name + "'", *f.parameters.shared_memory_region,
                    f.parameters.shared_memory_offset, f.parameters.shared_memory_byte_size,
                    in.bytes));
    parsed->shm_inputs.emplace_back(parsed->request.inputs.size(), std::move(place));
  } else if (int64_t size = f.parameters.binary_data_size.value_or(-1); size >= 0) {
    if (f.has_data) {
      return InvalidArgument("input '" + in.client.name + "': both \"data\" and binary_data_size");
    }
    FERRY_RETURN_IF_ERROR(TakeBinary(in, size, binary, offset));
  } else if (!f.has_data) {
    return InvalidArgument("input '" + in.client.name + "': no \"data\" and no binary_data_size");
  } else {
    FERRY_RETURN_IF_ERROR(ReadData(in, tensor, text_bytes, parsed));
  }
  parsed->request.inputs.push_back(std::move(in.client));
  return OkStatus();
}

Status ReadInputs(od::value& value, size_t text_bytes, std::string_view binary,
                  ParsedInfer* parsed) {
  Error wrong = InvalidArgument("\"inputs\" must be an array of 1 to 64 tensors");
  od::array inputs;
  if (value.get_array().get(inputs)) {
    return wrong;
  }
  // Reserved first: spans into `storage` must not move.
  parsed->storage.reserve(64);
  size_t offset = 0;
  for (simdjson::simdjson_result<od::value> item : inputs) {
    od::object tensor;
    if (parsed->request.inputs.size() == 64) {
      return wrong;
    }
    if (item.get_object().get(tensor)) {
      return InvalidArgument("each input needs a string \"name\"");
    }
    FERRY_RETURN_IF_ERROR(ReadInput(tensor, text_bytes, binary, &offset, parsed));
  }
  if (parsed->request.inputs.empty()) {
    return wrong;
  }
  if (offset != binary.size()) {
    return InvalidArgument("the binary section holds " + std::to_string(binary.size()) +
                           " bytes but the inputs use " + std::to_string(offset));
  }
  return OkStatus();
}

// `binary`: each output's "binary_data" parameter where it has one (the request's
// "binary_data_output" may come after the outputs).
Status ReadOutputs(od::value& value, ParsedInfer* parsed,
                   std::vector<std::optional<bool>>* binary) {
  Error wrong = InvalidArgument("\"outputs\" must be an array of at most 64");
  od::array outputs;
  if (value.get_array().get(outputs)) {
    return wrong;
  }
  for (simdjson::simdjson_result<od::value> item : outputs) {
    if (parsed->outputs.size() == 64) {
      return wrong;
    }
    od::object o;
    Error unnamed = InvalidArgument("each requested output needs a string \"name\"");
    if (item.get_object().get(o)) {
      return unnamed;
    }
    std::optional<std::string> name;
    JsonParameters params;
    for (simdjson::simdjson_result<od::field> field : o) {
      std::string_view key;
      od::value v;
      if (field.unescaped_key().get(key) || field.value().get(v)) {
        return NotAnObject();
      }
      if (key == "name") {
        FERRY_ASSIGN_OR_RETURN(name, ReadString(v, unnamed.message));
      } else if (key == "parameters") {
        FERRY_RETURN_IF_ERROR(ReadParameters(v, &params));
      }
    }
    if (!name) {
      return unnamed;
    }
    std::optional<SharedTensor> place;
    if (params.shared_memory_region) {
      FERRY_ASSIGN_OR_RETURN(
          place, SharedPlace("output '" + *name + "'", *params.shared_memory_region,
                             params.shared_memory_offset, params.shared_memory_byte_size, 0));
    }
    parsed->outputs.push_back({std::move(*name), false, std::move(place)});
    binary->push_back(params.binary_data);
  }
  return OkStatus();
}

Status ReadDocument(od::document& doc, size_t text_bytes, std::string_view binary,
                    ParsedInfer* parsed) {
  od::object top;
  if (doc.get_object().get(top)) {
    return NotAnObject();
  }
  JsonParameters params;
  bool has_inputs = false;
  std::vector<std::optional<bool>> output_binary;
  for (simdjson::simdjson_result<od::field> field : top) {
    std::string_view key;
    od::value v;
    if (field.unescaped_key().get(key) || field.value().get(v)) {
      return NotAnObject();
    }
    if (key == "id") {
      FERRY_ASSIGN_OR_RETURN(parsed->id, ReadString(v, "\"id\" must be a string"));
    } else if (key == "parameters") {
      FERRY_RETURN_IF_ERROR(ReadParameters(v, &params));
    } else if (key == "inputs") {
      has_inputs = true;
      FERRY_RETURN_IF_ERROR(ReadInputs(v, text_bytes, binary, parsed));
    } else if (key == "outputs") {
      FERRY_RETURN_IF_ERROR(ReadOutputs(v, parsed, &output_binary));
    }
  }
  if (!has_inputs) {
    return InvalidArgument("\"inputs\" must be an array of 1 to 64 tensors");
  }
  parsed->request.sequence_id = params.sequence_id;
  parsed->request.sequence_start = params.sequence_start;
  parsed->request.sequence_end = params.sequence_end;
  parsed->binary_default = params.binary_data_output.value_or(false);
  for (size_t i = 0; i < parsed->outputs.size(); ++i) {
    parsed->outputs[i].binary = output_binary[i].value_or(parsed->binary_default);
  }
  parsed->timeout_us = params.timeout.value_or(0);
  if (parsed->timeout_us < 0) {
    return InvalidArgument("parameter \"timeout\" must be >= 0 (microseconds)");
  }
  FERRY_ASSIGN_OR_RETURN(parsed->priority, PriorityFromParameter(params.priority.value_or(0)));
  parsed->tenant = params.tenant.value_or("");
  return OkStatus();
}

// A parser and the padded copy of the document it reads.
struct PaddedParser {
  od::parser parser;
  std::string text;  // The document, then SIMDJSON_PADDING bytes.
};

}  // namespace

Result<ParsedInfer> ParseInferRequest(std::string_view header, std::string_view binary) {
  thread_local PaddedParser reused;
  std::unique_ptr<PaddedParser> own;
  PaddedParser* p = &reused;
  if (header.size() > kReusedParserBytes) {
    own = std::make_unique<PaddedParser>();
    p = own.get();
  }
  p->text.assign(header);
  p->text.append(simdjson::SIMDJSON_PADDING, '\0');
  od::document doc;
  if (p->parser.iterate(p->text.data(), header.size(), p->text.size()).get(doc)) {
    return NotAnObject();
  }
  ParsedInfer parsed;
  Status read = ReadDocument(doc, header.size(), binary, &parsed);
  if (read.ok() && doc.current_location().error() == simdjson::SUCCESS) {
    return NotAnObject();  // Something after the object.
  }
  if (!read.ok()) {
    return read.error();
  }
  return parsed;
}

}  // namespace ferry::frontend
