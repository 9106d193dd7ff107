#include "data/readers.h"

#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <vector>

#include "common/fs.h"

namespace strata {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the .npy reader copies little-endian values directly");

constexpr uint32_t kIdxImagesMagic = 0x00000803;
constexpr uint32_t kIdxLabelsMagic = 0x00000801;
constexpr int64_t kIdxImagesHeader = 16;
constexpr int64_t kIdxLabelsHeader = 8;
constexpr int64_t kCifarPixels = 3 * 32 * 32;

bool IsGzip(const std::string& bytes) {
  return bytes.size() >= 2 && static_cast<uint8_t>(bytes[0]) == 0x1f &&
         static_cast<uint8_t>(bytes[1]) == 0x8b;
}

// Inflates a whole gzip file held in memory. Concatenated members (what
// `cat a.gz b.gz` makes) are joined, as gunzip does.
Result<std::string> Gunzip(const std::string& in, const std::string& path) {
  z_stream zs;
  std::memset(&zs, 0, sizeof(zs));
  // 16 + MAX_WBITS: expect a gzip wrapper and check its CRC and length.
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
    return Status::Internal("{}: inflateInit2 failed", path);
  }
  std::string out;
  out.resize(std::max<size_t>(in.size() * 4, 1 << 16));
  size_t in_pos = 0;
  size_t out_pos = 0;
  constexpr size_t kMaxChunk = 1u << 30;  // avail_in/avail_out are 32-bit
  int rc = Z_OK;
  while (true) {
    if (out_pos == out.size()) out.resize(out.size() * 2);
    size_t in_chunk = std::min(in.size() - in_pos, kMaxChunk);
    size_t out_chunk = std::min(out.size() - out_pos, kMaxChunk);
    zs.next_in =
        reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + in_pos));
    zs.avail_in = static_cast<uInt>(in_chunk);
    zs.next_out = reinterpret_cast<Bytef*>(&out[out_pos]);
    zs.avail_out = static_cast<uInt>(out_chunk);
    rc = inflate(&zs, Z_NO_FLUSH);
    in_pos += in_chunk - zs.avail_in;
    out_pos += out_chunk - zs.avail_out;
    if (rc == Z_STREAM_END) {
      // Another member follows only if the next bytes are a gzip header;
      // anything else (e.g. zero padding from tape tools) is ignored.
      if (in.size() - in_pos >= 2 && static_cast<uint8_t>(in[in_pos]) == 0x1f &&
          static_cast<uint8_t>(in[in_pos + 1]) == 0x8b) {
        inflateReset(&zs);
        continue;
      }
      break;
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR && in_pos == in.size() && out_pos < out.size()) {
      // No progress possible: the input ended inside the stream.
      inflateEnd(&zs);
      return Status::DataLoss("{}: truncated gzip stream ({} compressed bytes)",
                              path, in.size());
    }
    if (rc == Z_BUF_ERROR) continue;  // output full; grow and go on
    std::string msg = zs.msg != nullptr ? zs.msg : "inflate error";
    inflateEnd(&zs);
    return Status::DataLoss("{}: corrupt gzip data: {}", path, msg);
  }
  inflateEnd(&zs);
  out.resize(out_pos);
  return out;
}

// The file's bytes, gunzipped when they start with the gzip magic (the name
// is not consulted). NotFound says "<path>: no such file".
Result<std::string> ReadMaybeGzip(const std::string& path) {
  Result<std::string> raw = ReadFile(path);
  if (!raw.ok() || !IsGzip(*raw)) return raw;
  return Gunzip(*raw, path);
}

uint32_t BigEndian32(const std::string& bytes, size_t offset) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data() + offset);
  return (static_cast<uint32_t>(p[0]) << 24) |
         (static_cast<uint32_t>(p[1]) << 16) |
         (static_cast<uint32_t>(p[2]) << 8) | static_cast<uint32_t>(p[3]);
}

