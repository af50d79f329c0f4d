// modelcast-tune's command layer: JSON contract and input validation.
#include <gtest/gtest.h>

#include <functional>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "modelcast/predictor_csv.h"
#include "tune_commands.h"

namespace modelcast::tune {
namespace {

std::string write_log(const std::string& name, int points, int upto = -1) {
  const auto path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream out(path);
  out << "step,loss,time_s\n";
  for (int i = 0; i < points && (upto < 0 || i * 100 <= upto); ++i)
    out << i * 100 << ',' << (i == 0 ? 10.0 : 3.0 + 2.0 * std::pow(i / double(points), -0.5)) << ',' << i * 30.0 << '\n';
  return path;
}

CommonArgs base(const std::string& log) {
  CommonArgs a;
  a.log_path = log;
  a.publish_cost_s = 30;
  a.update_latency_s = 15;
  return a;
}

TEST(TuneCommands, PlanJsonHasTheDocumentedFields) {
  auto a = base(write_log("mc_tune_prefix.csv", 40, 1000));
  a.total_steps = 3900;
  a.plot_path = (std::filesystem::temp_directory_path() / "mc_tune_plot.svg").string();
  const auto r = run_plan(a);
  ASSERT_TRUE(r.contains("publish_steps"));
  EXPECT_TRUE(r["predicted_cil"].is_number());
  EXPECT_DOUBLE_EQ(r["slowdown_s"].get<double>(), 30.0 * static_cast<double>(r["publish_steps"].size()));
  for (const char* b : {"every_candidate", "every_e_steps", "viper_fixed_interval", "viper_threshold"}) {
    ASSERT_TRUE(r["baselines"].contains(b)) << b;
    // The plan is optimal for its own forecast, so no baseline can beat it there.
    EXPECT_GE(r["baselines"][b]["predicted_cil"].get<double>(), r["predicted_cil"].get<double>() - 1e-9) << b;
  }
  EXPECT_FALSE(r["publish_steps"].empty());
  // The plan hedges over the forecast's scenarios and says how it would fare in them.
  const auto& e = r["expected_regret"];
  ASSERT_TRUE(e.is_object());
  EXPECT_GT(e["scenarios"].get<int>(), 1);
  // The text counted loss scenarios while the JSON counted (loss, time) pairs with a gain.
  EXPECT_LE(e["scenarios_with_gain"].get<int>(), e["scenarios"].get<int>());
  EXPECT_EQ(e["scenarios"].get<std::size_t>(), e["loss_scenarios"].get<std::size_t>() * r["time_scenarios"].size());
  const auto shown = render_text(r);
  EXPECT_NE(shown.find("expected regret over the " + std::to_string(e["scenarios_with_gain"].get<int>()) + " of " +
                       std::to_string(e["scenarios"].get<int>()) + " forecast scenarios with a gain"),
            std::string::npos) << shown;
  EXPECT_GE(e["expected_pct"].get<double>(), 0.0);
  EXPECT_LE(e["p10_pct"].get<double>(), e["p50_pct"].get<double>());
  EXPECT_LE(e["p50_pct"].get<double>(), e["p90_pct"].get<double>());
  EXPECT_EQ(r["forecast"]["point_loss"].size(), r["forecast"]["loss"].size());
  // Which schedule it is against the best evenly spaced one, and why, in both outputs.
  const auto& c = r["choice"];
  ASSERT_TRUE(c.is_object());
  EXPECT_TRUE(c["picked"] == "forecast" || c["picked"] == "evenly_spaced" || c["picked"] == "no_publish") << c;
  // The plan is the candidate it departs to, or the best even spacing it keeps to.
  const auto& kept = c["picked"] == "evenly_spaced" && c["candidate"]["publish_steps"] != r["publish_steps"]
                         ? c["best_evenly_spaced"] : c["candidate"];
  EXPECT_EQ(kept["publish_steps"], r["publish_steps"]) << c;
  EXPECT_DOUBLE_EQ(kept["expected_cil"].get<double>(), r["expected_cil"].get<double>());
  EXPECT_FALSE(c["best_evenly_spaced"]["publish_steps"].empty());
  EXPECT_GE(c["best_evenly_spaced"]["expected_cil"].get<double>(), c["candidate"]["expected_cil"].get<double>() - 1e-9);
  EXPECT_GE(c["expected_margin_pct"].get<double>(), 0.0);
  EXPECT_GE(c["win_probability"].get<double>(), 0.0);
  EXPECT_LE(c["win_probability"].get<double>(), 1.0 + 1e-12);
  EXPECT_DOUBLE_EQ(c["required_confidence"].get<double>(), 0.5);
  EXPECT_NE(shown.find("why this plan: " + c["reason"].get<std::string>()), std::string::npos) << shown;
  std::ifstream svg(a.plot_path);
  std::string head;
  std::getline(svg, head);
  EXPECT_EQ(head.rfind("<svg", 0), 0u);
}

TEST(TuneCommands, PlanFromAShortPrefixReportsItsTimeScenarios) {
  // Three points: two intervals after step 0 cannot show whether steps get slower.
  auto a = base(write_log("mc_tune_short.csv", 3));
  a.total_steps = 3900;
  const auto r = run_plan(a);
  ASSERT_TRUE(r.contains("time_scenarios"));
  ASSERT_EQ(r["time_scenarios"].size(), 3U);
  double weights = 0.0;
  for (const auto& t : r["time_scenarios"]) weights += t["weight"].get<double>();
  EXPECT_NEAR(weights, 1.0, 1e-12);
  // A longer run serves the stale warm-up model longer: the expected CIL exceeds the CIL on the
  // forecast's own (shortest) time axis.
  EXPECT_GT(r["expected_cil"].get<double>(), r["predicted_cil"].get<double>());
  // With forty points the step time is measured: one time axis, and the two CILs agree.
  auto b = base(write_log("mc_tune_prefix.csv", 40, 1000));
  b.total_steps = 3900;
  const auto q = run_plan(b);
  ASSERT_EQ(q["time_scenarios"].size(), 1U);
  EXPECT_NEAR(q["expected_cil"].get<double>(), q["predicted_cil"].get<double>(), 1e-9 * q["predicted_cil"].get<double>());
}

TEST(TuneCommands, ReplayAndEvaluateAgreeOnTheTrueCurve) {
  const auto a0 = base(write_log("mc_tune_full.csv", 40));
  auto a = a0;
  a.warmup_step = 800;
  const auto replay = run_replay(a);
  std::vector<std::int64_t> steps = replay["publish_steps"];
  const auto eval = run_evaluate(a, steps);
  EXPECT_NEAR(eval["predicted_cil"].get<double>(), replay["predicted_cil"].get<double>(), 1e-9);
  EXPECT_GE(eval["predicted_cil"].get<double>(), eval["optimal"]["predicted_cil"].get<double>() - 1e-9);
}

TEST(TuneCommands, AStatedLossFloorMakesALossWithAConstantInItTheLossWithout) {
  // The log's losses with 1000 added: with the floor at 1000 stated, replay and plan decide as on
  // the plain log (without it, the band and the plan's drops were sized on a level of 1000).
  const auto plain_path = write_log("mc_tune_floor_plain.csv", 40);
  const auto offset_path = (std::filesystem::temp_directory_path() / "mc_tune_floor_offset.csv").string();
  {
    std::ifstream in(plain_path);
    std::ofstream out(offset_path);
    std::string line;
    std::getline(in, line);
    out << line << '\n';
    std::int64_t step = 0;
    double loss = 0, time_s = 0;
    char comma = 0;
    while (in >> step >> comma >> loss >> comma >> time_s) out << step << ',' << (loss + 1000.0) << ',' << time_s << '\n';
  }
  auto plain = base(plain_path), offset = base(offset_path);
  plain.warmup_step = offset.warmup_step = 800;
  plain.total_steps = offset.total_steps = 3900;
  offset.loss_floor = 1000.0;
  EXPECT_EQ(run_replay(offset)["publish_steps"], run_replay(plain)["publish_steps"]);
  EXPECT_EQ(run_plan(offset)["publish_steps"], run_plan(plain)["publish_steps"]);
  offset.loss_floor = 1005.1;  // above the log's last losses (5.03 + 1000)
  EXPECT_THROW(run_replay(offset), modelcast::Error);
  offset.loss_floor = std::numeric_limits<double>::infinity();
  EXPECT_THROW(run_plan(offset), modelcast::Error);
}

// plan, replay and evaluate of one run report CIL over one window: the warm-up to the run's end
// (plan once integrated to the forecast's end and replay to the log's, which differ whenever
// --total-steps is not the log's last step); a replay or evaluation cannot score past the log.
TEST(TuneCommands, EveryCommandReportsCilOverTheWarmUpToTheEndOfTheRun) {
  auto a = base(write_log("mc_tune_window.csv", 40));  // steps 0 to 3900
  a.warmup_step = 800;
  a.total_steps = 3900;
  const auto plan = run_plan(a);
  const auto replay = run_replay(a);
  const auto eval = run_evaluate(a, {1200, 2400});
  for (const auto* r : {&plan, &replay, &eval}) {
    EXPECT_EQ((*r)["cil_window"]["from_step"].get<std::int64_t>(), 800) << (*r)["command"];
    EXPECT_EQ((*r)["cil_window"]["to_step"].get<std::int64_t>(), 3900) << (*r)["command"];
    EXPECT_NE(render_text(*r).find("over steps 800 to 3900"), std::string::npos) << render_text(*r);
  }
  auto beyond = a;
  beyond.total_steps = 9000;
  for (bool replaying : {true, false}) {
    try {
      replaying ? run_replay(beyond) : run_evaluate(beyond, {1200});
      ADD_FAILURE() << "a --total-steps past the log was scored over the log only";
    } catch (const modelcast::Error& e) {
      EXPECT_NE(std::string(e.what()).find("--total-steps 9000 is beyond the log, which ends at step 3900"),
                std::string::npos)
          << e.what();
    }
  }
  // plan forecasts past the log: its window is the run's, wherever the log ends.
  EXPECT_EQ(run_plan(beyond)["cil_window"]["to_step"].get<std::int64_t>(), 9000);
  // --window sets the window in seconds of training from the warm-up: reported so, not as the
  // run's steps (which every command said while scoring the other window).
  auto windowed = a;
  windowed.window_s = 100;
  for (const auto& r : {run_plan(windowed), run_replay(windowed), run_evaluate(windowed, {1200, 2400})}) {
    const auto& window = r["cil_window"];
    EXPECT_FALSE(window.contains("to_step")) << window.dump();
    EXPECT_EQ(window["window_s"].get<double>(), 100.0) << window.dump();
    EXPECT_DOUBLE_EQ(window["to_time_s"].get<double>(), window["from_time_s"].get<double>() + 100.0) << window.dump();
    EXPECT_NE(render_text(r).find("over the --window of 100 s after the warm-up"), std::string::npos) << render_text(r);
    EXPECT_EQ(render_text(r).find("to the end of the run"), std::string::npos) << render_text(r);
  }
  // replay and evaluate score the logged curve: a window past its end scored the last loss as
  // served for the rest, and a window of 0 scored nothing (CIL 0 whatever the schedule).
  auto past = a;
  past.window_s = 1e6;
  for (const auto& command : {std::function<void()>([&] { run_replay(past); }), std::function<void()>([&] { run_evaluate(past, {1200}); })}) {
    try {
      command();
      ADD_FAILURE() << "a --window past the log was scored";
    } catch (const modelcast::Error& e) {
      EXPECT_NE(std::string(e.what()).find("after the log's last point"), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(run_plan(past));  // plan forecasts past the log
  auto empty = a;
  empty.window_s = 0;
  EXPECT_THROW(run_plan(empty), modelcast::Error);
}

// plan of a log that already reaches the run's end said "--total-steps (6000) must exceed the
// last warm-up step (6000)" to a user who gave neither option: each number is named by its source.
TEST(TuneCommands, APlanWithNothingLeftToPlanSaysWhereTheEndAndTheWarmUpCameFrom) {
  auto a = base(write_log("mc_tune_nothing_left.csv", 40));  // steps 0 to 3900
  const auto refusal = [](const CommonArgs& args) {
    try {
      run_plan(args);
    } catch (const modelcast::Error& e) {
      return std::string(e.what());
    }
    return std::string("planned");
  };
  a.total_steps = 3900;
  EXPECT_NE(refusal(a).find("nothing to plan: --total-steps 3900 does not come after the log's last step 3900 (no "
                            "--warmup-steps: the whole log is the warm-up); plan forecasts from the warm-up on (give --warmup-steps"),
            std::string::npos)
      << refusal(a);
  a.warmup_step = 800;
  a.total_steps = 500;
  // The warm-up was given: the hint is the end, not the warm-up again.
  EXPECT_NE(refusal(a).find("nothing to plan: --total-steps 500 does not come after the warm-up step 800; plan forecasts "
                            "from the warm-up on (give a --total-steps after the warm-up"),
            std::string::npos)
      << refusal(a);
}

TEST(TuneCommands, RejectsBadCostsAndSteps) {
  auto a = base(write_log("mc_tune_bad.csv", 20));
  a.warmup_step = 500;
  auto neg = a;
  neg.publish_cost_s = -1;
  EXPECT_THROW(run_evaluate(neg, {}), modelcast::Error);
  neg = a;
  neg.update_latency_s = -0.5;
  EXPECT_THROW(run_replay(neg), modelcast::Error);
  neg = a;
  neg.request_rate = 0;
  EXPECT_THROW(run_evaluate(neg, {}), modelcast::Error);
  auto missing = a;
  missing.publish_cost_s = std::nan("");
  EXPECT_THROW(run_evaluate(missing, {}), modelcast::Error);
  EXPECT_THROW(run_evaluate(a, {550}), modelcast::Error);  // not a logged step
  EXPECT_THROW(run_evaluate(a, {400}), modelcast::Error);  // before warm-up
  auto plan = a;
  plan.total_steps = 100;  // not beyond the warm-up prefix
  EXPECT_THROW(run_plan(plan), modelcast::Error);
  // Given but not positive: said so, not taken for missing.
  plan.total_steps = -5;
  try {
    run_plan(plan);
    ADD_FAILURE() << "a negative --total-steps was taken";
  } catch (const modelcast::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--total-steps must be positive, got -5"), std::string::npos) << e.what();
  }
  // A run ending before the log does: its window would silently be the log's.
  auto shorter = a;
  shorter.total_steps = 1500;  // the log ends at 1900
  EXPECT_THROW(run_replay(shorter), modelcast::Error);
  EXPECT_THROW(run_evaluate(shorter, {}), modelcast::Error);
  auto png = a;
  png.plot_path = "/tmp/x.png";
  EXPECT_THROW(run_replay(png), modelcast::Error);
  auto no_file = a;
  no_file.log_path = "/nonexistent/x.csv";
  EXPECT_THROW(run_evaluate(no_file, {}), predictor::CsvError);
}

// A rate of 1e308 requests a second once printed an infinite CIL and a regret of "-nan %" as a
// result (rc 0); every command now refuses it, naming the rate, and writes no plot.
TEST(TuneCommands, ACilThatOverflowsIsRefusedNamingTheRequestRate) {
  auto a = base(write_log("mc_tune_overflow.csv", 20));
  a.warmup_step = 300;
  a.total_steps = 1900;
  a.request_rate = 1e308;
  a.plot_path = (std::filesystem::temp_directory_path() / "mc_tune_overflow.svg").string();
  for (const char* command : {"plan", "replay", "evaluate"}) {
    std::filesystem::remove(a.plot_path);
    const std::string name = command;
    try {
      name == "plan" ? run_plan(a) : name == "replay" ? run_replay(a) : run_evaluate(a, {600, 1200});
      ADD_FAILURE() << command << " scored a CIL that overflows";
    } catch (const modelcast::Error& e) {
      EXPECT_NE(std::string(e.what()).find("the CIL overflows a double (inf) with --request-rate 1e+308"), std::string::npos)
          << command << ": " << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(a.plot_path)) << command;
  }
  a.request_rate = 1e6;  // large, and finite: scored
  EXPECT_TRUE(std::isfinite(run_evaluate(a, {600, 1200})["predicted_cil"].get<double>()));
  // A window that overflows at any rate was blamed on the rate alone, with advice that could not help.
  a.request_rate = 1e-100;
  a.window_s = 1.7e308;
  try {
    run_plan(a);
    ADD_FAILURE() << "a window whose CIL overflows was scored";
  } catch (const modelcast::Error& e) {
    EXPECT_NE(std::string(e.what()).find("over --window 1.7e+308 s"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("so give a shorter window"), std::string::npos) << e.what();
  }
}

TEST(TuneCommands, NeedsTimesInTheLog) {
  const auto path = (std::filesystem::temp_directory_path() / "mc_tune_notime.csv").string();
  std::ofstream(path) << "step,loss\n0,5\n10,4\n20,3\n";
  auto a = base(path);
  a.warmup_step = 10;
  EXPECT_THROW(run_evaluate(a, {}), modelcast::Error);
}

// A time_s column of zeros once scored every schedule as costing nothing.
TEST(TuneCommands, RefusesTimesThatDoNotAdvance) {
  const auto path = (std::filesystem::temp_directory_path() / "mc_tune_stopped_clock.csv").string();
  std::ofstream(path) << "step,loss,time_s\n0,5,0\n10,4,0\n20,3,0\n30,2.5,0\n";
  auto a = base(path);
  a.warmup_step = 10;
  try {
    run_evaluate(a, {});
    FAIL() << "a log whose clock never moves was accepted";
  } catch (const modelcast::Error& e) {
    EXPECT_NE(std::string(e.what()).find("mc_tune_stopped_clock.csv: time_s does not advance (0 s at step 0, 0 s at step 30)"),
              std::string::npos) << e.what();
  }
}

TEST(TuneCommands, EveryCommandWritesAPlot) {
  const auto log = write_log("mc_tune_plot.csv", 20);
  auto a = base(log);
  a.warmup_step = 300;
  a.total_steps = 1900;
  for (const char* command : {"plan", "replay", "evaluate"}) {
    a.plot_path = (std::filesystem::temp_directory_path() / (std::string("mc_tune_") + command + ".svg")).string();
    std::filesystem::remove(a.plot_path);
    const std::string name = command;
    const auto r = name == "plan" ? run_plan(a) : name == "replay" ? run_replay(a) : run_evaluate(a, {600, 1200});
    EXPECT_EQ(r["plot"], a.plot_path) << command;
    std::ifstream in(a.plot_path);
    const std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(svg.find("modelcast-tune " + name), std::string::npos) << command;
    EXPECT_NE(svg.find("</svg>"), std::string::npos) << command;
  }
}

TEST(TuneCommands, ReadsAQuotedLearningRateScheduleAndNamesABadLine) {
  const auto log = write_log("mc_tune_lr_log.csv", 20);
  const auto lr = (std::filesystem::temp_directory_path() / "mc_tune_lr.csv").string();
  std::ofstream(lr) << "\"step\",\"lr\"\n0,\"0.001\"\n1000,0.001\n1900,\"0.0001\"\n";
  auto a = base(log);
  a.warmup_step = 600;
  a.total_steps = 1900;
  a.lr_schedule_path = lr;
  EXPECT_NO_THROW(run_plan(a));
  std::ofstream(lr) << "step,lr\n0,0.001\n1000,\"0.001\n";
  try {
    run_plan(a);
    ADD_FAILURE() << "a schedule with an unterminated quote was accepted";
  } catch (const modelcast::predictor::CsvError& e) {
    EXPECT_EQ(e.line(), 3u) << e.what();
  }
}

std::string write_file(const std::string& name, const std::string& text) {
  const auto path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path) << text;
  return path;
}

// Negative losses with nothing to gain printed "regret -nan %": the guard compared the gain with
// a fraction of a negative no-publish CIL.
TEST(TuneCommands, NegativeLossesWithNoGainSayNoGainAchievable) {
  std::string text = "step,loss,time_s\n";
  for (int i = 0; i <= 10; ++i) text += std::to_string(i * 10) + ",-2," + std::to_string(i * 10) + "\n";
  auto a = base(write_file("mc_tune_neg_flat.csv", text));
  a.warmup_step = 20;
  for (const auto& r : {run_evaluate(a, {50}), run_replay(a)}) {
    EXPECT_LT(r["no_publish_cil"].get<double>(), 0.0);
    EXPECT_TRUE(r["regret_pct"].is_null()) << r["regret_pct"];
    const auto shown = render_text(r);
    EXPECT_NE(shown.find("no gain achievable"), std::string::npos) << shown;
    EXPECT_EQ(shown.find("nan"), std::string::npos) << shown;
  }
}

// A reference ending at or before step 0 was divided by its last step: points dropped or
// progress reversed without a word. A many-run reference was told to use --run, an option of --log.
TEST(TuneCommands, RefusesAReferenceWithoutPositiveStepsOrWithManyRuns) {
  auto a = base(write_log("mc_tune_ref_log.csv", 20));
  a.warmup_step = 600;
  a.total_steps = 1900;
  auto refused = [&](const std::string& text, const std::string& words) {
    a.reference_path = write_file("mc_tune_ref.csv", text);
    try {
      run_plan(a);
      ADD_FAILURE() << "accepted reference:\n" << text;
    } catch (const modelcast::Error& e) {
      EXPECT_NE(std::string(e.what()).find(a.reference_path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused("step,loss\n-10,5\n0,3\n", "its steps start at -10");
  refused("step,loss\n-20,5\n-10,3\n", "its steps start at -20");
  refused("run,track,record,step,total_steps,val_loss,train_time_s\nr1,t,a,0,10,5,0\nr1,t,a,10,10,4,1\n",
          "--reference needs a single run's step,loss[,time_s] log");
  a.reference_path = write_file("mc_tune_ref.csv", "step,loss\n0,5\n10,3\n");
  EXPECT_NO_THROW(run_plan(a));
}

// The schedule's reader refused what the loss-log reader takes: a byte order mark, a header in capitals.
TEST(TuneCommands, ReadsALearningRateScheduleAsTheLossLogIsRead) {
  auto a = base(write_log("mc_tune_lr2_log.csv", 20));
  a.warmup_step = 600;
  a.total_steps = 1900;
  a.lr_schedule_path = write_file("mc_tune_lr2.csv", "step,lr\n0,0.001\n1000,0.001\n1900,0.0001\n");
  const auto plain = run_plan(a);
  // Steps as the loss log takes them: "1e3" and "1900.0" are steps 1000 and 1900.
  a.lr_schedule_path = write_file("mc_tune_lr2.csv", "step,lr\n0,0.001\n1e3,0.001\n1900.0,0.0001\n");
  EXPECT_EQ(run_plan(a)["publish_steps"], plain["publish_steps"]);
  for (const char* header : {"\xEF\xBB\xBFstep,lr", "Step,LR", "STEP,Lr"}) {
    a.lr_schedule_path = write_file("mc_tune_lr2.csv", std::string(header) + "\n0,0.001\n1000,0.001\n1900,0.0001\n");
    nlohmann::json r;
    ASSERT_NO_THROW(r = run_plan(a)) << header;
    EXPECT_EQ(r["publish_steps"], plain["publish_steps"]) << header;
  }
}

// A schedule whose decay the warm-up does not reach was set aside by the forecaster, said only in
// the JSON's forecast note, with no option to give the drop it asks for.
TEST(TuneCommands, AScheduleSetAsideIsWarnedAboutAndAnAnnealDropPutsItToUse) {
  auto a = base(write_log("mc_tune_lr3_log.csv", 20));
  a.warmup_step = 600;
  a.total_steps = 1900;
  a.lr_schedule_path = write_file("mc_tune_lr3.csv", "step,lr\n0,0.001\n1000,0.001\n1900,0.0001\n");
  const auto warned = run_plan(a);
  ASSERT_TRUE(warned.contains("warnings"));
  EXPECT_NE(warned["warnings"].dump().find("--lr-schedule is not used"), std::string::npos) << warned["warnings"].dump();
  a.anneal_drop = 0.3;
  const auto used = run_plan(a);
  EXPECT_FALSE(used.contains("warnings")) << used["warnings"].dump();
  // The schedule is now the forecast's: its note no longer sets it aside, and the run's end, past
  // the anneal (the rate down by 90 % of its peak), is forecast lower by that share of the drop
  // than with a drop of 0.
  EXPECT_NE(warned["forecast"]["note"].get<std::string>().find("lr_schedule not used"), std::string::npos);
  EXPECT_EQ(used["forecast"]["note"].get<std::string>().find("lr_schedule not used"), std::string::npos);
  a.anneal_drop = 0.0;
  const auto no_drop = run_plan(a);
  EXPECT_EQ(no_drop["forecast"]["note"].get<std::string>().find("lr_schedule not used"), std::string::npos);
  EXPECT_NEAR(no_drop["forecast"]["point_loss"].back().get<double>() - used["forecast"]["point_loss"].back().get<double>(),
              0.9 * 0.3, 1e-6);
  // A schedule without an anneal within the run (its rate constant, falling only after the run's
  // end, climbing only, or peaking after the end) was taken without a word and the drop did
  // nothing; without --anneal-drop the advice was to give one.
  for (const char* text : {"step,lr\n5000,0.001\n6000,0.0001\n", "step,lr\n0,0.001\n", "step,lr\n0,0\n500,0.001\n",
                           "step,lr\n0,0.001\n1000,0.0005\n5000,0.01\n", "step,lr\n-100,0.01\n0,0.001\n"}) {
    a.lr_schedule_path = write_file("mc_tune_lr3_after.csv", text);
    for (double drop : {0.3, std::numeric_limits<double>::quiet_NaN()}) {
      a.anneal_drop = drop;
      const auto idle = run_plan(a);
      ASSERT_TRUE(idle.contains("warnings")) << text;
      const auto said = idle["warnings"].dump();
      EXPECT_NE(said.find("--lr-schedule has no anneal within the run"), std::string::npos) << text << said;
      EXPECT_EQ(said.find("give --anneal-drop"), std::string::npos) << text << said;
    }
  }
  a.lr_schedule_path = write_file("mc_tune_lr3.csv", "step,lr\n0,0.001\n1000,0.001\n1900,0.0001\n");
  a.anneal_drop = -1;
  EXPECT_THROW(run_plan(a), modelcast::Error);
  a.anneal_drop = 0.3;
  a.lr_schedule_path.clear();
  try {
    run_plan(a);
    ADD_FAILURE() << "--anneal-drop without a schedule was accepted";
  } catch (const modelcast::Error& e) {
    EXPECT_NE(std::string(e.what()).find("it needs --lr-schedule"), std::string::npos) << e.what();
  }
}

// The every-candidate and every-E-steps baselines ignored --max-slowdown while the plan, the
// scheduler, the optimum and the VIPER baselines kept to it, so their CIL was not comparable.
TEST(TuneCommands, EveryBaselineKeepsToTheSlowdownCap) {
  auto a = base(write_log("mc_tune_capped.csv", 40));
  a.warmup_step = 500;
  a.epoch_steps = 300;
  a.max_slowdown_s = 2.5 * a.publish_cost_s;  // two publishes
  for (const auto& r : {run_replay(a), run_evaluate(a, {600, 900})}) {
    ASSERT_TRUE(r["baselines"].contains("every_candidate"));
    for (const auto& [name, b] : r["baselines"].items()) {
      EXPECT_LE(b["publish_steps"].size(), 2u) << r["command"] << " " << name;
      EXPECT_LE(b["slowdown_s"].get<double>(), a.max_slowdown_s) << r["command"] << " " << name;
    }
  }
  a.max_slowdown_s = std::numeric_limits<double>::infinity();
  EXPECT_GT(run_evaluate(a, {600})["baselines"]["every_candidate"]["publish_steps"].size(), 2u);
}

// evaluate scored a schedule over the cap against capped optima: "regret -34 %".
TEST(TuneCommands, EvaluateRefusesASchedulePastTheSlowdownCapSayingWhatFits) {
  auto a = base(write_log("mc_tune_evaluate_cap.csv", 40));
  a.warmup_step = 500;
  a.max_slowdown_s = 2.5 * a.publish_cost_s;  // two publishes
  EXPECT_NO_THROW(run_evaluate(a, {600, 900}));
  try {
    run_evaluate(a, {600, 900, 1200});
    ADD_FAILURE() << "three publishes were scored under a cap of two";
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("--publish-steps: 3 publishes stall training 90 s, over --max-slowdown 75 s "
                                         "(at --publish-cost 30 s, 2 fit)"),
              std::string::npos)
        << e.what();
  }
}

// The schedules do not depend on the rate; a CIL in subnormal numbers lost digits and moved the
// regrets (5e-324: 1.0 % became 0.45 %).
TEST(TuneCommands, ACilThatUnderflowsIsRefusedNamingTheRequestRate) {
  auto a = base(write_log("mc_tune_underflow.csv", 20));
  a.warmup_step = 300;
  a.total_steps = 1900;
  a.request_rate = 5e-324;
  for (const char* command : {"plan", "replay", "evaluate"}) {
    const std::string name = command;
    try {
      name == "plan" ? run_plan(a) : name == "replay" ? run_replay(a) : run_evaluate(a, {600, 1200});
      ADD_FAILURE() << command << " scored a CIL in subnormal numbers";
    } catch (const modelcast::Error& e) {
      EXPECT_NE(std::string(e.what()).find("the CIL underflows a double"), std::string::npos) << command << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("--request-rate 4.94066e-324"), std::string::npos) << e.what();
    }
  }
  a.request_rate = 1e-280;  // small, and normal: scored
  EXPECT_GT(run_evaluate(a, {600, 1200})["predicted_cil"].get<double>(), 0.0);
}

// from_chars leaves an out-of-range value at 0: 1e400 or 1e-400 read as an lr of 0, silently.
TEST(TuneCommands, ALearningRateOrStepOutOfRangeIsRefusedNamingTheLine) {
  auto a = base(write_log("mc_tune_lr_range_log.csv", 20));
  a.warmup_step = 600;
  a.total_steps = 1900;
  const std::pair<const char*, const char*> cases[] = {
      {"step,lr\n0,0.001\n1000,1e400\n1900,0.001\n", ":3: lr is out of a double's range: '1e400'"},
      {"step,lr\n0,0.001\n1000,1e-400\n1900,0.001\n", ":3: lr is out of a double's range: '1e-400'"},
      {"step,lr\n0,0.001\n99999999999999999999,0.001\n", ":3: step is out of range: '99999999999999999999'"},
      // Within 64 bits but not a double's exact steps: refused by the loss log, taken here.
      {"step,lr\n0,0.001\n9223372036854775807,0.0001\n", ":3: step 9223372036854775807 is beyond 2^53"},
      {"step,lr\n0,0.001\n1000,0.001\n500,0.001\n", ":4: steps not increasing: step 500 follows step 1000"},
      // The repository's file of many runs' schedules read as one schedule whose steps restart.
      {"run,step,lr\nd000,0,0.001\nd001,0,0.001\n", ":1: a 'run' column: --lr-schedule takes one run's schedule"}};
  a.lr_schedule_path = "/nonexistent/mc_tune_lr.csv";
  try {
    run_plan(a);
    ADD_FAILURE() << "a missing schedule was read";
  } catch (const modelcast::predictor::CsvError& e) {
    EXPECT_EQ(std::string(e.what()), "/nonexistent/mc_tune_lr.csv: cannot open file: No such file or directory");
  }
  for (const auto& [text, words] : cases) {
    a.lr_schedule_path = write_file("mc_tune_lr_range.csv", text);
    try {
      run_plan(a);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const modelcast::predictor::CsvError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  }
}

// --loss-col time_s planned on the times as if they were losses.
TEST(TuneCommands, ALossColumnThatIsTheStepOrTimeColumnIsRefused) {
  auto a = base(write_log("mc_tune_loss_col_role.csv", 20));
  a.warmup_step = 600;
  a.total_steps = 1900;
  for (const auto& [column, role] : {std::pair{"time_s", "time"}, std::pair{"step", "step"}}) {
    a.loss_column = column;
    try {
      run_plan(a);
      ADD_FAILURE() << "planned on column " << column << " as the loss";
    } catch (const modelcast::predictor::CsvError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("the loss column '") + column + "' is the log's " + role + " column"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace modelcast::tune
