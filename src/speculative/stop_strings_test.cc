#include <gtest/gtest.h>

#include "speculative/stop_strings.h"

namespace dspark {
namespace {

TEST(StopStrings, HoldsBackPossiblePrefixAndCutsAtStop) {
  StopStringMatcher m({"</end>", "\n\n"});
  EXPECT_EQ(m.Push("hello <"), "hello ");
  EXPECT_EQ(m.Push("/e"), "");
  EXPECT_EQ(m.Push("nd> tail"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopStrings, FalseAlarmIsReleased) {
  StopStringMatcher m({"</end>"});
  EXPECT_EQ(m.Push("a </e"), "a ");
  EXPECT_EQ(m.Push("x"), "</ex");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.Push("</"), "");
  EXPECT_EQ(m.Flush(), "</");
}

TEST(StopStrings, StopInsideOneChunkAndNoStops) {
  StopStringMatcher m({"STOP"});
  EXPECT_EQ(m.Push("abcSTOPdef"), "abc");
  EXPECT_TRUE(m.stopped());
  StopStringMatcher none({});
  EXPECT_EQ(none.Push("anything"), "anything");
}

}  // namespace
}  // namespace dspark