Status CheckIdxMagic(const std::string& bytes, const std::string& path,
                     uint32_t expected, int64_t header_size, const char* what) {
  if (bytes.size() < 4) {
    return Status::DataLoss(
        "{}: truncated: {} bytes, shorter than the {}-byte IDX {} header", path,
        bytes.size(), header_size, what);
  }
  uint32_t magic = BigEndian32(bytes, 0);
  if (magic != expected) {
    return Status::DataLoss(
        "{}: bad magic: expected 0x{:08x} (IDX {}), found 0x{:08x}", path,
        expected, what, magic);
  }
  if (static_cast<int64_t>(bytes.size()) < header_size) {
    return Status::DataLoss(
        "{}: truncated: {} bytes, shorter than the {}-byte IDX {} header", path,
        bytes.size(), header_size, what);
  }
  return Status::Ok();
}

// Checks that exactly `count` records of `record_bytes` follow the header.
Status CheckPayload(const std::string& bytes, const std::string& path,
                    int64_t header_size, uint64_t count, uint64_t record_bytes,
                    const char* what) {
  uint64_t available = bytes.size() - header_size;
  if (record_bytes == 0) {
    return Status::DataLoss("{}: header declares zero-sized {}", path, what);
  }
  if (count > available / record_bytes) {
    return Status::DataLoss(
        "{}: truncated: header claims {} {} ({} bytes) but only {} bytes "
        "follow the header",
        path, count, what, count * record_bytes, available);
  }
  uint64_t extra = available - count * record_bytes;
  if (extra != 0) {
    return Status::DataLoss(
        "{}: size mismatch: {} unexpected bytes after the {} {} the header "
        "claims",
        path, extra, count, what);
  }
  return Status::Ok();
}

Status CheckLabel(int64_t label, int64_t index, int64_t num_classes,
                  const std::string& path, const char* kind = "label") {
  if (label < 0 || label >= num_classes) {
    return Status::DataLoss(
        "{}: label out of range: {} {} at index {} (must be in [0, {}))", path,
        kind, label, index, num_classes);
  }
  return Status::Ok();
}

void AppendDataset(Dataset& into, Dataset&& from) {
  into.features.insert(into.features.end(), from.features.begin(),
                       from.features.end());
  into.labels.insert(into.labels.end(), from.labels.begin(), from.labels.end());
  into.coarse_labels.insert(into.coarse_labels.end(),
                            from.coarse_labels.begin(),
                            from.coarse_labels.end());
}

// `dir/base.gz` if present, else `dir/base`; NotFound names both.
Result<std::string> FindMaybeGz(const std::string& dir,
                                const std::string& base) {
  std::string raw = JoinPath(dir, base);
  if (FileExists(raw + ".gz")) return raw + ".gz";
  if (FileExists(raw)) return raw;
  return Status::NotFound("{}[.gz]: no such file (looked for {}.gz and {})",
                          raw, raw, raw);
}

// Reads fixed-size CIFAR records: `label_bytes` label bytes then 3072
// pixels. The last label byte is `labels`; with two label bytes the first
// is the coarse label.
Result<Dataset> ReadCifarRecords(const std::string& path, int label_bytes,
                                 int64_t num_classes, int64_t coarse_classes,
                                 bool fine, const std::string& name) {
  ASSIGN_OR_RETURN(std::string bytes, ReadMaybeGzip(path));
  const int64_t record = label_bytes + kCifarPixels;
  const int64_t size = static_cast<int64_t>(bytes.size());
  if (size == 0) {
    return Status::DataLoss(
        "{}: truncated: empty file, expected {}-byte "
        "records",
        path, record);
  }
  if (size % record != 0) {
    return Status::DataLoss(
        "{}: truncated: {} bytes is not a multiple of the {}-byte record "
        "({} whole records and {} bytes over)",
        path, size, record, size / record, size % record);
  }
  const int64_t n = size / record;
  Dataset d;
  d.name = name;
  d.channels = 3;
  d.height = 32;
  d.width = 32;
  d.num_classes = label_bytes == 2 && !fine ? coarse_classes : num_classes;
  d.features.resize(n * kCifarPixels);
  d.labels.resize(n);
  if (label_bytes == 2) d.coarse_labels.resize(n);
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  for (int64_t i = 0; i < n; ++i, p += record) {
    if (label_bytes == 2) {
      int64_t coarse = p[0];
      int64_t fine_label = p[1];
      RETURN_IF_ERROR(
          CheckLabel(coarse, i, coarse_classes, path, "coarse label"));
      RETURN_IF_ERROR(
          CheckLabel(fine_label, i, num_classes, path, "fine label"));
      d.coarse_labels[i] = coarse;
      d.labels[i] = fine ? fine_label : coarse;
    } else {
      RETURN_IF_ERROR(CheckLabel(p[0], i, num_classes, path));
      d.labels[i] = p[0];
    }
    // The file is already channel-major (1024 R, 1024 G, 1024 B), which is
    // our C x H x W layout, so the pixels are copied in order.
    float* out = d.features.data() + i * kCifarPixels;
    const uint8_t* px = p + label_bytes;
    for (int64_t j = 0; j < kCifarPixels; ++j) out[j] = px[j] / 255.0f;
  }
  return d;
}

