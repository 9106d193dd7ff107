#include "data/readers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "data/test_util.h"
#include "data/transforms.h"

namespace strata {
namespace {

using ::strata::testing::ContainsAll;
using ::strata::testing::IdxImages;
using ::strata::testing::IdxLabels;
using ::strata::testing::Npy;
using ::strata::testing::RawBytes;
using ::strata::testing::TempDir;
using ::strata::testing::WriteBytes;
using ::strata::testing::WriteGzip;

// Three 2x3 images whose pixels are 0, 1, ..., 17 except the very first,
// which is 255; labels 0, 9, 4.
std::vector<uint8_t> SmallPixels() {
  std::vector<uint8_t> px(18);
  for (int i = 0; i < 18; ++i) px[i] = static_cast<uint8_t>(i);
  px[0] = 255;
  return px;
}
const std::vector<uint8_t> kSmallLabels = {0, 9, 4};

void ExpectSmallIdx(const Dataset& d) {
  EXPECT_EQ(d.name, "mnist");
  EXPECT_EQ(d.size(), 3);
  EXPECT_EQ(d.channels, 1);
  EXPECT_EQ(d.height, 2);
  EXPECT_EQ(d.width, 3);
  EXPECT_EQ(d.num_classes, 10);
  EXPECT_EQ(d.labels, (std::vector<int64_t>{0, 9, 4}));
  ASSERT_EQ(d.features.size(), 18u);
  EXPECT_FLOAT_EQ(d.features[0], 1.0f);
  for (int i = 1; i < 18; ++i) EXPECT_FLOAT_EQ(d.features[i], i / 255.0f);
  EXPECT_TRUE(d.coarse_labels.empty());
}

TEST(IdxTest, RawAndGzipReadTheSame) {
  TempDir tmp;
  WriteBytes(tmp.File("img"), IdxImages(3, 2, 3, SmallPixels()));
  WriteBytes(tmp.File("lbl"), IdxLabels(kSmallLabels));
  // Gzip is detected from the content: these names do not end in .gz.
  WriteGzip(tmp.File("img.raw"), IdxImages(3, 2, 3, SmallPixels()));
  WriteGzip(tmp.File("lbl.raw"), IdxLabels(kSmallLabels));

  auto raw = ReadIdxPair(tmp.File("img"), tmp.File("lbl"), "mnist", 10);
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  ExpectSmallIdx(*raw);
  auto gz = ReadIdxPair(tmp.File("img.raw"), tmp.File("lbl.raw"), "mnist", 10);
  ASSERT_TRUE(gz.ok()) << gz.status().ToString();
  ExpectSmallIdx(*gz);
}

TEST(IdxTest, MissingFileIsNamed) {
  TempDir tmp;
  WriteBytes(tmp.File("lbl"), IdxLabels(kSmallLabels));
  auto r = ReadIdxPair(tmp.File("nope"), tmp.File("lbl"), "mnist", 10);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kNotFound);
  EXPECT_TRUE(
      ContainsAll(r.status().message(), {tmp.File("nope"), "no such file"}));
}

TEST(IdxTest, TruncatedHeader) {
  TempDir tmp;
  std::string header = IdxImages(3, 2, 3, {}).substr(0, 10);
  WriteBytes(tmp.File("img"), header);
  WriteBytes(tmp.File("lbl"), IdxLabels(kSmallLabels));
  auto r = ReadIdxPair(tmp.File("img"), tmp.File("lbl"), "mnist", 10);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kDataLoss);
  EXPECT_TRUE(
      ContainsAll(r.status().message(), {tmp.File("img"), "truncated"}));
}

TEST(IdxTest, TruncatedImagePayload) {
  TempDir tmp;
  // The header claims 5 images but only 3 follow.
  WriteBytes(tmp.File("img"), IdxImages(5, 2, 3, SmallPixels()));
  WriteBytes(tmp.File("lbl"), IdxLabels(kSmallLabels));
  auto r = ReadIdxPair(tmp.File("img"), tmp.File("lbl"), "mnist", 10);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(ContainsAll(r.status().message(),
                          {tmp.File("img"), "truncated", "5 images"}));
}

