// KvLayerTable: exact slots, read segments, exit copies and per-token memory of every
// layout on an Ouro-like (0-24-0, r_max 4) and a Huginn-like (2-4-2, r_max 8) shape, and
// cross-layer maps (LCKV, CLA).
#include "kv/kv_layout.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace fathom {
namespace {

using Pairs = std::vector<std::pair<int32_t, int32_t>>;
constexpr TokenPhase kP = TokenPhase::kPrompt;
constexpr TokenPhase kD = TokenPhase::kDecode;
constexpr KvLayout kAllLayouts[] = {KvLayout::kDepthIndexed, KvLayout::kLastExited,
                                    KvLayout::kShared, KvLayout::kFirstThenShared,
                                    KvLayout::kHybrid};

KvModelShape Shape(int32_t prelude, int32_t core, int32_t coda, int32_t max_depth,
                   std::vector<int32_t> reads_from = {}) {
  KvModelShape s;
  s.n_prelude = prelude;
  s.n_core = core;
  s.n_coda = coda;
  s.max_depth = max_depth;
  s.reads_from = std::move(reads_from);
  return s;
}
KvModelShape Ouro() { return Shape(0, 24, 0, 4); }
KvModelShape Huginn() { return Shape(2, 4, 2, 8); }

KvLayerTable MustBuild(const KvModelShape& shape, KvLayout layout, int32_t shared_after = 1) {
  Result<KvLayerTable> t = KvLayerTable::Build(shape, layout, shared_after);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return std::move(t).value();
}

std::vector<KvSegment> Read(const KvLayerTable& t, int32_t layer, int32_t step, TokenPhase ph,
                            int64_t prompt_len, int64_t n_keys) {
  std::vector<KvSegment> out;
  t.ReadSegments(layer, step, ph, prompt_len, n_keys, &out);
  return out;
}

Pairs Exit(const KvLayerTable& t, int32_t steps_run) {
  Pairs out;
  t.ExitCopies(steps_run, &out);
  return out;
}

std::vector<int32_t> Ints(const std::string& s) {  // "0_1_5" -> {0, 1, 5}
  std::vector<int32_t> v;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, '_')) v.push_back(std::stoi(part));
  return v;
}

// Every (layer, step, phase) write and read of two tables agree.
void ExpectSameTable(const KvLayerTable& a, const KvLayerTable& b) {
  ASSERT_EQ(a.num_physical_layers(), b.num_physical_layers());
  const KvModelShape& s = a.shape();
  for (int32_t l = 0; l < s.num_layers(); ++l) {
    for (int32_t r = 0; r < s.max_depth; ++r) {
      for (TokenPhase ph : {kP, kD}) {
        EXPECT_EQ(a.WriteLayer(l, r, ph), b.WriteLayer(l, r, ph)) << l << " " << r;
        const int64_t n_keys = ph == kP ? 7 : 12;
        EXPECT_EQ(Read(a, l, r, ph, 10, n_keys), Read(b, l, r, ph, 10, n_keys));
      }
    }
  }
  for (TokenPhase ph : {kP, kD}) EXPECT_EQ(a.LayersPerToken(ph), b.LayersPerToken(ph));
  EXPECT_EQ(a.HasHoles(), b.HasHoles());
}

TEST(KvLayoutNames, ParseRoundTripsAndListsNamesOnError) {
  for (KvLayout l : kAllLayouts) {
    Result<KvLayout> p = ParseKvLayout(KvLayoutName(l));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, l);
  }
  Result<KvLayout> bad = ParseKvLayout("depth");
  ASSERT_FALSE(bad.ok());
  for (const char* n : {"\"depth\"", "depth-indexed", "last-exited", "shared", "first-then-shared",
                        "hybrid"}) {
    EXPECT_NE(bad.status().message().find(n), std::string::npos) << bad.status().message();
  }
}

