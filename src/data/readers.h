#pragma once

#include <string>

#include "data/dataset.h"

namespace strata {

// Dataset readers. Every error names the file and the fault (missing file,
// truncated file, wrong magic, image/label count mismatch, label out of
// range, unsupported dtype). Thread-safe (no shared state).

// One IDX image file (magic 0x00000803) and its label file (0x00000801),
// gzip-compressed or raw (detected from the content, not the name).
// Pixels are scaled to [0, 1]; shape 1 x rows x cols.
Result<Dataset> ReadIdxPair(const std::string& images_path,
                            const std::string& labels_path,
                            const std::string& name, int64_t num_classes);

// MNIST or Fashion-MNIST from `dir`: train-images-idx3-ubyte[.gz],
// train-labels-idx1-ubyte[.gz], t10k-images-idx3-ubyte[.gz],
// t10k-labels-idx1-ubyte[.gz]. `name` is "mnist" or "fashion-mnist".
Result<DatasetSplits> LoadMnistFamily(const std::string& dir,
                                      const std::string& name);

// CIFAR-10 binary from `dir` (or dir/cifar-10-batches-bin): data_batch_1..5.bin
// (train) and test_batch.bin (val). 3 x 32 x 32, scaled to [0, 1].
Result<DatasetSplits> LoadCifar10(const std::string& dir);
// One CIFAR-10 .bin file (records of 1 + 3072 bytes).
Result<Dataset> ReadCifar10File(const std::string& path);

// CIFAR-100 binary from `dir` (or dir/cifar-100-binary): train.bin, test.bin.
// Records are coarse byte, fine byte, 3072 pixels. `fine` selects which
// label is `labels` (100 or 20 classes); the coarse ones are always kept in
// coarse_labels.
Result<DatasetSplits> LoadCifar100(const std::string& dir, bool fine);
Result<Dataset> ReadCifar100File(const std::string& path, bool fine);

// A NumPy .npy pair: features (uint8 or float32, C order, first dimension N)
// and labels (int32 or int64, shape (N,)). uint8 features are scaled to
// [0, 1]. `shape` ("CxHxW", or empty for flat) gives one example's shape and
// must multiply to the per-example size. num_classes = max label + 1 unless
// `num_classes` > 0, in which case a label >= num_classes is an error.
// Negative labels are an error.
Result<Dataset> ReadNpyPair(const std::string& features_path,
                            const std::string& labels_path,
                            const std::string& shape, int64_t num_classes = 0);

// Parses "CxHxW" (or "D" for flat 1x1xD). InvalidArgument on bad text.
Status ParseShape(const std::string& text, int64_t* c, int64_t* h, int64_t* w);

}  // namespace strata
