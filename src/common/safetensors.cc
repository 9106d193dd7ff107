#include "common/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "common/fs.h"

namespace strata {

static_assert(sizeof(float) == 4, "float32");

int64_t SafetensorsDtypeSize(const std::string& dtype) {
  static const std::map<std::string, int64_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

SafeTensor SafeTensor::Floats(std::string name, std::vector<int64_t> shape,
                              const float* values) {
  SafeTensor t;
  t.name = std::move(name);
  t.dtype = "F32";
  t.shape = std::move(shape);
  t.data.assign(reinterpret_cast<const char*>(values),
                static_cast<size_t>(t.numel()) * sizeof(float));
  return t;
}

int64_t SafeTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<float> SafeTensor::ToFloats() const {
  if (dtype != "F32") return {};
  std::vector<float> out(data.size() / sizeof(float));
  std::memcpy(out.data(), data.data(), out.size() * sizeof(float));
  return out;
}

const SafeTensor* SafetensorsFile::Find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

Result<std::string> EncodeSafetensors(
    const std::vector<SafeTensor>& tensors,
    const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  int64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" ||
        !names.insert(t.name).second) {
      return Status::InvalidArgument(
          "safetensors: tensor name \"{}\" is empty, reserved or repeated",
          t.name);
    }
    const int64_t size = SafetensorsDtypeSize(t.dtype);
    if (size == 0)
      return Status::InvalidArgument("safetensors: tensor {}: unknown dtype {}",
                                     t.name, t.dtype);
    for (int64_t d : t.shape) {
      if (d < 0)
        return Status::InvalidArgument(
            "safetensors: tensor {}: negative dimension", t.name);
    }
    if (static_cast<int64_t>(t.data.size()) != t.numel() * size) {
      return Status::InvalidArgument(
          "safetensors: tensor {} holds {} bytes; {} x {} needs {}", t.name,
          t.data.size(), nlohmann::json(t.shape).dump(), t.dtype,
          t.numel() * size);
    }
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets",
                       {offset, offset + static_cast<int64_t>(t.data.size())}}};
    offset += static_cast<int64_t>(t.data.size());
  }
  std::string h = header.dump();
  // The data starts 8-byte aligned.
  h.append((8 - h.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + h.size() + static_cast<size_t>(offset));
  const uint64_t n = h.size();
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += h;
  for (const auto& t : tensors) out += t.data;
  return out;
}

Status WriteSafetensors(const std::string& path,
                        const std::vector<SafeTensor>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  ASSIGN_OR_RETURN(std::string bytes, EncodeSafetensors(tensors, metadata));
  return WriteFileAtomic(path, bytes);
}

namespace {

// One tensor's header entry, checked against the data section: its bytes
// and its [begin, end) in the data.
Status DecodeTensorEntry(const std::string& name, const nlohmann::json& v,
                         std::string_view data, const std::string& what,
                         SafeTensor& t, std::pair<uint64_t, uint64_t>* span) {
  const uint64_t data_size = data.size();
  if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() ||
      !v.contains("shape") || !v["shape"].is_array() ||
      !v.contains("data_offsets") || !v["data_offsets"].is_array() ||
      v["data_offsets"].size() != 2 ||
      !v["data_offsets"][0].is_number_unsigned() ||
      !v["data_offsets"][1].is_number_unsigned()) {
    return Status::DataLoss(
        "{}: tensor {}: expected dtype, shape and two data_offsets", what,
        name);
  }
  t.name = name;
  t.dtype = v["dtype"].get<std::string>();
  for (const auto& d : v["shape"]) {
    if (!d.is_number_unsigned())
      return Status::DataLoss("{}: tensor {}: bad shape {}", what, name,
                              v["shape"].dump());
    t.shape.push_back(d.get<int64_t>());
  }
  const int64_t size = SafetensorsDtypeSize(t.dtype);
  if (size == 0)
    return Status::DataLoss("{}: tensor {}: unknown dtype {}", what, name,
                            t.dtype);
  const uint64_t b = v["data_offsets"][0].get<uint64_t>();
  const uint64_t e = v["data_offsets"][1].get<uint64_t>();
  if (b > e || e > data_size)
    return Status::DataLoss(
        "{}: tensor {}: data_offsets [{}, {}) outside the {} data bytes", what,
        name, b, e, data_size);
  if (static_cast<int64_t>(e - b) != t.numel() * size)
    return Status::DataLoss(
        "{}: tensor {}: {} bytes for shape {} of {} (needs {})", what, name,
        e - b, v["shape"].dump(), t.dtype, t.numel() * size);
  t.data = data.substr(b, e - b);
  *span = {b, e};
  return Status::Ok();
}

}  // namespace

Result<SafetensorsFile> DecodeSafetensors(const std::string& bytes,
                                          const std::string& what) {
  if (bytes.size() < 8)
    return Status::DataLoss("{}: {} bytes, too short for a safetensors file",
                            what, bytes.size());
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  if (n > bytes.size() - 8)
    return Status::DataLoss(
        "{}: header length {} is beyond the file's {} bytes (not a "
        "safetensors file, or cut short)",
        what, n, bytes.size());
  nlohmann::json header =
      nlohmann::json::parse(bytes.substr(8, n), nullptr, false);
  if (header.is_discarded() || !header.is_object())
    return Status::DataLoss("{}: the header is not a JSON object", what);
  SafetensorsFile file;
  const uint64_t data_size = bytes.size() - 8 - n;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (!v.is_object())
        return Status::DataLoss("{}: __metadata__ is not an object", what);
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string())
          return Status::DataLoss("{}: metadata {} is not a string", what, k);
        file.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    SafeTensor t;
    std::pair<uint64_t, uint64_t> span;
    RETURN_IF_ERROR(DecodeTensorEntry(
        name, v, std::string_view(bytes).substr(8 + n), what, t, &span));
    spans.push_back(span);
    file.tensors.push_back(std::move(t));
  }
  // Data order, and the tensors cover the data section exactly.
  std::vector<size_t> order(file.tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return spans[a] < spans[b]; });
  uint64_t at = 0;
  std::vector<SafeTensor> sorted;
  for (size_t i : order) {
    if (spans[i].first != at)
      return Status::DataLoss(
          "{}: tensor {} starts at byte {} of the data, expected {} (overlap "
          "or hole)",
          what, file.tensors[i].name, spans[i].first, at);
    at = spans[i].second;
    sorted.push_back(std::move(file.tensors[i]));
  }
  if (at != data_size)
    return Status::DataLoss("{}: {} data bytes after the last tensor", what,
                            data_size - at);
  file.tensors = std::move(sorted);
  return file;
}

Result<SafetensorsFile> ReadSafetensors(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  return DecodeSafetensors(bytes, path);
}

}  // namespace strata