TEST(KvLayerTable, DepthIndexedHuginn) {
  const KvLayerTable t = MustBuild(Huginn(), KvLayout::kDepthIndexed);
  EXPECT_EQ(t.num_layers(), 8);
  EXPECT_EQ(t.num_physical_layers(), 2 + 8 * 4 + 2);
  EXPECT_EQ(t.WriteLayer(0, 0, kP), 0);
  EXPECT_EQ(t.WriteLayer(1, 5, kD), 1);  // step ignored outside the core
  EXPECT_EQ(t.WriteLayer(2, 0, kP), 2);
  EXPECT_EQ(t.WriteLayer(3, 5, kD), 2 + 5 * 4 + 1);
  EXPECT_EQ(t.WriteLayer(5, 7, kP), 2 + 7 * 4 + 3);
  EXPECT_EQ(t.WriteLayer(6, 3, kD), 34);
  EXPECT_EQ(t.WriteLayer(7, 0, kP), 35);
  EXPECT_EQ(Read(t, 3, 5, kD, 10, 13), (std::vector<KvSegment>{{23, 0, 13}}));
  EXPECT_EQ(Read(t, 3, 5, kP, 10, 4), (std::vector<KvSegment>{{23, 0, 4}}));
  EXPECT_EQ(Read(t, 7, 0, kD, 10, 11), (std::vector<KvSegment>{{35, 0, 11}}));
  EXPECT_TRUE(t.HasHoles());
  EXPECT_TRUE(Exit(t, 3).empty());
  EXPECT_EQ(t.LayersPerToken(kP), 36);
  EXPECT_EQ(t.LayersPerToken(kD), 36);
}

TEST(KvLayerTable, DepthIndexedOuro) {
  const KvLayerTable t = MustBuild(Ouro(), KvLayout::kDepthIndexed);
  EXPECT_EQ(t.num_physical_layers(), 96);
  EXPECT_EQ(t.WriteLayer(0, 0, kP), 0);
  EXPECT_EQ(t.WriteLayer(5, 2, kD), 2 * 24 + 5);  // Ouro's reference: ut * L + layer
  EXPECT_EQ(t.WriteLayer(23, 3, kP), 95);
  EXPECT_EQ(Read(t, 5, 2, kD, 3, 9), (std::vector<KvSegment>{{53, 0, 9}}));
}

TEST(KvLayerTable, LastExitedCopiesTheLastStepIntoDeeperSlots) {
  const KvLayerTable t = MustBuild(Huginn(), KvLayout::kLastExited);
  EXPECT_EQ(t.num_physical_layers(), 36);
  EXPECT_EQ(t.WriteLayer(3, 5, kD), 23);  // depth-indexed addressing
  EXPECT_FALSE(t.HasHoles());
  // Exit after 6 steps: step 5 (slots 22..25) -> steps 6 and 7, per core layer.
  EXPECT_EQ(Exit(t, 6), (Pairs{{22, 26}, {22, 30}, {23, 27}, {23, 31}, {24, 28}, {24, 32},
                               {25, 29}, {25, 33}}));
  EXPECT_TRUE(Exit(t, 8).empty());  // ran every step: nothing skipped
  EXPECT_EQ(Exit(t, 1).size(), 4u * 7u);
  EXPECT_EQ(Exit(t, 1).front(), (std::pair<int32_t, int32_t>{2, 6}));

  const KvLayerTable o = MustBuild(Ouro(), KvLayout::kLastExited);
  const Pairs copies = Exit(o, 2);  // step 1 -> steps 2, 3
  ASSERT_EQ(copies.size(), 48u);
  EXPECT_EQ(copies[0], (std::pair<int32_t, int32_t>{24, 48}));
  EXPECT_EQ(copies[1], (std::pair<int32_t, int32_t>{24, 72}));
  EXPECT_EQ(copies[47], (std::pair<int32_t, int32_t>{47, 95}));
}

TEST(KvLayerTable, SharedIgnoresTheStep) {
  const KvLayerTable t = MustBuild(Huginn(), KvLayout::kShared);
  EXPECT_EQ(t.num_physical_layers(), 8);
  for (int32_t r = 0; r < 8; ++r) {
    EXPECT_EQ(t.WriteLayer(3, r, kP), 3);
    EXPECT_EQ(t.WriteLayer(5, r, kD), 5);
  }
  EXPECT_EQ(t.WriteLayer(6, 0, kD), 6);
  EXPECT_EQ(t.WriteLayer(7, 0, kD), 7);
  EXPECT_EQ(Read(t, 4, 6, kD, 10, 15), (std::vector<KvSegment>{{4, 0, 15}}));
  EXPECT_FALSE(t.HasHoles());
  EXPECT_TRUE(Exit(t, 2).empty());

  const KvLayerTable o = MustBuild(Ouro(), KvLayout::kShared);
  EXPECT_EQ(o.num_physical_layers(), 24);
  EXPECT_EQ(o.WriteLayer(5, 3, kD), 5);
}

