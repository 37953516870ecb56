// The knob rows (common/param.h): strict values, ranges, and one report per knob set.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "common/param.h"

namespace {

XCCL_PARAM(TestKnob, "TEST_KNOB", 7, 1, 64)
XCCL_PARAM(TestOpenKnob, "TEST_OPEN_KNOB", 0, -1, ::xccl::kKnobMax)
// Read by one test only: "once per process" must hold when the whole binary runs in one
// process (ctest's transport.StripedOver3Sockets) as when each test has its own.
XCCL_PARAM(TestReportedKnob, "TEST_REPORTED_KNOB", 7, 1, 64)

std::vector<std::string>* gReports = nullptr;
void collect(const std::string& line) { gReports->push_back(line); }

std::string thrown(int64_t (*read)()) {
  try {
    read();
  } catch (const xccl::InvalidUsage& e) {
    return e.what();
  }
  return "";
}

TEST(Knobs, AValueOutsideItsRangeIsRefusedNamingTheKnobAndTheRange) {
  setenv("XCCL_TEST_KNOB", "65", 1);
  EXPECT_EQ(thrown(xcclParamTestKnob), "XCCL_TEST_KNOB=65 is out of range: 1 to 64");
  setenv("XCCL_TEST_KNOB", "0", 1);
  EXPECT_EQ(thrown(xcclParamTestKnob), "XCCL_TEST_KNOB=0 is out of range: 1 to 64");
  setenv("XCCL_TEST_OPEN_KNOB", "-2", 1);
  EXPECT_EQ(thrown(xcclParamTestOpenKnob), "XCCL_TEST_OPEN_KNOB=-2 is out of range: at least -1");
  setenv("XCCL_TEST_KNOB", "8x", 1);
  EXPECT_EQ(thrown(xcclParamTestKnob), "XCCL_TEST_KNOB='8x' is not an integer");
  setenv("XCCL_TEST_KNOB", "64", 1);  // the bounds are inclusive
  EXPECT_EQ(xcclParamTestKnob(), 64);
  unsetenv("XCCL_TEST_KNOB");
  unsetenv("XCCL_TEST_OPEN_KNOB");
  EXPECT_EQ(xcclParamTestKnob(), 7);
}

TEST(Knobs, AKnobSetToOtherThanItsDefaultIsReportedOncePerProcess) {
  std::vector<std::string> reports;
  gReports = &reports;
  xccl::setKnobReporter(collect);
  setenv("XCCL_TEST_REPORTED_KNOB", "7", 1);  // the default: nothing to report
  EXPECT_EQ(xcclParamTestReportedKnob(), 7);
  setenv("XCCL_TEST_REPORTED_KNOB", "0x10", 1);
  EXPECT_EQ(xcclParamTestReportedKnob(), 16);
  EXPECT_EQ(xcclParamTestReportedKnob(), 16);  // read again: not reported again
  unsetenv("XCCL_TEST_REPORTED_KNOB");
  xccl::setKnobReporter(nullptr);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0], "XCCL_TEST_REPORTED_KNOB=16 (default 7)");
}

}  // namespace
