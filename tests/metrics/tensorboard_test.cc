#include "metrics/tensorboard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "common/fs.h"
#include "metrics/crc32c.h"

namespace strata {
namespace {

std::string TempDir() {
  std::string dir = "/tmp/strata_tb_test_XXXXXX";
  EXPECT_NE(::mkdtemp(dir.data()), nullptr);
  return dir;
}

TEST(Crc32cTest, KnownVectors) {
  // RFC 3720 (iSCSI) B.4 and the usual check value.
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  std::string zeros(32, '\0'), ones(32, '\xff'), inc(32, 0), dec(32, 0);
  for (int i = 0; i < 32; ++i) {
    inc[i] = static_cast<char>(i);
    dec[i] = static_cast<char>(31 - i);
  }
  EXPECT_EQ(Crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(Crc32c(inc.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(dec.data(), 32), 0x113FDB5Cu);
  EXPECT_EQ(Crc32c("", 0), 0u);
  // Incremental equals one pass; masking round-trips.
  EXPECT_EQ(Crc32c("6789", 4, Crc32c("12345", 5)), 0xE3069283u);
  EXPECT_EQ(UnmaskCrc32c(MaskCrc32c(0xE3069283u)), 0xE3069283u);
  EXPECT_NE(MaskCrc32c(0xE3069283u), 0xE3069283u);
}

TEST(TensorBoardTest, EventsRoundTripWithEveryCrcChecked) {
  const std::string dir = TempDir() + "/tb";
  auto w = TensorBoardWriter::Open(dir, "worker0");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_TRUE(
      (*w)->Scalars(10, {{"train/loss", 2.5}, {"train/accuracy", 0.25}}).ok());
  ASSERT_TRUE((*w)->Scalars(20, {{"train/loss", 1.5}}).ok());
  const std::string path = (*w)->path();
  EXPECT_NE(path.find("/events.out.tfevents."), std::string::npos);
  auto records = ReadTfRecords(path);
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  EXPECT_EQ(records->size(), 3u);  // file version + 2 events
  auto events = ReadScalarEvents(path);
  ASSERT_TRUE(events.ok()) << events.status().ToString();
  ASSERT_EQ(events->size(), 3u);
  EXPECT_EQ((*events)[0].tag, "train/loss");
  EXPECT_EQ((*events)[0].step, 10);
  EXPECT_FLOAT_EQ((*events)[0].value, 2.5f);
  EXPECT_EQ((*events)[1].tag, "train/accuracy");
  EXPECT_EQ((*events)[2].step, 20);
  EXPECT_GT((*events)[2].wall_time, 1.6e9);

  // A flipped byte in the data, then a truncated last record: both named.
  auto bytes = ReadFile(path);
  ASSERT_TRUE(bytes.ok());
  std::string bad = *bytes;
  bad[bad.size() - 6] ^= 0x40;
  ASSERT_TRUE(WriteFileAtomic(path + ".bad", bad).ok());
  auto r1 = ReadTfRecords(path + ".bad");
  ASSERT_FALSE(r1.ok());
  EXPECT_NE(r1.status().message().find("CRC"), std::string::npos);
  ASSERT_TRUE(
      WriteFileAtomic(path + ".short", bytes->substr(0, bytes->size() - 3))
          .ok());
  auto r2 = ReadTfRecords(path + ".short");
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("truncated"), std::string::npos);
}

TEST(TensorBoardTest, UnwritableDirectoryIsNamed) {
  auto w = TensorBoardWriter::Open("/proc/strata_no_such_dir/tb", "x");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("/proc/strata_no_such_dir"),
            std::string::npos);
}

}  // namespace
}  // namespace strata