TEST(KvLayerTable, FirstThenSharedClampsTheStep) {
  const KvLayerTable t = MustBuild(Huginn(), KvLayout::kFirstThenShared, 3);
  EXPECT_EQ(t.shared_after(), 3);
  EXPECT_EQ(t.num_physical_layers(), 2 + 3 * 4 + 2);
  EXPECT_EQ(t.WriteLayer(3, 0, kP), 3);
  EXPECT_EQ(t.WriteLayer(3, 1, kP), 2 + 4 + 1);
  EXPECT_EQ(t.WriteLayer(3, 2, kD), 2 + 8 + 1);
  EXPECT_EQ(t.WriteLayer(3, 5, kD), 2 + 8 + 1);
  EXPECT_EQ(t.WriteLayer(3, 7, kP), 2 + 8 + 1);
  EXPECT_EQ(t.WriteLayer(6, 7, kP), 14);
  EXPECT_EQ(Read(t, 3, 6, kD, 4, 9), (std::vector<KvSegment>{{11, 0, 9}}));
  EXPECT_TRUE(t.HasHoles());  // an exit after 1 step leaves step-1 and step-2 slots empty
}

TEST(KvLayerTable, FirstThenSharedEndpointsEqualSharedAndDepthIndexed) {
  for (const KvModelShape& shape : {Huginn(), Ouro()}) {
    ExpectSameTable(MustBuild(shape, KvLayout::kFirstThenShared, 1),
                    MustBuild(shape, KvLayout::kShared));
    ExpectSameTable(MustBuild(shape, KvLayout::kFirstThenShared, shape.max_depth),
                    MustBuild(shape, KvLayout::kDepthIndexed));
  }
}

TEST(KvLayerTable, HybridPromptIsDepthIndexedDecodeIsShared) {
  const KvLayerTable t = MustBuild(Huginn(), KvLayout::kHybrid);
  // Prelude 0-1, depth core 2..33, shared core 34..37, coda 38-39.
  EXPECT_EQ(t.num_physical_layers(), 2 + 8 * 4 + 4 + 2);
  EXPECT_EQ(t.WriteLayer(3, 5, kP), 23);
  EXPECT_EQ(t.WriteLayer(3, 5, kD), 35);
  EXPECT_EQ(t.WriteLayer(3, 0, kD), 35);
  EXPECT_EQ(t.WriteLayer(1, 5, kD), 1);
  EXPECT_EQ(t.WriteLayer(6, 0, kP), 38);
  EXPECT_EQ(t.WriteLayer(7, 0, kD), 39);
  // Decode query at (layer 3, step 5), 10 prompt tokens, keys [0, 13).
  EXPECT_EQ(Read(t, 3, 5, kD, 10, 13), (std::vector<KvSegment>{{23, 0, 10}, {35, 10, 13}}));
  EXPECT_EQ(Read(t, 3, 1, kD, 10, 11), (std::vector<KvSegment>{{7, 0, 10}, {35, 10, 11}}));
  // No prompt: only the shared part.
  EXPECT_EQ(Read(t, 3, 5, kD, 0, 3), (std::vector<KvSegment>{{35, 0, 3}}));
  // A prompt query reads its depth slot only.
  EXPECT_EQ(Read(t, 3, 5, kP, 10, 6), (std::vector<KvSegment>{{23, 0, 6}}));
  // Outside the core: one segment.
  EXPECT_EQ(Read(t, 6, 0, kD, 10, 13), (std::vector<KvSegment>{{38, 0, 13}}));
  EXPECT_TRUE(Read(t, 3, 5, kD, 10, 0).empty());
  EXPECT_TRUE(t.StoresPhase(23, kP));
  EXPECT_FALSE(t.StoresPhase(23, kD));
  EXPECT_FALSE(t.StoresPhase(35, kP));
  EXPECT_TRUE(t.StoresPhase(35, kD));
  EXPECT_TRUE(t.StoresPhase(0, kP) && t.StoresPhase(0, kD) && t.StoresPhase(39, kD));
  EXPECT_FALSE(t.HasHoles());
  EXPECT_TRUE(Exit(t, 3).empty());
}