// `dir` itself if it holds `probe`, else `dir/sub` if that does.
Result<std::string> FindCifarDir(const std::string& dir, const std::string& sub,
                                 const std::string& probe) {
  if (FileExists(JoinPath(dir, probe))) return dir;
  std::string nested = JoinPath(dir, sub);
  if (FileExists(JoinPath(nested, probe))) return nested;
  return Status::NotFound("{}: no such file (nor {})", JoinPath(dir, probe),
                          JoinPath(nested, probe));
}

// ---- .npy -----------------------------------------------------------------

struct NpyArray {
  std::string descr;
  std::vector<int64_t> shape;
  std::string bytes;  // the whole (decompressed) file
  size_t data_offset = 0;
  int64_t item_size = 0;

  int64_t count() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
  const char* data() const { return bytes.data() + data_offset; }
};

// Finds `'key':` in the header dict and returns the position after the
// colon (and spaces), or npos.
size_t FindKey(const std::string& header, const std::string& key) {
  for (char q : {'\'', '"'}) {
    std::string quoted = std::string(1, q) + key + std::string(1, q);
    size_t at = header.find(quoted);
    if (at == std::string::npos) continue;
    size_t p = at + quoted.size();
    while (p < header.size() && header[p] == ' ') ++p;
    if (p >= header.size() || header[p] != ':') return std::string::npos;
    ++p;
    while (p < header.size() && header[p] == ' ') ++p;
    return p;
  }
  return std::string::npos;
}

// Parses the npy header dict, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
Status ParseNpyHeader(const std::string& header, const std::string& path,
                      NpyArray* array) {
  size_t p = FindKey(header, "descr");
  if (p == std::string::npos || (header[p] != '\'' && header[p] != '"')) {
    // A structured dtype is a list, not a string.
    return Status::DataLoss(
        "{}: unsupported dtype: header has no plain 'descr' string: {}", path,
        header);
  }
  size_t end = header.find(header[p], p + 1);
  if (end == std::string::npos) {
    return Status::DataLoss("{}: malformed .npy header: {}", path, header);
  }
  array->descr = header.substr(p + 1, end - p - 1);

  p = FindKey(header, "fortran_order");
  if (p == std::string::npos) {
    return Status::DataLoss("{}: malformed .npy header (no fortran_order): {}",
                            path, header);
  }
  if (header.compare(p, 4, "True") == 0) {
    return Status::DataLoss(
        "{}: fortran_order is True: Fortran (column-major) arrays are not "
        "supported; save a C-order array (numpy.ascontiguousarray)",
        path);
  }
  if (header.compare(p, 5, "False") != 0) {
    return Status::DataLoss("{}: malformed .npy header (fortran_order): {}",
                            path, header);
  }

  p = FindKey(header, "shape");
  if (p == std::string::npos || header[p] != '(') {
    return Status::DataLoss("{}: malformed .npy header (no shape): {}", path,
                            header);
  }
  end = header.find(')', p);
  if (end == std::string::npos) {
    return Status::DataLoss("{}: malformed .npy header (shape): {}", path,
                            header);
  }
  array->shape.clear();
  size_t q = p + 1;
  while (q < end) {
    while (q < end && (header[q] == ' ' || header[q] == ',')) ++q;
    if (q >= end) break;
    int64_t dim = 0;
    auto [ptr, ec] =
        std::from_chars(header.data() + q, header.data() + end, dim);
    if (ec != std::errc() || dim < 0) {
      return Status::DataLoss("{}: malformed .npy header (shape): {}", path,
                              header);
    }
    array->shape.push_back(dim);
    q = ptr - header.data();
    if (q < end && header[q] == 'L') ++q;  // Python 2 longs: (3L, 4L)
  }
  return Status::Ok();
}