TEST(IdxTest, TruncatedLabelPayload) {
  TempDir tmp;
  WriteBytes(tmp.File("img"), IdxImages(3, 2, 3, SmallPixels()));
  WriteBytes(tmp.File("lbl"), IdxLabels(kSmallLabels).substr(0, 9));
  auto r = ReadIdxPair(tmp.File("img"), tmp.File("lbl"), "mnist", 10);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(
      ContainsAll(r.status().message(), {tmp.File("lbl"), "truncated"}));
}

TEST(IdxTest, TruncatedGzipStream) {
  TempDir tmp;
  std::vector<uint8_t> px(3 * 28 * 28);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 31);
  WriteGzip(tmp.File("full.gz"), IdxImages(3, 28, 28, px));
  auto full = ReadFile(tmp.File("full.gz"));
  ASSERT_TRUE(full.ok());
  WriteBytes(tmp.File("img.gz"), full->substr(0, full->size() / 2));
  WriteBytes(tmp.File("lbl"), IdxLabels(kSmallLabels));
  auto r = ReadIdxPair(tmp.File("img.gz"), tmp.File("lbl"), "mnist", 10);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kDataLoss);
  EXPECT_TRUE(
      ContainsAll(r.status().message(), {tmp.File("img.gz"), "truncated"}));
}

TEST(IdxTest, BadMagicShowsExpectedAndFound) {
  TempDir tmp;
  // Images and labels swapped: each file has the other's magic.
  WriteBytes(tmp.File("img"), IdxImages(3, 2, 3, SmallPixels()));
  WriteBytes(tmp.File("lbl"), IdxLabels(kSmallLabels));
  auto r = ReadIdxPair(tmp.File("lbl"), tmp.File("img"), "mnist", 10);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kDataLoss);
  EXPECT_TRUE(ContainsAll(r.status().message(), {tmp.File("lbl"), "bad magic",
                                                 "0x00000803", "0x00000801"}));

  WriteBytes(tmp.File("lbl2"), IdxLabels(kSmallLabels, 0x00000803));
  r = ReadIdxPair(tmp.File("img"), tmp.File("lbl2"), "mnist", 10);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(ContainsAll(r.status().message(),
                          {tmp.File("lbl2"), "bad magic", "expected 0x00000801",
                           "found 0x00000803"}));
}

TEST(IdxTest, CountMismatchNamesBothFiles) {
  TempDir tmp;
  WriteBytes(tmp.File("img"), IdxImages(3, 2, 3, SmallPixels()));
  WriteBytes(tmp.File("lbl"), IdxLabels({1, 2, 3, 4}));
  auto r = ReadIdxPair(tmp.File("img"), tmp.File("lbl"), "mnist", 10);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(ContainsAll(r.status().message(),
                          {"count mismatch", tmp.File("img"), tmp.File("lbl"),
                           "3 images", "4 labels"}));
}

TEST(IdxTest, LabelOutOfRangeGivesValueAndIndex) {
  TempDir tmp;
  WriteBytes(tmp.File("img"), IdxImages(3, 2, 3, SmallPixels()));
  WriteBytes(tmp.File("lbl"), IdxLabels({0, 9, 10}));
  auto r = ReadIdxPair(tmp.File("img"), tmp.File("lbl"), "mnist", 10);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(ContainsAll(
      r.status().message(),
      {tmp.File("lbl"), "label out of range", "label 10", "index 2"}));
}