// A prompt prefilled at fewer loop steps than the table's depth (prompts that follow the
// budget): copies into its own deeper slots where nothing masks them (last-exited, and
// hybrid's per-depth prompt slots); nothing where holes are masked or the slot is shared.
TEST(KvLayerTable, PromptExitCopiesFillTheDeeperPromptSlots) {
  auto prompt_exit = [](const KvLayerTable& t, int32_t steps_run) {
    Pairs out;
    t.PromptExitCopies(steps_run, &out);
    return out;
  };
  const Pairs six{{22, 26}, {22, 30}, {23, 27}, {23, 31}, {24, 28}, {24, 32}, {25, 29}, {25, 33}};
  const KvLayerTable hybrid = MustBuild(Huginn(), KvLayout::kHybrid);
  EXPECT_EQ(prompt_exit(hybrid, 6), six);  // prompt slot of (core layer j, step s): 2 + 4s + j
  EXPECT_EQ(hybrid.WriteLayer(2, 5, kP), 22);
  EXPECT_EQ(hybrid.WriteLayer(2, 7, kP), 30);
  EXPECT_TRUE(prompt_exit(hybrid, 8).empty());
  EXPECT_EQ(prompt_exit(MustBuild(Huginn(), KvLayout::kLastExited), 6), six);
  const KvLayerTable last = MustBuild(Huginn(), KvLayout::kLastExited);
  EXPECT_EQ(prompt_exit(last, 3), Exit(last, 3));
  EXPECT_TRUE(prompt_exit(MustBuild(Huginn(), KvLayout::kDepthIndexed), 3).empty());
  EXPECT_TRUE(prompt_exit(MustBuild(Huginn(), KvLayout::kShared), 3).empty());
  EXPECT_TRUE(prompt_exit(MustBuild(Huginn(), KvLayout::kFirstThenShared, 4), 3).empty());
}

TEST(KvLayerTable, StoresEveryPhaseOutsideHybrid) {
  for (KvLayout l : {KvLayout::kDepthIndexed, KvLayout::kLastExited, KvLayout::kShared,
                     KvLayout::kFirstThenShared}) {
    const KvLayerTable t = MustBuild(Huginn(), l, 2);
    for (int32_t p = 0; p < t.num_physical_layers(); ++p) {
      EXPECT_TRUE(t.StoresPhase(p, kP) && t.StoresPhase(p, kD)) << KvLayoutName(l) << " " << p;
    }
  }
}

// Physical layers per token (x 2 * kv_dim * 4 bytes) follow the formulas of DESIGN.md §3.
TEST(KvLayerTable, MemoryPerTokenFollowsTheFormulas) {
  for (const KvModelShape& s : {Huginn(), Ouro()}) {
    const int32_t outer = s.n_prelude + s.n_coda, R = s.max_depth, C = s.n_core;
    const int32_t depth_core =
        MustBuild(s, KvLayout::kDepthIndexed).LayersPerToken(kD) - outer;
    EXPECT_EQ(depth_core, R * C);
    EXPECT_EQ(MustBuild(s, KvLayout::kLastExited).LayersPerToken(kP) - outer, R * C);
    const int32_t shared_core = MustBuild(s, KvLayout::kShared).LayersPerToken(kD) - outer;
    EXPECT_EQ(shared_core * R, depth_core);  // shared core = depth-indexed core / r_max
    for (int32_t S = 1; S <= R; ++S) {
      const KvLayerTable f = MustBuild(s, KvLayout::kFirstThenShared, S);
      EXPECT_EQ(f.LayersPerToken(kP) - outer, S * C);
      EXPECT_EQ(f.LayersPerToken(kD) - outer, S * C);
      EXPECT_EQ(f.num_physical_layers(), outer + S * C);
    }
    const KvLayerTable h = MustBuild(s, KvLayout::kHybrid);
    EXPECT_EQ(h.LayersPerToken(kP), MustBuild(s, KvLayout::kDepthIndexed).LayersPerToken(kP));
    EXPECT_EQ(h.LayersPerToken(kD), MustBuild(s, KvLayout::kShared).LayersPerToken(kD));
    EXPECT_EQ(h.num_physical_layers(), outer + (R + 1) * C);
  }
}

