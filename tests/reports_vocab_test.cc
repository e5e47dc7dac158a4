// The vocabulary (reports/results/vocab.h): each enum's one name table. Every value has a
// name that parses back to it and no two share one; anything else parses to nothing.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "reports/results/vocab.h"

namespace sweep {
namespace {

template <Vocabulary E>
void names_round_trip() {
  std::set<std::string_view> seen;
  for (const E e : all_of<E>()) {
    const std::string_view name = name_of(e);
    EXPECT_FALSE(name.empty()) << VocabTable<E>::key;
    EXPECT_EQ(parse_as<E>(name), e) << VocabTable<E>::key << ": " << name;
    EXPECT_TRUE(seen.insert(name).second) << VocabTable<E>::key << ": " << name << " twice";
  }
  EXPECT_FALSE(parse_as<E>("")) << VocabTable<E>::key;
  EXPECT_FALSE(parse_as<E>(to_string(all_of<E>().front()) + " ")) << VocabTable<E>::key;
  EXPECT_EQ(to_string(std::optional<E>()), "");
}

TEST(Vocabulary, EveryNameParsesBackToItsValue) {
  names_round_trip<Mode>();
  names_round_trip<Precision>();
  names_round_trip<Checkpointing>();
  names_round_trip<OptimizerKind>();
  names_round_trip<Adapter>();
  names_round_trip<Offload>();
  names_round_trip<Weights>();
  names_round_trip<Device>();
  names_round_trip<Status>();
}

// The names are the results files' and the configs' spelling: changing one breaks every file
// written before, so they are pinned here.
TEST(Vocabulary, NamesAreThoseResultsFilesHold) {
  EXPECT_EQ(choices<Mode>(), "train, eval");
  EXPECT_EQ(choices<Precision>(), "fp32, fp16-amp, bf16-amp, bf16");
  EXPECT_EQ(choices<Checkpointing>(), "none, block");
  EXPECT_EQ(choices<OptimizerKind>(),
            "adamw, adamw-fused, sgd, adafactor, adamw8bit, paged-adamw8bit, paged-adamw32bit, none");
  EXPECT_EQ(choices<Adapter>(), "none, lora");
  EXPECT_EQ(choices<Offload>(), "none, optimizer");
  EXPECT_EQ(choices<Weights>(), "full, int8, nf4, fp4");
  EXPECT_EQ(choices<Device>(), "cpu, cuda, emulated");
  EXPECT_EQ(choices<Status>(), "ok, oom, crash, timeout, skipped");
  EXPECT_EQ(to_string(Precision::kBf16Amp), "bf16-amp");
  EXPECT_FALSE(parse_as<Precision>("BF16"));  // names are exact; configs fold '_' before
}

}  // namespace
}  // namespace sweep
