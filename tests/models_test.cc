// The zoo against Hugging Face: parameter counts for every model, logits and loss against
// transformers' own for one tiny seeded configuration per family (tests/fixtures/, written by
// make_reference.py), and the initial loss of the language models on random data.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "models/weights.h"
#include "models/whisper.h"
#include "models/zoo.h"

namespace sweep::models {
namespace {

// num_parameters() of the transformers model (WhisperForConditionalGeneration for whisper-*,
// WhisperForAudioClassification with 2 labels for whisper-*-cls), printed by transformers
// 5.23.0 from each checkpoint's configuration (scripts/hf_reference.py build, on Meta).
const std::map<std::string, int64_t> kHuggingFaceParameters = {
    {"gpt2", 124439808},          {"gpt2-medium", 354823168},     {"gpt2-large", 774030080},
    {"gpt2-xl", 1557611200},      {"t5-small", 60506624},         {"t5-base", 222903552},
    {"t5-large", 737668096},      {"whisper-tiny", 37760640},     {"whisper-base", 72593920},
    {"whisper-small", 241734912}, {"whisper-medium", 763857920},  {"whisper-large-v3", 1543490560},
    {"whisper-large-v3-turbo", 808878080},
    {"whisper-tiny-cls", 8307458},      {"whisper-base-cls", 20722434},
    {"whisper-small-cls", 88351490},    {"whisper-medium-cls", 307479298},
    {"whisper-large-v3-cls", 637297410},
    {"gpt2-test", 182016},        {"t5-test", 230400},            {"whisper-test", 145410},
    {"whisper-s2s-test", 331264},
    // The catalogue (models/catalogue/) and the decoder fixtures (tests/fixtures/configs/):
    // num_parameters() of the model transformers 5.23 builds from each config.json, on Meta.
    {"qwen2.5-0.5b", 494032768},   {"qwen2.5-3b", 3085938688},    {"qwen2.5-7b", 7615616512},
    {"qwen2.5-14b", 14770033664},  {"qwen2.5-32b", 32763876352},  {"qwen3-0.6b", 596049920},
    {"qwen3-4b", 4022468096},      {"qwen3-8b", 8190735360},      {"qwen3-14b", 14768307200},
    {"qwen3-32b", 32762123264},    {"tinyllama-1.1b-chat-v1.0", 1100048384},
    {"llama-3.1-8b", 8030261248},  {"llama-3.2-1b-instruct", 1235814400},
    {"llama-3.2-3b", 3212749824},  {"llama-3.1-70b", 70553706496},
    {"phi-3-mini-4k-instruct", 3821079552}, {"phi-3.5-mini-instruct", 3821079552},
    {"smollm2-135m", 134515008},    {"smollm2-1.7b-instruct", 1711376384},    {"qwen2.5-1.5b", 1543714304},  {"qwen3-1.7b", 1720574976},
    {"mistral-7b-v0.3", 7248023552},
    {SWEEP_SOURCE_DIR "/tests/fixtures/configs/phi3-mini-1layer/config.json", 310256640},
    {SWEEP_SOURCE_DIR "/tests/fixtures/configs/qwen2.5-0.5b-2layers/config.json", 165960320},
    {SWEEP_SOURCE_DIR "/tests/fixtures/configs/qwen3-0.6b-2layers/config.json", 187045376},
    {SWEEP_SOURCE_DIR "/tests/fixtures/configs/tinyllama-1.1b-1layer/config.json", 175118336},
    {SWEEP_SOURCE_DIR "/tests/fixtures/configs/mistral-7b-v0.3-1layer/config.json", 486551552},
    {SWEEP_SOURCE_DIR "/tests/fixtures/configs/llama-3.2-1b-2layers/config.json", 384313344},
};

// Models built to count their modules: up to 320M parameters (1.3 GB in fp32, every fixture). The
// larger catalogue models are held to transformers' count through the same table formula.
constexpr int64_t kBuildUpTo = 320'000'000;

std::vector<std::string> zoo_names() {
  std::vector<std::string> names;
  for (const auto& s : zoo()) names.push_back(s.name);
  return names;
}

class Parameters : public testing::TestWithParam<std::string> {};

TEST_P(Parameters, EqualHuggingFaceAndTheZooTable) {
  const auto* spec = find_model(GetParam());
  ASSERT_NE(spec, nullptr);
  ASSERT_TRUE(kHuggingFaceParameters.count(spec->name)) << "add the transformers count";
  const int64_t hf = kHuggingFaceParameters.at(spec->name);
  EXPECT_EQ(spec->parameters, hf) << "zoo table";
  if (hf > kBuildUpTo) return;
  auto model = spec->make();
  EXPECT_EQ(count_parameters(*model), hf) << "built modules";
}

std::vector<std::string> zoo_and_fixture_names() {
  auto names = zoo_names();
  for (const char* f : {"phi3-mini-1layer", "qwen2.5-0.5b-2layers", "qwen3-0.6b-2layers",
                        "tinyllama-1.1b-1layer", "mistral-7b-v0.3-1layer", "llama-3.2-1b-2layers"})
    names.push_back(std::string(SWEEP_SOURCE_DIR "/tests/fixtures/configs/") + f + "/config.json");
  return names;
}

INSTANTIATE_TEST_SUITE_P(Zoo, Parameters, testing::ValuesIn(zoo_and_fixture_names()),
                         [](const auto& info) {
                           std::string n = info.param;
                           if (n.ends_with("/config.json")) {  // its folder
                             n.erase(n.size() - 12);
                             n = n.substr(n.rfind('/') + 1);
                           }
                           for (auto& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(Zoo, RealModelsFirstTestModelsMarkedAndAxesByFamily) {
  bool seen_test = false;
  const std::map<std::string, std::vector<std::string>> axes = {
      {"gpt2", {"seq"}}, {"t5", {"seq", "target_seq"}}, {"whisper", {"audio_s", "target_seq"}},
      {"whisper-cls", {"audio_s"}}, {"llama", {"seq"}}, {"phi3", {"seq"}}};
  for (const auto& s : zoo()) {
    if (s.test_only) seen_test = true;
    EXPECT_EQ(s.test_only, seen_test) << s.name << ": test models come last";
    // A Hub id names the model the Hub holds: the encoder-classifiers have none.
    EXPECT_EQ(s.hf_id.empty(), s.test_only || s.family == "whisper-cls") << s.name;
    EXPECT_EQ(s.axes, axes.at(s.family)) << s.name;
  }
  EXPECT_TRUE(seen_test);
}

// --- against transformers, numerically -------------------------------------------------

struct Reference {
  std::string model;
  std::set<std::string> tied;  // Hugging Face names that alias a parameter we hold once
};

void PrintTo(const Reference& r, std::ostream* os) { *os << r.model; }

class AgainstTransformers : public testing::TestWithParam<Reference> {};

TEST_P(AgainstTransformers, LogitsAndLossMatch) {
  const auto& ref = GetParam();
  auto blob = read_pickle(std::string(SWEEP_SOURCE_DIR) + "/tests/fixtures/" + ref.model + ".pt")
                  .toGenericDict();
  torch::manual_seed(0);
  // A decoder's fixture comes with its config.json (tests/fixtures/configs/<name>/).
  const std::string config = std::string(SWEEP_SOURCE_DIR) + "/tests/fixtures/configs/" + ref.model + "/config.json";
  auto model = find_model(ref.model.ends_with("-tiny") ? config : ref.model)->make();
  auto loaded = load_state_dict(*model, blob.at("state_dict").toGenericDict());
  EXPECT_EQ(std::set<std::string>(loaded.unused.begin(), loaded.unused.end()), ref.tied);
  model->eval();

  Batch batch;
  for (const auto& t : blob.at("inputs").toList()) batch.tensors.push_back(t.get().toTensor());
  const auto expected = blob.at("logits").toTensor();
  const double expected_loss = blob.at("loss").toTensor().item<double>();
  torch::NoGradGuard no_grad;
  const auto logits = model->logits(batch);
  ASSERT_EQ(logits.sizes(), expected.sizes());
  const double max_diff = (logits - expected).abs().max().item<double>();
  const double loss = model->loss(batch).item<double>();
  std::printf("%s (transformers %s): max |logit difference| = %.3g, loss %.6f vs %.6f\n",
              ref.model.c_str(), blob.at("transformers").toStringRef().c_str(), max_diff, loss,
              expected_loss);
  EXPECT_LT(max_diff, 1e-4);
  EXPECT_NEAR(loss, expected_loss, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, AgainstTransformers,
    testing::Values(Reference{"gpt2-test", {"lm_head.weight"}},
                    Reference{"t5-test",
                              {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
                               "lm_head.weight"}},
                    Reference{"whisper-test", {}},
                    Reference{"whisper-s2s-test", {"proj_out.weight"}},
                    Reference{"llama-tiny", {}},
                    Reference{"qwen2-tiny", {"lm_head.weight"}},
                    Reference{"qwen3-tiny", {"lm_head.weight"}}, Reference{"mistral-tiny", {}},
                    Reference{"phi3-tiny", {}}),
    [](const auto& info) {
      const std::string& m = info.param.model;
      return m == "whisper-s2s-test" ? std::string("whispers2s") : m.substr(0, m.find('-'));
    });

TEST(Weights, MissingOrMisshapenTensorsAreNamed) {
  auto model = find_model("gpt2-test")->make();
  c10::impl::GenericDict state(c10::StringType::get(), c10::TensorType::get());
  for (const auto& item : model->named_parameters()) state.insert(item.key(), item.value());
  state.insert_or_assign("transformer.wpe.weight", torch::zeros({3, 3}));
  try {
    load_state_dict(*model, state);
    FAIL() << "a misshapen tensor was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("transformer.wpe.weight"), std::string::npos) << e.what();
  }
  ASSERT_EQ(state.erase("transformer.wpe.weight"), 1u);
  try {
    load_state_dict(*model, state);
    FAIL() << "a missing tensor was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no saved tensor for parameter transformer.wpe.weight"),
              std::string::npos) << e.what();
  }
}

// --- behaviour on random data ------------------------------------------------------------

// A freshly initialised language model predicts close to uniformly: loss near ln(vocabulary).
// (T5's N(0, 1) embeddings give logits of unit variance, which adds about 0.5.)
TEST(InitialLoss, LanguageModelsStartNearLnVocabulary) {
  for (const auto& [name, vocab] : std::vector<std::pair<std::string, double>>{
           {"gpt2", 50257}, {"t5-small", 32128}}) {
    torch::manual_seed(1);
    auto model = find_model(name)->make();
    model->train();
    auto gen = at::detail::createCPUGenerator(2);
    auto batch = model->synthetic_batch({2, 64, 32, 0}, torch::kCPU, gen);
    torch::NoGradGuard no_grad;
    const double loss = model->loss(batch).item<double>();
    std::printf("%s: initial loss %.3f, ln(%g) = %.3f\n", name.c_str(), loss, vocab, std::log(vocab));
    EXPECT_NEAR(loss, std::log(vocab), 0.1 * std::log(vocab)) << name;
  }
}

TEST(Whisper, AudioSecondsSetFramesAndPositions) {
  EXPECT_EQ(WhisperForAudioClassificationImpl::frames(30), 3000);
  EXPECT_EQ(WhisperForAudioClassificationImpl::positions(3000), 1500);
  EXPECT_EQ(WhisperForAudioClassificationImpl::frames(2.5), 250);
  EXPECT_EQ(WhisperForAudioClassificationImpl::positions(250), 125);
  auto model = find_model("whisper-test")->make();
  auto gen = at::detail::createCPUGenerator(2);
  auto batch = model->synthetic_batch({3, 0, 0, 1.5}, torch::kCPU, gen);
  EXPECT_EQ(batch.tensors[0].sizes(), (std::vector<int64_t>{3, 16, 150}));
  EXPECT_EQ(batch.tokens, 3 * 75);
  torch::NoGradGuard no_grad;
  EXPECT_EQ(model->logits(batch).sizes(), (std::vector<int64_t>{3, 2}));
  // The test model's window is 4 s (200 positions); more is refused with the reason.
  auto too_long = model->synthetic_batch({1, 0, 0, 5}, torch::kCPU, gen);
  EXPECT_THROW(model->logits(too_long), c10::Error);
}

TEST(T5, DecoderInputsAreTheLabelsShiftedRightFromStartTokenZero) {
  // Changing the last label must not change any logit (it is never a decoder input), while
  // changing the first changes the logits from position 1 on, and position 0 not at all.
  torch::manual_seed(3);
  auto model = find_model("t5-test")->make();
  model->eval();
  auto ids = torch::randint(1024, {1, 5});
  auto labels = torch::randint(1, 1024, {1, 4});
  torch::NoGradGuard no_grad;
  auto base = model->logits(Batch{{ids, labels}});
  auto last = labels.clone();
  last[0][3] = 0;
  EXPECT_TRUE(torch::allclose(model->logits(Batch{{ids, last}}), base));
  auto first = labels.clone();
  first[0][0] = (labels[0][0].item<int64_t>() + 1) % 1024;
  auto changed = model->logits(Batch{{ids, first}});
  EXPECT_TRUE(torch::allclose(changed.select(1, 0), base.select(1, 0)));
  EXPECT_FALSE(torch::allclose(changed.select(1, 1), base.select(1, 1)));
}

}  // namespace
}  // namespace sweep::models