TEST(KvLayerTable, DenseModelIsTheSameUnderEveryLayout) {
  const KvModelShape dense = Shape(6, 0, 0, 0);
  for (KvLayout l : kAllLayouts) {
    const KvLayerTable t = MustBuild(dense, l);
    EXPECT_EQ(t.num_physical_layers(), 6);
    EXPECT_EQ(t.WriteLayer(4, 0, kD), 4);
    EXPECT_FALSE(t.HasHoles());
  }
}

TEST(KvLayerTable, LckvReadsALaterLayerAndSkipsNonProducers) {
  KvModelShape s = Shape(8, 0, 0, 0);
  s.reads_from = Ints("0_1_5_5_5_5_6_7");
  const KvLayerTable t = MustBuild(s, KvLayout::kDepthIndexed);
  EXPECT_TRUE(t.cross_layer());
  // Producers 0, 1, 5, 6, 7 -> slots 0..4; layers 2, 3, 4 produce nothing.
  EXPECT_EQ(t.num_physical_layers(), 5);
  const std::vector<int32_t> writes = {0, 1, -1, -1, -1, 2, 3, 4};
  for (int32_t l = 0; l < 8; ++l) {
    EXPECT_EQ(t.WriteLayer(l, 0, kP), writes[l]) << l;
    EXPECT_EQ(t.WriteLayer(l, 0, kD), writes[l]) << l;
  }
  EXPECT_EQ(t.ReadsFrom(2), 5);
  for (int32_t l = 2; l <= 5; ++l) {
    EXPECT_EQ(Read(t, l, 0, kD, 4, 9), (std::vector<KvSegment>{{2, 0, 9}})) << l;
  }
  EXPECT_EQ(Read(t, 6, 0, kP, 4, 3), (std::vector<KvSegment>{{3, 0, 3}}));
  EXPECT_EQ(t.LayersPerToken(kP), 5);
  EXPECT_EQ(t.LayersPerToken(kD), 5);
  EXPECT_NE(t.Describe().find("writes none, reads 2 (layer 5)"), std::string::npos)
      << t.Describe();
}

TEST(KvLayerTable, LckvTopTargetFullSize) {
  // LCKV's "0_1_2_3_4_16_..._16_17_..._21" on 22 layers: layers 5..15 produce nothing.
  KvModelShape s = Shape(22, 0, 0, 0);
  std::string m = "0_1_2_3_4";
  for (int i = 5; i <= 16; ++i) m.append("_16");
  for (int i = 17; i <= 21; ++i) m.append("_").append(std::to_string(i));
  s.reads_from = Ints(m);
  const KvLayerTable t = MustBuild(s, KvLayout::kDepthIndexed);
  EXPECT_EQ(t.num_physical_layers(), 5 + 1 + 5);
  EXPECT_EQ(t.WriteLayer(10, 0, kD), -1);
  EXPECT_EQ(t.WriteLayer(16, 0, kD), 5);
  EXPECT_EQ(t.WriteLayer(21, 0, kD), 10);
  EXPECT_EQ(Read(t, 7, 0, kD, 1, 2), (std::vector<KvSegment>{{5, 0, 2}}));
}

TEST(KvLayerTable, ClaPairsShareKv) {
  KvModelShape s = Shape(4, 0, 0, 0);
  s.reads_from = Ints("0_0_2_2");
  const KvLayerTable t = MustBuild(s, KvLayout::kShared);
  EXPECT_EQ(t.num_physical_layers(), 2);
  EXPECT_EQ(t.WriteLayer(0, 0, kP), 0);
  EXPECT_EQ(t.WriteLayer(1, 0, kP), -1);
  EXPECT_EQ(t.WriteLayer(2, 0, kP), 1);
  EXPECT_EQ(t.WriteLayer(3, 0, kP), -1);
  EXPECT_EQ(Read(t, 1, 0, kD, 2, 5), (std::vector<KvSegment>{{0, 0, 5}}));
  EXPECT_EQ(Read(t, 3, 0, kD, 2, 5), (std::vector<KvSegment>{{1, 0, 5}}));
}

