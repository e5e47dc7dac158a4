// results.csv reader: columns by name, quoted fields, errors with file and line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "reports/results/rows.h"

namespace sweep::reports {
namespace {

// The columns every results file has (rows.h: the required cells).
constexpr const char* kHeader = "point_id,model,status,batch,peak_allocated_bytes,peak_reserved_bytes\n";

std::string write_tmp(const std::string& name, const std::string& text) {
  auto dir = std::filesystem::temp_directory_path() / "sweep_results_test";
  std::filesystem::create_directories(dir);
  auto path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

TEST(ResultsReader, ReadsColumnsByNameInAnyOrder) {
  auto path = write_tmp("a.csv",
                        "status,model,point_id,peak_allocated_bytes,message,batch,peak_reserved_bytes\n"
                        "ok,gpt2,00aa,1048576,,1,2097152\n"
                        "crash,gpt2,00bb,,\"killed, by \"\"signal\"\" 11\",2,\n");
  auto r = read_results(path);
  ASSERT_EQ(r.rows.size(), 2u);
  EXPECT_EQ(r.rows[0].at(schema::column("model")), "gpt2");
  EXPECT_EQ(r.rows[0].number(schema::column("peak_allocated_bytes")), 1048576.0);
  EXPECT_FALSE(r.rows[1].number(schema::column("peak_allocated_bytes")).has_value());
  EXPECT_EQ(r.rows[1].at(schema::column("message")), "killed, by \"signal\" 11");
  EXPECT_TRUE(r.has_column(schema::column("status")));
  EXPECT_FALSE(r.has_column(schema::column("tflops")));
  EXPECT_EQ(r.rows[1].line, 3u);
}

TEST(ResultsReader, DirectoryMeansItsResultsCsv) {
  auto path = write_tmp("results.csv", std::string(kHeader) + "01,gpt2,ok,1,1,1\n");
  auto r = read_results(std::filesystem::path(path).parent_path().string());
  EXPECT_EQ(r.rows.size(), 1u);
}

TEST(ResultsReader, TooFewColumnsNamesTheLine) {
  auto path = write_tmp("short.csv", std::string(kHeader) + "01,gpt2,ok,1,1,1\n02,gpt2\n");
  try {
    read_results(path);
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_EQ(e.line(), 3) << e.located();
    EXPECT_NE(e.located().find("short.csv:3:"), std::string::npos) << e.located();
  }
}

TEST(ResultsReader, MissingRequiredColumnIsAnError) {
  auto path = write_tmp("nostatus.csv", "point_id,model\n01,gpt2\n");
  EXPECT_THROW(read_results(path), UserError);
}

TEST(ResultsReader, NonNumberInNumericColumnNamesColumnAndLine) {
  // Checked when read: no command ever sees a row with a bad number.
  auto path = write_tmp("nan.csv", "point_id,model,status,batch,peak_allocated_bytes,peak_reserved_bytes,step_ms\n"
                                   "01,gpt2,ok,1,1,1,fast\n");
  try {
    read_results(path);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.line(), 2);
    EXPECT_NE(std::string(e.what()).find("step_ms"), std::string::npos);
  }
}

}  // namespace
}  // namespace sweep::reports