// Reads a .npy file (format versions 1-3) and checks that its dtype is one
// of `allowed` and the payload is complete.
Result<NpyArray> ReadNpy(const std::string& path,
                         const std::vector<std::string>& allowed,
                         const char* role) {
  NpyArray array;
  ASSIGN_OR_RETURN(array.bytes, ReadMaybeGzip(path));
  const std::string& b = array.bytes;
  static const char kMagic[] = "\x93NUMPY";
  if (b.size() < 6 || b.compare(0, 6, kMagic, 6) != 0) {
    return Status::DataLoss(
        "{}: not a .npy file (bad magic: expected \\x93NUMPY at the start)",
        path);
  }
  if (b.size() < 10) {
    return Status::DataLoss(
        "{}: truncated: {} bytes, shorter than the .npy "
        "preamble",
        path, b.size());
  }
  const auto* u = reinterpret_cast<const uint8_t*>(b.data());
  int major = u[6];
  size_t header_len;
  size_t header_start;
  if (major == 1) {
    header_len = u[8] | (u[9] << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) {
      return Status::DataLoss(
          "{}: truncated: {} bytes, shorter than the "
          ".npy preamble",
          path, b.size());
    }
    header_len = static_cast<size_t>(u[8]) | (static_cast<size_t>(u[9]) << 8) |
                 (static_cast<size_t>(u[10]) << 16) |
                 (static_cast<size_t>(u[11]) << 24);
    header_start = 12;
  } else {
    return Status::DataLoss("{}: unsupported .npy format version {}.{}", path,
                            major, u[7]);
  }
  if (b.size() < header_start + header_len) {
    return Status::DataLoss(
        "{}: truncated: {} bytes, shorter than the {}-byte .npy header", path,
        b.size(), header_start + header_len);
  }
  RETURN_IF_ERROR(
      ParseNpyHeader(b.substr(header_start, header_len), path, &array));
  if (std::find(allowed.begin(), allowed.end(), array.descr) == allowed.end()) {
    std::string list;
    for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
    return Status::DataLoss("{}: unsupported dtype '{}' for {} (allowed: {})",
                            path, array.descr, role, list);
  }
  array.item_size = std::stoll(array.descr.substr(2));
  array.data_offset = header_start + header_len;
  uint64_t available = b.size() - array.data_offset;
  uint64_t count = 1;
  for (int64_t s : array.shape) {
    if (s != 0 && count > std::numeric_limits<uint64_t>::max() / 16 / s) {
      return Status::DataLoss(
          "{}: truncated: shape is far larger than the "
          "file",
          path);
    }
    count *= s;
  }
  uint64_t needed = count * array.item_size;
  if (available < needed) {
    return Status::DataLoss(
        "{}: truncated: shape needs {} data bytes but only {} follow the "
        "header",
        path, needed, available);
  }
  if (available > needed) {
    return Status::DataLoss(
        "{}: size mismatch: {} unexpected bytes after the array data", path,
        available - needed);
  }
  return array;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return s + (shape.size() == 1 ? ",)" : ")");
}

}  // namespace