TEST(IdxTest, LoadMnistFamilyMixesGzipAndRaw) {
  TempDir tmp;
  WriteGzip(tmp.File("train-images-idx3-ubyte.gz"),
            IdxImages(3, 2, 3, SmallPixels()));
  WriteBytes(tmp.File("train-labels-idx1-ubyte"), IdxLabels(kSmallLabels));
  WriteBytes(tmp.File("t10k-images-idx3-ubyte"),
             IdxImages(1, 2, 3, std::vector<uint8_t>(6, 51)));
  WriteGzip(tmp.File("t10k-labels-idx1-ubyte.gz"), IdxLabels({7}));
  auto s = LoadMnistFamily(tmp.path(), "fashion-mnist");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->train.size(), 3);
  EXPECT_EQ(s->train.name, "fashion-mnist");
  EXPECT_EQ(s->val.size(), 1);
  EXPECT_EQ(s->val.labels[0], 7);
  EXPECT_FLOAT_EQ(s->val.features[5], 0.2f);

  auto bad_name = LoadMnistFamily(tmp.path(), "kmnist");
  ASSERT_FALSE(bad_name.ok());
  EXPECT_EQ(bad_name.status().code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(ContainsAll(bad_name.status().message(), {"kmnist", "mnist"}));

  std::remove(tmp.File("t10k-images-idx3-ubyte").c_str());
  auto missing = LoadMnistFamily(tmp.path(), "mnist");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(
      ContainsAll(missing.status().message(),
                  {tmp.File("t10k-images-idx3-ubyte"), "no such file"}));
}

// ---- CIFAR ----------------------------------------------------------------

constexpr int kPixels = 3072;

// Record i: pixel j holds (i * 7 + j) % 251, except the first red pixel of
// record 0 (255) and the first green pixel (200).
std::string CifarRecord(int i, const std::vector<uint8_t>& label_bytes) {
  std::string r(label_bytes.begin(), label_bytes.end());
  for (int j = 0; j < kPixels; ++j) {
    r.push_back(static_cast<char>((i * 7 + j) % 251));
  }
  if (i == 0) {
    r[label_bytes.size()] = static_cast<char>(255);
    r[label_bytes.size() + 1024] = static_cast<char>(200);
  }
  return r;
}

float CifarPixel(int i, int j) {
  if (i == 0 && j == 0) return 1.0f;
  if (i == 0 && j == 1024) return 200 / 255.0f;
  return ((i * 7 + j) % 251) / 255.0f;
}

void ExpectCifarPixels(const Dataset& d) {
  ASSERT_EQ(d.channels, 3);
  ASSERT_EQ(d.height, 32);
  ASSERT_EQ(d.width, 32);
  ASSERT_EQ(d.features.size(), static_cast<size_t>(d.size()) * kPixels);
  for (int i = 0; i < d.size(); ++i) {
    for (int j = 0; j < kPixels; ++j) {
      ASSERT_FLOAT_EQ(d.example(i)[j], CifarPixel(i, j)) << i << " " << j;
    }
  }
  // Channel-major: the first green pixel is at offset 1024 (channel 1).
  EXPECT_FLOAT_EQ(d.example(0)[0], 1.0f);
  EXPECT_FLOAT_EQ(d.example(0)[1 * 32 * 32], 200 / 255.0f);
}

TEST(CifarTest, Cifar10LabelsAndPixels) {
  TempDir tmp;
  WriteBytes(tmp.File("b.bin"),
             CifarRecord(0, {3}) + CifarRecord(1, {0}) + CifarRecord(2, {9}));
  auto d = ReadCifar10File(tmp.File("b.bin"));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->name, "cifar10");
  EXPECT_EQ(d->num_classes, 10);
  EXPECT_EQ(d->labels, (std::vector<int64_t>{3, 0, 9}));
  EXPECT_TRUE(d->coarse_labels.empty());
  ExpectCifarPixels(*d);
}

TEST(CifarTest, Cifar10SizeNotMultipleOfRecordIsTruncated) {
  TempDir tmp;
  WriteBytes(tmp.File("b.bin"),
             CifarRecord(0, {3}) + CifarRecord(1, {0}) + "12345");
  auto d = ReadCifar10File(tmp.File("b.bin"));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Status::Code::kDataLoss);
  EXPECT_TRUE(ContainsAll(d.status().message(),
                          {tmp.File("b.bin"), "truncated", "3073"}));
}

TEST(CifarTest, Cifar10LabelOutOfRange) {
  TempDir tmp;
  WriteBytes(tmp.File("b.bin"), CifarRecord(0, {3}) + CifarRecord(1, {10}));
  auto d = ReadCifar10File(tmp.File("b.bin"));
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(
      ContainsAll(d.status().message(),
                  {tmp.File("b.bin"), "label out of range", "10", "index 1"}));
}