TEST(KvLayerTable, ProducerThatReadsAnotherLayer) {
  // Layer 1 reads layer 0 but is read by layer 2: it produces KV without reading its own.
  KvModelShape s = Shape(3, 0, 0, 0);
  s.reads_from = {0, 0, 1};
  const KvLayerTable t = MustBuild(s, KvLayout::kDepthIndexed);
  EXPECT_EQ(t.num_physical_layers(), 2);
  EXPECT_EQ(t.WriteLayer(1, 0, kD), 1);
  EXPECT_EQ(t.WriteLayer(2, 0, kD), -1);
  EXPECT_EQ(Read(t, 1, 0, kD, 0, 1), (std::vector<KvSegment>{{0, 0, 1}}));
  EXPECT_EQ(Read(t, 2, 0, kD, 0, 1), (std::vector<KvSegment>{{1, 0, 1}}));
}

void ExpectError(const KvModelShape& s, KvLayout l, int32_t shared_after,
                 const std::vector<std::string>& parts) {
  Result<KvLayerTable> t = KvLayerTable::Build(s, l, shared_after);
  ASSERT_FALSE(t.ok());
  for (const std::string& p : parts) {
    EXPECT_NE(t.status().message().find(p), std::string::npos) << t.status().message();
  }
}

TEST(KvLayerTable, BuildErrors) {
  KvModelShape s = Shape(4, 0, 0, 0);
  s.reads_from = {0, 0, 4, 2};
  ExpectError(s, KvLayout::kDepthIndexed, 1, {"reads_from[2] = 4", "0..3"});
  s.reads_from = {0, -1, 2, 2};
  ExpectError(s, KvLayout::kDepthIndexed, 1, {"reads_from[1] = -1"});
  s.reads_from = {0, 0, 2};
  ExpectError(s, KvLayout::kDepthIndexed, 1, {"3 entries", "4 layers"});

  KvModelShape looped = Huginn();
  looped.reads_from = {0, 0, 2, 3, 4, 5, 6, 7};
  ExpectError(looped, KvLayout::kDepthIndexed, 1, {"non-looped", "max_depth = 8"});
  looped.reads_from = {0, 1, 2, 3, 4, 5, 6, 7};  // the identity is no cross-layer sharing
  EXPECT_TRUE(KvLayerTable::Build(looped, KvLayout::kDepthIndexed).ok());

  ExpectError(Huginn(), KvLayout::kFirstThenShared, 0, {"shared_after", "got 0"});
  ExpectError(Huginn(), KvLayout::kFirstThenShared, 9, {"shared_after", "got 9"});
  KvModelShape no_depth = Huginn();
  no_depth.max_depth = 0;
  ExpectError(no_depth, KvLayout::kShared, 1, {"max_depth"});
  ExpectError(Shape(0, 0, 0, 0), KvLayout::kShared, 1, {"no layers"});
  ExpectError(Shape(-1, 2, 0, 1), KvLayout::kShared, 1,
              {"negative"});
}

TEST(KvLayerTable, DescribeNamesTheLayoutAndSlots) {
  const std::string d = MustBuild(Huginn(), KvLayout::kHybrid).Describe();
  EXPECT_NE(d.find("hybrid"), std::string::npos) << d;
  EXPECT_NE(d.find("40 physical KV layers"), std::string::npos) << d;
  EXPECT_NE(d.find("step 5: writes 22 23 24 25 (prompt), 34 35 36 37 (decode)"),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("layer 7 coda: writes 39"), std::string::npos) << d;
}

TEST(KvLayerTableDeathTest, OutOfRangeArgumentsCheckFail) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const KvLayerTable t = MustBuild(Huginn(), KvLayout::kDepthIndexed);
  std::vector<KvSegment> out;
  EXPECT_DEATH(t.WriteLayer(8, 0, kP), "FATHOM_CHECK");
  EXPECT_DEATH(t.WriteLayer(3, 8, kP), "step=8");
  EXPECT_DEATH(t.ExitCopies(0, nullptr), "FATHOM_CHECK");
  EXPECT_DEATH(t.ReadSegments(3, 0, kP, 4, 5, &out), "prompt query");
  EXPECT_DEATH(t.StoresPhase(36, kP), "physical_layer=36");
}

}  // namespace
}  // namespace fathom
