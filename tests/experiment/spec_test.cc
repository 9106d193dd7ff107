#include "experiment/spec.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "common/fs.h"
#include "experiment/test_util.h"

namespace strata {
namespace {

Result<ExperimentSpec> Parse(const std::string& text) {
  return ExperimentSpec::FromString(text, "test.toml", ".");
}

TEST(SpecTest, GridIsACartesianProductInKeyOrder) {
  auto spec = Parse(R"(
repeats = 2
[base]
cluster.workers = 4
[grid]
"cluster.mode" = ["sync", "async"]
train.lr = [0.1, 0.01, 0.001]
)");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  ASSERT_EQ(spec->cells.size(), 6u);
  EXPECT_EQ(spec->grid_keys,
            (std::vector<std::string>{"cluster.mode", "train.lr"}));
  EXPECT_EQ(spec->cells[0].name, "mode-sync_lr-0.1");
  EXPECT_EQ(spec->cells[5].name, "mode-async_lr-0.001");
  EXPECT_EQ(spec->cells[4].overrides,
            (std::vector<std::pair<std::string, std::string>>{
                {"cluster.mode", "async"}, {"train.lr", "0.01"}}));
  // Repeat-major: every cell's first repeat, then the second.
  ASSERT_EQ(spec->runs.size(), 12u);
  EXPECT_EQ(spec->runs[0].name, "mode-sync_lr-0.1_r1");
  EXPECT_EQ(spec->runs[6].name, "mode-sync_lr-0.1_r2");
  // Default seeds: run.seed (1) + repeat - 1.
  EXPECT_EQ(spec->runs[0].seed, 1);
  EXPECT_EQ(spec->runs[6].seed, 2);
  auto config = spec->CellConfig(3);
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->GetString("cluster.mode"), "async");
  EXPECT_DOUBLE_EQ(config->GetFloat("train.lr"), 0.1);
  EXPECT_EQ(config->GetInt("cluster.workers"), 4);
}

TEST(SpecTest, ExplicitCellsTimesGrid) {
  auto spec = Parse(R"(
seeds = [11, 12, 13]
baseline = "a_mode-async"
[[cells]]
name = "a"
set = { train.lr = 0.2 }
[[cells]]
name = "b"
set = { "train.lr" = 0.3, "model.hidden" = 32 }
compare_to = "a_mode-sync"
[grid]
cluster.mode = ["sync", "async"]
)");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  ASSERT_EQ(spec->cells.size(), 4u);
  EXPECT_EQ(spec->cells[0].name, "a_mode-sync");
  EXPECT_EQ(spec->cells[3].name, "b_mode-async");
  EXPECT_EQ(spec->cells[3].overrides.size(), 3u);
  EXPECT_EQ(spec->cells[3].compare_to, "a_mode-sync");
  EXPECT_EQ(spec->repeats, 3);
  EXPECT_EQ(spec->runs.back().seed, 13);
  EXPECT_EQ(spec->baseline, "a_mode-async");
  EXPECT_EQ(spec->BaselineIndex(), 1);
}

TEST(SpecTest, BaselineBySelector) {
  auto spec = Parse(R"(
baseline = "cluster.mode=async,train.lr=0.1"
[grid]
cluster.mode = ["sync", "async"]
train.lr = [0.1, 0.2]
)");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->baseline, "mode-async_lr-0.1");
  auto ambiguous = Parse(R"(
baseline = "cluster.mode=async"
[grid]
cluster.mode = ["sync", "async"]
train.lr = [0.1, 0.2]
)");
  ASSERT_FALSE(ambiguous.ok());
  EXPECT_NE(ambiguous.status().message().find("matches 2 cells"),
            std::string::npos);
  auto none = Parse("baseline = \"nope\"\n[grid]\ncluster.mode = [\"sync\"]\n");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("'nope'"), std::string::npos);
}