TEST(CifarTest, Cifar10MissingFile) {
  TempDir tmp;
  auto d = ReadCifar10File(tmp.File("nope.bin"));
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(ContainsAll(d.status().message(),
                          {tmp.File("nope.bin"), "no such file"}));
}

TEST(CifarTest, Cifar100FineAndCoarse) {
  TempDir tmp;
  WriteBytes(tmp.File("train.bin"), CifarRecord(0, {19, 99}) +
                                        CifarRecord(1, {0, 1}) +
                                        CifarRecord(2, {5, 50}));
  auto fine = ReadCifar100File(tmp.File("train.bin"), true);
  ASSERT_TRUE(fine.ok()) << fine.status().ToString();
  EXPECT_EQ(fine->name, "cifar100");
  EXPECT_EQ(fine->num_classes, 100);
  EXPECT_EQ(fine->labels, (std::vector<int64_t>{99, 1, 50}));
  EXPECT_EQ(fine->coarse_labels, (std::vector<int64_t>{19, 0, 5}));
  ExpectCifarPixels(*fine);

  auto coarse = ReadCifar100File(tmp.File("train.bin"), false);
  ASSERT_TRUE(coarse.ok()) << coarse.status().ToString();
  EXPECT_EQ(coarse->num_classes, 20);
  EXPECT_EQ(coarse->labels, (std::vector<int64_t>{19, 0, 5}));
  EXPECT_EQ(coarse->coarse_labels, (std::vector<int64_t>{19, 0, 5}));
}

TEST(CifarTest, Cifar100LabelRanges) {
  TempDir tmp;
  WriteBytes(tmp.File("coarse.bin"),
             CifarRecord(0, {19, 99}) + CifarRecord(1, {20, 3}));
  auto d = ReadCifar100File(tmp.File("coarse.bin"), true);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(ContainsAll(d.status().message(),
                          {tmp.File("coarse.bin"), "label out of range",
                           "coarse label 20", "index 1"}));

  WriteBytes(tmp.File("fine.bin"), CifarRecord(0, {0, 100}));
  d = ReadCifar100File(tmp.File("fine.bin"), false);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(ContainsAll(d.status().message(),
                          {tmp.File("fine.bin"), "label out of range",
                           "fine label 100", "index 0"}));
}

TEST(CifarTest, Cifar100Truncated) {
  TempDir tmp;
  // One CIFAR-10-sized record is not a whole CIFAR-100 record.
  WriteBytes(tmp.File("test.bin"), CifarRecord(0, {3}));
  auto d = ReadCifar100File(tmp.File("test.bin"), true);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(ContainsAll(d.status().message(),
                          {tmp.File("test.bin"), "truncated", "3074"}));
}

TEST(CifarTest, LoadCifar10FindsNestedDirectory) {
  TempDir tmp;
  std::string nested = tmp.File("cifar-10-batches-bin");
  ASSERT_TRUE(MakeDirs(nested).ok());
  for (int i = 1; i <= 5; ++i) {
    WriteBytes(JoinPath(nested, "data_batch_" + std::to_string(i) + ".bin"),
               CifarRecord(i, {static_cast<uint8_t>(i)}));
  }
  WriteBytes(JoinPath(nested, "test_batch.bin"),
             CifarRecord(0, {8}) + CifarRecord(1, {9}));
  auto s = LoadCifar10(tmp.path());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->train.labels, (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(s->train.features.size(), 5u * kPixels);
  EXPECT_FLOAT_EQ(s->train.example(4)[10], CifarPixel(5, 10));
  EXPECT_EQ(s->val.labels, (std::vector<int64_t>{8, 9}));

  std::remove(JoinPath(nested, "data_batch_3.bin").c_str());
  auto missing = LoadCifar10(tmp.path());
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(ContainsAll(missing.status().message(),
                          {"data_batch_3.bin", "no such file"}));

  TempDir empty;
  missing = LoadCifar10(empty.path());
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(ContainsAll(missing.status().message(),
                          {empty.File("data_batch_1.bin"), "no such file"}));
}

TEST(CifarTest, LoadCifar100FromTopDirectory) {
  TempDir tmp;
  WriteBytes(tmp.File("train.bin"),
             CifarRecord(0, {1, 11}) + CifarRecord(1, {2, 22}));
  WriteBytes(tmp.File("test.bin"), CifarRecord(0, {3, 33}));
  auto s = LoadCifar100(tmp.path(), true);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->train.labels, (std::vector<int64_t>{11, 22}));
  EXPECT_EQ(s->val.labels, (std::vector<int64_t>{33}));
  EXPECT_EQ(s->val.coarse_labels, (std::vector<int64_t>{3}));
}

