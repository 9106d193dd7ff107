#include "experiment/results.h"

#include <gtest/gtest.h>

#include "common/fs.h"
#include "test_util.h"

namespace strata {
namespace {

using testing_util::FreshDir;
using testing_util::WriteFakeRun;

// Two cells x 3 repeats with hand-picked final metrics.
class SummarizeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    out_ = FreshDir("out");
    auto spec = ExperimentSpec::FromString(R"(
name = "hand"
repeats = 3
baseline = "random"
[[cells]]
name = "random"
set = { train.lr = 0.1 }
[[cells]]
name = "stratified"
set = { train.lr = 0.2 }
)",
                                           "hand.toml", ".");
    ASSERT_TRUE(spec.ok()) << spec.status().message();
    spec_ = *spec;
    auto plan = PlanJson(spec_);
    ASSERT_TRUE(plan.ok());
    ASSERT_TRUE(
        WriteFileAtomic(JoinPath(out_, "plan.json"), plan->dump()).ok());
    // runs are repeat-major: random_r1, stratified_r1, random_r2, ...
    const double random_acc[] = {0.90, 0.92, 0.97};  // mean 0.93, var 0.0013
    const double strat_acc[] = {0.93, 0.94, 0.95};   // mean 0.94, var 0.0001
    const double random_loss[] = {0.5, 0.3, 0.1};    // mean 0.3, var 0.04
    const double strat_loss[] = {0.2, 0.3, 0.4};     // mean 0.3, var 0.01
    for (const PlannedRun& r : spec_.runs) {
      const bool random = r.cell == 0;
      const int k = r.repeat - 1;
      WriteFakeRun(
          spec_, r, out_,
          {{"final_train_loss", random ? random_loss[k] : strat_loss[k]},
           {"final_train_acc", 0.5},
           {"final_val_loss", 1.0 + k},
           {"final_val_acc", random ? random_acc[k] : strat_acc[k]},
           {"wall_s", 10.0 * r.repeat},
           {"train_s", 9.0 * r.repeat},
           {"samples_per_s", 1000.0}});
    }
  }
  std::string out_;
  ExperimentSpec spec_;
};

TEST_F(SummarizeTest, MeansVariancesAndRatiosByHand) {
  auto data = LoadExperiment(out_);
  ASSERT_TRUE(data.ok()) << data.status().message();
  nlohmann::json s = Summarize(*data);
  ASSERT_EQ(s["cells"].size(), 2u);
  const auto& random = s["cells"][0]["metrics"];
  const auto& strat = s["cells"][1]["metrics"];
  EXPECT_EQ(s["cells"][0]["runs_complete"], 3);
  EXPECT_NEAR(random["final_val_acc"]["mean"].get<double>(), 0.93, 1e-12);
  // ((-0.03)^2 + (-0.01)^2 + 0.04^2) / 2 = 0.0026 / 2 = 0.0013.
  EXPECT_NEAR(random["final_val_acc"]["variance"].get<double>(), 0.0013, 1e-12);
  EXPECT_NEAR(strat["final_val_acc"]["mean"].get<double>(), 0.94, 1e-12);
  EXPECT_NEAR(strat["final_val_acc"]["variance"].get<double>(), 0.0001, 1e-12);
  // 0.0013 / 0.0001 = 13: stratified varies 13x less.
  EXPECT_NEAR(strat["final_val_acc"]["variance_ratio"].get<double>(), 13.0,
              1e-9);
  EXPECT_NEAR(random["final_val_acc"]["variance_ratio"].get<double>(), 1.0,
              1e-12);
  EXPECT_NEAR(random["final_train_loss"]["variance"].get<double>(), 0.04,
              1e-12);
  EXPECT_NEAR(strat["final_train_loss"]["variance"].get<double>(), 0.01, 1e-12);
  EXPECT_NEAR(strat["final_train_loss"]["variance_ratio"].get<double>(), 4.0,
              1e-9);
  // Constant metric: variance 0, ratio undefined (null), not infinity.
  EXPECT_EQ(strat["final_train_acc"]["variance"].get<double>(), 0.0);
  EXPECT_TRUE(strat["final_train_acc"]["variance_ratio"].is_null());
  // 1, 2, 3: variance 1.
  EXPECT_NEAR(strat["final_val_loss"]["variance"].get<double>(), 1.0, 1e-12);
  EXPECT_NEAR(random["wall_s"]["mean"].get<double>(), 20.0, 1e-12);
  // Paper 004 table: accuracy in %, training time = train_s.
  const auto& t = s["paper004_table"];
  EXPECT_EQ(t[0]["change"], "(baseline)");
  EXPECT_EQ(t[1]["change"], "train.lr=0.2");
  EXPECT_NEAR(t[1]["accuracy_pct"].get<double>(), 94.0, 1e-9);
  EXPECT_NEAR(t[1]["training_time_s"].get<double>(), 18.0, 1e-9);
  EXPECT_TRUE(s["complete"].get<bool>());

  const std::string csv = SummaryCsv(s);
  EXPECT_NE(csv.find("cell,n,final_train_loss_mean"), std::string::npos) << csv;
  EXPECT_NE(csv.find("stratified,3,0.3,0.01,4,"), std::string::npos) << csv;
  const std::string text = SummaryText(s);
  EXPECT_NE(text.find("13.00x"), std::string::npos) << text;
  EXPECT_NE(text.find("random *"), std::string::npos) << text;
}