Result<Dataset> ReadIdxPair(const std::string& images_path,
                            const std::string& labels_path,
                            const std::string& name, int64_t num_classes) {
  ASSIGN_OR_RETURN(std::string images, ReadMaybeGzip(images_path));
  RETURN_IF_ERROR(CheckIdxMagic(images, images_path, kIdxImagesMagic,
                                kIdxImagesHeader, "images"));
  const uint64_t n_images = BigEndian32(images, 4);
  const uint64_t rows = BigEndian32(images, 8);
  const uint64_t cols = BigEndian32(images, 12);
  RETURN_IF_ERROR(CheckPayload(images, images_path, kIdxImagesHeader, n_images,
                               rows * cols, "images"));

  ASSIGN_OR_RETURN(std::string labels, ReadMaybeGzip(labels_path));
  RETURN_IF_ERROR(CheckIdxMagic(labels, labels_path, kIdxLabelsMagic,
                                kIdxLabelsHeader, "labels"));
  const uint64_t n_labels = BigEndian32(labels, 4);
  RETURN_IF_ERROR(CheckPayload(labels, labels_path, kIdxLabelsHeader, n_labels,
                               1, "labels"));
  if (n_images != n_labels) {
    return Status::DataLoss(
        "count mismatch: {} has {} images but {} has {} "
        "labels",
        images_path, n_images, labels_path, n_labels);
  }

  Dataset d;
  d.name = name;
  d.channels = 1;
  d.height = static_cast<int64_t>(rows);
  d.width = static_cast<int64_t>(cols);
  d.num_classes = num_classes;
  d.labels.resize(n_labels);
  const auto* lp =
      reinterpret_cast<const uint8_t*>(labels.data() + kIdxLabelsHeader);
  for (uint64_t i = 0; i < n_labels; ++i) {
    RETURN_IF_ERROR(CheckLabel(lp[i], i, num_classes, labels_path));
    d.labels[i] = lp[i];
  }
  d.features.resize(n_images * rows * cols);
  const auto* px =
      reinterpret_cast<const uint8_t*>(images.data() + kIdxImagesHeader);
  for (size_t i = 0; i < d.features.size(); ++i) d.features[i] = px[i] / 255.0f;
  return d;
}

Result<DatasetSplits> LoadMnistFamily(const std::string& dir,
                                      const std::string& name) {
  if (name != "mnist" && name != "fashion-mnist") {
    return Status::InvalidArgument(
        "unknown MNIST-family dataset '{}' (known: mnist, fashion-mnist)",
        name);
  }
  ASSIGN_OR_RETURN(std::string train_images,
                   FindMaybeGz(dir, "train-images-idx3-ubyte"));
  ASSIGN_OR_RETURN(std::string train_labels,
                   FindMaybeGz(dir, "train-labels-idx1-ubyte"));
  ASSIGN_OR_RETURN(std::string val_images,
                   FindMaybeGz(dir, "t10k-images-idx3-ubyte"));
  ASSIGN_OR_RETURN(std::string val_labels,
                   FindMaybeGz(dir, "t10k-labels-idx1-ubyte"));
  DatasetSplits splits;
  ASSIGN_OR_RETURN(splits.train,
                   ReadIdxPair(train_images, train_labels, name, 10));
  ASSIGN_OR_RETURN(splits.val, ReadIdxPair(val_images, val_labels, name, 10));
  if (splits.train.height != splits.val.height ||
      splits.train.width != splits.val.width) {
    return Status::DataLoss("{} is {}x{} but {} is {}x{}: shape mismatch",
                            train_images, splits.train.height,
                            splits.train.width, val_images, splits.val.height,
                            splits.val.width);
  }
  return splits;
}

Result<Dataset> ReadCifar10File(const std::string& path) {
  return ReadCifarRecords(path, 1, 10, 0, true, "cifar10");
}

Result<DatasetSplits> LoadCifar10(const std::string& dir) {
  ASSIGN_OR_RETURN(std::string base, FindCifarDir(dir, "cifar-10-batches-bin",
                                                  "data_batch_1.bin"));
  DatasetSplits splits;
  for (int i = 1; i <= 5; ++i) {
    ASSIGN_OR_RETURN(
        Dataset part,
        ReadCifar10File(JoinPath(base, fmt::format("data_batch_{}.bin", i))));
    if (i == 1) {
      splits.train = std::move(part);
    } else {
      AppendDataset(splits.train, std::move(part));
    }
  }
  ASSIGN_OR_RETURN(splits.val,
                   ReadCifar10File(JoinPath(base, "test_batch.bin")));
  return splits;
}

Result<Dataset> ReadCifar100File(const std::string& path, bool fine) {
  return ReadCifarRecords(path, 2, 100, 20, fine, "cifar100");
}

Result<DatasetSplits> LoadCifar100(const std::string& dir, bool fine) {
  ASSIGN_OR_RETURN(std::string base,
                   FindCifarDir(dir, "cifar-100-binary", "train.bin"));
  DatasetSplits splits;
  ASSIGN_OR_RETURN(splits.train,
                   ReadCifar100File(JoinPath(base, "train.bin"), fine));
  ASSIGN_OR_RETURN(splits.val,
                   ReadCifar100File(JoinPath(base, "test.bin"), fine));
  return splits;
}