// ---- .npy -------------------------------------------------------------------

TEST(NpyTest, Uint8FeaturesInt64Labels) {
  TempDir tmp;
  std::vector<uint8_t> x = {0, 51, 102, 255, 1, 2, 3, 4, 5, 6, 7, 8};
  WriteBytes(tmp.File("x.npy"), Npy("|u1", false, {3, 2, 2}, RawBytes(x)));
  WriteBytes(tmp.File("y.npy"),
             Npy("<i8", false, {3}, RawBytes<int64_t>({2, 0, 4})));
  auto d = ReadNpyPair(tmp.File("x.npy"), tmp.File("y.npy"), "1x2x2");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->size(), 3);
  EXPECT_EQ(d->channels, 1);
  EXPECT_EQ(d->height, 2);
  EXPECT_EQ(d->width, 2);
  EXPECT_EQ(d->num_classes, 5);  // max label + 1
  EXPECT_EQ(d->labels, (std::vector<int64_t>{2, 0, 4}));
  EXPECT_FLOAT_EQ(d->features[1], 0.2f);
  EXPECT_FLOAT_EQ(d->features[3], 1.0f);
  EXPECT_FLOAT_EQ(d->features[11], 8 / 255.0f);
}

TEST(NpyTest, Float32FeaturesInt32LabelsFlat) {
  TempDir tmp;
  std::vector<float> x = {0.5f, -1.25f, 3.0f, 1e-3f, 7, 8, 9, 10};
  WriteBytes(tmp.File("x.npy"), Npy("<f4", false, {2, 4}, RawBytes(x)));
  WriteBytes(tmp.File("y.npy"),
             Npy("<i4", false, {2}, RawBytes<int32_t>({1, 0})));
  auto d = ReadNpyPair(tmp.File("x.npy"), tmp.File("y.npy"), "", 3);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->channels, 1);
  EXPECT_EQ(d->height, 1);
  EXPECT_EQ(d->width, 4);
  EXPECT_EQ(d->num_classes, 3);  // given, not inferred
  EXPECT_EQ(d->features, x);
  EXPECT_EQ(d->labels, (std::vector<int64_t>{1, 0}));
}

TEST(NpyTest, ShapeMustMatchExampleSize) {
  TempDir tmp;
  std::vector<float> x(2 * 12, 0.5f);
  WriteBytes(tmp.File("x.npy"), Npy("<f4", false, {2, 3, 2, 2}, RawBytes(x)));
  WriteBytes(tmp.File("y.npy"),
             Npy("<i8", false, {2}, RawBytes<int64_t>({0, 1})));
  auto ok = ReadNpyPair(tmp.File("x.npy"), tmp.File("y.npy"), "3x2x2");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->channels, 3);
  EXPECT_EQ(ok->example_size(), 12);

  auto bad = ReadNpyPair(tmp.File("x.npy"), tmp.File("y.npy"), "3x3x3");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(ContainsAll(bad.status().message(),
                          {"3x3x3", "27", "12", tmp.File("x.npy")}));
  bad = ReadNpyPair(tmp.File("x.npy"), tmp.File("y.npy"), "3x2");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(ContainsAll(bad.status().message(), {"bad shape", "3x2"}));
}