TEST(SpecTest, ErrorsNameTheKey) {
  auto unknown = Parse("[grid]\ncluster.modes = [\"sync\"]\n");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("cluster.modes"), std::string::npos)
      << unknown.status().message();

  auto bad_value = Parse("[grid]\ncluster.mode = [\"sync\", \"bogus\"]\n");
  ASSERT_FALSE(bad_value.ok());
  EXPECT_NE(bad_value.status().message().find("cluster.mode"),
            std::string::npos);
  EXPECT_NE(bad_value.status().message().find("bogus"), std::string::npos);

  auto bad_type = Parse("[grid]\ncluster.workers = [\"four\"]\n");
  ASSERT_FALSE(bad_type.ok());
  EXPECT_NE(bad_type.status().message().find("cluster.workers"),
            std::string::npos);

  auto out_of_range =
      Parse("[[cells]]\nname = \"x\"\nset = { train.lr = -1.0 }\n");
  ASSERT_FALSE(out_of_range.ok());
  EXPECT_NE(out_of_range.status().message().find("train.lr"),
            std::string::npos);

  auto bad_base = Parse("[base]\ntrain.lrr = 0.1\n");
  ASSERT_FALSE(bad_base.ok());
  EXPECT_NE(bad_base.status().message().find("train.lrr"), std::string::npos);

  auto not_list = Parse("[grid]\ncluster.mode = \"sync\"\n");
  ASSERT_FALSE(not_list.ok());
  EXPECT_NE(not_list.status().message().find("non-empty list"),
            std::string::npos);

  auto reserved = Parse("[grid]\nrun.seed = [1, 2]\n");
  ASSERT_FALSE(reserved.ok());
  EXPECT_NE(reserved.status().message().find("run.seed"), std::string::npos);

  auto mismatch = Parse("repeats = 3\nseeds = [1, 2]\n");
  ASSERT_FALSE(mismatch.ok());

  auto top = Parse("repeat = 3\n");
  ASSERT_FALSE(top.ok());
  EXPECT_NE(top.status().message().find("'repeat'"), std::string::npos);

  auto twice = Parse(
      "[[cells]]\nname = \"a\"\nset = { cluster.mode = \"sync\" }\n"
      "[grid]\ncluster.mode = [\"async\"]\n");
  ASSERT_FALSE(twice.ok());

  auto bad_name = Parse("[[cells]]\nname = \"a/b\"\n");
  ASSERT_FALSE(bad_name.ok());

  auto dup = Parse("[[cells]]\nname = \"a\"\n[[cells]]\nname = \"a\"\n");
  ASSERT_FALSE(dup.ok());
}

TEST(SpecTest, NoGridIsOneBaseCell) {
  auto spec = Parse("repeats = 3\n[base]\ntrain.iterations = 5\n");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  ASSERT_EQ(spec->cells.size(), 1u);
  EXPECT_EQ(spec->cells[0].name, "base");
  EXPECT_EQ(spec->runs.size(), 3u);
  EXPECT_EQ(spec->base.GetInt("train.iterations"), 5);
}

// The example file of docs/guide/experiments.md (its first toml block), as
// the guide shows it: it parses, and its cells are the ones the guide names.
TEST(SpecTest, TheGuidesExampleFileParses) {
  std::ifstream guide(std::string(STRATA_SOURCE_DIR) +
                      "/docs/guide/experiments.md");
  ASSERT_TRUE(guide) << "cannot read docs/guide/experiments.md";
  std::stringstream all;
  all << guide.rdbuf();
  const std::string text = all.str();
  const size_t open = text.find("```toml\n");
  ASSERT_NE(open, std::string::npos) << "no toml block in the guide";
  const size_t body = open + 8;
  const size_t close = text.find("```", body);
  ASSERT_NE(close, std::string::npos);
  // Its `config = "base.toml"` names a file beside it: an empty one here.
  const std::string dir = testing_util::FreshDir("guide");
  std::ofstream(JoinPath(dir, "base.toml")) << "";
  auto spec = ExperimentSpec::FromString(text.substr(body, close - body),
                                         "docs/guide/experiments.md", dir);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  ASSERT_EQ(spec->cells.size(), 4u);
  EXPECT_EQ(spec->cells[0].name, "async_lr-0.1");
  EXPECT_EQ(spec->cells[3].name, "ssp-s10_lr-0.01");
  EXPECT_EQ(spec->baseline, "async_lr-0.1");
  EXPECT_EQ(spec->cells[2].compare_to, "async_lr-0.1");
  EXPECT_EQ(spec->runs.size(), 20u);
}

TEST(SpecTest, OverrideTextRoundTrips) {
  EXPECT_EQ(OverrideText(ConfigValue(std::string("random"))), "random");
  EXPECT_EQ(OverrideText(ConfigValue(int64_t{20})), "20");
  EXPECT_EQ(OverrideText(ConfigValue(0.03)), "0.03");
  EXPECT_EQ(OverrideText(ConfigValue(true)), "true");
}

}  // namespace
}  // namespace strata
