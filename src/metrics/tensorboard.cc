#include "metrics/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/fs.h"
#include "metrics/crc32c.h"
#include "tensorboard_event.pb.h"

namespace strata {
namespace {

double Now() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void PutLe(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out->push_back(static_cast<char>(v >> (8 * i)));
}

uint64_t GetLe(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

Result<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Open(
    const std::string& dir, const std::string& name) {
  RETURN_IF_ERROR(MakeDirs(dir));
  char host[256] = "localhost";
  if (::gethostname(host, sizeof(host) - 1) != 0)
    std::strcpy(host, "localhost");
  const std::string path =
      JoinPath(dir, "events.out.tfevents." +
                        std::to_string(static_cast<int64_t>(Now())) + "." +
                        host + "." + std::to_string(::getpid()) + "." + name);
  const int fd = ::open(
      path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Status::IoError("{}: cannot create the TensorBoard event file: {}",
                           path, std::strerror(errno));
  }
  std::unique_ptr<TensorBoardWriter> w(new TensorBoardWriter(fd, path));
  tensorboard::Event e;
  e.set_wall_time(Now());
  e.set_file_version("brain.Event:2");
  {
    MutexLock lock(&w->mu_);
    RETURN_IF_ERROR(w->WriteRecord(e.SerializeAsString()));
  }
  return w;
}

TensorBoardWriter::~TensorBoardWriter() { ::close(fd_); }

Status TensorBoardWriter::WriteRecord(const std::string& data) {
  std::string rec;
  rec.reserve(data.size() + 16);
  PutLe(&rec, data.size(), 8);
  PutLe(&rec, MaskCrc32c(Crc32c(rec.data(), 8)), 4);
  rec += data;
  PutLe(&rec, MaskCrc32c(Crc32c(data.data(), data.size())), 4);
  const ssize_t n = ::write(fd_, rec.data(), rec.size());
  if (n != static_cast<ssize_t>(rec.size())) {
    return Status::IoError("{}: write failed: {}", path_, std::strerror(errno));
  }
  return Status::Ok();
}

Status TensorBoardWriter::Scalars(
    int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  tensorboard::Event e;
  e.set_wall_time(Now());
  e.set_step(step);
  for (const auto& [tag, value] : values) {
    tensorboard::SummaryValue* v = e.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  const std::string data = e.SerializeAsString();
  MutexLock lock(&mu_);
  return WriteRecord(data);
}

Result<std::vector<std::string>> ReadTfRecords(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  std::vector<std::string> records;
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t off = 0;
  while (off < bytes.size()) {
    if (bytes.size() - off < 12) {
      return Status::DataLoss("{}: truncated record header at byte {}", path,
                              off);
    }
    const uint64_t len = GetLe(p + off, 8);
    const uint32_t len_crc = static_cast<uint32_t>(GetLe(p + off + 8, 4));
    if (UnmaskCrc32c(len_crc) != Crc32c(p + off, 8)) {
      return Status::DataLoss("{}: bad length CRC at byte {}", path, off);
    }
    if (len > bytes.size() - off - 12 || bytes.size() - off - 12 - len < 4) {
      return Status::DataLoss("{}: record at byte {} of {} bytes is truncated",
                              path, off, len);
    }
    const unsigned char* data = p + off + 12;
    const uint32_t data_crc = static_cast<uint32_t>(GetLe(data + len, 4));
    if (UnmaskCrc32c(data_crc) != Crc32c(data, len)) {
      return Status::DataLoss("{}: bad data CRC in the record at byte {}", path,
                              off);
    }
    records.emplace_back(reinterpret_cast<const char*>(data), len);
    off += 12 + len + 4;
  }
  return records;
}

Result<std::vector<ScalarEvent>> ReadScalarEvents(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<std::string> records, ReadTfRecords(path));
  std::vector<ScalarEvent> out;
  for (size_t i = 0; i < records.size(); ++i) {
    tensorboard::Event e;
    if (!e.ParseFromString(records[i])) {
      return Status::DataLoss("{}: record {} is not an Event", path, i);
    }
    if (i == 0) {
      if (e.file_version() != "brain.Event:2")
        return Status::DataLoss("{}: no file-version event first", path);
      continue;
    }
    for (const auto& v : e.summary().value()) {
      out.push_back(
          ScalarEvent{e.wall_time(), e.step(), v.tag(), v.simple_value()});
    }
  }
  return out;
}

}  // namespace strata