TEST(NpyTest, UnsupportedDtype) {
  TempDir tmp;
  WriteBytes(tmp.File("x.npy"),
             Npy("<f8", false, {2, 1}, RawBytes<double>({1.0, 2.0})));
  WriteBytes(tmp.File("y.npy"),
             Npy("<i8", false, {2}, RawBytes<int64_t>({0, 1})));
  auto d = ReadNpyPair(tmp.File("x.npy"), tmp.File("y.npy"), "");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Status::Code::kDataLoss);
  EXPECT_TRUE(ContainsAll(d.status().message(),
                          {tmp.File("x.npy"), "unsupported dtype", "<f8"}));

  // Float labels are not accepted either.
  WriteBytes(tmp.File("x.npy"),
             Npy("<f4", false, {2, 1}, RawBytes<float>({1.0f, 2.0f})));
  WriteBytes(tmp.File("yf.npy"),
             Npy("<f4", false, {2}, RawBytes<float>({0.0f, 1.0f})));
  d = ReadNpyPair(tmp.File("x.npy"), tmp.File("yf.npy"), "");
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(ContainsAll(d.status().message(),
                          {tmp.File("yf.npy"), "unsupported dtype", "<f4"}));
}

TEST(NpyTest, FortranOrderRejected) {
  TempDir tmp;
  WriteBytes(tmp.File("x.npy"),
             Npy("<f4", true, {2, 2}, RawBytes<float>({1, 2, 3, 4})));
  WriteBytes(tmp.File("y.npy"),
             Npy("<i8", false, {2}, RawBytes<int64_t>({0, 1})));
  auto d = ReadNpyPair(tmp.File("x.npy"), tmp.File("y.npy"), "");
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(ContainsAll(d.status().message(),
                          {tmp.File("x.npy"), "fortran_order", "C-order"}));
}

TEST(NpyTest, BadMagicIsNotNpy) {
  TempDir tmp;
  WriteBytes(tmp.File("x.npy"), "PK\x03\x04 this is a zip, not npy");
  WriteBytes(tmp.File("y.npy"),
             Npy("<i8", false, {2}, RawBytes<int64_t>({0, 1})));
  auto d = ReadNpyPair(tmp.File("x.npy"), tmp.File("y.npy"), "");
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(ContainsAll(d.status().message(),
                          {tmp.File("x.npy"), "not a .npy file"}));
}

TEST(NpyTest, TruncatedData) {
  TempDir tmp;
  std::string full =
      Npy("<f4", false, {4, 2}, RawBytes<float>({1, 2, 3, 4, 5, 6, 7, 8}));
  WriteBytes(tmp.File("x.npy"), full.substr(0, full.size() - 3));
  WriteBytes(tmp.File("y.npy"),
             Npy("<i8", false, {4}, RawBytes<int64_t>({0, 1, 0, 1})));
  auto d = ReadNpyPair(tmp.File("x.npy"), tmp.File("y.npy"), "");
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(
      ContainsAll(d.status().message(), {tmp.File("x.npy"), "truncated"}));

  WriteBytes(tmp.File("h.npy"), full.substr(0, 40));  // inside the header
  d = ReadNpyPair(tmp.File("h.npy"), tmp.File("y.npy"), "");
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(
      ContainsAll(d.status().message(), {tmp.File("h.npy"), "truncated"}));
}

TEST(NpyTest, CountMismatchAndLabelShape) {
  TempDir tmp;
  WriteBytes(tmp.File("x.npy"),
             Npy("<f4", false, {3, 1}, RawBytes<float>({1, 2, 3})));
  WriteBytes(tmp.File("y.npy"),
             Npy("<i8", false, {4}, RawBytes<int64_t>({0, 1, 0, 1})));
  auto d = ReadNpyPair(tmp.File("x.npy"), tmp.File("y.npy"), "");
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(
      ContainsAll(d.status().message(),
                  {"count mismatch", tmp.File("x.npy"), tmp.File("y.npy")}));

  WriteBytes(tmp.File("y2.npy"),
             Npy("<i8", false, {3, 1}, RawBytes<int64_t>({0, 1, 0})));
  d = ReadNpyPair(tmp.File("x.npy"), tmp.File("y2.npy"), "");
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(ContainsAll(d.status().message(), {tmp.File("y2.npy"), "(N,)"}));
}

