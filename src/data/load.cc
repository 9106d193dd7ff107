#include "data/load.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "data/readers.h"
#include "data/synthetic.h"
#include "data/transforms.h"

namespace strata {
namespace {

// Moves a seeded random `fraction` of `all` into a validation split.
DatasetSplits HoldOut(Dataset all, double fraction, uint64_t seed) {
  std::vector<int64_t> order(all.size());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  int64_t n_val = static_cast<int64_t>(fraction * all.size());
  DatasetSplits s;
  for (Dataset* d : {&s.train, &s.val}) {
    d->name = all.name;
    d->channels = all.channels;
    d->height = all.height;
    d->width = all.width;
    d->num_classes = all.num_classes;
  }
  const int64_t e = all.example_size();
  for (int64_t k = 0; k < all.size(); ++k) {
    Dataset& d = k < n_val ? s.val : s.train;
    int64_t i = order[k];
    d.features.insert(d.features.end(), all.example(i), all.example(i) + e);
    d.labels.push_back(all.labels[i]);
  }
  return s;
}

Result<DatasetSplits> Load(const Config& c) {
  const std::string& name = c.GetString("data.dataset");
  const std::string& dir = c.GetString("data.dir");
  auto need_dir = [&]() -> Status {
    if (dir.empty()) {
      return Status::InvalidArgument(
          "data.dataset = \"{}\" needs data.dir (the directory holding its "
          "files; `strata data download {} --dir DIR` fetches them)",
          name, name);
    }
    return Status::Ok();
  };
  if (name == "synthetic") {
    SyntheticOptions o;
    o.classes = c.GetInt("data.synthetic.classes");
    o.subclusters = c.GetInt("data.synthetic.subclusters");
    o.imbalance = c.GetFloat("data.synthetic.imbalance");
    o.dim = c.GetInt("data.synthetic.dim");
    o.shape = c.GetString("data.synthetic.shape");
    o.noise = c.GetFloat("data.synthetic.noise");
    o.separation = c.GetFloat("data.synthetic.separation");
    o.train_size = c.GetInt("data.synthetic.train_size");
    o.val_size = c.GetInt("data.synthetic.val_size");
    o.seed = static_cast<uint64_t>(c.GetInt("data.synthetic.seed"));
    return MakeSynthetic(o);
  }
  if (name == "mnist" || name == "fashion-mnist") {
    RETURN_IF_ERROR(need_dir());
    return LoadMnistFamily(dir, name);
  }
  if (name == "cifar10") {
    RETURN_IF_ERROR(need_dir());
    return LoadCifar10(dir);
  }
  if (name == "cifar100") {
    RETURN_IF_ERROR(need_dir());
    return LoadCifar100(dir, c.GetString("data.cifar100_labels") == "fine");
  }
  // npy
  const std::string& tf = c.GetString("data.train_features");
  const std::string& tl = c.GetString("data.train_labels");
  if (tf.empty() || tl.empty()) {
    return Status::InvalidArgument(
        "data.dataset = \"npy\" needs data.train_features and "
        "data.train_labels (paths to .npy files)");
  }
  const std::string& shape = c.GetString("data.input_shape");
  ASSIGN_OR_RETURN(Dataset train, ReadNpyPair(tf, tl, shape));
  const std::string& vf = c.GetString("data.val_features");
  const std::string& vl = c.GetString("data.val_labels");
  if (vf.empty() != vl.empty()) {
    return Status::InvalidArgument(
        "data.val_features and data.val_labels must be given together");
  }
  if (vf.empty()) {
    return HoldOut(std::move(train), c.GetFloat("data.val_fraction"),
                   static_cast<uint64_t>(c.GetInt("run.seed")));
  }
  ASSIGN_OR_RETURN(Dataset val, ReadNpyPair(vf, vl, shape, train.num_classes));
  if (val.example_size() != train.example_size()) {
    return Status::InvalidArgument(
        "{}: examples have {} values but the training ones have {}", vf,
        val.example_size(), train.example_size());
  }
  DatasetSplits s{std::move(train), std::move(val)};
  return s;
}

}  // namespace

Result<DatasetSplits> LoadDatasetFromConfig(const Config& config) {
  ASSIGN_OR_RETURN(DatasetSplits splits, Load(config));
  if (splits.train.size() == 0) {
    return Status::InvalidArgument("dataset '{}' has no training examples",
                                   splits.train.name);
  }
  if (config.GetBool("data.normalize")) {
    ChannelStats stats = DatasetStats(splits.train);
    Standardize(splits.train, stats);
    Standardize(splits.val, stats);
  }
  return splits;
}

}  // namespace strata