Result<Dataset> ReadNpyPair(const std::string& features_path,
                            const std::string& labels_path,
                            const std::string& shape, int64_t num_classes) {
  ASSIGN_OR_RETURN(NpyArray x,
                   ReadNpy(features_path, {"|u1", "<f4"}, "features"));
  if (x.shape.empty()) {
    return Status::DataLoss(
        "{}: features must have a first dimension N, got "
        "shape ()",
        features_path);
  }
  ASSIGN_OR_RETURN(NpyArray y, ReadNpy(labels_path, {"<i4", "<i8"}, "labels"));
  if (y.shape.size() != 1) {
    return Status::DataLoss("{}: labels must have shape (N,), got {}",
                            labels_path, ShapeText(y.shape));
  }
  const int64_t n = x.shape[0];
  if (y.shape[0] != n) {
    return Status::DataLoss(
        "count mismatch: {} has {} examples but {} has {} "
        "labels",
        features_path, n, labels_path, y.shape[0]);
  }
  int64_t per_example = 1;
  for (size_t i = 1; i < x.shape.size(); ++i) per_example *= x.shape[i];

  Dataset d;
  d.name = "npy";
  d.width = per_example;
  if (!shape.empty()) {
    RETURN_IF_ERROR(ParseShape(shape, &d.channels, &d.height, &d.width));
    if (d.example_size() != per_example) {
      return Status::InvalidArgument(
          "shape '{}' holds {} values per example but {} has shape {} ({} "
          "per example)",
          shape, d.example_size(), features_path, ShapeText(x.shape),
          per_example);
    }
  }

  d.labels.resize(n);
  int64_t max_label = -1;
  for (int64_t i = 0; i < n; ++i) {
    int64_t label;
    if (y.item_size == 4) {
      int32_t v;
      std::memcpy(&v, y.data() + 4 * i, 4);
      label = v;
    } else {
      std::memcpy(&label, y.data() + 8 * i, 8);
    }
    if (label < 0 || (num_classes > 0 && label >= num_classes)) {
      if (num_classes > 0) {
        return Status::DataLoss(
            "{}: label out of range: label {} at index {} "
            "(must be in [0, {}))",
            labels_path, label, i, num_classes);
      }
      return Status::DataLoss(
          "{}: label out of range: label {} at index {} (must be >= 0)",
          labels_path, label, i);
    }
    max_label = std::max(max_label, label);
    d.labels[i] = label;
  }
  d.num_classes = num_classes > 0 ? num_classes : max_label + 1;

  d.features.resize(n * per_example);
  if (x.item_size == 1) {
    const auto* px = reinterpret_cast<const uint8_t*>(x.data());
    for (size_t i = 0; i < d.features.size(); ++i) {
      d.features[i] = px[i] / 255.0f;
    }
  } else {
    std::memcpy(d.features.data(), x.data(), d.features.size() * 4);
  }
  return d;
}

Status ParseShape(const std::string& text, int64_t* c, int64_t* h, int64_t* w) {
  std::vector<int64_t> dims;
  size_t start = 0;
  while (true) {
    size_t end = text.find('x', start);
    std::string part = text.substr(
        start, end == std::string::npos ? std::string::npos : end - start);
    int64_t v = 0;
    auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || ec != std::errc() || ptr != part.data() + part.size() ||
        v <= 0) {
      return Status::InvalidArgument(
          "bad shape '{}': expected CxHxW (e.g. 3x32x32) or D, with positive "
          "integers",
          text);
    }
    dims.push_back(v);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (dims.size() == 1) {
    *c = 1;
    *h = 1;
    *w = dims[0];
  } else if (dims.size() == 3) {
    *c = dims[0];
    *h = dims[1];
    *w = dims[2];
  } else {
    return Status::InvalidArgument(
        "bad shape '{}': expected CxHxW (e.g. 3x32x32) or D, got {} "
        "dimensions",
        text, dims.size());
  }
  return Status::Ok();
}

}  // namespace strata