TEST(NpyTest, LabelOutOfRange) {
  TempDir tmp;
  WriteBytes(tmp.File("x.npy"),
             Npy("<f4", false, {3, 1}, RawBytes<float>({1, 2, 3})));
  WriteBytes(tmp.File("y.npy"),
             Npy("<i4", false, {3}, RawBytes<int32_t>({0, 1, 3})));
  auto d = ReadNpyPair(tmp.File("x.npy"), tmp.File("y.npy"), "", 3);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(ContainsAll(
      d.status().message(),
      {tmp.File("y.npy"), "label out of range", "label 3", "index 2"}));

  WriteBytes(tmp.File("neg.npy"),
             Npy("<i8", false, {3}, RawBytes<int64_t>({0, -1, 1})));
  d = ReadNpyPair(tmp.File("x.npy"), tmp.File("neg.npy"), "");
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(ContainsAll(
      d.status().message(),
      {tmp.File("neg.npy"), "label out of range", "label -1", "index 1"}));
}

TEST(NpyTest, MissingFile) {
  TempDir tmp;
  auto d = ReadNpyPair(tmp.File("x.npy"), tmp.File("y.npy"), "");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Status::Code::kNotFound);
  EXPECT_TRUE(
      ContainsAll(d.status().message(), {tmp.File("x.npy"), "no such file"}));
}

TEST(DataParseShapeTest, AcceptsCxHxWAndFlat) {
  int64_t c = 0, h = 0, w = 0;
  ASSERT_TRUE(ParseShape("3x32x32", &c, &h, &w).ok());
  EXPECT_EQ(c, 3);
  EXPECT_EQ(h, 32);
  EXPECT_EQ(w, 32);
  ASSERT_TRUE(ParseShape("784", &c, &h, &w).ok());
  EXPECT_EQ(c, 1);
  EXPECT_EQ(h, 1);
  EXPECT_EQ(w, 784);
  for (const char* bad :
       {"", "3x32", "0x1x1", "abc", "3x-1x2", "3x32x32x1", "3x32x", "12a"}) {
    Status st = ParseShape(bad, &c, &h, &w);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find(std::string("'") + bad + "'"),
              std::string::npos)
        << st.message();
  }
}

// ---- Real data
// ---------------------------------------------------------------

TEST(RealDataTest, Mnist) {
  const char* root = std::getenv("STRATA_DATA_DIR");
  if (root == nullptr) {
    GTEST_SKIP() << "STRATA_DATA_DIR not set: skipping real-MNIST test";
  }
  auto s = LoadMnistFamily(JoinPath(root, "mnist"), "mnist");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (const Dataset* d : {&s->train, &s->val}) {
    EXPECT_EQ(d->channels, 1);
    EXPECT_EQ(d->height, 28);
    EXPECT_EQ(d->width, 28);
    EXPECT_EQ(d->num_classes, 10);
    std::set<int64_t> seen(d->labels.begin(), d->labels.end());
    EXPECT_EQ(seen.size(), 10u);
    EXPECT_EQ(*seen.begin(), 0);
    EXPECT_EQ(*seen.rbegin(), 9);
    auto [lo, hi] = std::minmax_element(d->features.begin(), d->features.end());
    EXPECT_FLOAT_EQ(*lo, 0.0f);
    EXPECT_FLOAT_EQ(*hi, 1.0f);
  }
  EXPECT_EQ(s->train.size(), 60000);
  EXPECT_EQ(s->val.size(), 10000);
  // The well-known first labels of each split.
  EXPECT_EQ(std::vector<int64_t>(s->train.labels.begin(),
                                 s->train.labels.begin() + 5),
            (std::vector<int64_t>{5, 0, 4, 1, 9}));
  EXPECT_EQ(
      std::vector<int64_t>(s->val.labels.begin(), s->val.labels.begin() + 5),
      (std::vector<int64_t>{7, 2, 1, 0, 4}));
  // Our [0, 1] scaling reproduces the published statistics.
  ChannelStats measured = ComputeStats(s->train);
  EXPECT_NEAR(measured.mean[0], 0.1307, 5e-4);
  EXPECT_NEAR(measured.std[0], 0.3081, 5e-4);
}

}  // namespace
}  // namespace strata
