#include "common/config.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(ConfigTest, DefaultsMatchSchema) {
  Config c;
  EXPECT_EQ(c.GetString("model.name"), "mlp");
  EXPECT_EQ(c.GetInt("train.batch_size"), 64);
  EXPECT_DOUBLE_EQ(c.GetFloat("train.lr"), 0.05);
}

TEST(ConfigTest, TomlNestedTablesAndIntForFloat) {
  auto c = Config::FromTomlString(
      "[train]\nlr = 1\nbatch_size = 32\n[data.synthetic]\nclasses = 4\n", "x");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_DOUBLE_EQ(c->GetFloat("train.lr"), 1.0);
  EXPECT_EQ(c->GetInt("train.batch_size"), 32);
  EXPECT_EQ(c->GetInt("data.synthetic.classes"), 4);
}

TEST(ConfigTest, UnknownKeyIsNamed) {
  auto c = Config::FromTomlString("[train]\nlrr = 0.1\n", "run.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("train.lrr"), std::string::npos);
  EXPECT_NE(c.status().message().find("run.toml"), std::string::npos);
  EXPECT_NE(c.status().message().find("train.lr"), std::string::npos);  // hint
}

TEST(ConfigTest, BadValueNamesKeyValueAndAllowed) {
  Config c;
  Status st = c.ApplyOverride("model.name=vgg");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("model.name"), std::string::npos);
  EXPECT_NE(st.message().find("vgg"), std::string::npos);
  EXPECT_NE(st.message().find("lenet"), std::string::npos);
  st = c.ApplyOverride("train.batch_size=0");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("an integer in [1, "), std::string::npos)
      << st.message();
  st = c.ApplyOverride("train.batch_size=abc");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("abc"), std::string::npos);
  EXPECT_FALSE(c.ApplyOverride("noequals").ok());
  auto t = Config::FromTomlString("[train]\nbatch_size = \"big\"\n", "f");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("train.batch_size"), std::string::npos);
}

TEST(ConfigTest, InvalidTomlReportsLine) {
  auto c = Config::FromTomlString("[train]\nlr = = 3\n", "bad.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("bad.toml:2"), std::string::npos)
      << c.status().message();
}

TEST(ConfigTest, ResolvedTomlRoundTrips) {
  Config c;
  ASSERT_TRUE(c.ApplyOverride("train.lr=0.125").ok());
  ASSERT_TRUE(c.ApplyOverride("run.name=a \"quoted\" name").ok());
  ASSERT_TRUE(c.ApplyOverride("train.nesterov=true").ok());
  auto back = Config::FromTomlString(c.ToToml(), "resolved");
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << c.ToToml();
  EXPECT_EQ(back->ToToml(), c.ToToml());
  EXPECT_DOUBLE_EQ(back->GetFloat("train.lr"), 0.125);
  EXPECT_EQ(back->GetString("run.name"), "a \"quoted\" name");
  EXPECT_TRUE(back->GetBool("train.nesterov"));
}

}  // namespace
}  // namespace strata