TEST_F(SummarizeTest, OnlyCompleteRunsCount) {
  // stratified_r3: interrupted -> left out; random_r2: gone.
  const std::string r3 = JoinPath(out_, "runs/stratified_r3/summary.json");
  ASSERT_TRUE(
      WriteFileAtomic(r3, R"({"interrupted": true, "final_val_acc": 0.1})")
          .ok());
  ASSERT_EQ(std::system(
                ("rm -rf '" + JoinPath(out_, "runs/random_r2") + "'").c_str()),
            0);
  auto data = LoadExperiment(out_);
  ASSERT_TRUE(data.ok());
  nlohmann::json s = Summarize(*data);
  EXPECT_FALSE(s["complete"].get<bool>());
  EXPECT_EQ(s["cells"][1]["runs_complete"], 2);
  // {0.93, 0.94}: mean 0.935, variance 0.00005.
  EXPECT_NEAR(s["cells"][1]["metrics"]["final_val_acc"]["mean"].get<double>(),
              0.935, 1e-12);
  EXPECT_NEAR(
      s["cells"][1]["metrics"]["final_val_acc"]["variance"].get<double>(), 5e-5,
      1e-12);
  // random without r2: {0.90, 0.97}: variance 0.00245.
  EXPECT_NEAR(
      s["cells"][0]["metrics"]["final_val_acc"]["variance"].get<double>(),
      0.00245, 1e-12);
  EXPECT_EQ(s["runs"][2]["state"], "missing");  // random_r2
  EXPECT_EQ(s["runs"][5]["state"], "partial");  // stratified_r3
}

TEST(ResultsTest, LoadResultsRefusesOtherDirectories) {
  const std::string dir = FreshDir("empty");
  auto r = LoadResults(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kNotFound);
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "plan.json"), "{not json").ok());
  r = LoadResults(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kDataLoss);
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// target_accuracy: each run's time to it from its eval.jsonl, summarised
// over the runs that reached it.
TEST(TimeToAccuracyTest, FirstEvaluationAtTheTargetPerRunAndPerCell) {
  const std::string out = testing_util::FreshDir("tta");
  auto spec = ExperimentSpec::FromString(R"(
name = "tta"
repeats = 3
target_accuracy = 0.8
[[cells]]
name = "a"
set = { train.lr = 0.1 }
)",
                                         "tta.toml", ".");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  auto plan = PlanJson(*spec);
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(out, "plan.json"), plan->dump()).ok());
  // Run 1 reaches 0.8 at 2 s, run 2 at 4 s (0.85 at 3 s is after a 0.79),
  // run 3 never.
  const std::vector<std::vector<std::pair<double, double>>> evals = {
      {{0.5, 1.0}, {0.8, 2.0}, {0.9, 3.0}},
      {{0.79, 2.0}, {0.82, 4.0}, {0.7, 5.0}},
      {{0.5, 1.0}, {0.79, 9.0}}};
  for (const PlannedRun& r : spec->runs) {
    testing_util::WriteFakeRun(*spec, r, out,
                               {{"final_val_acc", 0.8}, {"train_s", 1.0}});
    std::string lines;
    for (const auto& [acc, wall] : evals[r.repeat - 1])
      lines += nlohmann::json{{"step", 1}, {"val_acc", acc}, {"wall_s", wall}}
                   .dump() +
               "\n";
    ASSERT_TRUE(
        WriteFileAtomic(
            JoinPath(JoinPath(JoinPath(out, "runs"), r.name), "eval.jsonl"),
            lines)
            .ok());
  }
  EXPECT_DOUBLE_EQ(TimeToAccuracy(JoinPath(out, "runs/a_r1/eval.jsonl"), 0.8),
                   2.0);
  EXPECT_TRUE(std::isnan(TimeToAccuracy(JoinPath(out, "nothing"), 0.8)));
  auto data = LoadExperiment(out);
  ASSERT_TRUE(data.ok()) << data.status().message();
  EXPECT_DOUBLE_EQ(data->target_accuracy, 0.8);
  const nlohmann::json s = Summarize(*data);
  const auto& tta = s["cells"][0]["metrics"]["time_to_accuracy_s"];
  EXPECT_EQ(tta["n"], 2);
  EXPECT_DOUBLE_EQ(tta["mean"].get<double>(), 3.0);
  // t(0.975, 1) = 12.706 x sd sqrt(2) / sqrt(2).
  EXPECT_NEAR(tta["ci95"].get<double>(), 12.706, 1e-2);
  EXPECT_EQ(s["cells"][0]["runs_complete"], 3);
  EXPECT_TRUE(s["runs"][2]["time_to_accuracy_s"].is_null());
  EXPECT_EQ(s["paper004_table"][0]["reached_target"], 2);
  const std::string text = SummaryText(s);
  EXPECT_NE(text.find("2/3"), std::string::npos) << text;
  EXPECT_NE(text.find("time to 0.8 s"), std::string::npos) << text;
  // A target outside (0, 1] is refused, naming it.
  auto bad =
      ExperimentSpec::FromString("target_accuracy = 80\n", "x.toml", ".");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("target_accuracy"), std::string::npos);
}

}  // namespace
}  // namespace strata
