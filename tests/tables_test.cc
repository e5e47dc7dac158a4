// `sweep tables` (sweeps/cli/tables.h): the committed tables are the emulator's regression test.
// One card's GPT-2 sections are regenerated from scratch and must equal docs/tables/t4.md's, line
// for line (the emulation is deterministic); a change to the emulator, the allocator model or
// fit's search that moves a number fails here until the tables are regenerated
// (`sweep tables --card t4`, or scripts/tables.sh for every card). Also: a misspelt card is a
// user error that names the flag and writes nothing.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "temp_tree.h"

namespace sweep {
namespace {

namespace fs = std::filesystem;
const fs::path kSource = fs::path(SWEEP_TEST_DATA).parent_path().parent_path();

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// "## heading" -> its text up to the next "## ".
std::map<std::string, std::string> sections(const std::string& md) {
  std::map<std::string, std::string> out;
  std::istringstream in(md);
  std::string line, current;
  while (std::getline(in, line)) {
    if (line.starts_with("## ")) current = line;
    if (!current.empty()) out[current] += line + "\n";
  }
  return out;
}

struct Run {
  int code = -1;
  std::string err;
};

Run sweep_tables(const std::string& args, const fs::path& dir) {
  const std::string err = (dir / "stderr").string();
  const int status = std::system((std::string(SWEEP_BINARY) + " tables " + args + " 2>" + err).c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read(err)};
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    remove_tree(path);
    fs::create_directories(path);
  }
  ~TempDir() { remove_tree(path); }
};

TEST(Tables, RegeneratedT4Gpt2EqualsTheCommittedTable) {
  const std::string committed = read(kSource / "docs/tables/t4.md");
  ASSERT_FALSE(committed.empty()) << "docs/tables/t4.md is missing: sweep tables --card t4";
  TempDir dir("sweep_tables_regen");
  const Run r = sweep_tables("--card t4 --model gpt2 -q --out " + (dir.path / "out").string() +
                                 " --results " + (dir.path / "results").string(),
                             dir.path);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto fresh = sections(read(dir.path / "out/t4.md"));
  const auto old = sections(committed);
  for (const char* s : {"## gpt2, seq 512", "## gpt2, seq 1024"}) {
    ASSERT_TRUE(fresh.count(s)) << s;
    ASSERT_TRUE(old.count(s)) << s << " is not in docs/tables/t4.md";
    EXPECT_EQ(fresh.at(s), old.at(s))
        << "the emulated T4 table moved: regenerate with `sweep tables --card t4` and commit "
           "docs/tables/ if the change is meant";
  }
  // The page was written from the same data.
  EXPECT_NE(read(dir.path / "out/index.html").find("\"key\":\"t4\""), std::string::npos);
}

TEST(Tables, AMisspeltCardIsAUserErrorAndWritesNothing) {
  TempDir dir("sweep_tables_badcard");
  const Run r = sweep_tables("--card rtx3600 --out " + (dir.path / "out").string(), dir.path);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--card"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("unknown card 'rtx3600'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hint: did you mean rtx3060?"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir.path / "out"));
}

}  // namespace
}  // namespace sweep
